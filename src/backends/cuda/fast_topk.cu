// The device backend's top-k (dk::TopkBatch) as a selection linear in the row length, on the
// kernel library's radix select (topk_select.cuh, the indexer's): the simple path ranks every
// entry against every other one of its row (O(size²): 5.6× the per-token time of mini-flash's
// decode at 64K against 4K). docs/CUDA.md "Top-k in the backend, linear in the row".
// 1. A block per (job, row, chunk of TopkBatch::kChunk entries): the chunk's scores as ordered keys
//    in shared memory (−inf and NaN as the ineligible key 0), then block_select_topk. A row of one
//    chunk is done: its ids go straight to out. Otherwise the chunk's best `width` (key, id) pairs
//    go to the job's scratch, padded with key 0 / id −1.
// 2. For a row of more than kGroup chunks, a block per (row, group of kGroup chunks):
//    block_select_topk over the group's concatenated candidates, its best `width` pairs to the
//    job's group scratch (so that no single block merges a long row's 256 × width candidates: at
//    1M entries that one block was most of the selection's time).
// 3. A block per row of more than one chunk: block_select_topk over the concatenated candidates
//    of its chunks or groups. Chunks (and groups) are contiguous and each list is ascending by
//    id, so the concatenation is too, and its top-k (ties → earlier in the list) is the row's
//    top-k (ties → lower id).
// The job's hints (TopkBatch::Job) change what is read, not the ids: a pooled row selects over its
// pool's positions (ids gathered with the keys), a floor makes the keys below it ineligible in
// every kernel, a long row without one gets a sampled floor first (topk_floor_kernel: the
// width-th largest of the maxima of disjoint runs of 32 entries), and a row marked done is left
// as it is by every kernel (its out already holds the selection).
// A job of rows of more than one chunk with a floor (its own or sampled) is compacted instead of
// steps 1–3: topk_compact_kernel streams each chunk once and writes the keys at or above the floor
// to the chunk's candidate slots in list order (a chunk with more than `width` of them selects its
// best `width` instead, as step 1), then topk_gather_kernel, a block per row, gathers the chunks'
// candidates into one list in shared memory and selects from it. Above a good floor a chunk keeps
// a few dozen keys, so the selection reads each score once instead of sorting 4,096 a block and
// merging 512 padded slots a chunk (docs/CUDA.md "The top-k compacted above its floor").
// The same ids as the simple path, bit for bit (DeviceKernelsCuda.TopkBatchEqualsSelectTopk checks
// both against select_topk, device_kernels_check.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/topk_select.cuh"

namespace dsv41::fast {
namespace {

constexpr int kTopkThreads = 512;
constexpr int kMaxWidth = 2048;  // wider jobs run the simple path
constexpr int64_t kChunk = dk::TopkBatch::kChunk, kGroup = dk::TopkBatch::kGroup;
using Job = dk::TopkBatch::Job;

// −inf and NaN are never selected (select_topk): both map to the ineligible key. (ordered_key
// alone would rank a positive NaN above +inf.)
__device__ __forceinline__ uint32_t selection_key(float v) { return v > -INFINITY ? cuda::ordered_key(v) : 0u; }

// Whether a job's rows are compacted above their floor (topk_compact_kernel, topk_gather_kernel)
// instead of selected by chunks, groups and a merge: rows of several chunks that have a floor. A
// row of such a job whose floor is none (−inf, NaN) still selects exactly, only slower.
__host__ __device__ bool compacted(bool hints, const Job& job) {
  return hints && !job.pooled() && job.chunks() > 1 && (job.floor != nullptr || job.sampled());
}

// Row `row`'s floor as a key (0: none): the caller's, else the sampled one, else none.
__device__ __forceinline__ uint32_t floor_key(const dk::TopkBatch& t, const Job& job, int64_t row) {
  if (job.floor) return selection_key(job.floor[row * job.floor_stride]);
  return t.hints && job.sampled() ? job.floor_keys()[row] : 0u;
}

// The jobs of a unit with blocks in one launch, worked out on the host: entry i is t.jobs[job[i]],
// its blocks [first[i], first[i + 1]) of the launch's first[n].
struct JobStarts {
  int n = 0;
  int job[dk::TopkBatch::kMax];
  int64_t first[dk::TopkBatch::kMax + 1] = {};
  void add(int j, int64_t blocks) {
    if (blocks <= 0) return;
    job[n] = j;
    first[n + 1] = first[n] + blocks;
    ++n;
  }
  int64_t total() const { return first[n]; }
};

// The job of block b of a launch planned by s; b becomes the block's index within its job.
__device__ __forceinline__ const Job& job_of_block(const dk::TopkBatch& t, const JobStarts& s, int64_t& b) {
  const int i = launch_entry(s.first, s.n, b);
  b -= s.first[i];
  return t.jobs[s.job[i]];
}

// ---- Sampled floors ---------------------------------------------------------------------------

// A block per sampled row: the maxima of its runs (run i: the 32 entries from i·stride, the stride the
// row's length over its runs rounded down to a multiple of four — at least 32, so the runs are
// disjoint and every maximum is a different entry), then its floor key, the width-th largest of them
// (0: fewer). A warp's load covers four runs, eight lanes a run with a 16-byte load each where the row
// is 16-byte aligned, kFloorUnroll loads a lane in flight (a thread a run, 32 loads one after
// another, took ≈ 14 µs a 16-row chain before the selection's launch: session 47).
constexpr int kFloorUnroll = 8;
__global__ void __launch_bounds__(kTopkThreads)
    topk_floor_kernel(const __grid_constant__ dk::TopkBatch t, const __grid_constant__ JobStarts starts) {
  await_previous_kernel();
  __shared__ uint32_t maxima[dk::TopkBatch::kSampleRuns];
  __shared__ uint32_t out_keys[kMaxWidth];
  __shared__ int32_t out_ids[kMaxWidth];
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t row = blockIdx.x;
  const Job& job = job_of_block(t, starts, row);
  if (job.row_done(row)) return;
  const int runs = job.samples();
  const int64_t stride = job.length() / runs / 4 * 4;
  const float* v = job.v + row * job.size;
  const bool aligned = (reinterpret_cast<uintptr_t>(v) & 15) == 0;
  constexpr int kWarps = kTopkThreads / 32, kStep = kWarps * 4 * kFloorUnroll;
  const int lane = threadIdx.x % 32, part = lane % 8;
  for (int r0 = threadIdx.x / 32 * 4 + lane / 8; r0 < runs; r0 += kStep) {
    float4 x[kFloorUnroll];
#pragma unroll
    for (int u = 0; u < kFloorUnroll; ++u) {  // every load in flight before any maximum
      const int run = r0 + u * kWarps * 4;
      const float* at = v + run * stride + 4 * part;
      if (run >= runs) {
        x[u] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      } else if (aligned) {
        x[u] = __ldg(reinterpret_cast<const float4*>(at));
      } else {
        x[u] = make_float4(at[0], at[1], at[2], at[3]);
      }
    }
#pragma unroll
    for (int u = 0; u < kFloorUnroll; ++u) {
      float m = fmaxf(fmaxf(x[u].x, x[u].y), fmaxf(x[u].z, x[u].w));  // NaN ignored (it is never selected)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 4));
      const int run = r0 + u * kWarps * 4;
      if (part == 0 && run < runs) maxima[run] = selection_key(m);
    }
  }
  __syncthreads();
  const uint32_t kth = cuda::block_select_topk<kTopkThreads>(maxima, nullptr, 0, runs, job.width, out_keys, out_ids, sel);
  if (threadIdx.x == 0) job.floor_keys()[row] = kth;
}

// ---- The selection ----------------------------------------------------------------------------

struct ChunkShared {
  uint32_t keys[kChunk];
  int32_t ids[kChunk];           // a pooled row's entry ids (position order is id order)
  uint32_t out_keys[kMaxWidth];  // the selected keys of a one-chunk row (only the ids are kept)
  cuda::SelectShared<kTopkThreads> sel;
};

// Positions [p0, p0 + n) of a pooled row as keys and ids: position p is entry kept[p / bs]·bs +
// p mod bs, ineligible where the block is padding or the entry lies past the row.
__device__ void load_pooled(const Job& job, int64_t row, int64_t p0, int n, ChunkShared& sm) {
  const int32_t* kept = job.kept + row * job.nb;
  const float* v = job.v + row * job.size;
  for (int i = threadIdx.x; i < n; i += kTopkThreads) {
    const int64_t p = p0 + i;
    const int32_t block = kept[p / job.bs];
    const int64_t id = block < 0 ? -1 : int64_t{block} * job.bs + p % job.bs;
    const bool in = id >= 0 && id < job.size;
    sm.keys[i] = in ? selection_key(v[id]) : 0u;
    sm.ids[i] = in ? static_cast<int32_t>(id) : -1;
  }
}

// Blocks of each step for a job: 1 (chunks), 2 (groups), 3 (the merge); none for a compacted job.
__host__ __device__ int64_t chunk_blocks_of(bool hints, const Job& j) { return compacted(hints, j) ? 0 : j.rows * j.chunks(); }
__host__ __device__ int64_t group_blocks_of(bool hints, const Job& j) {
  return !compacted(hints, j) && j.chunks() > kGroup ? j.rows * j.groups() : 0;
}
__host__ __device__ int64_t merge_rows_of(bool hints, const Job& j) { return !compacted(hints, j) && j.chunks() > 1 ? j.rows : 0; }

__global__ void __launch_bounds__(kTopkThreads)
    topk_chunk_kernel(const __grid_constant__ dk::TopkBatch t, const __grid_constant__ JobStarts starts) {
  await_previous_kernel();
  __shared__ ChunkShared sm;
  int64_t b = blockIdx.x;
  const Job job = job_of_block(t, starts, b);
  const int64_t row = b / job.chunks(), chunk = b % job.chunks(), p0 = chunk * kChunk;
  if (job.row_done(row)) return;
  const int n = static_cast<int>(job.length() - p0 < kChunk ? job.length() - p0 : kChunk);
  const bool pooled = job.pooled();
  if (pooled) {
    load_pooled(job, row, p0, n, sm);
  } else {
    const float* scores = job.v + row * job.size + p0;
    for (int i = threadIdx.x; i < n; i += kTopkThreads) sm.keys[i] = selection_key(scores[i]);
  }
  const uint32_t floor = floor_key(t, job, row);
  __syncthreads();
  const int32_t* ids = pooled ? sm.ids : nullptr;
  if (job.chunks() == 1) {
    cuda::block_select_topk<kTopkThreads>(sm.keys, ids, 0, n, job.width, sm.out_keys, job.out + row * job.width,
                                          sm.sel, floor);
    return;
  }
  const int64_t at = (row * job.chunks() + chunk) * job.width;
  cuda::block_select_topk<kTopkThreads>(sm.keys, ids, p0, n, job.width, job.candidate_keys() + at,
                                        job.candidate_ids() + at, sm.sel, floor);
}

// Block b of the group kernel: the (row, group) pairs of the jobs of more than kGroup chunks, one
// job after another, row-major.
__global__ void __launch_bounds__(kTopkThreads)
    topk_group_kernel(const __grid_constant__ dk::TopkBatch t, const __grid_constant__ JobStarts starts) {
  await_previous_kernel();
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t b = blockIdx.x;
  const Job job = job_of_block(t, starts, b);
  const int64_t chunks = job.chunks(), groups = job.groups(), row = b / groups, group = b % groups;
  if (job.row_done(row)) return;
  const int64_t first = group * kGroup, count = min(kGroup, chunks - first);
  const int64_t at = (row * chunks + first) * job.width, out = (row * groups + group) * job.width;
  cuda::block_select_topk<kTopkThreads>(job.candidate_keys() + at, job.candidate_ids() + at, 0,
                                        static_cast<int>(count * job.width), job.width, job.group_keys() + out,
                                        job.group_ids() + out, sel, floor_key(t, job, row));
}

// Block b of the merge kernel: the rows of the jobs of more than one chunk, one job after another.
__global__ void __launch_bounds__(kTopkThreads)
    topk_merge_kernel(const __grid_constant__ dk::TopkBatch t, const __grid_constant__ JobStarts starts) {
  await_previous_kernel();
  __shared__ uint32_t out_keys[kMaxWidth];
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t row = blockIdx.x;
  const Job job = job_of_block(t, starts, row);
  if (job.row_done(row)) return;
  const bool grouped = job.chunks() > kGroup;
  const int64_t list = (grouped ? job.groups() : job.chunks()) * job.width, at = row * list;
  cuda::block_select_topk<kTopkThreads>((grouped ? job.group_keys() : job.candidate_keys()) + at,
                                        (grouped ? job.group_ids() : job.candidate_ids()) + at, 0,
                                        static_cast<int>(list), job.width, out_keys, job.out + row * job.width, sel,
                                        floor_key(t, job, row));
}

// ---- Rows above a floor: compaction, then a selection a row -------------------------------------

constexpr int kCompactThreads = 256;
constexpr int kRounds = 4;  // float4 loads a lane: a warp's 512 consecutive entries in four rounds
static_assert(kCompactThreads * kRounds * 4 == kChunk, "a block streams one chunk");
constexpr int kListMax = 16384;  // candidates a row's gather holds in shared memory (128 KB)

// A row's scores read where they lie, as selection keys (a compact block's chunk with more than
// `width` keys above its floor selects from them as step 1 does from shared memory).
struct FloatKeys {
  const float* v;
  __device__ uint32_t operator[](int i) const { return selection_key(v[i]); }
};

// The compacted jobs of a unit, worked out on the host (the kernels' blocks would otherwise each walk
// every job's shape to find their own: up to 64 jobs of 64-bit arithmetic a block): job i of them is
// t.jobs[job[i]], of chunks[i] chunks a row, its (row, chunk) pairs [first[i], first[i + 1]) of the
// compaction's `total`, its rows [first_row[i], first_row[i + 1]) of the gather's.
struct CompactPlan {
  int n = 0;
  int job[dk::TopkBatch::kMax];
  uint32_t chunks[dk::TopkBatch::kMax];
  int64_t first[dk::TopkBatch::kMax + 1], first_row[dk::TopkBatch::kMax + 1];
  int64_t total = 0;
};

// A chunk's scores and its row's floor, loaded a chunk ahead of their compaction.
struct PendingChunk {
  int j;         // index into t.jobs
  int64_t row, chunk;
  float x[kRounds][4];
  uint32_t floor;
  bool done;  // the row is done (Job::done): nothing loaded, nothing to compact
};

// Chunk x of the plan (x < total) with its loads issued: warp w takes entries [512w, 512w + 512) of
// the chunk, lane l entries 128i + 4l … 128i + 4l + 3 in round i (coalesced 16-byte loads where the
// chunk is whole and aligned; −inf past the row).
__device__ PendingChunk fetch_chunk(const dk::TopkBatch& t, const CompactPlan& p, int64_t x) {
  const int i = launch_entry(p.first, p.n, x);
  PendingChunk c;
  c.j = p.job[i];
  const Job& job = t.jobs[c.j];
  const uint32_t local = static_cast<uint32_t>(x - p.first[i]);  // (< 2^31: launch_chain checks)
  c.row = local / p.chunks[i];
  c.chunk = local % p.chunks[i];
  c.done = job.row_done(c.row);
  if (c.done) return c;
  const int64_t p0 = c.chunk * kChunk;
  const int n = static_cast<int>(job.size - p0 < kChunk ? job.size - p0 : kChunk);
  const float* v = job.v + c.row * job.size + p0;
  const int first = threadIdx.x / 32 * 512 + 4 * (threadIdx.x % 32);
  const bool whole = n == kChunk && (reinterpret_cast<uintptr_t>(v) & 15) == 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int at = first + 128 * r;
    if (whole) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(v + at));
      c.x[r][0] = f.x, c.x[r][1] = f.y, c.x[r][2] = f.z, c.x[r][3] = f.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) c.x[r][e] = at + e < n ? v[at + e] : -INFINITY;
    }
  }
  c.floor = floor_key(t, job, c.row);
  return c;
}

// One chunk's compaction: its keys at or above the row's floor, in list order, to the chunk's slots
// (their count to chunk_counts), or its best `width` of them where more pass (then `width`). One
// scan of four packed byte counts places every kept key (a round's count a lane ≤ 4, a warp's ≤
// 128). `buf`: the block scan's buffer, alternating between calls. All threads call it.
__device__ void compact_chunk(const dk::TopkBatch& t, const PendingChunk& c, cuda::SelectShared<kCompactThreads>& sel,
                              int buf) {
  const Job& job = t.jobs[c.j];
  const int lane = threadIdx.x % 32;
  const int first = threadIdx.x / 32 * 512 + 4 * lane;
  const uint32_t lo = c.floor > cuda::kIneligibleKey ? c.floor : cuda::kIneligibleKey + 1;
  uint32_t kv[kRounds][4];
  uint32_t packed = 0;  // round r's count of kept keys in byte r
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    unsigned n = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      kv[r][e] = selection_key(c.x[r][e]);
      n += kv[r][e] >= lo ? 1u : 0u;
    }
    packed |= n << (8 * r);
  }
  uint32_t inc = packed;  // the warp's inclusive scan of the packed counts (bytes never carry)
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += y;
  }
  const uint32_t rounds = __shfl_sync(0xffffffffu, inc, 31);  // the warp's count a round
  const uint32_t warp_kept = (rounds & 0xFF) + (rounds >> 8 & 0xFF) + (rounds >> 16 & 0xFF) + (rounds >> 24);
  uint32_t total;
  const uint32_t warp_at = cuda::block_exclusive_scan<kCompactThreads>(lane == 0 ? warp_kept : 0u, sel, buf, &total);
  const int64_t chunks = job.chunks(), p0 = c.chunk * kChunk, slot = (c.row * chunks + c.chunk) * job.width;
  uint32_t* keys = job.candidate_keys() + slot;
  int32_t* ids = job.candidate_ids() + slot;
  int32_t* count = job.chunk_counts() + c.row * chunks + c.chunk;
  if (total <= static_cast<uint32_t>(job.width)) {  // block-uniform: every kept key goes, in list order
    int at = static_cast<int>(__shfl_sync(0xffffffffu, warp_at, 0));
    const uint32_t before = inc - packed;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      int pos = at + static_cast<int>(before >> (8 * r) & 0xFF);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (kv[r][e] < lo) continue;
        keys[pos] = kv[r][e];
        ids[pos] = static_cast<int32_t>(p0 + first + 128 * r + e);
        ++pos;
      }
      at += static_cast<int>(rounds >> (8 * r) & 0xFF);
    }
    if (threadIdx.x == 0) *count = static_cast<int32_t>(total);
    return;
  }
  // More than `width` pass: step 1's selection, from the scores where they lie. (Its first barrier
  // comes before it touches what the scan used; it ends at a barrier.)
  const int n = static_cast<int>(job.size - p0 < kChunk ? job.size - p0 : kChunk);
  cuda::block_select_topk<kCompactThreads>(FloatKeys{job.v + c.row * job.size + p0}, nullptr, p0, n, job.width, keys,
                                           ids, sel, c.floor);
  if (threadIdx.x == 0) *count = job.width;
}

// The compaction as one wave of blocks over the plan's (row, chunk) pairs, each block's next chunk
// loaded while it compacts the current one (a block a chunk spent most of its time waiting on its
// loads: 45 µs for the 32 MB of a 16 × 512K chain, 0.7 TB/s, session 47's first call).
__global__ void __launch_bounds__(kCompactThreads, 3)
    topk_compact_kernel(const __grid_constant__ dk::TopkBatch t, const __grid_constant__ CompactPlan p) {
  await_previous_kernel();
  __shared__ cuda::SelectShared<kCompactThreads> sel;
  int64_t x = blockIdx.x;
  if (x >= p.total) return;
  PendingChunk cur = fetch_chunk(t, p, x);
  for (int buf = 0;;) {
    const int64_t next = x + gridDim.x;
    PendingChunk ahead;
    if (next < p.total) ahead = fetch_chunk(t, p, next);  // (block-uniform)
    if (!cur.done) {  // (block-uniform; the scan's buffer alternates between the chunks compacted)
      compact_chunk(t, cur, sel, buf);
      buf ^= 1;
    }
    if (next >= p.total) break;
    cur = ahead;
    x = next;
  }
}

// Candidates [x0, x0 + kTopkThreads·kGatherLoads) of a round of `used` chunks (chunk w's at[w] … in
// the round's list; at[] ascending) copied from the chunks' slots to the list, kGatherLoads a thread,
// every load issued before any store: a candidate finds its chunk by a binary search of at[] (the
// last chunk starting at or before it: a chunk that left none starts where the next one does).
constexpr int kGatherLoads = 4;
__device__ __forceinline__ void gather_round(int x0, int n, int used, const int* at, const uint32_t* keys,
                                             const int32_t* ids, int width, uint32_t* list_keys, int32_t* list_ids) {
  uint32_t k[kGatherLoads];
  int32_t id[kGatherLoads];
#pragma unroll
  for (int u = 0; u < kGatherLoads; ++u) {
    const int x = x0 + u * kTopkThreads + static_cast<int>(threadIdx.x);
    if (x >= n) continue;
    int lo = 0, hi = used - 1;  // the last w with at[w] ≤ x
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (at[mid] <= x) lo = mid; else hi = mid - 1;
    }
    const int64_t from = int64_t{lo} * width + (x - at[lo]);
    k[u] = keys[from];
    id[u] = ids[from];
  }
#pragma unroll
  for (int u = 0; u < kGatherLoads; ++u) {
    const int x = x0 + u * kTopkThreads + static_cast<int>(threadIdx.x);
    if (x < n) list_keys[x] = k[u], list_ids[x] = id[u];
  }
}

// A block per row of the compacted jobs: the chunks' candidates gathered in list order (chunk after
// chunk) into shared memory, and the row's selection from them. A row whose chunks left more than
// kListMax (a floor far below its k-th: none, or many keys equal to it) pads each chunk's slots with
// ineligible keys and selects over all of them where they lie, as step 3 without groups.
__global__ void __launch_bounds__(kTopkThreads)
    topk_gather_kernel(const __grid_constant__ dk::TopkBatch t, const __grid_constant__ CompactPlan p) {
  await_previous_kernel();
  extern __shared__ uint32_t list_keys[];  // [kListMax], then the ids
  int32_t* list_ids = reinterpret_cast<int32_t*>(list_keys + kListMax);
  __shared__ uint32_t out_keys[kMaxWidth];
  __shared__ int at_of[kTopkThreads];
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t row = blockIdx.x;
  const int i = launch_entry(p.first_row, p.n, row);
  const Job& job = t.jobs[p.job[i]];
  row -= p.first_row[i];
  if (job.row_done(row)) return;
  const int64_t chunks = p.chunks[i];
  const int32_t* counts = job.chunk_counts() + row * chunks;
  const uint32_t* cand_keys = job.candidate_keys() + row * chunks * job.width;
  const int32_t* cand_ids = job.candidate_ids() + row * chunks * job.width;
  const uint32_t floor = floor_key(t, job, row);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int buf = 0;
  int64_t listed = 0;  // the candidates of the chunks before this round
  for (int64_t c0 = 0; c0 < chunks; c0 += kTopkThreads) {
    const int64_t c = c0 + tid;
    const int cnt = c < chunks ? counts[c] : 0;
    uint32_t round;
    const uint32_t before = cuda::block_exclusive_scan<kTopkThreads>(static_cast<uint32_t>(cnt), sel, buf, &round);
    buf ^= 1;
    if (listed + round <= kListMax) {  // block-uniform
      at_of[tid] = static_cast<int>(before);  // (within the round)
      __syncthreads();
      const int used = static_cast<int>(chunks - c0 < kTopkThreads ? chunks - c0 : kTopkThreads);
      for (int x0 = 0; x0 < static_cast<int>(round); x0 += kTopkThreads * kGatherLoads)
        gather_round(x0, static_cast<int>(round), used, at_of, cand_keys + c0 * job.width,
                     cand_ids + c0 * job.width, job.width, list_keys + listed, list_ids + listed);
      __syncthreads();  // (at_of rewritten next round)
    }
    listed += round;
  }
  int32_t* out = job.out + row * job.width;
  if (listed <= kListMax) {
    cuda::block_select_topk<kTopkThreads>(list_keys, list_ids, 0, static_cast<int>(listed), job.width, out_keys, out,
                                          sel, floor);
    return;
  }
  uint32_t* pad = job.candidate_keys() + row * chunks * job.width;
  for (int64_t c = warp; c < chunks; c += kTopkThreads / 32)
    for (int i = counts[c] + lane; i < job.width; i += 32) pad[c * job.width + i] = 0u;
  __syncthreads();  // (the block's own global writes, visible to it after the barrier)
  cuda::block_select_topk<kTopkThreads>(cand_keys, cand_ids, 0, static_cast<int>(chunks * job.width), job.width,
                                        out_keys, out, sel, floor);
}

constexpr size_t kGatherShared = size_t{kListMax} * 8;


}  // namespace

bool launch_chain(const dk::TopkBatch& unit, Stream s) {
  dk::TopkBatch t = unit;
  for (int j = 0; j < t.n && !t.hints; ++j) t.jobs[j].kept = nullptr, t.jobs[j].floor = nullptr, t.jobs[j].done = nullptr;
  JobStarts chunk_blocks, group_blocks, merge_rows, sample_rows;
  int64_t compact_blocks = 0, gather_rows = 0;
  CompactPlan plan;
  for (int j = 0; j < t.n; ++j) {
    const Job& job = t.jobs[j];
    if (job.rows == 0) continue;
    if (job.rows < 0 || job.size < 1 || job.width < 1 || job.width > kMaxWidth ||
        job.chunks() * job.width > (int64_t{1} << 30) || (job.kept && (job.nb < 0 || job.bs < 0)))
      return false;
    chunk_blocks.add(j, chunk_blocks_of(t.hints, job));
    group_blocks.add(j, group_blocks_of(t.hints, job));
    merge_rows.add(j, merge_rows_of(t.hints, job));
    if (compacted(t.hints, job)) {
      plan.job[plan.n] = j;
      plan.chunks[plan.n] = static_cast<uint32_t>(job.chunks());
      plan.first[plan.n] = compact_blocks;
      plan.first_row[plan.n++] = gather_rows;
      compact_blocks += job.rows * job.chunks();
      gather_rows += job.rows;
    }
    sample_rows.add(j, t.hints && job.sampled() ? job.rows : 0);
  }
  // (nothing to do: neither path launches)
  const int64_t chunks = chunk_blocks.total();
  if (chunks + compact_blocks == 0 || chunks > 0x7FFFFFFF || compact_blocks > 0x7FFFFFFF) return false;
  plan.first[plan.n] = plan.total = compact_blocks;
  plan.first_row[plan.n] = gather_rows;
  if (gather_rows > 0 && cudaFuncSetAttribute(&topk_gather_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(kGatherShared)) != cudaSuccess)
    return false;
  const auto grid = [](const JobStarts& starts) { return static_cast<unsigned>(starts.total()); };
  if (sample_rows.n > 0) launch_kernel(&topk_floor_kernel, grid(sample_rows), kTopkThreads, 0, s, t, sample_rows);
  if (chunk_blocks.n > 0) launch_kernel(&topk_chunk_kernel, grid(chunk_blocks), kTopkThreads, 0, s, t, chunk_blocks);
  if (group_blocks.n > 0) launch_kernel(&topk_group_kernel, grid(group_blocks), kTopkThreads, 0, s, t, group_blocks);
  if (merge_rows.n > 0) launch_kernel(&topk_merge_kernel, grid(merge_rows), kTopkThreads, 0, s, t, merge_rows);
  if (compact_blocks > 0) {
    const int64_t wave = resident_blocks(&topk_compact_kernel, kCompactThreads, 1056);  // (132 SMs × 8 where unknown)
    launch_kernel(&topk_compact_kernel, static_cast<unsigned>(std::min(compact_blocks, wave)), kCompactThreads, 0, s, t,
                  plan);
  }
  if (gather_rows > 0)
    launch_kernel(&topk_gather_kernel, static_cast<unsigned>(gather_rows), kTopkThreads, kGatherShared, s, t, plan);
  return true;
}

}  // namespace dsv41::fast
