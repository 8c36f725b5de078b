// Indexer scores on integer tensor cores (fast_kernels.h, launch_index): dk::IndexScoreK for keys
// that are MXFP4 index records and queries that the backend fake-quantised to MXFP4, with the
// simple body's bits.
//
// Why it is exact: index_exact.h. Each 32-channel block's products sum to an int32 times one power
// of two — one m16n8k32 s8 MMA per block (16 heads × 8 entries × 32 channels) — and where the
// blocks' exponents span ≤ 38 bits the simple body's double chain is exact, so it equals the sum of
// those terms. Then float(acc), the ReLU, the scale and the ordered head sum are the simple body's
// operations. An (entry, head) outside that — a wider span, a NaN or near-overflow key scale, a
// query block that is not an MXFP4 value — takes the simple body's chain in place: the simple
// kernel's bits everywhere.
//
// Work: blocks of 4 warps. A row without a candidate pool: a block per (row, `per` chunks of 256
// entries), `per` chosen by the launch's size so that a long decode row stages its queries once
// for thousands of entries (staging — 4 MXFP4 blocks × 32 heads converted to A fragments — for
// every 256 entries cost 10–15 % of a 1M-entry row, session 36). A row with a pool: its −∞ row written by one
// fill launch first, then a block per (row, 256 of the kept list's entries), so a reindex layer's
// work is the pool (2,048 blocks × 8), not the context. In a block the row's queries become the A
// fragments once, in shared memory; a warp takes 32 entries at a time: their records' code words
// straight from global memory into B fragments (8 codes per lane per block; a tile's words are
// fetched while the tile before is scored, a pass's first tile during the previous pass's last),
// 2 × 4 MMAs per 8 entries, the per-(entry, head) ReLU terms through shared memory, then lane e
// adds entry e's heads in head order. Entries no row can see are written −∞ without work.
#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/index_exact.h"
#include "backends/cuda/mma.cuh"

#include <cuda_runtime.h>

#include <algorithm>

namespace dsv41::fast {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kPasses = 2, kChunk = kWarps * 32 * kPasses;  // entries a block scores
constexpr int kMaxHeads = 64, kMaxBlocks = 4;               // nh ≤ 64 (whole 16-row tiles), dh ≤ 128
// A relu row's stride: ≡ 4 (mod 16) words, so that a fragment's stores (lane (q, t): entry 2t or
// 2t + 1, head q or q + 8) fall in 32 different banks, and rows of 16 bytes, so that the head sums
// read four heads at once with no conflict between the 8 lanes of a quarter warp (stride 65 put
// up to four lanes of a store in one bank).
constexpr int kReluStride = kMaxHeads + 4;

__host__ __device__ inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kTargetBlocks = 2048;  // a launch's blocks before a block takes several chunks
constexpr int kMaxChunksPerBlock = 16;

__host__ __device__ inline int64_t chunks_of(const dk::IndexScoreK& k) { return cdiv(k.G, kChunk); }
// Blocks per row: a full row's chunks in groups of `per`, or a pool row's kept entries (nb · bs) in chunks.
__host__ __device__ inline int64_t row_blocks(const dk::IndexScoreK& k, int per) {
  return k.kept ? cdiv(int64_t(k.nb) * k.bs, kChunk) : cdiv(chunks_of(k), per);
}

// Where each body's blocks begin in the launch (first[n]: the total), and how many chunks a block
// of a row without a pool scores.
struct IntPlan {
  int first[dk::Batched<dk::IndexScoreK>::kMax + 1];
  int per;
  RowGate gate;
};

struct Shared {
  uint4 a[kMaxHeads / 16 * kMaxBlocks * 32];  // A fragments [m tile][block][lane]
  int qexp[kMaxHeads][kMaxBlocks];            // block unit exponents u, then u · 2^20 (exponent_field)
  int qspan[kMaxHeads];                       // index_query_span: past kIndexExactSpan, not exact
  alignas(16) float hw[kMaxHeads];
  alignas(16) float relu[kWarps][32][kReluStride];  // a warp's 32 entries × heads
  int pool_end;                               // the kept list's first −1 (or nb)
};

// e as the high word of a double's exponent field: 2^(u + s − 128) for a query unit u and a key
// scale byte s is the double with high word exponent_field(u) + exponent_field(s − 128 + 1023) and
// low word 0 (dk::index_pow2's bits, as one integer add a pair and block).
__device__ __forceinline__ int exponent_field(int e) { return int(uint32_t(e) << 20); }

// Thread (h, b): query block b of head h as 32 int8 into the A fragments and its unit (index_exact.h);
// then per head the span of its units (past kIndexExactSpan where a block is not exact) and its weight.
__device__ void stage_queries(const dk::IndexScoreK& k, int64_t r, Shared& sh) {
  const int nh = int(k.nh), nb = int(k.dh / 32);
  for (int x = threadIdx.x; x < nh * nb; x += kThreads) {
    const int h = x / nb, b = x % nb;
    int8_t n[32];
    sh.qexp[h][b] = dk::index_query_block(k.q + (r * k.nh + h) * k.dh + b * 32, n);
    uint32_t words[8];
#pragma unroll
    for (int w = 0; w < 8; ++w)
      words[w] = uint32_t(uint8_t(n[4 * w])) | uint32_t(uint8_t(n[4 * w + 1])) << 8 |
                 uint32_t(uint8_t(n[4 * w + 2])) << 16 | uint32_t(uint8_t(n[4 * w + 3])) << 24;
    // Channel 8t + i (i < 4) is k = 4t + i of the MMA, 8t + 4 + i is k = 16 + 4t + i (the keys'
    // e2m1x8_to_s8 order); row h % 16 of m tile h / 16: a0/a2 for rows 0…7, a1/a3 for 8…15.
    const int mt = h / 16, row = h % 16, g = row % 8;
    uint32_t* frag = reinterpret_cast<uint32_t*>(&sh.a[(mt * kMaxBlocks + b) * 32]);
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      frag[(g * 4 + t) * 4 + (row < 8 ? 0 : 1)] = words[2 * t];
      frag[(g * 4 + t) * 4 + (row < 8 ? 2 : 3)] = words[2 * t + 1];
    }
  }
  __syncthreads();
  for (int h = threadIdx.x; h < nh; h += kThreads) {
    sh.qspan[h] = dk::index_query_span(sh.qexp[h], nb);
    for (int b = 0; b < nb; ++b)
      sh.qexp[h][b] = exponent_field(
          sh.qexp[h][b] == dk::kIndexZeroBlock || sh.qexp[h][b] == dk::kIndexNotExact ? 0 : sh.qexp[h][b]);
    sh.hw[h] = k.hw[r * k.nh + h];
  }
}

// Entry g's key record as the lanes of its quad see it: the B fragments of its blocks (lane t:
// code word t of each block), its scale bytes, and the span of its nonzero blocks' exponents.
struct KeyTile {
  uint32_t lo[kMaxBlocks], hi[kMaxBlocks];
  uint32_t scales;
  int span;
};

// Entry g's code words (lane t: word t of each block) and scale bytes, as loaded: fetched one
// tile ahead of their use (score_warp), so that the loads' latency hides behind a tile's MMAs.
struct KeyWords {
  uint32_t w[kMaxBlocks];
  uint32_t scales;
};

__device__ KeyWords fetch_keys(const dk::IndexScoreK& k, int64_t g, int t) {
  const int nb = int(k.dh / 32);
  KeyWords kw{};
  if (g < 0 || g >= k.G) return kw;
  const uint8_t* rec = k.keys.row(g).rec;
  const bool aligned = (reinterpret_cast<uintptr_t>(rec) & 3) == 0;  // 68-byte records are
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) {
    if (b >= nb) break;
    const uint8_t* at = rec + b * 16 + t * 4;
    kw.w[b] = aligned ? *reinterpret_cast<const uint32_t*>(at)
                      : uint32_t(at[0]) | uint32_t(at[1]) << 8 | uint32_t(at[2]) << 16 | uint32_t(at[3]) << 24;
    if (!aligned || nb != kMaxBlocks) kw.scales |= uint32_t(rec[k.dh / 2 + b]) << (8 * b);
  }
  // dh 128: the four scale bytes as one word (at byte 64 of an aligned record).
  if (aligned && nb == kMaxBlocks) kw.scales = *reinterpret_cast<const uint32_t*>(rec + k.dh / 2);
  return kw;
}

// The tile of fetched words: B fragments, scales, span. All lanes call it (the quad's shuffles).
__device__ KeyTile decode_keys(const dk::IndexScoreK& k, const KeyWords& kw) {
  const int nb = int(k.dh / 32);
  KeyTile kt{};
  kt.scales = kw.scales;
  uint32_t nonzero = 0;
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) {
    if (b >= nb) break;
    dsv41::cuda::e2m1x8_to_s8(kw.w[b], kt.lo[b], kt.hi[b]);
    nonzero |= (kw.w[b] & 0x77777777u) ? 1u << b : 0u;
  }
  nonzero |= __shfl_xor_sync(kFull, nonzero, 1);
  nonzero |= __shfl_xor_sync(kFull, nonzero, 2);
  // dk::index_key_span, unrolled (an array of the scales would live in local memory).
  int lo = 1 << 20, hi = -(1 << 20);
  bool wide = false;
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) {
    if (b >= nb) break;
    const int scale = int(kt.scales >> (8 * b) & 0xFFu);
    wide = wide || scale > 252;
    if (nonzero >> b & 1u) {
      lo = min(lo, scale);
      hi = max(hi, scale);
    }
  }
  kt.span = wide ? 1 << 20 : hi >= lo ? hi - lo : 0;
  return kt;
}

// The words of a pass's first tile (entries 0 … 7 of the warp's 32; lane e's entry g), as the
// lanes of each quad fetch them. All lanes call it.
__device__ KeyWords fetch_first_tile(const dk::IndexScoreK& k, int64_t g) {
  const int lane = threadIdx.x & 31;
  return fetch_keys(k, __shfl_sync(kFull, g, lane >> 2), lane & 3);
}

// One warp, 32 entries: lane e's entry g (−1: none) and whether its row sees it; lane e's score at
// the end (−∞ where unseen). The lanes of a quad load the keys of the entry their tile column names.
// `ahead` holds this pass's first tile (fetch_first_tile) and is left holding the first tile of the
// pass whose lane e has entry g_next (−1: none), fetched during this pass's last tile: a pass's
// first loads wait a whole memory round trip otherwise.
__device__ __forceinline__ float score_warp(const dk::IndexScoreK& k, int64_t r, int64_t g, bool seen,
                                            const Shared& sh, float (&relu)[32][kReluStride], KeyWords& ahead,
                                            int64_t g_next) {
  const int lane = threadIdx.x & 31, q = lane >> 2, t = lane & 3;
  const int nh = int(k.nh), nb = int(k.dh / 32), mts = nh / 16;
  __syncwarp();  // the previous pass's head sums have read `relu`
  const unsigned any = __ballot_sync(kFull, seen);
  if (!any) ahead = fetch_first_tile(k, g_next);
  if (any) {
    for (int nt = 0; nt < 4; ++nt) {
      const KeyWords words = ahead;
      ahead = nt + 1 < 4 ? fetch_keys(k, __shfl_sync(kFull, g, (nt + 1) * 8 + q), t) : fetch_first_tile(k, g_next);
      if (!(any >> (nt * 8) & 0xFFu)) continue;
      const KeyTile kt = decode_keys(k, words);
      // Columns 2t, 2t + 1 of this tile: entries of the quads 2t and 2t + 1.
      uint32_t scales[2];
      int span[2];
      int entry[2];  // G < 2^31 (index_int_fits)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        scales[j] = __shfl_sync(kFull, kt.scales, (2 * t + j) * 4);
        span[j] = __shfl_sync(kFull, kt.span, (2 * t + j) * 4);
        entry[j] = __shfl_sync(kFull, int(g), nt * 8 + 2 * t + j);
      }
      int kfield[2][kMaxBlocks];  // the columns' scales as exponent fields (exponent_field)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int b = 0; b < kMaxBlocks; ++b)
          kfield[j][b] = exponent_field(int(scales[j] >> (8 * b) & 0xFFu) - 128 + 1023);
      for (int mt = 0; mt < mts; ++mt) {
        int s[kMaxBlocks][4] = {};
#pragma unroll
        for (int b = 0; b < kMaxBlocks; ++b) {
          if (b >= nb) break;
          const uint4 a = sh.a[(mt * kMaxBlocks + b) * 32 + lane];
          dsv41::cuda::mma_s8_16832(s[b], a.x, a.y, a.z, a.w, kt.lo[b], kt.hi[b]);
        }
        // The four (entry, head) pairs of this lane's fragment: each pair's exact sum formed
        // unconditionally, with no branch between the four chains, so that they interleave (one
        // pair's chain is four dependent conversions and DFMAs; a branch per pair ran them one
        // after another); a pair outside the exact span (rare: index_exact.h) then replaces its
        // sum with the simple body's chain, and only the pairs the row sees are stored.
        double acc[4];
        bool exact[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = mt * 16 + q + (i >= 2 ? 8 : 0);
          exact[i] = sh.qspan[h] + span[i & 1] <= dk::kIndexExactSpan;
          // dk::index_exact_dot's sum, unrolled over the blocks: its arrays, indexed up to a
          // runtime count, would live in local memory.
          double a = 0;
#pragma unroll
          for (int b = 0; b < kMaxBlocks; ++b)
            if (b < nb) a += double(s[b][i]) * __hiloint2double(sh.qexp[h][b] + kfield[i & 1][b], 0);
          acc[i] = a;
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = mt * 16 + q + (i >= 2 ? 8 : 0), col = nt * 8 + 2 * t + (i & 1);
          // The simple body's chain; an unseen column's row is stored too but never read.
          if (!exact[i] && (any >> col & 1u)) acc[i] = k.head_dot(r, entry[i & 1], h);
          relu[col][h] = fmaxf(float(acc[i]), 0.0f) * k.scale;
        }
      }
    }
  }
  __syncwarp();
  if (!seen) return -INFINITY;
  float total = 0.0f;
  for (int h = 0; h < nh; h += 4) {  // nh % 16 == 0 (index_int_fits); the sum in head order
    const float4 v = *reinterpret_cast<const float4*>(&relu[lane][h]);
    const float4 w = *reinterpret_cast<const float4*>(&sh.hw[h]);
    total += v.x * w.x;
    total += v.y * w.y;
    total += v.z * w.z;
    total += v.w * w.w;
  }
  return total;
}

// Chunks [c0, c1) of a row without a pool: every entry's score, −∞ past what the row sees.
__device__ void score_chunks(const dk::IndexScoreK& k, int64_t r, int64_t c0, int64_t c1, Shared& sh) {
  const int64_t visible = min(k.G, (k.start + r + 1) / k.ratio);
  float* out = k.scores + r * k.G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // Pass i of the block (chunk c0 + i / kPasses, pass i % kPasses): this lane's entry, −1 past the
  // block's chunks or the row.
  const auto entry = [&](int64_t i) -> int64_t {
    const int64_t e = (c0 + i / kPasses) * kChunk + ((i % kPasses) * kWarps + warp) * 32 + lane;
    return i < (c1 - c0) * kPasses && e < k.G ? e : -1;
  };
  KeyWords ahead{};
  if (c0 * kChunk < visible) {
    ahead = fetch_first_tile(k, entry(0));  // in flight while the queries are staged
    stage_queries(k, r, sh);
    __syncthreads();
  }
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t g0 = c * kChunk;
    if (g0 >= visible) {  // no entry of the chunk (nor of a later one) is visible to this row
      for (int64_t g = g0 + threadIdx.x; g < min(k.G, g0 + kChunk); g += kThreads) out[g] = -INFINITY;
      continue;
    }
    for (int p = 0; p < kPasses; ++p) {
      const int64_t i = (c - c0) * kPasses + p, e = entry(i);
      const float score = score_warp(k, r, e, e >= 0 && e < visible, sh, sh.relu[warp], ahead, entry(i + 1));
      if (e >= 0) out[e] = score;
    }
  }
}

// Positions [p0, p0 + kChunk) of a pool row's kept entries (position p: entry kept[p / bs] · bs +
// p % bs, up to the list's first −1), each scored where the row sees it; the rest of the row holds
// fill_pool_rows' −∞ (an entry the list names twice gets the same value twice).
__device__ void score_pool(const dk::IndexScoreK& k, int64_t r, int64_t p0, Shared& sh) {
  const int32_t* kept = k.kept + r * k.nb;
  if (threadIdx.x == 0) sh.pool_end = k.nb;
  __syncthreads();
  for (int j = threadIdx.x; j < k.nb; j += kThreads)
    if (kept[j] < 0) atomicMin(&sh.pool_end, j);
  __syncthreads();
  const int64_t used = int64_t(sh.pool_end) * k.bs;
  if (p0 >= used) return;
  stage_queries(k, r, sh);
  __syncthreads();
  const int64_t visible = min(k.G, (k.start + r + 1) / k.ratio);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const auto entry = [&](int p) -> int64_t {  // this lane's entry in pass p, −1 where none
    const int64_t pos = p0 + (p * kWarps + warp) * 32 + lane;
    const int64_t g = p < kPasses && pos < used ? int64_t(kept[pos / k.bs]) * k.bs + pos % k.bs : -1;
    return g < k.G ? g : -1;
  };
  KeyWords ahead = fetch_first_tile(k, entry(0));
  for (int p = 0; p < kPasses; ++p) {
    const int64_t g = entry(p);
    const bool seen = g >= 0 && g < visible;
    const float score = score_warp(k, r, g, seen, sh, sh.relu[warp], ahead, entry(p + 1));
    if (seen) k.scores[r * k.G + g] = score;
  }
}

// At most 96 registers, 5 blocks an SM (ptxas spilled more without the bound; ncu, session 37:
// 4.7 warps a scheduler, 63 % of issue slots busy, the integer ALU the busiest pipe at 52 %).
__global__ void __launch_bounds__(kThreads, 5)
    index_int_kernel(const dk::Batched<dk::IndexScoreK> b, const IntPlan plan) {
  await_previous_kernel();
  __shared__ Shared sh;
  const int blk = int(blockIdx.x);
  int j = 0, first = 0;  // the body holding block blk (unrolled: no copy of the plan in local memory)
#pragma unroll
  for (int i = 1; i < dk::Batched<dk::IndexScoreK>::kMax; ++i)
    if (i < b.n && blk >= plan.first[i]) j = i, first = plan.first[i];
  const dk::IndexScoreK& k = b.body[j];
  const int64_t per_row = row_blocks(k, plan.per), x = (blk - first) % per_row, r = (blk - first) / per_row;
  if (plan.gate.at[j] && plan.gate.at[j][r * plan.gate.stride] == 0.0f) return;  // a row the caller left out
  if (k.kept)
    score_pool(k, r, x * kChunk, sh);
  else
    score_chunks(k, r, x * plan.per, min(chunks_of(k), (x + 1) * plan.per), sh);
}

// Every score of the rows with a pool −∞ (index_int_kernel then writes the pool's entries).
__global__ void fill_pool_rows(const dk::Batched<dk::IndexScoreK> b) {
  await_previous_kernel();
  for (int j = 0; j < b.n; ++j) {
    if (!b.body[j].kept) continue;
    float* out = b.body[j].scores;
    for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < b.count[j]; i += int64_t{gridDim.x} * blockDim.x)
      out[i] = -INFINITY;
  }
}

}  // namespace

bool index_int_fits(int64_t n, const dk::IndexScoreK& k) {
  const bool records = (k.keys.rec || k.keys.pages) && !k.keys.f && k.keys.kind == RowKind::kIndex;
  return records && k.keys.D == k.dh && k.G > 0 && k.G < (int64_t{1} << 31) && n % k.G == 0 && k.nh > 0 &&
         k.nh % 16 == 0 && k.nh <= kMaxHeads && k.dh > 0 && k.dh % 32 == 0 && k.dh <= 32 * kMaxBlocks && k.ratio > 0;
}

bool launch_index_int(const dk::Batched<dk::IndexScoreK>& b, Stream s, int chunks_per_block, const RowGate& gate) {
  if (b.n < 1) return false;
  int64_t full_chunks = 0, pool_scores = 0;
  for (int j = 0; j < b.n; ++j) {
    const dk::IndexScoreK& k = b.body[j];
    if (!index_int_fits(b.count[j], k)) return false;
    if (k.kept)
      pool_scores += b.count[j];
    else
      full_chunks += b.count[j] / k.G * chunks_of(k);
  }
  IntPlan plan{};
  plan.gate = gate;
  plan.per = chunks_per_block > 0 ? chunks_per_block
                                  : int(std::clamp<int64_t>(full_chunks / kTargetBlocks, 1, kMaxChunksPerBlock));
  int64_t blocks = 0;
  for (int j = 0; j < b.n; ++j) {
    plan.first[j] = int(blocks);
    blocks += b.count[j] / b.body[j].G * row_blocks(b.body[j], plan.per);
    if (blocks > 0x7fffffff) return false;
  }
  plan.first[b.n] = int(blocks);
  if (pool_scores > 0) {
    const int64_t fill_blocks = std::min<int64_t>(cdiv(pool_scores, 256), 2048);
    launch_kernel(&fill_pool_rows, unsigned(fill_blocks), 256, 0, s, b);
  }
  if (blocks > 0) launch_kernel(&index_int_kernel, unsigned(blocks), kThreads, 0, s, b, plan);
  return true;
}

}  // namespace dsv41::fast
