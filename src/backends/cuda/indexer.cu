// Fused indexer scoring on MXFP4 keys + top-k (cuda_kernels.h). Spec: model.md §3.4 "Indexer";
// CPU twin: model/indexer.cpp (indexer_scores, indexer_scores_in_pool, select_topk).
//
// Kernel 1, one CTA per (chunk of 8192 positions, query token), 8 warps, three CTAs per SM:
//   index rows are staged into shared memory (dense: one bulk copy per 16-row tile completing on
//   an mbarrier; pools: 16-byte cp.async), 4 tiles in flight per warp. The two warpgroups score
//   64 entries at a time with FP8 warpgroup MMAs (wgmma m64n32k32 e4m3): an MXFP4 row is E2M1
//   codes with a power-of-two scale per 32 channels; 7 logic ops per 8 channels place E2M1 in
//   E4M3 bits (value·2^-6, exact; mma.cuh) as the A operand in registers, q (E2M1 with its block
//   scales folded in relative to the head's largest, exact in E4M3 within 2^14) is the B operand
//   in shared memory, and one MMA per block gives the exact partial dot of 64 keys × 32 heads.
//   Partials are scaled by the key's block scale and summed in fp32; ReLU, head weights and the
//   head sum follow, and the scores go to shared memory. A query with a block more than 2^14
//   below its head's largest takes the fp16 mma.sync path instead (exact within 2^22).
//   Then the chunk's own top-k (topk_select.cuh) over its keys at or above the token's
//   selection floor goes to the workspace: k (key, id) pairs.
// Kernel 2, one CTA per token (after one CTA per 8-chunk segment when there are ≥ 16 chunks):
// top-k of the chunks' candidates → ascending ids, −1 padded.
// Global traffic: the index rows once (68 B per entry at V4.1 widths) plus nchunks·k·8 B of
// candidates per token (1/136 of the rows at chunk 8192, k 512); no [T, G] score matrix.
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/topk_select.cuh"

namespace dsv41::cuda {
namespace {

constexpr int kChunk = 8192;         // positions per scoring CTA (its scores stay in shared memory)
// Candidate pools are short (16384 positions at V4.1): when tokens × chunks would leave the GPU
// half idle (< kFewCtas CTAs, about two per SM on an H200), pools use 2048-position chunks.
// Measured on the H200, pool layer at 16384 entries: batch 1 0.150 → 0.062 ms, batch 64
// 0.173 → 0.143 ms; at batch 256 the small chunks were slower (0.38 → 0.48 ms: 4× the
// candidates to merge), hence the rule.
constexpr int kPoolChunk = 2048;
constexpr int64_t kFewCtas = 256;
constexpr int kChunkThreads = 256;   // 8 warps
constexpr int kMergeThreads = 1024;

constexpr int kWarps = kChunkThreads / 32;
constexpr int kStages = 4;               // tiles in flight per warp (2 CTAs/SM: ~70 KB in flight)
constexpr int kGroupBytes = 272;         // 4 rows of 68 B or 8 rows of 34 B: 16-byte aligned
constexpr int kGroupSegments = kGroupBytes / 16;
constexpr int kTileBytes = 1088;         // 16 rows of 68 B (the 34 B rows use half)
constexpr int kTileSegmentsMax = kTileBytes / 16;

// CTAs per SM the dense scoring kernel is built for (registers ≤ 65536 / (256·that)). Three
// (80 registers, then one wgmma accumulator set) against two (128, two sets overlapping the MMAs
// with the scaling): ratio-1 layer at batch 64 / 1M 2.63 → 2.39 ms on the H200, 2026-12-01.
// Since 2026-12-03 the three-CTA build overlaps too (see the scoring loop): 2.5 % fewer executed
// instructions, ≈ 1 % less time (ratio-2 layer 1.201 → 1.190 ms, two runs each).
constexpr int kMinCtas = 3;

// Dense chunks keep no id array (entry = p0 + position): the selection's compacted ids go to
// the staging buffers, free by then, which keeps the CTA small enough for kMinCtas per SM.
template <int kChunkN = kChunk, bool kIds = true>
struct ChunkSmem {
  uint32_t keys[kChunkN];
  int32_t ids[kIds ? kChunkN : 1];
  SelectShared<kChunkThreads> sel;
  uint32_t floor;  // the token's selection floor when this chunk selects
  uint32_t q_wide;  // some head's blocks span more than 2^14: the fp16 path
  // Per head: w_h · dh^-1/2 · 2^(emax_h − 127), read in each tile's epilogue (in registers they
  // made the dense kernel spill once its MMAs overlap the scaling; see the scoring loop).
  alignas(8) float wq[32];
  uint64_t full[kWarps][kStages];  // dense tiles: bulk copy landed (mbarrier, one per stage)
  alignas(16) unsigned char stage[kWarps][kStages][kTileBytes];
  alignas(128) uint8_t qb[32 * 128];  // q as FP8 B operand: [block][head/8][k/16][head%8][k%16]
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Dense tiles are one contiguous span of 16 records (1088 B at dim 128), so one lane moves a whole
// tile with the bulk copy engine (cp.async.bulk, completion counted in bytes on an mbarrier):
// about 10 instructions per tile where 32 lanes of 16-byte cp.async cost ≈ 100 (address and
// bounds arithmetic per segment; ncu on the H200, 2026-12-01).
__device__ __forceinline__ unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred p;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra WAIT_%=;\n}\n" ::"r"(
          smem_u32(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t i = code & 7;
  const float mag = i < 4 ? 0.5f * static_cast<float>(i) : static_cast<float>(1u << (i / 2 - 1)) * (i & 1 ? 1.5f : 1.0f);
  return code & 8 ? -mag : mag;
}

// Block b's scale 2^(code−127) from the row's packed scale bytes, two integer ops and no
// branch: codes 1..254 exactly; code 0 (a block whose amax is below 6·2^-127, i.e. all zeros or
// float32 subnormals) gives 0 instead of 2^-127, and 0xFF is caught by has_nan_scale.
__device__ __forceinline__ float ue8m0_fast(uint32_t sw, int b) {
  const uint32_t bits = b < 3 ? (sw << (23 - 8 * b)) : (sw >> (8 * b - 23));
  return __uint_as_float(bits & 0x7F800000u);
}

// Whether any scale byte of the word is 0xFF (no carry crosses bytes: low 7 bits + 1 ≤ 0x80).
__device__ __forceinline__ bool has_nan_scale(uint32_t sw) {
  return ((sw & 0x80808080u) & ((sw & 0x7F7F7F7Fu) + 0x01010101u)) != 0;
}

__device__ __forceinline__ float ue8m0_scale(uint32_t code) {
  return code == 0xFF ? __int_as_float(0x7FC00000) : (code == 0 ? __int_as_float(0x00400000) : __int_as_float(code << 23));
}

// Visible entries of token `tok` and the length of its position list (pool or dense). Entry
// ids are int32 (as top-k ids are), so all position arithmetic below is 32-bit.
__device__ __forceinline__ void token_extent(const IndexerParams& p, int tok, int* visible, int* npos) {
  const int64_t v = (p.positions[tok] + 1) / p.ratio;
  const int64_t vis = v < p.entries[tok] ? v : p.entries[tok];
  *visible = static_cast<int>(vis);
  *npos = vis <= 0 ? 0 : (p.pool_blocks ? p.pool_size << p.pool_block_shift : static_cast<int>(vis));
}

// Entry id at list position `pos` (−1 when not a visible entry). Pool blocks are 2^shift
// entries (checked on the host), so no division.
template <bool kPool>
__device__ __forceinline__ int entry_at(const IndexerParams& p, int tok, int pos, int npos, int visible) {
  if (pos >= npos) return -1;
  int e = pos;
  if constexpr (kPool) {
    const int32_t blk = __ldg(p.pool_blocks + static_cast<int64_t>(tok) * p.pool_size + (pos >> p.pool_block_shift));
    if (blk < 0) return -1;
    e = (blk << p.pool_block_shift) | (pos & ((1 << p.pool_block_shift) - 1));
  }
  return e < visible ? e : -1;
}

template <int NH, int DH, bool kPool, int kChunkN>
__global__ void __launch_bounds__(kChunkThreads, kPool ? 2 : kMinCtas) indexer_chunk_kernel(IndexerParams p, int nchunks,
                                                                      uint32_t* cand_keys, int32_t* cand_ids,
                                                                      uint32_t* floors) {
  constexpr int NB = DH / 32;          // scale blocks per row
  constexpr int NT = NH / 8;           // n8 head tiles
  constexpr int RB = DH / 2 + DH / 32; // record bytes
  constexpr int GR = kGroupBytes / RB;  // rows per 16-byte-aligned group
  constexpr int kTileSegments = 16 * RB / 16;
  static_assert(GR * RB == kGroupBytes && kTileSegments <= kTileSegmentsMax, "index row width");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  ChunkSmem<kChunkN, kPool>& sm = *reinterpret_cast<ChunkSmem<kChunkN, kPool>*>(smem_raw);
  static_assert(kPool || sizeof(sm.stage) >= kChunkN * sizeof(int32_t), "dense ids live in the staging buffers");
  int32_t* const ids = kPool ? sm.ids : reinterpret_cast<int32_t*>(&sm.stage[0][0][0]);
  // Tokens along x: a wave holds the first chunks of every token, so later chunks find a
  // floor published by earlier ones (see the selection at the end).
  const int tok = blockIdx.x, chunk = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  int visible, npos;
  token_extent(p, tok, &visible, &npos);
  const int p0 = chunk * kChunkN;
  const int n = p0 >= npos ? 0 : (npos - p0 < kChunkN ? npos - p0 : kChunkN);
  uint32_t* out_keys = cand_keys + (int64_t{tok} * nchunks + chunk) * p.k;
  int32_t* out_ids = cand_ids + (int64_t{tok} * nchunks + chunk) * p.k;

  if (n > 0) {
    const uint8_t* q = p.q + int64_t{tok} * NH * RB;
    // Head weights w_h · dh^-1/2 · 2^(emax_h − 127), where emax_h is the head's largest block
    // scale code (q's block scales are folded in relative to it).
    static_assert(NH <= 32, "sm.wq holds 32 heads");
    if (tid < NH) {
      const uint8_t* qrow = q + tid * RB;
      int emax = 0;
#pragma unroll
      for (int b = 0; b < NB; ++b) emax = max(emax, static_cast<int>(qrow[DH / 2 + b]));
      sm.wq[tid] = p.head_weights[int64_t{tok} * NH + tid] * rsqrtf(static_cast<float>(DH)) *
                   ue8m0_scale(static_cast<uint32_t>(emax));
    }
    // q as the FP8 B operand of the warpgroup MMAs (see score_f8 below): value·2^(6 − d) with d =
    // emax_h − code_b, exact in E4M3 for d ≤ 14 (0.5·2^-8 is E4M3's smallest subnormal step…
    // 6·2^6 = 384 < 448). A head with a nonzero block more than 2^14 below its largest takes the
    // fp16 path instead (exact within 2^22), decided for the whole CTA.
    if (tid == 0) sm.q_wide = 0;
    __syncthreads();
    {
      bool wide = false;
#pragma unroll  // 8 independent iterations: their loads overlap
      for (int idx = tid; idx < NH * DH / 2; idx += kChunkThreads) {
        const int hd = idx / (DH / 2), byte = idx % (DH / 2), b = byte / 16;
        const uint8_t* qrow = q + hd * RB;
        int emax = 0;
#pragma unroll
        for (int bb = 0; bb < NB; ++bb) emax = max(emax, static_cast<int>(qrow[DH / 2 + bb]));
        const int d = emax - static_cast<int>(qrow[DH / 2 + b]);
        const uint32_t codes = qrow[byte];
#pragma unroll
        for (int o = 0; o < 2; ++o) {
          const uint32_t nib = (codes >> (4 * o)) & 0xF;
          const int e = 127 + 6 - d;
          const float v = e2m1_value(nib) * (e >= 1 ? __int_as_float(e << 23) : 0.0f);
          wide = wide || (d > 14 && (nib & 7) != 0);
          const int cc = (2 * byte + o) % 32;                      // channel within the block
          const int k = (cc % 2) * 16 + (cc / 8) * 4 + (cc % 8) / 2;  // its k slot (e2m1x8_to_e4m3)
          sm.qb[b * NH * 32 + (hd / 8) * 256 + (k / 16) * 128 + (hd % 8) * 16 + (k % 16)] =
              static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
        }
      }
      if (wide) atomicOr(&sm.q_wide, 1u);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes → wgmma reads
    }
    __syncthreads();
    const bool use_f8 = sm.q_wide == 0;

    const uint8_t* keys = p.keys[tok];
    const int limit = static_cast<int>(p.entries[tok]);  // records that exist: never read past them
    const int tiles = (n + 15) / 16;
    unsigned char* stages = sm.stage[warp][0];

    // Stage one tile (16 list positions) into shared memory.
    //   Dense: 16 consecutive records, one contiguous 16-byte-aligned span: one bulk copy issued
    //   by lane 0, completing on the stage's mbarrier; a tile reaching past the last existing
    //   record (at most one per token) is copied by the lanes with plain loads, zero-filled.
    //   Pool: 16/GR groups of GR consecutive entries (272 B each), 16-byte cp.async per lane;
    //   absent groups and bytes past the last record are zero-filled (cp.async src-size).
    auto issue = [&](int tile, int stage) {
      if constexpr (!kPool) {
        if (tile < tiles) {
          unsigned char* dst = stages + stage * kTileBytes;
          uint64_t* bar = &sm.full[warp][stage];
          const int e0 = p0 + tile * 16;
          const uint8_t* src = keys + static_cast<int64_t>(e0) * RB;
          if (e0 + 16 <= limit) {
            if (lane == 0) {
              mbar_arrive_tx(bar, 16 * RB);
              bulk_copy_g2s(dst, src, 16 * RB, bar);
            }
          } else {
            const int avail = (limit - e0) * RB;  // bytes of existing records (RB is even)
            for (int i = lane; i < 8 * RB; i += 32)
              reinterpret_cast<uint16_t*>(dst)[i] = 2 * i < avail ? reinterpret_cast<const uint16_t*>(src)[i] : 0;
            __syncwarp();
            if (lane == 0) mbar_arrive(bar);
          }
        }
      } else {
        if (tile < tiles) {
          unsigned char* dst = stages + stage * kTileBytes;
          for (int sgi = lane; sgi < kTileSegments; sgi += 32) {
            const int grp = sgi / kGroupSegments, off = (sgi % kGroupSegments) * 16;
            const int e0 = entry_at<kPool>(p, tok, p0 + tile * 16 + grp * GR, npos, 0x7FFFFFFF);
            int bytes = 0;
            if (e0 >= 0) {
              const int rows_left = limit - e0;  // ≥ 1 row: whole 16 bytes unless in the last row
              bytes = rows_left >= GR ? 16 : max(0, min(16, rows_left * RB - off));
            }
            cp_async16(dst + grp * kGroupBytes + off, keys + (bytes > 0 ? static_cast<int64_t>(e0) * RB + off : 0),
                       bytes);
          }
        }
        cp_async_commit();  // empty groups keep the count uniform
      }
    };
    // Word of a staged row at byte offset `at` (rows are 2-byte aligned when RB is not 4·k).
    auto word = [&](const unsigned char* rowp, int at) -> uint32_t {
      if constexpr (RB % 4 == 0) {
        return *reinterpret_cast<const uint32_t*>(rowp + at);
      } else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(rowp + at);
        return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
      }
    };

    // Warpgroup wg (warps 4wg..4wg+3) takes 64-position super-tiles wg, wg + 2, …; warp wi of
    // the group stages and holds rows 16wi..16wi+15 of each (its tile 4·S + wi).
    const int wg = warp / 4, wi = warp % 4;
    const int supers = (tiles + 3) / 4;
    const int iters = supers > wg ? (supers - wg + 1) / 2 : 0;
    auto tile_of = [&](int i) { return 4 * (2 * i + wg) + wi; };
    if constexpr (!kPool) {
      if (lane == 0) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) mbar_init(&sm.full[warp][s]);
        mbar_init_fence();
      }
      __syncwarp();
    }
    struct Rows {
      uint32_t c[2][NB];
      uint32_t sw[2];  // the row's UE8M0 scale bytes, block b in byte b
      int e[2];        // pools: the rows' entry ids (dense: computed at the store, one register less)
    };
    // Rows g and g + 8 of the warp's tile of iteration i (zeros past the last tile).
    auto load_rows = [&](int i, int tile) {
      Rows cur;
      if constexpr (!kPool) {
        if (tile < tiles) mbar_wait(&sm.full[warp][i % kStages], static_cast<unsigned>(i / kStages) & 1u);
      } else {
        cp_async_wait<kStages - 1>();
        __syncwarp();
      }
      const unsigned char* st = stages + (i % kStages) * kTileBytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = g + 8 * h;
        if constexpr (kPool) cur.e[h] = tile * 16 + r < n ? entry_at<kPool>(p, tok, p0 + tile * 16 + r, npos, visible) : -1;
        const unsigned char* rowp = st + r * RB;
        if (tile < tiles) {
#pragma unroll
          for (int b = 0; b < NB; ++b) cur.c[h][b] = word(rowp, 16 * b + 4 * t);
          if constexpr (NB == 4) {
            cur.sw[h] = *reinterpret_cast<const uint32_t*>(rowp + DH / 2);
          } else {
            uint32_t sw = 0;
#pragma unroll
            for (int b = 0; b < NB; ++b) sw |= static_cast<uint32_t>(rowp[DH / 2 + b]) << (8 * b);
            cur.sw[h] = sw;
          }
        } else {
#pragma unroll
          for (int b = 0; b < NB; ++b) cur.c[h][b] = 0;
          cur.sw[h] = 0;
        }
      }
      __syncwarp();  // this stage is refilled on the next iteration
      return cur;
    };
    // ReLU, head weights, head sum; the keys of positions < n go to shared memory.
    auto store_scores = [&](int tile, const Rows& cur, const float (&acc)[NT][4], float wscale) {
      float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float2 w = *reinterpret_cast<const float2*>(&sm.wq[nt * 8 + 2 * t]);  // heads 2t, 2t + 1
        s0 += fmaxf(acc[nt][0], 0.0f) * w.x + fmaxf(acc[nt][1], 0.0f) * w.y;
        s1 += fmaxf(acc[nt][2], 0.0f) * w.x + fmaxf(acc[nt][3], 0.0f) * w.y;
      }
      s0 *= wscale, s1 *= wscale;  // a power of two: exact
      // A NaN block scale (0xFF: a poisoned row) makes the score NaN, as on the CPU.
      if (has_nan_scale(cur.sw[0])) s0 = __int_as_float(0x7FC00000);
      if (has_nan_scale(cur.sw[1])) s1 = __int_as_float(0x7FC00000);
      s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
      s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
      s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
      s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
      // Lane t = 0 of each quad writes row g, lane t = 1 row g + 8 (both hold both sums).
      if (t < 2) {
        const int r = tile * 16 + g + 8 * t;
        int e;
        if constexpr (kPool) {
          e = t == 0 ? cur.e[0] : cur.e[1];
        } else {
          e = r < n ? entry_at<kPool>(p, tok, p0 + r, npos, visible) : -1;
        }
        const float s = t == 0 ? s0 : s1;
        if (r < n) {
          sm.keys[r] = e >= 0 ? ordered_key(s) : kIneligibleKey;
          if (p.scores_debug && e >= 0) p.scores_debug[static_cast<int64_t>(tok) * p.max_entries + e] = s;
          // Entry ids are kept for pools only (dense: entry = p0 + position, or not visible).
          if constexpr (kPool) sm.ids[r] = e;
        }
      }
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(tile_of(s), s);

    if (use_f8) {
      // FP8 warpgroup MMAs: one wgmma m64nNHk32 per scale block gives the exact partial dots of
      // the group's 64 keys × NH heads; E2M1 → E4M3 is 7 logic ops per 8 channels (mma.cuh),
      // where the fp16 path below needs 16 and 8 mma.sync per block and 16 keys.
      const uint64_t desc0 = wgmma_desc(sm.qb, 128, 256);
      auto desc = [&](int b) { return desc0 + static_cast<uint64_t>((b * NH * 32) >> 4); };
      for (int i = 0; i < iters; ++i) {
        const int tile = tile_of(i);
        issue(tile_of(i + kStages - 1), (i + kStages - 1) % kStages);
        const Rows cur = load_rows(i, tile);
        // A operands converted one block ahead of their MMA (fewer live registers).
        uint32_t a[NB][4];
        auto convert = [&](int b) {
          e2m1x8_to_e4m3(cur.c[0][b], a[b][0], a[b][2]);
          e2m1x8_to_e4m3(cur.c[1][b], a[b][1], a[b][3]);
        };
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
        auto consume = [&](const float (&d)[NH / 2], int b) {
          const float sk0 = ue8m0_fast(cur.sw[0], b), sk1 = ue8m0_fast(cur.sw[1], b);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            acc[nt][0] = fmaf(d[4 * nt + 0], sk0, acc[nt][0]);
            acc[nt][1] = fmaf(d[4 * nt + 1], sk0, acc[nt][1]);
            acc[nt][2] = fmaf(d[4 * nt + 2], sk1, acc[nt][2]);
            acc[nt][3] = fmaf(d[4 * nt + 3], sk1, acc[nt][3]);
          }
        };
        // Two accumulator sets: block b + 1's MMA runs while block b's partials are scaled. The
        // three-CTA build waited for each block's MMA before (one set: 80 registers with the head
        // weights and entry ids in registers); with those moved out the overlap fits in 80.
        // The partials and their summation order are the same as before. Measured on the H200
        // (2026-12-03, batch 64 / 128K ratio-2 layer, ncu): 111.9 M → 109.1 M warp instructions,
        // 183.6 → 180.9 µs, issue slots 70.7 % → 70.1 % busy: the loop is issue-bound, and the
        // waits it removed were mostly hidden by the other warpgroups already.
        float d0[NH / 2], d1[NH / 2];
#pragma unroll
        for (int j = 0; j < NH / 2; ++j) d0[j] = d1[j] = 0.0f;
        convert(0);
        convert(1);
        __syncwarp();
        wgmma_fence();
        wgmma_e4m3_m64k32<NH>(d0, a[0], desc(0));
        wgmma_commit();
        wgmma_e4m3_m64k32<NH>(d1, a[1], desc(1));
        wgmma_commit();
        if constexpr (NB == 4) convert(2);
        wgmma_wait<1>();
        wgmma_reg_fence(d0);
        consume(d0, 0);
        if constexpr (NB == 4) {
          wgmma_fence();
          wgmma_e4m3_m64k32<NH>(d0, a[2], desc(2));
          wgmma_commit();
          convert(3);
          wgmma_wait<1>();
          wgmma_reg_fence(d1);
          consume(d1, 1);
          wgmma_fence();
          wgmma_e4m3_m64k32<NH>(d1, a[3], desc(3));
          wgmma_commit();
          wgmma_wait<1>();
          wgmma_reg_fence(d0);
          consume(d0, 2);
          wgmma_wait<0>();
          wgmma_reg_fence(d1);
          consume(d1, 3);
        } else {
          static_assert(NB == 2, "scale blocks per row");
          wgmma_wait<0>();
          wgmma_reg_fence(d1);
          consume(d1, 1);
        }
        store_scores(tile, cur, acc, 1.0f);
      }
    } else {
      // fp16 path (mma.sync): bqh holds the fp16 channel pairs (0,4) (1,5) (2,6) (3,7) of the
      // thread's 8 channels of each block (the pairing e2m1x8_to_f16 gives the keys), each head's
      // block scales folded in relative to its largest block (exact within 2^22 of it; smaller
      // ones round into fp16 subnormals, a change below 2^-22 of that block).
      uint32_t bqh[NT][NB][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint8_t* qrow = q + (nt * 8 + g) * RB;
        int emax = 0;
#pragma unroll
        for (int b = 0; b < NB; ++b) emax = max(emax, static_cast<int>(qrow[DH / 2 + b]));
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          // Rows are only 2-byte aligned at dim 64 (34 B): read the word as two halves.
          const uint16_t* qw = reinterpret_cast<const uint16_t*>(qrow + 16 * b + 4 * t);
          const uint32_t w = static_cast<uint32_t>(qw[0]) | (static_cast<uint32_t>(qw[1]) << 16);
          const int d = 127 + static_cast<int>(qrow[DH / 2 + b]) - emax;  // 2^(code_b − emax) ≤ 1
          const float rel = d >= 1 ? __int_as_float(d << 23) : 0.0f;     // < 2^-126 of the head: dropped
#pragma unroll
          for (int i = 0; i < 4; ++i) {  // channels i and i+4 of the word (nibbles i, i+4)
            const __half2 h = __floats2half2_rn(e2m1_value((w >> (4 * i)) & 0xF) * rel,
                                                e2m1_value((w >> (4 * i + 16)) & 0xF) * rel);
            bqh[nt][b][i] = *reinterpret_cast<const uint32_t*>(&h);
          }
        }
      }
      for (int i = 0; i < iters; ++i) {
        const int tile = tile_of(i);
        issue(tile_of(i + kStages - 1), (i + kStages - 1) % kStages);
        const Rows cur = load_rows(i, tile);
        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          const float sk0 = ue8m0_fast(cur.sw[0], b), sk1 = ue8m0_fast(cur.sw[1], b);
          uint32_t h0[4], h1[4];
          e2m1x8_to_f16(cur.c[0][b], h0);
          e2m1x8_to_f16(cur.c[1][b], h1);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // exact partial dot of this block
            mma_f16_16816(part, h0[0], h1[0], h0[1], h1[1], bqh[nt][b][0], bqh[nt][b][1]);
            mma_f16_16816(part, h0[2], h1[2], h0[3], h1[3], bqh[nt][b][2], bqh[nt][b][3]);
            acc[nt][0] = fmaf(part[0], sk0, acc[nt][0]);
            acc[nt][1] = fmaf(part[1], sk0, acc[nt][1]);
            acc[nt][2] = fmaf(part[2], sk1, acc[nt][2]);
            acc[nt][3] = fmaf(part[3], sk1, acc[nt][3]);
          }
        }
        store_scores(tile, cur, acc, 16384.0f);  // keys entered the MMA as value·2^-14
      }
    }
  }
  __syncthreads();
  if constexpr (!kPool) {
    if (p.block_max) {
      // Block maxima of this chunk's positions (= entries in dense mode); positions past n are
      // not visible (−inf). Blocks never straddle chunks (block size divides the chunk).
      const int bs = p.candidate_block;
      const int64_t nblocks = (p.max_entries + bs - 1) / bs;
      const int b0 = p0 / bs;
      for (int j = tid; j < kChunkN / bs && b0 + j < nblocks; j += kChunkThreads) {
        uint32_t m = kIneligibleKey;
        for (int i = j * bs; i < (j + 1) * bs && i < n; ++i) m = max(m, sm.keys[i]);
        float v = key_to_float(m);
        if (visible >= 1 && (visible - 1) / bs == b0 + j) v = INFINITY;  // newest block pinned
        p.block_max[static_cast<int64_t>(tok) * nblocks + b0 + j] = v;
      }
    }
  }
  // Floor: the largest k-th key any finished chunk of this token found. That chunk alone has
  // k keys at or above it, so the token's final k-th key is too, and a key below it can never
  // be selected: it is left out here, which makes the selection (a fifth of this kernel's time
  // at 1M) mostly a single pass, and the merge's lists mostly padding. The final top-k is the
  // same whatever the floor was (only never-selected keys are dropped), so the result does not
  // depend on the order the CTAs ran in.
  if (tid == 0) sm.floor = __ldcg(floors + tok);
  __syncthreads();
  // The keys at or above the floor, moved to the front in list order (ids with them): the radix
  // passes and the ordered compaction then run over those few hundred instead of all 8192.
  const int m = block_compact_eligible<kChunkThreads, kChunkN / kChunkThreads>(sm.keys, ids, kPool, p0, n,
                                                                                sm.floor, sm.sel);
  const uint32_t kth = block_select_topk<kChunkThreads>(sm.keys, ids, 0, m, p.k, out_keys, out_ids, sm.sel,
                                                        sm.floor);
  if (tid == 0 && kth != 0) atomicMax(floors + tok, kth);
}

// Chunk top-k of given score rows (topk_rows): the same selection as the indexer's.
__global__ void __launch_bounds__(kChunkThreads) scores_chunk_kernel(const float* scores, int64_t n_all, int k,
                                                                     int nchunks, uint32_t* cand_keys,
                                                                     int32_t* cand_ids) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  ChunkSmem<kChunk, false>& sm = *reinterpret_cast<ChunkSmem<kChunk, false>*>(smem_raw);
  const int chunk = blockIdx.x, tok = blockIdx.y;
  const int64_t p0 = int64_t{chunk} * kChunk;
  const int n = static_cast<int>(n_all - p0 < kChunk ? n_all - p0 : kChunk);
  for (int i = threadIdx.x; i < n; i += kChunkThreads) sm.keys[i] = ordered_key(scores[tok * n_all + p0 + i]);
  __syncthreads();
  const int64_t off = (int64_t{tok} * nchunks + chunk) * k;
  block_select_topk<kChunkThreads>(sm.keys, nullptr, p0, n, k, cand_keys + off, cand_ids + off, sm.sel);
}

// Top-k of segment blockIdx.y of each token's candidate list (list entries per token, seg_len
// per segment): out[(token · segments + segment) · k, + k), ascending, padded with key 0 / −1.
// Segments are contiguous, so the concatenation of their top-k lists is still in list order,
// and the top-k of that concatenation is the top-k of the whole list (ties included).
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const uint32_t* in_keys, const int32_t* in_ids,
                                                              int64_t list, int64_t seg_len, int k,
                                                              uint32_t* out_keys, int32_t* out_ids,
                                                              const uint32_t* floors) {
  __shared__ SelectShared<kMergeThreads> sel;
  const int tok = blockIdx.x, seg = blockIdx.y;
  const int64_t first = int64_t{seg} * seg_len;
  const int n = static_cast<int>(list - first < seg_len ? list - first : seg_len);
  const int64_t off = int64_t{tok} * list + first, out = (int64_t{tok} * gridDim.y + seg) * k;
  // The chunks' final floor bounds the token's k-th key from below (null: no floor).
  block_select_topk<kMergeThreads>(in_keys + off, in_ids + off, 0, n, k, out_keys + out, out_ids + out, sel,
                                   floors ? floors[tok] : 0u);
}

// Long candidate lists (≥ 16 chunks) are merged in two steps: up to kMergeSegments CTAs per
// token select from 8-chunk segments, then one CTA per token from their k candidates each.
// One CTA of 1024 threads per token over 64 × 512 candidates (ratio 2 at 1M) took 68 µs on the
// H200, with 64 of the 132 SMs busy.
constexpr int kMergeSegments = 16;
int merge_segments(int64_t nchunks) {
  if (nchunks < 16) return 1;
  const int64_t want = std::min<int64_t>(kMergeSegments, (nchunks + 7) / 8);
  const int64_t per = (nchunks + want - 1) / want;
  return static_cast<int>((nchunks + per - 1) / per);
}

int64_t chunks_for(int64_t positions, int chunk = kChunk) {
  return positions <= 0 ? 1 : (positions + chunk - 1) / chunk;
}

// Workspace slices: candidate keys, candidate ids, merge output keys, per-token selection
// floors (zeroed by each indexer call), the segment merge's keys and ids.
struct Workspace {
  uint32_t* cand_keys;
  int32_t* cand_ids;
  uint32_t* out_keys;
  uint32_t* floors;
  uint32_t* mid_keys;
  int32_t* mid_ids;
};
size_t workspace_bytes(int tokens, int64_t nchunks, int k) {
  const size_t cand = static_cast<size_t>(tokens) * nchunks * k;
  const size_t mid = static_cast<size_t>(tokens) * merge_segments(nchunks) * k;
  return cand * 8 + static_cast<size_t>(tokens) * k * 4 + static_cast<size_t>(tokens) * 4 + mid * 8 + 256;
}
Workspace carve(void* ws, int tokens, int64_t nchunks, int k) {
  const size_t cand = static_cast<size_t>(tokens) * nchunks * k;
  const size_t mid = static_cast<size_t>(tokens) * merge_segments(nchunks) * k;
  auto* base = static_cast<unsigned char*>(ws);
  unsigned char* after = base + cand * 8 + static_cast<size_t>(tokens) * k * 4 + static_cast<size_t>(tokens) * 4;
  return {reinterpret_cast<uint32_t*>(base), reinterpret_cast<int32_t*>(base + cand * 4),
          reinterpret_cast<uint32_t*>(base + cand * 8),
          reinterpret_cast<uint32_t*>(base + cand * 8 + static_cast<size_t>(tokens) * k * 4),
          reinterpret_cast<uint32_t*>(after), reinterpret_cast<int32_t*>(after + mid * 4)};
}

// The final top-k per token from the chunks' candidates (one or two merge steps).
Status merge_candidates(const Workspace& w, int tokens, int64_t nchunks, int k, int32_t* out, const uint32_t* floors,
                        cudaStream_t stream) {
  const int segs = merge_segments(nchunks);
  const int64_t list = nchunks * k;
  if (segs > 1) {
    const int64_t per = (nchunks + segs - 1) / segs;
    merge_kernel<<<dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(segs)), kMergeThreads, 0, stream>>>(
        w.cand_keys, w.cand_ids, list, per * k, k, w.mid_keys, w.mid_ids, floors);
    if (Status s = launch_status("merge_kernel (segments)"); !s.ok()) return s;
    merge_kernel<<<dim3(static_cast<unsigned>(tokens), 1u), kMergeThreads, 0, stream>>>(
        w.mid_keys, w.mid_ids, int64_t{segs} * k, int64_t{segs} * k, k, w.out_keys, out, floors);
    return launch_status("merge_kernel");
  }
  merge_kernel<<<dim3(static_cast<unsigned>(tokens), 1u), kMergeThreads, 0, stream>>>(w.cand_keys, w.cand_ids, list,
                                                                                   list, k, w.out_keys, out, floors);
  return launch_status("merge_kernel");
}

template <int NH, int DH, bool kPool, int kChunkN>
Status launch_indexer(const IndexerParams& p, int64_t nchunks, const Workspace& w, cudaStream_t stream) {
  const int bytes = static_cast<int>(sizeof(ChunkSmem<kChunkN, kPool>));
  DSV41_CUDA_TRY(cudaFuncSetAttribute(indexer_chunk_kernel<NH, DH, kPool, kChunkN>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  DSV41_CUDA_TRY(cudaMemsetAsync(w.floors, 0, static_cast<size_t>(p.tokens) * sizeof(uint32_t), stream));
  indexer_chunk_kernel<NH, DH, kPool, kChunkN><<<dim3(static_cast<unsigned>(p.tokens), static_cast<unsigned>(nchunks)),
                                 kChunkThreads, bytes, stream>>>(p, static_cast<int>(nchunks), w.cand_keys, w.cand_ids,
                                                                 w.floors);
  if (Status s = launch_status("indexer_chunk_kernel"); !s.ok()) return s;
  return merge_candidates(w, p.tokens, nchunks, p.k, p.topk, w.floors, stream);
}

int64_t indexer_positions(const IndexerParams& p);

// Positions per chunk CTA for these params (see kPoolChunk).
int indexer_chunk(const IndexerParams& p) {
  if (!p.pool_blocks) return kChunk;
  return p.tokens * chunks_for(indexer_positions(p), kChunk) < kFewCtas ? kPoolChunk : kChunk;
}

int64_t indexer_positions(const IndexerParams& p) {
  return p.pool_blocks ? int64_t{p.pool_size} * p.pool_block_size : p.max_entries;
}

}  // namespace

size_t indexer_workspace_bytes(const IndexerParams& p) {
  return workspace_bytes(p.tokens, chunks_for(indexer_positions(p), indexer_chunk(p)), p.k);
}

Status indexer_topk(const IndexerParams& p, void* workspace, size_t workspace_bytes_given, cudaStream_t stream) {
  const std::string what = "indexer_topk";
  if (p.tokens < 0 || p.k < 1 || p.k > 2048 || p.ratio < 1 || p.max_entries < 0)
    return invalid_argument(what + ": tokens " + std::to_string(p.tokens) + ", k " + std::to_string(p.k) + ", ratio " +
                            std::to_string(p.ratio));
  if (p.tokens == 0) return ok_status();
  if (!p.q || !p.head_weights || !p.positions || !p.entries || !p.keys || !p.topk || !workspace)
    return invalid_argument(what + ": null pointer");
  if (p.pool_blocks && (p.pool_size < 1 || p.pool_block_size < 1))
    return invalid_argument(what + ": pool of " + std::to_string(p.pool_size) + " blocks of " +
                            std::to_string(p.pool_block_size));
  const int rb = static_cast<int>(index_row_bytes(static_cast<size_t>(p.head_dim > 0 ? p.head_dim : 0)));
  IndexerParams q = p;
  if (p.pool_blocks) {
    q.pool_block_shift = 0;
    while ((1 << q.pool_block_shift) < p.pool_block_size) ++q.pool_block_shift;
    if ((1 << q.pool_block_shift) != p.pool_block_size || rb <= 0 || kGroupBytes % rb != 0 ||
        p.pool_block_size % (kGroupBytes / rb) != 0)
      return invalid_argument(what + ": pool blocks of " + std::to_string(p.pool_block_size) +
                              " entries: need a power of two holding whole 272-byte groups of index rows");
  }
  if (p.max_entries > 0x7FFFFFFF) return out_of_range(what + ": more than 2^31 entries");
  if (p.block_max && (p.pool_blocks || p.candidate_block < 1 || p.candidate_block > kChunk ||
                      (p.candidate_block & (p.candidate_block - 1)) != 0))
    return invalid_argument(what + ": block maxima need a dense layer and a power-of-two block ≤ 8192, got " +
                            std::to_string(p.candidate_block));
  const int chunk = indexer_chunk(p);
  const int64_t nchunks = chunks_for(indexer_positions(p), chunk);
  if (nchunks * p.k > (int64_t{1} << 30) || nchunks > 65535)
    return out_of_range(what + ": " + std::to_string(nchunks) + " chunks of candidates");
  if (workspace_bytes_given < workspace_bytes(p.tokens, nchunks, p.k))
    return invalid_argument(what + ": workspace of " + std::to_string(workspace_bytes_given) + " bytes, needs " +
                            std::to_string(workspace_bytes(p.tokens, nchunks, p.k)));
  const Workspace w = carve(workspace, p.tokens, nchunks, p.k);
  if (p.heads == 32 && p.head_dim == 128) {
    if (!q.pool_blocks) return launch_indexer<32, 128, false, kChunk>(q, nchunks, w, stream);
    return chunk == kPoolChunk ? launch_indexer<32, 128, true, kPoolChunk>(q, nchunks, w, stream)
                               : launch_indexer<32, 128, true, kChunk>(q, nchunks, w, stream);
  }
  if (p.heads == 8 && p.head_dim == 64) {
    if (!q.pool_blocks) return launch_indexer<8, 64, false, kChunk>(q, nchunks, w, stream);
    return chunk == kPoolChunk ? launch_indexer<8, 64, true, kPoolChunk>(q, nchunks, w, stream)
                               : launch_indexer<8, 64, true, kChunk>(q, nchunks, w, stream);
  }
  return unsupported(what + ": " + std::to_string(p.heads) + " heads × " + std::to_string(p.head_dim) +
                     " (built for 32×128, V4.1-Flash, and 8×64)");
}

size_t topk_rows_workspace_bytes(int tokens, int64_t n, int k) { return workspace_bytes(tokens, chunks_for(n), k); }

Status topk_rows(const float* scores, int tokens, int64_t n, int k, int32_t* out, void* workspace,
                 size_t workspace_bytes_given, cudaStream_t stream) {
  const std::string what = "topk_rows";
  if (tokens < 0 || n < 1 || k < 1 || k > 2048)
    return invalid_argument(what + ": tokens " + std::to_string(tokens) + ", n " + std::to_string(n) + ", k " +
                            std::to_string(k));
  if (tokens == 0) return ok_status();
  if (!scores || !out || !workspace) return invalid_argument(what + ": null pointer");
  const int64_t nchunks = chunks_for(n);
  if (workspace_bytes_given < workspace_bytes(tokens, nchunks, k))
    return invalid_argument(what + ": workspace too small");
  const Workspace w = carve(workspace, tokens, nchunks, k);
  const int bytes = static_cast<int>(sizeof(ChunkSmem<kChunk, false>));
  DSV41_CUDA_TRY(cudaFuncSetAttribute(scores_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  scores_chunk_kernel<<<dim3(static_cast<unsigned>(nchunks), static_cast<unsigned>(tokens)), kChunkThreads, bytes,
                        stream>>>(scores, n, k, static_cast<int>(nchunks), w.cand_keys, w.cand_ids);
  if (Status s = launch_status("scores_chunk_kernel"); !s.ok()) return s;
  return merge_candidates(w, tokens, nchunks, k, out, nullptr, stream);
}

}  // namespace dsv41::cuda
