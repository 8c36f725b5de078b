// The vision tower's attention (vision_kernels.h attention_bf16): softmax(q·kᵀ/√hd)·v over all
// n keys, flash-style (online softmax), so the n × n scores are never stored.
//
// One CTA = one head × 64 query rows, 4 warps of 16 rows each (q fragments kept in registers).
// Key/value tiles of 64 rows are double-buffered in shared memory through cp.async (the next
// tile loads while this one is multiplied). Per tile a warp computes S [16, 64] on tensor cores,
// masks keys ≥ n, updates its rows' running max m and sum l (exp2 with log2(e)/√hd folded into
// the scores), rescales its O [16, hd] accumulators and adds P·V with P converted in registers
// from the S accumulator layout to an A operand (rows g and g+8 of the fragment coincide), V read
// with ldmatrix.trans. Rows are padded to hd + 8 bf16 so that ldmatrix is conflict-free.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/smem_tiles.cuh"
#include "backends/cuda/vision_kernels.h"

namespace dsv41::cuda {
namespace {

constexpr int kBq = 64, kBkv = 64, kThreads = 128;

template <int HD>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttentionArgs p, float scale_log2) {
  constexpr int kLd = HD + 8, kChunks = HD / 8;  // 16-byte chunks per row
  __shared__ __align__(16) uint16_t qs[kBq * kLd];
  __shared__ __align__(16) uint16_t ks[2][kBkv * kLd];
  __shared__ __align__(16) uint16_t vs[2][kBkv * kLd];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head = blockIdx.y, q0 = blockIdx.x * kBq, n = p.n;
  const int64_t base = int64_t(head) * n * HD;
  const uint16_t* qg = p.q + base;
  const uint16_t* kg = p.k + base;
  const uint16_t* vg = p.v + base;

  // rows [r0, r0 + 64) of src [n, HD] into dst, zero past n
  auto load_rows = [&](uint16_t* dst, const uint16_t* src, int r0) {
#pragma unroll
    for (int i = 0; i < kBq * kChunks / kThreads; ++i) {
      const int c = tid + i * kThreads, row = c / kChunks, ch = (c % kChunks) * 8;
      const bool ok = r0 + row < n;
      tiles::cp_async16(&dst[row * kLd + ch], ok ? src + int64_t(r0 + row) * HD + ch : src, ok);
    }
  };
  const int tiles_kv = (n + kBkv - 1) / kBkv;
  load_rows(qs, qg, q0);
  load_rows(ks[0], kg, 0);
  load_rows(vs[0], vg, 0);
  tiles::cp_async_commit();

  uint32_t qf[HD / 16][4] = {};
  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int tc = (lane % 4) * 2;

  for (int j = 0; j < tiles_kv; ++j) {
    const int cur = j & 1;
    if (j + 1 < tiles_kv) {
      load_rows(ks[cur ^ 1], kg, (j + 1) * kBkv);
      load_rows(vs[cur ^ 1], vg, (j + 1) * kBkv);
    }
    tiles::cp_async_commit();
    tiles::cp_async_wait<1>();  // everything but the tile just requested
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kc = 0; kc < HD / 16; ++kc)
        tiles::ldmatrix_x4(qf[kc], &qs[(warp * 16 + lane % 16) * kLd + kc * 16 + (lane / 16) * 8]);
    }
    // S = Q·Kᵀ: 8 column tiles of 8 keys.
    float s[kBkv / 8][4] = {};
#pragma unroll
    for (int kc = 0; kc < HD / 16; ++kc)
#pragma unroll
      for (int nj = 0; nj < kBkv / 16; ++nj) {
        uint32_t r[4];
        tiles::ldmatrix_x4(r, &ks[cur][(nj * 16 + lane % 8 + (lane / 16) * 8) * kLd + kc * 16 + ((lane / 8) % 2) * 8]);
        mma_bf16_16816(s[2 * nj], qf[kc][0], qf[kc][1], qf[kc][2], qf[kc][3], r[0], r[1]);
        mma_bf16_16816(s[2 * nj + 1], qf[kc][0], qf[kc][1], qf[kc][2], qf[kc][3], r[2], r[3]);
      }
    // Online softmax; element e of a fragment: row half e / 2 (g or g+8), key column tc + e % 2.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int ni = 0; ni < kBkv / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j * kBkv + ni * 8 + tc + (e & 1);
        s[ni][e] = key < n ? s[ni][e] * scale_log2 : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[ni][e]);
      }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m[h], mx[h]);  // finite: every tile holds at least one key < n
      alpha[h] = exp2f(m[h] - m_new);
      m[h] = m_new;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int di = 0; di < HD / 8; ++di)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[di][e] *= alpha[e / 2];
#pragma unroll
    for (int ni = 0; ni < kBkv / 8; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[ni][e] = exp2f(s[ni][e] - m[e / 2]);
        l[e / 2] += s[ni][e];
      }
    // O += P·V: 16 keys per step; P's A fragment from S tiles 2kc (keys 0..7) and 2kc+1 (8..15).
#pragma unroll
    for (int kc = 0; kc < kBkv / 16; ++kc) {
      const uint32_t a0 = tiles::pack_bf16x2(s[2 * kc][0], s[2 * kc][1]);
      const uint32_t a1 = tiles::pack_bf16x2(s[2 * kc][2], s[2 * kc][3]);
      const uint32_t a2 = tiles::pack_bf16x2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      const uint32_t a3 = tiles::pack_bf16x2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
      for (int dj = 0; dj < HD / 16; ++dj) {
        uint32_t r[4];
        tiles::ldmatrix_x4_trans(
            r, &vs[cur][(kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLd + dj * 16 + (lane / 16) * 8]);
        mma_bf16_16816(o[2 * dj], a0, a1, a2, a3, r[0], r[1]);
        mma_bf16_16816(o[2 * dj + 1], a0, a1, a2, a3, r[2], r[3]);
      }
    }
    __syncthreads();  // buffer `cur` is reloaded at the next iteration's prefetch
  }
  tiles::cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = q0 + warp * 16 + lane / 4 + h * 8;
    if (row >= n) continue;
    const float inv = 1.0f / l[h];
    uint16_t* dst = p.out + int64_t(row) * p.ldo + head * HD + tc;
#pragma unroll
    for (int di = 0; di < HD / 8; ++di)
      *reinterpret_cast<uint32_t*>(dst + di * 8) = tiles::pack_bf16x2(o[di][2 * h] * inv, o[di][2 * h + 1] * inv);
  }
}

}  // namespace

Status attention_bf16(const AttentionArgs& a, cudaStream_t stream) {
  if (a.n <= 0 || a.heads <= 0) return invalid_argument("attention_bf16: n and heads must be positive");
  if (a.head_dim != 64)
    return unsupported("attention_bf16: head_dim " + std::to_string(a.head_dim) +
                       " (only 64, the release tower's 1024 / 16, is built)");
  if (!a.q || !a.k || !a.v || !a.out || a.ldo < int64_t(a.heads) * a.head_dim || a.ldo % 2)
    return invalid_argument("attention_bf16: null pointer or ldo (" + std::to_string(a.ldo) +
                            ") below heads·head_dim or odd");
  if (a.heads > 65535) return invalid_argument("attention_bf16: more than 65535 heads");
  const float scale_log2 = float(1.0 / std::sqrt(double(a.head_dim)) / std::log(2.0));
  const dim3 grid((a.n + kBq - 1) / kBq, a.heads);
  attention_kernel<64><<<grid, kThreads, 0, stream>>>(a, scale_log2);
  return launch_status("attention_kernel");
}

}  // namespace dsv41::cuda
