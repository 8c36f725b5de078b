// Sparse sink attention for decode, reading the packed records directly (cuda_kernels.h).
// Spec: model.md §3.4 "Sparse attention with sink"; CPU twin: model/attention.cpp.
//
// One CTA = one query token × 32 heads (two m16 row blocks), 16 warps. Keys arrive in tiles of 64:
//   1. decode: the tile's 64 records (FP8 window rows from the ring, NVFP4 main rows by top-k
//      id, absent ones as zeros) become bf16 rows in shared memory [64, D] — exact, since every
//      record value has at most 6 significant bits;
//   2. S = Q·Kᵀ [32, 64]: warp w takes row block w / 8 and keys 8(w%8)..8(w%8)+7, q split as
//      bf16 hi + lo (two MMAs);
//   3. online softmax per head row (the sink seeds the running max and the denominator);
//   4. O += P·V [32, D]: warp w owns row block w / 8, columns [(w%8)·D/8, (w%8+1)·D/8); P in
//      bf16, V = the same tile.
// K = V and one KV head for all 64 query heads, so each record is read and decoded once per 32
// heads (the 2 head-group CTAs of a token meet in L2), and the work is tensor-core MMAs.
// Measured on the H200 (2026-12-01): with 16 heads per CTA (8 warps, two CTAs per SM) a sparse
// layer at batch 64 took 0.103 ms, about half of its instructions decoding records that the
// token's other head groups decoded too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/mma.cuh"

namespace dsv41::cuda {
namespace {

constexpr int kThreads = 512;  // 16 warps; one CTA per SM
constexpr int kRows = 32;      // heads per CTA (two m16 row blocks)
constexpr int kTile = 64;      // keys per tile
constexpr int kMaxTopk = 1024;  // ids kept in shared memory (two CTAs per SM at D 512)

template <int D>
struct AttnSmem {
  static constexpr int kStride = D + 8;  // bf16 elements per row: +16 B keeps MMA loads conflict-free
  static constexpr int kPStride = kTile + 8;
  __nv_bfloat16 q_hi[kRows * kStride];
  __nv_bfloat16 q_lo[kRows * kStride];
  __nv_bfloat16 keys[kTile * kStride];
  float s[kRows][kTile + 1];
  __nv_bfloat16 p[kRows * kPStride];
  float m[kRows], l[kRows], alpha[kRows];
  int row_kind[kTile];  // 0 window record, 1 main record, 2 absent
  int32_t ids[kMaxTopk];  // the token's top-k ids, read once
};

__device__ __forceinline__ uint32_t ld_u32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }


// Two E4M3 bytes (low = first channel) times a scale, as a bf16 pair (exact).
__device__ __forceinline__ __nv_bfloat162 e4m3x2_scaled(uint32_t two, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFF), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return __floats2bfloat162_rn(f.x * scale, f.y * scale);
}

// One 16-channel unit of a key row as loaded from memory (registers), decoded after the loads
// of the whole tile are in flight.
struct RawUnit {
  uint32_t w[4];  // window: 16 E4M3 codes; main: 16 E2M1 codes in w[0..1]
  uint32_t scale; // the unit's scale byte
};

template <int D>
__device__ __forceinline__ RawUnit load_unit(const uint8_t* rec, int kind, int c0) {
  RawUnit u{{0, 0, 0, 0}, 0};
  if (kind == 0) {  // window row: E4M3 codes [D], UE8M0 per 32 channels at D + c/32
    if constexpr (D % 512 == 0) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(rec + c0));
      u.w[0] = v.x, u.w[1] = v.y, u.w[2] = v.z, u.w[3] = v.w;
    } else {
      for (int i = 0; i < 4; ++i)
        u.w[i] = rec[c0 + 4 * i] | (rec[c0 + 4 * i + 1] << 8) | (rec[c0 + 4 * i + 2] << 16) |
                 (uint32_t{rec[c0 + 4 * i + 3]} << 24);
    }
    u.scale = __ldg(rec + D + c0 / 32);
  } else if (kind == 1) {  // main row: E2M1 codes [D/2], E4M3 scale per 16 channels at D/2 + c/16
    if constexpr (D % 256 == 0) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(rec + c0 / 2));
      u.w[0] = v.x, u.w[1] = v.y;
    } else {
      for (int i = 0; i < 2; ++i) u.w[i] = __ldg(reinterpret_cast<const uint32_t*>(rec + c0 / 2 + 4 * i));  // 9D/16-byte rows
    }
    u.scale = __ldg(rec + D / 2 + c0 / 16);
  }
  return u;
}

// The unit as 16 bf16 values in shared memory (exact; absent rows as zeros).
__device__ __forceinline__ void store_unit(const RawUnit& u, int kind, __nv_bfloat16* dst) {
  __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst);
  if (kind == 2) {
    for (int i = 0; i < 8; ++i) d2[i] = __floats2bfloat162_rn(0.0f, 0.0f);
    return;
  }
  uint32_t w[4];
  float scale;
  if (kind == 0) {
    const uint32_t sc = u.scale;
    scale = sc == 0xFF ? __int_as_float(0x7FC00000) : (sc == 0 ? __int_as_float(0x00400000) : __int_as_float(sc << 23));
    w[0] = u.w[0], w[1] = u.w[1], w[2] = u.w[2], w[3] = u.w[3];
  } else {
    // E2M1 → E4M3 holding value·2^-6 (mma.cuh), in channel order: interleave even/odd bytes.
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

// Four 8×8 bf16 matrices from shared memory, each lane giving one row address (rows of lanes
// 8i..8i+7 form matrix i): an A fragment (16×16) or two k-steps of a B fragment.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* addr) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// B fragments of one n8 tile (k16 × n8) the same way; lanes 0..15 give the row addresses.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const __nv_bfloat16* row0, int stride, int lane) {
  const __nv_bfloat16* a = row0 + (lane & 15) * stride;
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(a));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// B fragments of two adjacent n8 tiles (P·V: k = keys, n = channels) from row-major V in
// shared memory, transposed on the fly. `row0` points at V[k0][n0]; stride in elements.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row0, int stride, int lane) {
  const __nv_bfloat16* a = row0 + (lane & 15) * stride + (lane >> 4) * 8;
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(a));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) sparse_attention_kernel(SparseAttentionParams p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  AttnSmem<D>& sm = *reinterpret_cast<AttnSmem<D>*>(smem_raw);
  constexpr int S = AttnSmem<D>::kStride, PS = AttnSmem<D>::kPStride;
  const int tok = blockIdx.x, h0 = blockIdx.y * kRows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int mt = warp / 8, wi = warp % 8;  // row block of the MMAs, warp within it
  // Logits are kept in log2 units (× log2 e) so the softmax uses the ex2 instruction directly;
  // the sink moves with them, and O / l is unchanged.
  constexpr float kLog2e = 1.4426950408889634f;
  const float scaling = rsqrtf(static_cast<float>(D)) * kLog2e;

  // q rows of this head group, split hi + lo (padded rows are zero). Every thread issues all its
  // 16-byte loads before converting any: a loop of dependent 4-byte loads (one per iteration,
  // 32 in a row) cost about a quarter of a sparse layer (window-only layers: 31 µs for 2 tiles).
  {
    constexpr int kVecs = kRows * D / 4, kPer = (kVecs + kThreads - 1) / kThreads;
    float4 v[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = j * kThreads + tid, r = i / (D / 4), c4 = i % (D / 4);
      v[j] = i < kVecs && h0 + r < p.heads
                 ? __ldg(reinterpret_cast<const float4*>(p.q + (static_cast<int64_t>(tok) * p.heads + h0 + r) * D) + c4)
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = j * kThreads + tid, r = i / (D / 4), c = (i % (D / 4)) * 4;
      if (i >= kVecs) continue;
      const float f[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const __nv_bfloat162 hi = __floats2bfloat162_rn(f[e], f[e + 1]);
        const __nv_bfloat162 lo =
            __floats2bfloat162_rn(f[e] - __low2float(hi), f[e + 1] - __high2float(hi));
        *reinterpret_cast<__nv_bfloat162*>(&sm.q_hi[r * S + c + e]) = hi;
        *reinterpret_cast<__nv_bfloat162*>(&sm.q_lo[r * S + c + e]) = lo;
      }
    }
  }
  if (tid < kRows) {
    sm.m[tid] = h0 + tid < p.heads ? p.sink[h0 + tid] * kLog2e : 0.0f;
    sm.l[tid] = 1.0f;  // exp(sink − m) with m = sink
  }
  const int64_t pos = p.positions[tok];
  const int64_t lo = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
  const int nwin = static_cast<int>(pos - lo + 1);
  const int lo_slot = static_cast<int>(lo % p.window);  // slot of the oldest window row
  const int nkeys = nwin + p.topk;
  const uint8_t* ring = p.window_rings[tok];
  const uint8_t* mains = p.topk > 0 ? p.main_rows[tok] : nullptr;
  constexpr int kWinBytes = D + D / 32, kMainBytes = D / 2 + D / 16;

  for (int j = tid; j < p.topk; j += kThreads) sm.ids[j] = p.topk_ids[static_cast<int64_t>(tok) * p.topk + j];
  __syncthreads();

  // At D ≥ 256 the Q·Kᵀ of a tile is split over channels: warp (mt, wi) multiplies row block mt
  // by channels [wi·D/8, (wi+1)·D/8) of all 64 keys, with its q fragments (hi and lo) held in
  // registers for the whole kernel; the 8 partial score blocks of a row block are summed in the
  // softmax. Before, every warp re-read its row block's q from shared memory for every tile
  // (32 KB per warp per tile, two thirds of the kernel's shared-memory traffic). The q arrays
  // are dead after this and hold the partial scores: [8][kRows][kTile + 1] floats.
  constexpr bool kSplitQK = D % 256 == 0;
  constexpr int QK = kSplitQK ? D / 256 : 1;  // k-step pairs (32 channels each) per warp: D/8 channels
  constexpr int kPS = kTile + 1;
  static_assert(!kSplitQK || 8 * kRows * kPS * 4 <= 2 * kRows * S * 2, "partial scores fit over q");
  uint32_t qa_hi[2 * QK][4], qa_lo[2 * QK][4];
  float* const spart = reinterpret_cast<float*>(sm.q_hi);
  if constexpr (kSplitQK) {
#pragma unroll
    for (int j = 0; j < 2 * QK; ++j) {
      const int c = wi * (D / 8) + 16 * j + (lane >> 4) * 8;
      ldmatrix_x4(qa_hi[j], &sm.q_hi[(mt * 16 + (lane & 15)) * S + c]);
      ldmatrix_x4(qa_lo[j], &sm.q_lo[(mt * 16 + (lane & 15)) * S + c]);
    }
    __syncthreads();
  }

  constexpr int NT = D / 64;  // n8 tiles of this warp's D/8 output columns
  float acc[NT][4];
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  // Rows of a tile are decoded in passes: pass j covers rows j·RP .. j·RP+RP−1, one 16-channel
  // unit per thread (a warp reads 512 contiguous bytes of a window row, 256 of a main row).
  // (At D 64 a pass covers more rows than a tile: threads past the tile's rows sit out.)
  constexpr int U = D / 16, RP = kThreads / U, kPasses = kTile / RP > 0 ? kTile / RP : 1;
  const int unit_row = tid / U, unit_c0 = (tid % U) * 16;
  const bool decodes = unit_row < kTile;
  auto row_source = [&](int kk, int* kind) -> const uint8_t* {
    if (kk < nwin) {  // ring slot of position lo + kk, without a 64-bit modulo per row
      *kind = 0;
      const int slot = lo_slot + kk;
      return ring + (slot >= p.window ? slot - p.window : slot) * kWinBytes;
    }
    if (kk < nkeys) {
      const int32_t id = sm.ids[kk - nwin];
      if (id >= 0) {
        *kind = 1;
        return mains + static_cast<int64_t>(id) * kMainBytes;
      }
    }
    *kind = 2;
    return nullptr;
  };
  RawUnit raw[kPasses];
  auto load_tile = [&](int k0) {
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      int kind;
      const uint8_t* src = row_source(k0 + j * RP + unit_row, &kind);
      raw[j] = load_unit<D>(src, decodes ? kind : 2, unit_c0);
    }
  };
  if (nkeys > 0) load_tile(0);

  for (int k0 = 0; k0 < nkeys; k0 += kTile) {
    // ---- 1. decode the tile loaded during the previous tile's math ---------------------------
    if (tid < kTile) {
      int kind;
      row_source(k0 + tid, &kind);
      sm.row_kind[tid] = kind;
    }
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      int kind;
      const int r = j * RP + unit_row;
      row_source(k0 + r, &kind);
      if (decodes) store_unit(raw[j], kind, &sm.keys[r * S + unit_c0]);
    }
    __syncthreads();

    // ---- 2. S = Q·Kᵀ ----------------------------------------------------------------------------
    if constexpr (kSplitQK) {
      // Row block mt × channels of warp wi × all 64 keys, in two halves of 32 keys.
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float sacc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
          const __nv_bfloat16* kb = &sm.keys[(32 * hf + 8 * nt + (lane & 7)) * S + wi * (D / 8) + (lane >> 3) * 8];
#pragma unroll
          for (int kk = 0; kk < QK; ++kk) {
            uint32_t b[4];
            ldmatrix_x4(b, kb + 32 * kk);
            const uint32_t(&h0)[4] = qa_hi[2 * kk];
            const uint32_t(&l0)[4] = qa_lo[2 * kk];
            const uint32_t(&h1)[4] = qa_hi[2 * kk + 1];
            const uint32_t(&l1)[4] = qa_lo[2 * kk + 1];
            mma_bf16_16816(sacc[nt], h0[0], h0[1], h0[2], h0[3], b[0], b[1]);
            mma_bf16_16816(sacc[nt], l0[0], l0[1], l0[2], l0[3], b[0], b[1]);
            mma_bf16_16816(sacc[nt], h1[0], h1[1], h1[2], h1[3], b[2], b[3]);
            mma_bf16_16816(sacc[nt], l1[0], l1[1], l1[2], l1[3], b[2], b[3]);
          }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          float* o = spart + (wi * kRows + mt * 16 + g) * kPS + 32 * hf + 8 * nt + 2 * t;
          o[0] = sacc[nt][0], o[1] = sacc[nt][1];
          o[8 * kPS] = sacc[nt][2], o[8 * kPS + 1] = sacc[nt][3];
        }
      }
    } else {
      {
        float s0[4] = {0, 0, 0, 0};
        // B (keys 8wi..8wi+7 × channels) two k-steps per ldmatrix.x4; A (16 head rows) per k-step.
        const __nv_bfloat16* kb = &sm.keys[(wi * 8 + (lane & 7)) * S + (lane >> 3) * 8];
        const __nv_bfloat16* qh = &sm.q_hi[(mt * 16 + (lane & 15)) * S + (lane >> 4) * 8];
        const __nv_bfloat16* ql = &sm.q_lo[(mt * 16 + (lane & 15)) * S + (lane >> 4) * 8];
#pragma unroll 4
        for (int kc = 0; kc < D; kc += 32) {
          uint32_t b[4], ah[4], al[4];
          ldmatrix_x4(b, kb + kc);
          ldmatrix_x4(ah, qh + kc);
          ldmatrix_x4(al, ql + kc);
          mma_bf16_16816(s0, ah[0], ah[1], ah[2], ah[3], b[0], b[1]);
          mma_bf16_16816(s0, al[0], al[1], al[2], al[3], b[0], b[1]);
          ldmatrix_x4(ah, qh + kc + 16);
          ldmatrix_x4(al, ql + kc + 16);
          mma_bf16_16816(s0, ah[0], ah[1], ah[2], ah[3], b[2], b[3]);
          mma_bf16_16816(s0, al[0], al[1], al[2], al[3], b[2], b[3]);
        }
        const float ninf = -INFINITY;
        const int c0 = wi * 8 + 2 * t, r = mt * 16 + g;
        sm.s[r][c0] = sm.row_kind[c0] == 2 ? ninf : s0[0] * scaling;
        sm.s[r][c0 + 1] = sm.row_kind[c0 + 1] == 2 ? ninf : s0[1] * scaling;
        sm.s[r + 8][c0] = sm.row_kind[c0] == 2 ? ninf : s0[2] * scaling;
        sm.s[r + 8][c0 + 1] = sm.row_kind[c0 + 1] == 2 ? ninf : s0[3] * scaling;
      }
    }
    __syncthreads();

    // ---- 3. online softmax: warp w updates head rows 2w, 2w+1 (both rows' reductions
    //         interleaved, so their shuffle latencies overlap) --------------------------------
    {
      const int r0 = warp * 2;
      float v[2][2], mx[2], sum[2], pr[2][2], m_old[2], m_new[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        if constexpr (kSplitQK) {  // the 8 channel slices' partial scores, in a fixed order
          float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
          for (int w = 0; w < 8; ++w) {
            const float* ps = spart + (w * kRows + r0 + i) * kPS;
            a0 += ps[lane], a1 += ps[lane + 32];
          }
          v[i][0] = sm.row_kind[lane] == 2 ? -INFINITY : a0 * scaling;
          v[i][1] = sm.row_kind[lane + 32] == 2 ? -INFINITY : a1 * scaling;
        } else {
          v[i][0] = sm.s[r0 + i][lane], v[i][1] = sm.s[r0 + i][lane + 32];
        }
        mx[i] = fmaxf(v[i][0], v[i][1]);
        m_old[i] = sm.m[r0 + i];
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], off));
        mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], off));
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        m_new[i] = fmaxf(m_old[i], mx[i]);  // finite: the sink seeds it
        pr[i][0] = exp2f(v[i][0] - m_new[i]), pr[i][1] = exp2f(v[i][1] - m_new[i]);
        sum[i] = pr[i][0] + pr[i][1];
        sm.p[(r0 + i) * PS + lane] = __float2bfloat16_rn(pr[i][0]);
        sm.p[(r0 + i) * PS + lane + 32] = __float2bfloat16_rn(pr[i][1]);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        sum[0] += __shfl_xor_sync(0xffffffffu, sum[0], off);
        sum[1] += __shfl_xor_sync(0xffffffffu, sum[1], off);
      }
      __syncwarp();  // every lane has read m before lanes 0 and 1 replace it
      if (lane < 2) {  // lane i updates row r0 + i (every lane holds both rows' values)
        const float mo = lane == 0 ? m_old[0] : m_old[1], mn = lane == 0 ? m_new[0] : m_new[1];
        const float a = exp2f(mo - mn);
        sm.alpha[r0 + lane] = a;
        sm.l[r0 + lane] = sm.l[r0 + lane] * a + (lane == 0 ? sum[0] : sum[1]);
        sm.m[r0 + lane] = mn;
      }
    }
    __syncthreads();

    // The next tile's records, in flight during P·V and the next decode's barrier (issued here
    // rather than before Q·Kᵀ so that they do not hold registers while the q fragments and the
    // partial scores do).
    if (k0 + kTile < nkeys) load_tile(k0 + kTile);

    // ---- 4. O = O·alpha + P·V over row block mt and this warp's D/8 columns -------------------
    {
      const int r = mt * 16 + g;
      const float a_lo = sm.alpha[r], a_hi = sm.alpha[r + 8];
      for (int n = 0; n < NT; ++n) acc[n][0] *= a_lo, acc[n][1] *= a_lo, acc[n][2] *= a_hi, acc[n][3] *= a_hi;
#pragma unroll
      for (int kc = 0; kc < kTile; kc += 16) {
        const uint32_t a0 = ld_u32(&sm.p[r * PS + kc + 2 * t]), a1 = ld_u32(&sm.p[(r + 8) * PS + kc + 2 * t]);
        const uint32_t a2 = ld_u32(&sm.p[r * PS + kc + 2 * t + 8]), a3 = ld_u32(&sm.p[(r + 8) * PS + kc + 2 * t + 8]);
        if constexpr (NT % 2 == 0) {
#pragma unroll
          for (int n = 0; n < NT; n += 2) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, &sm.keys[kc * S + wi * (D / 8) + n * 8], S, lane);
            mma_bf16_16816(acc[n], a0, a1, a2, a3, b[0], b[1]);
            mma_bf16_16816(acc[n + 1], a0, a1, a2, a3, b[2], b[3]);
          }
        } else {
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            uint32_t b[2];
            ldmatrix_x2_trans(b, &sm.keys[kc * S + wi * (D / 8) + n * 8], S, lane);
            mma_bf16_16816(acc[n], a0, a1, a2, a3, b[0], b[1]);
          }
        }
      }
    }
    __syncthreads();  // the next tile overwrites keys, s and p
  }

  // ---- output: O / l for the real heads ---------------------------------------------------------
  const int hr = h0 + mt * 16 + g;  // head of accumulator rows g (and g + 8)
  const float inv_lo = 1.0f / sm.l[mt * 16 + g], inv_hi = 1.0f / sm.l[mt * 16 + g + 8];
  for (int n = 0; n < NT; ++n) {
    const int d = wi * (D / 8) + n * 8 + 2 * t;
    if (hr < p.heads) {
      float* o = p.out + (static_cast<int64_t>(tok) * p.heads + hr) * D + d;
      o[0] = acc[n][0] * inv_lo, o[1] = acc[n][1] * inv_lo;
    }
    if (hr + 8 < p.heads) {
      float* o = p.out + (static_cast<int64_t>(tok) * p.heads + hr + 8) * D + d;
      o[0] = acc[n][2] * inv_hi, o[1] = acc[n][3] * inv_hi;
    }
  }
}

template <int D>
Status launch(const SparseAttentionParams& p, cudaStream_t stream) {
  const int bytes = static_cast<int>(sizeof(AttnSmem<D>));
  DSV41_CUDA_TRY(cudaFuncSetAttribute(sparse_attention_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>((p.heads + kRows - 1) / kRows));
  sparse_attention_kernel<D><<<grid, kThreads, bytes, stream>>>(p);
  return launch_status("sparse_attention_kernel");
}

}  // namespace

Status sparse_attention_decode(const SparseAttentionParams& p, cudaStream_t stream) {
  const std::string what = "sparse_attention_decode";
  if (p.tokens < 0 || p.heads < 1 || p.window < 1 || p.topk < 0 || p.topk > kMaxTopk)
    return invalid_argument(what + ": tokens " + std::to_string(p.tokens) + ", heads " + std::to_string(p.heads) +
                            ", window " + std::to_string(p.window) + ", topk " + std::to_string(p.topk));
  if (p.tokens == 0) return ok_status();
  if (!p.q || !p.sink || !p.positions || !p.window_rings || !p.out || (p.topk > 0 && (!p.main_rows || !p.topk_ids)))
    return invalid_argument(what + ": null pointer");
  switch (p.head_dim) {
    case 64: return launch<64>(p, stream);
    case 512: return launch<512>(p, stream);
    default: return unsupported(what + ": head_dim " + std::to_string(p.head_dim) + " (built for 64 and 512)");
  }
}

}  // namespace dsv41::cuda
