// The pieces of the tensor-core sink attention that the kernel-level sparse attention
// (sparse_attention.cu) and the backend's (fast_attention_tc.cu) share. Both run a block per
// (query row, 32 heads) of 16 warps over key tiles of 64 slots (fragment layouts: mma.cuh):
// - 16-channel units of the packed cache records (FP8 window rows, NVFP4 main rows; layouts in
//   format/record_layout.h) loaded into registers (a tile's loads all in flight) and decoded later
//   to bf16 — exact: a record's value has at most 6 significant bits (E4M3 × a power of two, or
//   E2M1 × an E4M3 scale); decoded as record_value does (device_kernels_records.h): a UE8M0 byte
//   of 0xFF is a NaN scale, 0 is 2^-127, an E4M3 scale's NaN code gives NaN;
// - the queries staged as two bf16 parts; S = Q·Kᵀ by channel slices (warp wi of a row block takes
//   channels [wi·D/8, (wi+1)·D/8) of every key, its q fragments in registers); the online softmax
//   (log2 units, the sink as the first term); O = O·α + P·V, P in one or two bf16 parts.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/mma.cuh"
#include "backends/cuda/smem_tiles.cuh"

namespace dsv41::cuda::attn_tiles {

constexpr int kHeads = 32;  // query heads a block: two m16 row blocks
constexpr int kKeys = 64;   // key slots a tile
constexpr int kPartStride = kKeys + 1;  // floats a row of partial scores

// Two E4M3 codes (low byte first) times a float scale, as a bf16 pair.
__device__ __forceinline__ __nv_bfloat162 e4m3x2_scaled(uint32_t two, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xFFFF), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return __floats2bfloat162_rn(f.x * scale, f.y * scale);
}

struct RawUnit {
  uint32_t w[4];  // window: 16 E4M3 codes; main: 16 E2M1 codes in w[0..1]
  uint32_t scale; // the unit's scale byte
};

// A record's aligned vector or byte: through the read-only cache from global memory, or a plain
// load (a record staged in shared memory).
template <bool kGlobal, class T>
__device__ __forceinline__ T record_load(const uint8_t* at) {
  if constexpr (kGlobal) return __ldg(reinterpret_cast<const T*>(at));
  return *reinterpret_cast<const T*>(at);
}

// Window row: D E4M3 codes, then a UE8M0 scale per 32 channels.
template <int D, bool kGlobal = true>
__device__ __forceinline__ RawUnit load_window_unit(const uint8_t* rec, int c0) {
  RawUnit u{{0, 0, 0, 0}, 0};
  if constexpr (D % 512 == 0) {
    const uint4 v = record_load<kGlobal, uint4>(rec + c0);
    u.w[0] = v.x, u.w[1] = v.y, u.w[2] = v.z, u.w[3] = v.w;
  } else {
    for (int i = 0; i < 4; ++i)
      u.w[i] = rec[c0 + 4 * i] | (rec[c0 + 4 * i + 1] << 8) | (rec[c0 + 4 * i + 2] << 16) |
               (uint32_t{rec[c0 + 4 * i + 3]} << 24);
  }
  u.scale = record_load<kGlobal, uint8_t>(rec + D + c0 / 32);
  return u;
}

// Main row: D/2 bytes of E2M1 pairs (even channel in the low nibble), then an E4M3 scale per 16.
template <int D, bool kGlobal = true>
__device__ __forceinline__ RawUnit load_main_unit(const uint8_t* rec, int c0) {
  RawUnit u{{0, 0, 0, 0}, 0};
  if constexpr (D % 256 == 0) {
    const uint2 v = record_load<kGlobal, uint2>(rec + c0 / 2);
    u.w[0] = v.x, u.w[1] = v.y;
  } else {
    for (int i = 0; i < 2; ++i) u.w[i] = record_load<kGlobal, uint32_t>(rec + c0 / 2 + 4 * i);  // 9D/16-byte rows
  }
  u.scale = record_load<kGlobal, uint8_t>(rec + D / 2 + c0 / 16);
  return u;
}

__device__ __forceinline__ void store_zero_unit(__nv_bfloat16* dst) {
  __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst);
  for (int i = 0; i < 8; ++i) d2[i] = __floats2bfloat162_rn(0.0f, 0.0f);
}

// The unit's 16 values as bf16 at dst (channel order), from a window (true) or main record unit.
__device__ __forceinline__ void store_record_unit(const RawUnit& u, bool window, __nv_bfloat16* dst) {
  __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst);
  uint32_t w[4];
  float scale;
  if (window) {
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

// ---- Queries --------------------------------------------------------------------------------------
// The block's kHeads query rows (row r at q + r·D; rows ≥ valid are zeros) as bf16 hi + lo parts at
// q_hi / q_lo (row stride S). Every thread issues all its 16-byte loads before converting any: a
// loop of dependent 4-byte loads cost about a quarter of a sparse layer (measured, 2026-12-01).
template <int D, int kThreads>
__device__ __forceinline__ void stage_q_split(const float* q, int64_t valid, __nv_bfloat16* q_hi, __nv_bfloat16* q_lo,
                                              int S, int tid) {
  constexpr int kVecs = kHeads * D / 4, kPer = (kVecs + kThreads - 1) / kThreads;
  float4 v[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = j * kThreads + tid, r = i / (D / 4), c4 = i % (D / 4);
    v[j] = i < kVecs && r < valid ? __ldg(reinterpret_cast<const float4*>(q + int64_t(r) * D) + c4)
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
      const __nv_bfloat162 lo = __floats2bfloat162_rn(f[e] - __low2float(hi), f[e + 1] - __high2float(hi));
      *reinterpret_cast<__nv_bfloat162*>(&q_hi[r * S + c + e]) = hi;
      *reinterpret_cast<__nv_bfloat162*>(&q_lo[r * S + c + e]) = lo;
    }
  }
}

// ---- S = Q·Kᵀ by channel slices (D a multiple of 256) -------------------------------------------
// Warp (mt, wi)'s q fragments: row block mt, channels [wi·D/8, (wi+1)·D/8) as D/128 k16 steps.
template <int D>
struct QFrags {
  static constexpr int kSteps = D >= 128 ? D / 128 : 1;  // (D 64: unused)
  uint32_t hi[kSteps][4], lo[kSteps][4];
};

template <int D>
__device__ __forceinline__ void load_q_frags(QFrags<D>& f, const __nv_bfloat16* q_hi, const __nv_bfloat16* q_lo, int S,
                                             int mt, int wi, int lane) {
#pragma unroll
  for (int j = 0; j < QFrags<D>::kSteps; ++j) {
    const int c = wi * (D / 8) + 16 * j + (lane >> 4) * 8;
    tiles::ldmatrix_x4(f.hi[j], &q_hi[(mt * 16 + (lane & 15)) * S + c]);
    tiles::ldmatrix_x4(f.lo[j], &q_lo[(mt * 16 + (lane & 15)) * S + c]);
  }
}

// Row block mt × warp wi's channels × the tile's 64 keys (bf16 rows at keys, stride S), in halves
// of 32 keys, both q parts: spart[(wi · kHeads + head row) · kPartStride + key].
template <int D>
__device__ __forceinline__ void partial_scores(const QFrags<D>& f, const __nv_bfloat16* keys, int S, float* spart,
                                               int mt, int wi, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float sacc[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.0f;
      const __nv_bfloat16* kb = &keys[(32 * hf + 8 * nt + (lane & 7)) * S + wi * (D / 8) + (lane >> 3) * 8];
#pragma unroll
      for (int kk = 0; kk < QFrags<D>::kSteps / 2; ++kk) {
        uint32_t b[4];
        tiles::ldmatrix_x4(b, kb + 32 * kk);
        const uint32_t(&h0)[4] = f.hi[2 * kk];
        const uint32_t(&l0)[4] = f.lo[2 * kk];
        const uint32_t(&h1)[4] = f.hi[2 * kk + 1];
        const uint32_t(&l1)[4] = f.lo[2 * kk + 1];
        mma_bf16_16816(sacc[nt], h0[0], h0[1], h0[2], h0[3], b[0], b[1]);
        mma_bf16_16816(sacc[nt], l0[0], l0[1], l0[2], l0[3], b[0], b[1]);
        mma_bf16_16816(sacc[nt], h1[0], h1[1], h1[2], h1[3], b[2], b[3]);
        mma_bf16_16816(sacc[nt], l1[0], l1[1], l1[2], l1[3], b[2], b[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      float* o = spart + (wi * kHeads + mt * 16 + g) * kPartStride + 32 * hf + 8 * nt + 2 * t;
      o[0] = sacc[nt][0], o[1] = sacc[nt][1];
      o[8 * kPartStride] = sacc[nt][2], o[8 * kPartStride + 1] = sacc[nt][3];
    }
  }
}

// The scaled score of head row r and key k from the 8 channel slices, added in slice order;
// −inf for an absent key.
__device__ __forceinline__ float sliced_score(const float* spart, int r, int k, bool absent, float scaling) {
  float a = 0.0f;
#pragma unroll
  for (int w = 0; w < 8; ++w) a += spart[(w * kHeads + r) * kPartStride + k];
  return absent ? -INFINITY : a * scaling;
}

// ---- Online softmax: warp w updates head rows 2w and 2w + 1 (both rows' reductions interleaved,
// so that their shuffle latencies overlap). score(r, k): the tile's scaled score (log2 units, −inf
// for an absent key). P goes to p_hi (row stride PS) and, when p_lo is set, its remainder to p_lo;
// m, l and alpha (the factor on the old sums) are updated for the two rows.
template <class Score>
__device__ __forceinline__ void softmax_rows(const Score& score, float* m, float* l, float* alpha, __nv_bfloat16* p_hi,
                                             __nv_bfloat16* p_lo, int PS, int warp, int lane) {
  const int r0 = warp * 2;
  float v[2][2], mx[2], sum[2], m_old[2], m_new[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    v[x][0] = score(r0 + x, lane), v[x][1] = score(r0 + x, lane + 32);
    mx[x] = fmaxf(v[x][0], v[x][1]);
    m_old[x] = m[r0 + x];
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], off));
    mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], off));
  }
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    m_new[x] = fmaxf(m_old[x], mx[x]);  // finite: the sink seeds it
    const float p[2] = {exp2f(v[x][0] - m_new[x]), exp2f(v[x][1] - m_new[x])};
    sum[x] = p[0] + p[1];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const __nv_bfloat16 hi = __float2bfloat16_rn(p[e]);
      p_hi[(r0 + x) * PS + lane + 32 * e] = hi;
      if (p_lo) p_lo[(r0 + x) * PS + lane + 32 * e] = __float2bfloat16_rn(p[e] - __bfloat162float(hi));
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    sum[0] += __shfl_xor_sync(0xffffffffu, sum[0], off);
    sum[1] += __shfl_xor_sync(0xffffffffu, sum[1], off);
  }
  __syncwarp();  // every lane has read m before lanes 0 and 1 replace it
  if (lane < 2) {  // lane x updates row r0 + x (every lane holds both rows' values)
    const float mo = lane == 0 ? m_old[0] : m_old[1], mn = lane == 0 ? m_new[0] : m_new[1];
    const float a = exp2f(mo - mn);
    alpha[r0 + lane] = a;
    l[r0 + lane] = l[r0 + lane] * a + (lane == 0 ? sum[0] : sum[1]);
    m[r0 + lane] = mn;
  }
}

// ---- O = O·α + P·V: row block mt, NT n8 tiles of channels from chan0, the tile's 64 keys --------
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* smem_row) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// One P part's A fragment of row block mt, keys kc … kc + 15.
__device__ __forceinline__ void p_frag(uint32_t (&a)[4], const __nv_bfloat16* p, int PS, int r, int kc, int t) {
  a[0] = *reinterpret_cast<const uint32_t*>(&p[r * PS + kc + 2 * t]);
  a[1] = *reinterpret_cast<const uint32_t*>(&p[(r + 8) * PS + kc + 2 * t]);
  a[2] = *reinterpret_cast<const uint32_t*>(&p[r * PS + kc + 2 * t + 8]);
  a[3] = *reinterpret_cast<const uint32_t*>(&p[(r + 8) * PS + kc + 2 * t + 8]);
}

template <int NT, bool kSplitP>
__device__ __forceinline__ void accumulate_values(float (&acc)[NT][4], const __nv_bfloat16* p_hi, const __nv_bfloat16* p_lo,
                                                  int PS, const float* alpha, const __nv_bfloat16* keys, int S, int chan0,
                                                  int mt, int lane) {
  const int r = mt * 16 + lane / 4, t = lane % 4;
  const float a_lo = alpha[r], a_hi = alpha[r + 8];
  for (int n = 0; n < NT; ++n) acc[n][0] *= a_lo, acc[n][1] *= a_lo, acc[n][2] *= a_hi, acc[n][3] *= a_hi;
#pragma unroll
  for (int kc = 0; kc < kKeys; kc += 16) {
    uint32_t ph[4], pl[4];
    p_frag(ph, p_hi, PS, r, kc, t);
    if constexpr (kSplitP) p_frag(pl, p_lo, PS, r, kc, t);
    if constexpr (NT % 2 == 0) {
#pragma unroll
      for (int n = 0; n < NT; n += 2) {
        uint32_t b[4];
        tiles::ldmatrix_x4_trans(b, &keys[(kc + (lane & 15)) * S + chan0 + n * 8 + (lane >> 4) * 8]);
        mma_bf16_16816(acc[n], ph[0], ph[1], ph[2], ph[3], b[0], b[1]);
        if constexpr (kSplitP) mma_bf16_16816(acc[n], pl[0], pl[1], pl[2], pl[3], b[0], b[1]);
        mma_bf16_16816(acc[n + 1], ph[0], ph[1], ph[2], ph[3], b[2], b[3]);
        if constexpr (kSplitP) mma_bf16_16816(acc[n + 1], pl[0], pl[1], pl[2], pl[3], b[2], b[3]);
      }
    } else {
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        uint32_t b[2];
        ldmatrix_x2_trans(b, &keys[(kc + (lane & 15)) * S + chan0 + n * 8]);
        mma_bf16_16816(acc[n], ph[0], ph[1], ph[2], ph[3], b[0], b[1]);
        if constexpr (kSplitP) mma_bf16_16816(acc[n], pl[0], pl[1], pl[2], pl[3], b[0], b[1]);
      }
    }
  }
}

}  // namespace dsv41::cuda::attn_tiles
