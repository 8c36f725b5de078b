// The vision tower's GEMM (vision_kernels.h gemm_bf16): out = a · wᵀ (+ bias) on bf16 tensor
// cores with fp32 accumulation.
//
// CTA tile 128 × 128, k steps of 32, 8 warps as 2 (m) × 4 (n), each warp 64 × 32 = 4 × 4
// m16n8k16 MMAs per 16 k. Operands stream through a 3-stage cp.async ring in shared memory;
// rows are padded to 40 bf16 (80 bytes) so that the 8 rows an ldmatrix reads fall in 8
// distinct 4-bank groups. Ragged edges: loads past m, n or k are zero-filled (k is a multiple
// of 8, so a 16-byte chunk is wholly in or out), stores past m or n are skipped.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/smem_tiles.cuh"
#include "backends/cuda/vision_kernels.h"

namespace dsv41::cuda {
namespace {

constexpr int kBm = 128, kBn = 128, kBk = 32, kStages = 3, kLds = kBk + 8, kThreads = 256;
constexpr int kSmemBytes = kStages * (kBm + kBn) * kLds * 2;

__global__ void __launch_bounds__(kThreads, 2) gemm_bf16_kernel(GemmArgs g) {
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* as = smem;                         // [stage][kBm][kLds]
  uint16_t* bs = smem + kStages * kBm * kLds;  // [stage][kBn][kLds]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / 4, wn = warp % 4;
  const int m0 = blockIdx.y * kBm, n0 = blockIdx.x * kBn;
  const int ktiles = (g.k + kBk - 1) / kBk;

  auto load = [&](int stage, int kt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kThreads, row = c / 4, kc = (c % 4) * 8, gk = kt * kBk + kc;
      const bool ka = gk < g.k;
      const bool oka = ka && m0 + row < g.m, okb = ka && n0 + row < g.n;
      tiles::cp_async16(&as[(stage * kBm + row) * kLds + kc], oka ? g.a + (m0 + row) * g.lda + gk : g.a, oka);
      tiles::cp_async16(&bs[(stage * kBn + row) * kLds + kc], okb ? g.w + (n0 + row) * g.ldw + gk : g.w, okb);
    }
  };

  float acc[4][4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load(s, s);
    tiles::cp_async_commit();  // empty groups keep the count uniform
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    tiles::cp_async_wait<kStages - 2>();  // tile kt has landed (this thread's part)
    __syncthreads();                      // ... and everyone's; stage (kt−1) % kStages is free
    if (kt + kStages - 1 < ktiles) load((kt + kStages - 1) % kStages, kt + kStages - 1);
    tiles::cp_async_commit();
    const uint16_t* at = as + (kt % kStages) * kBm * kLds;
    const uint16_t* bt = bs + (kt % kStages) * kBn * kLds;
#pragma unroll
    for (int kk = 0; kk < kBk; kk += 16) {
      uint32_t a[4][4], b[4][2];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
        tiles::ldmatrix_x4(a[mi], &at[(wm * 64 + mi * 16 + lane % 16) * kLds + kk + (lane / 16) * 8]);
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t r[4];
        tiles::ldmatrix_x4(r, &bt[(wn * 32 + nj * 16 + lane % 8 + (lane / 16) * 8) * kLds + kk + ((lane / 8) % 2) * 8]);
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          mma_bf16_16816(acc[mi][ni], a[mi][0], a[mi][1], a[mi][2], a[mi][3], b[ni][0], b[ni][1]);
    }
  }
  tiles::cp_async_wait<0>();

  const int gr = lane / 4, tc = (lane % 4) * 2;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wm * 64 + mi * 16 + gr + half * 8;
      if (row >= g.m) continue;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        if (g.swiglu_pairs) {  // this thread holds both columns of the pair (tc is even)
          const int col = n0 + wn * 32 + ni * 8 + tc;
          if (col >= g.n) continue;
          const float gate = acc[mi][ni][half * 2] + (g.bias ? g.bias[col] : 0.0f);
          const float up = acc[mi][ni][half * 2 + 1] + (g.bias ? g.bias[col + 1] : 0.0f);
          g.out_bf16[int64_t(row) * g.ldo + col / 2] = __bfloat16_as_ushort(__float2bfloat16_rn(gate / (1.0f + expf(-gate)) * up));
          continue;
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n0 + wn * 32 + ni * 8 + tc + e;
          if (col >= g.n) continue;
          float v = acc[mi][ni][half * 2 + e] + (g.bias ? g.bias[col] : 0.0f);
          const int64_t at_o = int64_t(row) * g.ldo + col;
          if (g.out_f32) {
            if (g.accumulate) v += g.out_f32[at_o];
            g.out_f32[at_o] = v;
          } else {
            g.out_bf16[at_o] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
          }
        }
      }
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

Status gemm_bf16(const GemmArgs& g, cudaStream_t stream) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0)
    return invalid_argument("gemm_bf16: sizes must be positive (m " + std::to_string(g.m) + ", n " +
                            std::to_string(g.n) + ", k " + std::to_string(g.k) + ")");
  if (g.k % 8 || g.lda % 8 || g.ldw % 8 || g.lda < g.k || g.ldw < g.k)
    return invalid_argument("gemm_bf16: k (" + std::to_string(g.k) + "), lda and ldw must be multiples of 8, lda/ldw ≥ k");
  if (!g.a || !g.w || !aligned16(g.a) || !aligned16(g.w))
    return invalid_argument("gemm_bf16: a and w must be 16-byte aligned device pointers");
  if ((g.out_f32 == nullptr) == (g.out_bf16 == nullptr) || g.ldo < (g.swiglu_pairs ? g.n / 2 : g.n))
    return invalid_argument("gemm_bf16: exactly one of out_f32 / out_bf16, with ldo ≥ n (n/2 for SwiGLU pairs)");
  if (g.swiglu_pairs && (g.n % 2 || !g.out_bf16))
    return invalid_argument("gemm_bf16: SwiGLU pairs need an even n and out_bf16");
  if (g.accumulate && !g.out_f32) return invalid_argument("gemm_bf16: accumulate needs out_f32");
  DSV41_CUDA_TRY(cudaFuncSetAttribute(gemm_bf16_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const dim3 grid((g.n + kBn - 1) / kBn, (g.m + kBm - 1) / kBm);
  gemm_bf16_kernel<<<grid, kThreads, kSmemBytes, stream>>>(g);
  return launch_status("gemm_bf16_kernel");
}

}  // namespace dsv41::cuda
