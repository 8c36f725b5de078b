// The sink attention of many rows on bf16 tensor cores (fast_kernels.h launch_attn_tensor): the
// backend's decode batches and prefill chunks at head_dim 512 (mini-flash, the real geometry).
// The split kernels (fast_attention.cu) repeat the simple bodies' double sums in their order, and
// at batch 64 their values pass is instruction-bound: ≈ 2 ms a layer of a 280-ms synthetic step
// (docs/CUDA.md "Tensor-core attention"). This kernel is bench/cuda's sparse attention
// (sparse_attention.cu) taught the backend's geometry (dk::AttnGeom: window rows from the ring or
// the segment's own fake-quantised rows, selected rows from paged NVFP4 records, absent slots, a
// floor) and made more exact: the queries and the probabilities go in as two bf16 parts each.
//
// One CTA = one query row × 32 heads, 16 warps; keys in tiles of 64 slots:
//   1. the tile's rows (KeyRow: float, FP8 window record, NVFP4 main record, absent) found once
//      by 64 threads, their 16-channel units loaded a tile ahead, then decoded to bf16 rows in
//      shared memory — exact: every cached value has at most 6 significant bits (model.md §4)
//      and the segment's own window rows are fake-quantised FP8 values;
//   2. S = (q_hi + q_lo)·Kᵀ, each warp a row block × 64 channels, partial sums added in warp order;
//   3. online softmax per head row (the sink seeds the running max and the denominator);
//   4. O = O·α + (P_hi + P_lo)·V.
// Sums are fp32 (the tensor core's), so the results are not the simple bodies' bits: a query or a
// probability carries ≈ 16 significant bits (hi + lo), each product is exact, the sums round;
// FastAttentionCuda.TensorSinkAttentionMatchesSimple bounds the difference.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/smem_tiles.cuh"

namespace dsv41::fast {
namespace {

using cuda::e2m1x8_to_e4m3;
using cuda::mma_bf16_16816;
using cuda::tiles::ldmatrix_x4;
using cuda::tiles::ldmatrix_x4_trans;

constexpr int kThreads = 512;  // 16 warps, one CTA an SM
constexpr int kRows = 32;      // heads a CTA (two m16 row blocks)
constexpr int kTile = 64;      // key slots a tile
constexpr int kD = 512;        // head_dim the kernel is built for

enum SlotKind : int { kWindowRecord = 0, kMainRecord = 1, kAbsent = 2, kFloatRow = 3 };

struct Smem {
  static constexpr int kStride = kD + 8;  // bf16 a row; +16 B keeps the ldmatrix rows conflict-free
  static constexpr int kPStride = kTile + 8;
  static constexpr int kPartStride = kTile + 1;
  __nv_bfloat16 q_hi[kRows * kStride];  // then (the q fragments in registers) the partial scores
  __nv_bfloat16 q_lo[kRows * kStride];
  __nv_bfloat16 keys[kTile * kStride];
  __nv_bfloat16 p_hi[kRows * kPStride];
  __nv_bfloat16 p_lo[kRows * kPStride];
  float m[kRows], l[kRows], alpha[kRows];
  const void* src[2][kTile];  // a tile's rows, double-buffered: the next tile's found during this one
  int kind[2][kTile];
  dk::AttnGeom g;
};
static_assert(8 * kRows * Smem::kPartStride * sizeof(float) <= 2 * kRows * Smem::kStride * sizeof(__nv_bfloat16),
              "partial scores fit over q");

// Two E4M3 codes (low byte first) times a float scale, as a bf16 pair (exact for cached values).
__device__ __forceinline__ __nv_bfloat162 e4m3x2_scaled(uint32_t two, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFF), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return __floats2bfloat162_rn(f.x * scale, f.y * scale);
}

// One 16-channel unit of a record as loaded (registers), decoded once the tile's loads are out.
struct RawUnit {
  uint32_t w[4];  // window: 16 E4M3 codes; main: 16 E2M1 codes in w[0..1]
  uint32_t scale;
};

__device__ __forceinline__ RawUnit load_unit(const void* row, int kind, int c0) {
  RawUnit u{{0, 0, 0, 0}, 0};
  const uint8_t* rec = static_cast<const uint8_t*>(row);
  if (kind == kWindowRecord) {  // D E4M3 codes, then a UE8M0 scale per 32 channels
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(rec + c0));
    u.w[0] = v.x, u.w[1] = v.y, u.w[2] = v.z, u.w[3] = v.w;
    u.scale = __ldg(rec + kD + c0 / 32);
  } else if (kind == kMainRecord) {  // D/2 bytes of E2M1 pairs, then an E4M3 scale per 16 channels
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(rec + c0 / 2));
    u.w[0] = v.x, u.w[1] = v.y;
    u.scale = __ldg(rec + kD / 2 + c0 / 16);
  }
  return u;
}

// The unit's 16 values as bf16 in shared memory (record_value's values; absent rows as zeros).
__device__ __forceinline__ void store_unit(const RawUnit& u, int kind, const void* row, int c0, __nv_bfloat16* dst) {
  __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst);
  if (kind == kAbsent) {
    for (int i = 0; i < 8; ++i) d2[i] = __floats2bfloat162_rn(0.0f, 0.0f);
    return;
  }
  if (kind == kFloatRow) {  // the segment's own window rows (fake-quantised: bf16 values)
    const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(row) + c0);
    for (int i = 0; i < 4; ++i) {
      const float4 v = __ldg(f + i);
      d2[2 * i] = __floats2bfloat162_rn(v.x, v.y);
      d2[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
    return;
  }
  uint32_t w[4];
  float scale;
  if (kind == kWindowRecord) {  // ue8m0_value: 0xFF NaN, else 2^(e − 127)
    const uint32_t e = u.scale;
    scale = e == 0xFF ? __int_as_float(0x7FC00000) : (e == 0 ? __int_as_float(0x00400000) : __int_as_float(e << 23));
    w[0] = u.w[0], w[1] = u.w[1], w[2] = u.w[2], w[3] = u.w[3];
  } else {
    // E2M1 → E4M3 holding value · 2^-6 (mma.cuh), in channel order: interleave even / odd bytes.
    for (int i = 0; i < 2; ++i) {
      uint32_t even, odd;
      e2m1x8_to_e4m3(u.w[i], even, odd);
      w[2 * i] = __byte_perm(even, odd, 0x5140);
      w[2 * i + 1] = __byte_perm(even, odd, 0x7362);
    }
    const __half_raw hs = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(u.scale), __NV_E4M3);
    scale = __half2float(__half(hs)) * 64.0f;  // exact: undoes the 2^-6
  }
  for (int i = 0; i < 4; ++i) {
    d2[2 * i] = e4m3x2_scaled(w[i], scale);
    d2[2 * i + 1] = e4m3x2_scaled(w[i] >> 16, scale);
  }
}

// Slot j of row i as (source, kind): AttnGeom::key, the row's form told once a tile.
__device__ __forceinline__ void find_slot(const dk::AttnGeom& g, int64_t i, int64_t j, int64_t nkeys,
                                          const void*& src, int& kind) {
  const dk::KeyRow key = j < nkeys ? g.key(i, j) : dk::KeyRow{};
  src = key.f ? static_cast<const void*>(key.f) : static_cast<const void*>(key.rec);
  kind = !key ? kAbsent : key.f ? kFloatRow : key.kind == RowKind::kWindow ? kWindowRecord : kMainRecord;
}

__global__ void __launch_bounds__(kThreads, 1) attn_tensor_kernel(const dk::AttnBatch b) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  constexpr int S = Smem::kStride, PS = Smem::kPStride, kPS = Smem::kPartStride;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g8 = lane / 4, t4 = lane % 4;
  const int mt = warp / 8, wi = warp % 8;  // row block of the MMAs, warp within it
  // This block's job and row.
  int jn = 0;
  int64_t i = blockIdx.x;
  while (jn + 1 < b.n && i >= b.jobs[jn].g.T) i -= b.jobs[jn++].g.T;
  if (tid == 0) sm.g = b.jobs[jn].g;
  const float* const q = b.jobs[jn].q;
  float* const out = b.jobs[jn].o;
  __syncthreads();
  const dk::AttnGeom& g = sm.g;
  const int64_t H = g.H, h0 = int64_t(blockIdx.y) * kRows;
  // Logits in log2 units (× log2 e) so that the softmax takes exp2; the sink moves with them.
  constexpr float kLog2e = 1.4426950408889634f;
  const float scaling = b.scaling * kLog2e;

  // The head group's queries split hi + lo (rows past H zero), every 16-byte load issued first.
  {
    constexpr int kVecs = kRows * kD / 4, kPer = kVecs / kThreads;
    float4 v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = j * kThreads + tid, r = e / (kD / 4), c4 = e % (kD / 4);
      v[j] = h0 + r < H ? __ldg(reinterpret_cast<const float4*>(q + (i * H + h0 + r) * kD) + c4)
                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int e = j * kThreads + tid, r = e / (kD / 4), c = (e % (kD / 4)) * 4;
      const float f[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int x = 0; x < 4; x += 2) {
        const __nv_bfloat162 hi = __floats2bfloat162_rn(f[x], f[x + 1]);
        const __nv_bfloat162 lo = __floats2bfloat162_rn(f[x] - __low2float(hi), f[x + 1] - __high2float(hi));
        *reinterpret_cast<__nv_bfloat162*>(&sm.q_hi[r * S + c + x]) = hi;
        *reinterpret_cast<__nv_bfloat162*>(&sm.q_lo[r * S + c + x]) = lo;
      }
    }
  }
  if (tid < kRows) {
    sm.m[tid] = h0 + tid < H ? b.sink[h0 + tid] * kLog2e : 0.0f;
    sm.l[tid] = 1.0f;  // exp(sink − m) with m = sink
  }
  // Present slots lie in [0, nkeys): the window's nwin, then the top-k row's k.
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  const int64_t present = nwin + (g.topk ? g.k : 0), nkeys = present < g.L ? present : g.L;
  if (tid < kTile) find_slot(g, i, tid, nkeys, sm.src[0][tid], sm.kind[0][tid]);
  __syncthreads();

  // Warp (mt, wi) multiplies row block mt by channels [64 wi, 64 wi + 64) of every key: its q
  // fragments (hi and lo) stay in registers; the q arrays then hold the 8 partial score blocks.
  uint32_t qa_hi[4][4], qa_lo[4][4];
  float* const spart = reinterpret_cast<float*>(sm.q_hi);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = wi * (kD / 8) + 16 * j + (lane >> 4) * 8;
    ldmatrix_x4(qa_hi[j], &sm.q_hi[(mt * 16 + (lane & 15)) * S + c]);
    ldmatrix_x4(qa_lo[j], &sm.q_lo[(mt * 16 + (lane & 15)) * S + c]);
  }
  __syncthreads();

  constexpr int NT = kD / 64;  // n8 tiles of this warp's 64 output channels
  float acc[NT][4];
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  // A pass of the decode covers RP rows, one 16-channel unit a thread.
  constexpr int U = kD / 16, RP = kThreads / U, kPasses = kTile / RP;
  const int unit_row = tid / U, unit_c0 = (tid % U) * 16;
  RawUnit raw[kPasses];
  auto load_tile = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = j * RP + unit_row;
      raw[j] = load_unit(sm.src[buf][r], sm.kind[buf][r], unit_c0);
    }
  };
  if (nkeys > 0) load_tile(0);

  int buf = 0;
  for (int64_t k0 = 0; k0 < nkeys; k0 += kTile, buf ^= 1) {
    // ---- 1. decode this tile (loaded during the last one); find the next tile's rows -----------
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = j * RP + unit_row;
      store_unit(raw[j], sm.kind[buf][r], sm.src[buf][r], unit_c0, &sm.keys[r * S + unit_c0]);
    }
    if (tid < kTile && k0 + kTile < nkeys) find_slot(g, i, k0 + kTile + tid, nkeys, sm.src[buf ^ 1][tid], sm.kind[buf ^ 1][tid]);
    __syncthreads();

    // ---- 2. S = Q·Kᵀ: row block mt × this warp's channels × 64 keys, in halves of 32 keys --------
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float sacc[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
        const __nv_bfloat16* kb = &sm.keys[(32 * hf + 8 * nt + (lane & 7)) * S + wi * (kD / 8) + (lane >> 3) * 8];
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          uint32_t bk[4];
          ldmatrix_x4(bk, kb + 32 * kk);
          const uint32_t(&h0f)[4] = qa_hi[2 * kk];
          const uint32_t(&l0f)[4] = qa_lo[2 * kk];
          const uint32_t(&h1f)[4] = qa_hi[2 * kk + 1];
          const uint32_t(&l1f)[4] = qa_lo[2 * kk + 1];
          mma_bf16_16816(sacc[nt], h0f[0], h0f[1], h0f[2], h0f[3], bk[0], bk[1]);
          mma_bf16_16816(sacc[nt], l0f[0], l0f[1], l0f[2], l0f[3], bk[0], bk[1]);
          mma_bf16_16816(sacc[nt], h1f[0], h1f[1], h1f[2], h1f[3], bk[2], bk[3]);
          mma_bf16_16816(sacc[nt], l1f[0], l1f[1], l1f[2], l1f[3], bk[2], bk[3]);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        float* o = spart + (wi * kRows + mt * 16 + g8) * kPS + 32 * hf + 8 * nt + 2 * t4;
        o[0] = sacc[nt][0], o[1] = sacc[nt][1];
        o[8 * kPS] = sacc[nt][2], o[8 * kPS + 1] = sacc[nt][3];
      }
    }
    __syncthreads();

    // ---- 3. online softmax: warp w updates head rows 2w and 2w + 1 ------------------------------
    {
      const int r0 = warp * 2;
      float v[2][2], mx[2], sum[2], m_old[2], m_new[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        float a0 = 0.0f, a1 = 0.0f;  // the 8 channel slices' partial scores, in warp order
#pragma unroll
        for (int w = 0; w < 8; ++w) {
          const float* ps = spart + (w * kRows + r0 + x) * kPS;
          a0 += ps[lane], a1 += ps[lane + 32];
        }
        v[x][0] = sm.kind[buf][lane] == kAbsent ? -INFINITY : a0 * scaling;
        v[x][1] = sm.kind[buf][lane + 32] == kAbsent ? -INFINITY : a1 * scaling;
        mx[x] = fmaxf(v[x][0], v[x][1]);
        m_old[x] = sm.m[r0 + x];
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], off));
        mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], off));
      }
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        m_new[x] = fmaxf(m_old[x], mx[x]);  // finite: the sink seeds it
        const float p0 = exp2f(v[x][0] - m_new[x]), p1 = exp2f(v[x][1] - m_new[x]);
        sum[x] = p0 + p1;
        const __nv_bfloat16 h0b = __float2bfloat16_rn(p0), h1b = __float2bfloat16_rn(p1);
        sm.p_hi[(r0 + x) * PS + lane] = h0b;
        sm.p_hi[(r0 + x) * PS + lane + 32] = h1b;
        sm.p_lo[(r0 + x) * PS + lane] = __float2bfloat16_rn(p0 - __bfloat162float(h0b));
        sm.p_lo[(r0 + x) * PS + lane + 32] = __float2bfloat16_rn(p1 - __bfloat162float(h1b));
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        sum[0] += __shfl_xor_sync(0xffffffffu, sum[0], off);
        sum[1] += __shfl_xor_sync(0xffffffffu, sum[1], off);
      }
      __syncwarp();  // every lane has read m before lanes 0 and 1 replace it
      if (lane < 2) {
        const float mo = lane == 0 ? m_old[0] : m_old[1], mn = lane == 0 ? m_new[0] : m_new[1];
        const float a = exp2f(mo - mn);
        sm.alpha[r0 + lane] = a;
        sm.l[r0 + lane] = sm.l[r0 + lane] * a + (lane == 0 ? sum[0] : sum[1]);
        sm.m[r0 + lane] = mn;
      }
    }
    __syncthreads();

    // The next tile's records, in flight during P·V and the next decode's barrier.
    if (k0 + kTile < nkeys) load_tile(buf ^ 1);

    // ---- 4. O = O·α + P·V over row block mt and this warp's 64 channels -------------------------
    {
      const int r = mt * 16 + g8;
      const float a_lo = sm.alpha[r], a_hi = sm.alpha[r + 8];
      for (int n = 0; n < NT; ++n) acc[n][0] *= a_lo, acc[n][1] *= a_lo, acc[n][2] *= a_hi, acc[n][3] *= a_hi;
#pragma unroll
      for (int kc = 0; kc < kTile; kc += 16) {
        uint32_t ph[4], pl[4];
        const int o0 = r * PS + kc + 2 * t4, o1 = (r + 8) * PS + kc + 2 * t4;
        ph[0] = *reinterpret_cast<const uint32_t*>(&sm.p_hi[o0]);
        ph[1] = *reinterpret_cast<const uint32_t*>(&sm.p_hi[o1]);
        ph[2] = *reinterpret_cast<const uint32_t*>(&sm.p_hi[o0 + 8]);
        ph[3] = *reinterpret_cast<const uint32_t*>(&sm.p_hi[o1 + 8]);
        pl[0] = *reinterpret_cast<const uint32_t*>(&sm.p_lo[o0]);
        pl[1] = *reinterpret_cast<const uint32_t*>(&sm.p_lo[o1]);
        pl[2] = *reinterpret_cast<const uint32_t*>(&sm.p_lo[o0 + 8]);
        pl[3] = *reinterpret_cast<const uint32_t*>(&sm.p_lo[o1 + 8]);
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, &sm.keys[(kc + (lane & 15)) * S + wi * (kD / 8) + n * 8 + (lane >> 4) * 8]);
          mma_bf16_16816(acc[n], ph[0], ph[1], ph[2], ph[3], bv[0], bv[1]);
          mma_bf16_16816(acc[n], pl[0], pl[1], pl[2], pl[3], bv[0], bv[1]);
          mma_bf16_16816(acc[n + 1], ph[0], ph[1], ph[2], ph[3], bv[2], bv[3]);
          mma_bf16_16816(acc[n + 1], pl[0], pl[1], pl[2], pl[3], bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // the next tile overwrites keys, the partial scores and p
  }

  // ---- out = O / l for the real heads -------------------------------------------------------------
  const int64_t hr = h0 + mt * 16 + g8;  // head of accumulator rows g8 (and g8 + 8)
  const float inv_lo = 1.0f / sm.l[mt * 16 + g8], inv_hi = 1.0f / sm.l[mt * 16 + g8 + 8];
  for (int n = 0; n < NT; ++n) {
    const int d = wi * (kD / 8) + n * 8 + 2 * t4;
    if (hr < H) *reinterpret_cast<float2*>(out + (i * H + hr) * kD + d) = make_float2(acc[n][0] * inv_lo, acc[n][1] * inv_lo);
    if (hr + 8 < H)
      *reinterpret_cast<float2*>(out + (i * H + hr + 8) * kD + d) = make_float2(acc[n][2] * inv_hi, acc[n][3] * inv_hi);
  }
}

// A job the kernel takes: head_dim 512, window rows as FP8 records or (fake-quantised) floats,
// selected rows as NVFP4 records (float main rows would be rounded to bf16: left to the split
// kernels).
bool tensor_fits(const dk::AttnGeom& g) {
  const bool ring_ok = g.ring.empty() || g.ring.f || g.ring.kind == RowKind::kWindow;
  const bool main_ok = g.main.empty() || (!g.main.f && g.main.kind == RowKind::kMain);
  return g.D == kD && g.H >= 1 && ring_ok && main_ok;
}

}  // namespace

bool launch_attn_tensor(const dk::AttnBatch& b, cudaStream_t s) {
  if (b.n < 1 || b.n > dk::AttnBatch::kMax) return false;
  int64_t rows = 0;
  for (int j = 0; j < b.n; ++j) {
    if (!tensor_fits(b.jobs[j].g) || b.jobs[j].g.H != b.jobs[0].g.H) return false;
    rows += b.jobs[j].g.T;
  }
  if (rows > 0x7fffffff) return false;
  const int bytes = int(sizeof(Smem));
  if (cudaFuncSetAttribute(attn_tensor_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess)
    return false;
  if (rows == 0) return true;
  const dim3 grid(unsigned(rows), unsigned((b.jobs[0].g.H + kRows - 1) / kRows));
  attn_tensor_kernel<<<grid, kThreads, bytes, s>>>(b);
  return true;
}

}  // namespace dsv41::fast
