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
#include "backends/cuda/attention_tiles.cuh"

namespace dsv41::cuda {
namespace {

namespace attn = attn_tiles;

constexpr int kThreads = 512;         // 16 warps; one CTA per SM
constexpr int kRows = attn::kHeads;  // heads per CTA (two m16 row blocks)
constexpr int kTile = attn::kKeys;   // keys per tile
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

using attn::RawUnit;

// One 16-channel unit of a key row (attention_tiles.cuh), loaded while the tile's other loads fly.
template <int D>
__device__ __forceinline__ RawUnit load_unit(const uint8_t* rec, int kind, int c0) {
  if (kind == 0) return attn::load_window_unit<D>(rec, c0);
  if (kind == 1) return attn::load_main_unit<D>(rec, c0);
  return RawUnit{{0, 0, 0, 0}, 0};
}

// The unit as 16 bf16 values in shared memory (exact; absent rows as zeros).
__device__ __forceinline__ void store_unit(const RawUnit& u, int kind, __nv_bfloat16* dst) {
  if (kind == 2) return attn::store_zero_unit(dst);
  attn::store_record_unit(u, kind == 0, dst);
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

  // q rows of this head group, split hi + lo (padded rows are zero).
  attn::stage_q_split<D, kThreads>(p.q + (static_cast<int64_t>(tok) * p.heads + h0) * D, p.heads - h0, sm.q_hi, sm.q_lo, S, tid);
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
  static_assert(!kSplitQK || 8 * kRows * attn::kPartStride * 4 <= 2 * kRows * S * 2, "partial scores fit over q");
  attn::QFrags<D> qf;
  float* const spart = reinterpret_cast<float*>(sm.q_hi);
  if constexpr (kSplitQK) {
    attn::load_q_frags<D>(qf, sm.q_hi, sm.q_lo, S, mt, wi, lane);
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
      attn::partial_scores<D>(qf, sm.keys, S, spart, mt, wi, lane);
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
          tiles::ldmatrix_x4(b, kb + kc);
          tiles::ldmatrix_x4(ah, qh + kc);
          tiles::ldmatrix_x4(al, ql + kc);
          mma_bf16_16816(s0, ah[0], ah[1], ah[2], ah[3], b[0], b[1]);
          mma_bf16_16816(s0, al[0], al[1], al[2], al[3], b[0], b[1]);
          tiles::ldmatrix_x4(ah, qh + kc + 16);
          tiles::ldmatrix_x4(al, ql + kc + 16);
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

    // ---- 3. online softmax (the 8 channel slices' partial scores, or the D 64 path's scores) --
    const auto score = [&](int r, int k) {
      if constexpr (kSplitQK) return attn::sliced_score(spart, r, k, sm.row_kind[k] == 2, scaling);
      else return sm.s[r][k];
    };
    attn::softmax_rows(score, sm.m, sm.l, sm.alpha, sm.p, static_cast<__nv_bfloat16*>(nullptr), PS, warp, lane);
    __syncthreads();

    // The next tile's records, in flight during P·V and the next decode's barrier (issued here
    // rather than before Q·Kᵀ so that they do not hold registers while the q fragments and the
    // partial scores do).
    if (k0 + kTile < nkeys) load_tile(k0 + kTile);

    // ---- 4. O = O·alpha + P·V over row block mt and this warp's D/8 columns -------------------
    attn::accumulate_values<NT, false>(acc, sm.p, nullptr, PS, sm.alpha, sm.keys, S, wi * (D / 8), mt, lane);
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
