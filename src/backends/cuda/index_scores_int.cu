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
// Work: a block of 4 warps per (row, 256 entries); the row's queries converted to the A fragments
// once per block in shared memory; a warp takes 32 entries at a time: their records' code words
// straight from global memory into B fragments (8 codes per lane per block), 2 × 4 MMAs per 8
// entries, the per-(entry, head) ReLU terms through shared memory, then lane e adds entry e's
// heads in head order. A candidate pool is marked per block from the kept list once (the simple
// body scans the list per entry). Entries no row can see are written −inf without work.
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

__host__ __device__ inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__host__ __device__ inline int64_t int_blocks(int64_t count, const dk::IndexScoreK& k) {
  return count / k.G * cdiv(k.G, kChunk);
}

struct Shared {
  uint4 a[kMaxHeads / 16 * kMaxBlocks * 32];  // A fragments [m tile][block][lane]
  int qexp[kMaxHeads][kMaxBlocks];            // block unit exponents u
  int qspan[kMaxHeads];                       // index_query_span: past kIndexExactSpan, not exact
  float hw[kMaxHeads];
  float relu[kWarps][32][kMaxHeads + 1];      // a warp's 32 entries × heads
  bool pool[kChunk];
  int pool_end;
};

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
      if (sh.qexp[h][b] == dk::kIndexZeroBlock || sh.qexp[h][b] == dk::kIndexNotExact) sh.qexp[h][b] = 0;
    sh.hw[h] = k.hw[r * k.nh + h];
  }
}

// The candidate pool's entries inside [g0, g0 + kChunk): the kept list up to its first −1.
__device__ void stage_pool(const dk::IndexScoreK& k, int64_t r, int64_t g0, Shared& sh) {
  for (int i = threadIdx.x; i < kChunk; i += kThreads) sh.pool[i] = false;
  if (threadIdx.x == 0) sh.pool_end = k.nb;
  __syncthreads();
  const int32_t* kept = k.kept + r * k.nb;
  for (int j = threadIdx.x; j < k.nb; j += kThreads)
    if (kept[j] < 0) atomicMin(&sh.pool_end, j);
  __syncthreads();
  for (int j = threadIdx.x; j < sh.pool_end; j += kThreads) {
    const int64_t first = int64_t(kept[j]) * k.bs;
    for (int64_t g = max(first, g0); g < first + k.bs && g < g0 + kChunk; ++g) sh.pool[g - g0] = true;
  }
}

// Entry g's key record as the lanes of its quad see it: the B fragments of its blocks (lane t:
// code word t of each block), its scale bytes, and the span of its nonzero blocks' exponents.
struct KeyTile {
  uint32_t lo[kMaxBlocks], hi[kMaxBlocks];
  uint32_t scales;
  int span;
};

__device__ KeyTile load_keys(const dk::IndexScoreK& k, int64_t g, int t) {
  const int nb = int(k.dh / 32);
  KeyTile kt{};
  uint32_t nonzero = 0;
  if (g < k.G) {  // (every lane goes on to the quad's shuffles)
    const uint8_t* rec = k.keys.row(g).rec;
    const bool aligned = (reinterpret_cast<uintptr_t>(rec) & 3) == 0;  // 68-byte records are
#pragma unroll
    for (int b = 0; b < kMaxBlocks; ++b) {
      if (b >= nb) break;
      const uint8_t* at = rec + b * 16 + t * 4;
      const uint32_t w = aligned ? *reinterpret_cast<const uint32_t*>(at)
                                 : uint32_t(at[0]) | uint32_t(at[1]) << 8 | uint32_t(at[2]) << 16 | uint32_t(at[3]) << 24;
      dsv41::cuda::e2m1x8_to_s8(w, kt.lo[b], kt.hi[b]);
      nonzero |= (w & 0x77777777u) ? 1u << b : 0u;
      kt.scales |= uint32_t(rec[k.dh / 2 + b]) << (8 * b);
    }
  }
  nonzero |= __shfl_xor_sync(kFull, nonzero, 1);
  nonzero |= __shfl_xor_sync(kFull, nonzero, 2);
  uint8_t scales[kMaxBlocks];
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b) scales[b] = uint8_t(kt.scales >> (8 * b));
  kt.span = dk::index_key_span(scales, nonzero, nb);
  return kt;
}

// One warp: entries [e0, e0 + 32) of row r, lane e's score at the end.
__device__ void score_warp(const dk::IndexScoreK& k, int64_t r, int64_t e0, int64_t g0, const Shared& sh,
                           float (&relu)[32][kMaxHeads + 1]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nh = int(k.nh), nb = int(k.dh / 32), mts = nh / 16;
  __syncwarp();  // the previous pass's head sums have read `relu`
  const int64_t e = e0 + lane, visible = (k.start + r + 1) / k.ratio;
  const bool seen = e < k.G && e < visible && (!k.kept || sh.pool[e - g0]);
  const unsigned any = __ballot_sync(kFull, seen);
  if (any) {
    for (int nt = 0; nt < 4; ++nt) {
      if (!(any >> (nt * 8) & 0xFFu)) continue;
      const KeyTile kt = load_keys(k, e0 + nt * 8 + g, t);
      // Columns 2t, 2t + 1 of this tile: entries of the quads 2t and 2t + 1.
      uint32_t scales[2];
      int span[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        scales[j] = __shfl_sync(kFull, kt.scales, (2 * t + j) * 4);
        span[j] = __shfl_sync(kFull, kt.span, (2 * t + j) * 4);
      }
      for (int mt = 0; mt < mts; ++mt) {
        int s[kMaxBlocks][4] = {};
#pragma unroll
        for (int b = 0; b < kMaxBlocks; ++b) {
          if (b >= nb) break;
          const uint4 a = sh.a[(mt * kMaxBlocks + b) * 32 + lane];
          dsv41::cuda::mma_s8_16832(s[b], a.x, a.y, a.z, a.w, kt.lo[b], kt.hi[b]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = mt * 16 + g + (i >= 2 ? 8 : 0), col = nt * 8 + 2 * t + (i & 1);
          if (!(any >> col & 1u)) continue;
          double acc;
          if (sh.qspan[h] + span[i & 1] <= dk::kIndexExactSpan) {
            int sums[kMaxBlocks];
            uint8_t sc[kMaxBlocks];
#pragma unroll
            for (int b = 0; b < kMaxBlocks; ++b) {
              sums[b] = s[b][i];
              sc[b] = uint8_t(scales[i & 1] >> (8 * b));
            }
            acc = dk::index_exact_dot(sums, sh.qexp[h], sc, nb);
          } else {
            acc = k.head_dot(r, e0 + col, h);  // the simple body's chain
          }
          relu[col][h] = fmaxf(float(acc), 0.0f) * k.scale;
        }
      }
    }
  }
  __syncwarp();
  if (e >= k.G) return;
  float score = -INFINITY;
  if (seen) {
    float total = 0.0f;
    for (int h = 0; h < nh; ++h) total += relu[lane][h] * sh.hw[h];
    score = total;
  }
  k.scores[r * k.G + e] = score;
}

__global__ void __launch_bounds__(kThreads) index_int_kernel(const dk::Batched<dk::IndexScoreK> b) {
  await_previous_kernel();
  __shared__ Shared sh;
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= int_blocks(b.count[j], b.body[j])) {
    blk -= int_blocks(b.count[j], b.body[j]);
    ++j;
  }
  const dk::IndexScoreK& k = b.body[j];
  const int64_t chunks = cdiv(k.G, kChunk), r = blk / chunks, g0 = (blk % chunks) * kChunk;
  const int64_t visible = min(k.G, (k.start + r + 1) / k.ratio);
  if (g0 >= visible) {  // no entry of the chunk is visible to this row
    for (int64_t g = g0 + threadIdx.x; g < min(k.G, g0 + kChunk); g += kThreads) k.scores[r * k.G + g] = -INFINITY;
    return;
  }
  stage_queries(k, r, sh);
  if (k.kept) stage_pool(k, r, g0, sh);
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  for (int p = 0; p < kPasses; ++p)
    score_warp(k, r, g0 + (p * kWarps + warp) * 32, g0, sh, sh.relu[warp]);
}

}  // namespace

bool index_int_fits(int64_t n, const dk::IndexScoreK& k) {
  const bool records = (k.keys.rec || k.keys.pages) && !k.keys.f && k.keys.kind == RowKind::kIndex;
  return records && k.keys.D == k.dh && k.G > 0 && n % k.G == 0 && k.nh > 0 && k.nh % 16 == 0 &&
         k.nh <= kMaxHeads && k.dh > 0 && k.dh % 32 == 0 && k.dh <= 32 * kMaxBlocks && k.ratio > 0;
}

bool launch_index_int(const dk::Batched<dk::IndexScoreK>& b, Stream s) {
  int64_t blocks = 0;
  for (int j = 0; j < b.n; ++j) {
    if (!index_int_fits(b.count[j], b.body[j])) return false;
    blocks += int_blocks(b.count[j], b.body[j]);
  }
  if (b.n < 1 || blocks > 0x7fffffff) return false;
  if (blocks > 0) launch_kernel(&index_int_kernel, unsigned(blocks), kThreads, 0, s, b);
  return true;
}

}  // namespace dsv41::fast
