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
// every kernel (a chunk with at most `width` keys above it is done after one counting pass instead
// of four), and a long row without one gets a sampled floor first (topk_sample_kernel,
// topk_floor_kernel: the width-th largest of the maxima of disjoint runs of 32 entries).
// The same ids as the simple path, bit for bit (DeviceKernelsCuda.TopkBatchEqualsSelectTopk checks
// both against select_topk, device_kernels_check.h).
#include <cuda_runtime.h>

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

// Row `row`'s floor as a key (0: none): the caller's, else the sampled one, else none.
__device__ __forceinline__ uint32_t floor_key(const dk::TopkBatch& t, const Job& job, int64_t row) {
  if (job.floor) return selection_key(job.floor[row * job.floor_stride]);
  return t.hints && job.sampled() ? job.floor_keys()[row] : 0u;
}

// The job of block b, where job j has blocks(jobs[j]) blocks one job after another; b becomes the
// block's index within its job.
template <class Blocks>
__device__ int job_of_block(const dk::TopkBatch& t, int64_t& b, Blocks blocks) {
  int j = 0;
  for (; j + 1 < t.n; ++j) {
    const int64_t n = blocks(t.jobs[j]);
    if (b < n) break;
    b -= n;
  }
  return j;
}

// ---- Sampled floors ---------------------------------------------------------------------------

__device__ int64_t sampled_rows(const Job& job) { return job.sampled() ? job.rows : 0; }

// A thread per (sampled row, run): the largest key of run i, 32 entries from i·(length / runs).
__global__ void topk_sample_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  int64_t x = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int j = job_of_block(t, x, [](const Job& job) { return sampled_rows(job) * job.samples(); });
  const Job& job = t.jobs[j];
  const int runs = job.samples();
  if (!job.sampled() || x >= job.rows * runs) return;
  const int64_t row = x / runs, run = x % runs;
  const float* v = job.v + row * job.size + run * (job.length() / runs);
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < 32; ++i) m = fmaxf(m, v[i]);  // NaN ignored (it is never selected)
  job.sample_keys()[row * dk::TopkBatch::kSampleRuns + run] = selection_key(m);
}

// A block per sampled row: its floor key, the width-th largest of its runs' maxima (0: fewer).
__global__ void __launch_bounds__(kTopkThreads) topk_floor_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ uint32_t out_keys[kMaxWidth];
  __shared__ int32_t out_ids[kMaxWidth];
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t row = blockIdx.x;
  const Job& job = t.jobs[job_of_block(t, row, sampled_rows)];
  const uint32_t kth = cuda::block_select_topk<kTopkThreads>(job.sample_keys() + row * dk::TopkBatch::kSampleRuns,
                                                             nullptr, 0, job.samples(), job.width, out_keys, out_ids, sel);
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

__global__ void __launch_bounds__(kTopkThreads) topk_chunk_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ ChunkShared sm;
  int64_t b = blockIdx.x;
  const Job job = t.jobs[job_of_block(t, b, [](const Job& j) { return j.rows * j.chunks(); })];
  const int64_t row = b / job.chunks(), chunk = b % job.chunks(), p0 = chunk * kChunk;
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
__global__ void __launch_bounds__(kTopkThreads) topk_group_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t b = blockIdx.x;
  const Job job = t.jobs[job_of_block(t, b, [](const Job& j) { return j.chunks() > kGroup ? j.rows * j.groups() : 0; })];
  const int64_t chunks = job.chunks(), groups = job.groups(), row = b / groups, group = b % groups;
  const int64_t first = group * kGroup, count = min(kGroup, chunks - first);
  const int64_t at = (row * chunks + first) * job.width, out = (row * groups + group) * job.width;
  cuda::block_select_topk<kTopkThreads>(job.candidate_keys() + at, job.candidate_ids() + at, 0,
                                        static_cast<int>(count * job.width), job.width, job.group_keys() + out,
                                        job.group_ids() + out, sel, floor_key(t, job, row));
}

// Block b of the merge kernel: the rows of the jobs of more than one chunk, one job after another.
__global__ void __launch_bounds__(kTopkThreads) topk_merge_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ uint32_t out_keys[kMaxWidth];
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t row = blockIdx.x;
  const Job job = t.jobs[job_of_block(t, row, [](const Job& j) { return j.chunks() > 1 ? j.rows : 0; })];
  const bool grouped = job.chunks() > kGroup;
  const int64_t list = (grouped ? job.groups() : job.chunks()) * job.width, at = row * list;
  cuda::block_select_topk<kTopkThreads>((grouped ? job.group_keys() : job.candidate_keys()) + at,
                                        (grouped ? job.group_ids() : job.candidate_ids()) + at, 0,
                                        static_cast<int>(list), job.width, out_keys, job.out + row * job.width, sel,
                                        floor_key(t, job, row));
}

}  // namespace

bool launch_chain(const dk::TopkBatch& unit, Stream s) {
  dk::TopkBatch t = unit;
  for (int j = 0; j < t.n && !t.hints; ++j) t.jobs[j].kept = nullptr, t.jobs[j].floor = nullptr;
  int64_t chunk_blocks = 0, group_blocks = 0, merge_blocks = 0, sample_rows = 0, sample_threads = 0;
  for (int j = 0; j < t.n; ++j) {
    const Job& job = t.jobs[j];
    if (job.rows == 0) continue;
    if (job.rows < 0 || job.size < 1 || job.width < 1 || job.width > kMaxWidth ||
        job.chunks() * job.width > (int64_t{1} << 30) || (job.kept && (job.nb < 0 || job.bs < 0)))
      return false;
    chunk_blocks += job.rows * job.chunks();
    group_blocks += job.chunks() > kGroup ? job.rows * job.groups() : 0;
    merge_blocks += job.chunks() > 1 ? job.rows : 0;
    const bool sampled = t.hints && job.sampled();
    sample_rows += sampled ? job.rows : 0;
    sample_threads += sampled ? job.rows * job.samples() : 0;
  }
  if (chunk_blocks == 0 || chunk_blocks > 0x7FFFFFFF) return false;  // (nothing to do: neither path launches)
  if (sample_rows > 0) {
    launch_kernel(&topk_sample_kernel, static_cast<unsigned>((sample_threads + 255) / 256), 256, 0, s, t);
    launch_kernel(&topk_floor_kernel, static_cast<unsigned>(sample_rows), kTopkThreads, 0, s, t);
  }
  launch_kernel(&topk_chunk_kernel, static_cast<unsigned>(chunk_blocks), kTopkThreads, 0, s, t);
  if (group_blocks > 0) launch_kernel(&topk_group_kernel, static_cast<unsigned>(group_blocks), kTopkThreads, 0, s, t);
  if (merge_blocks > 0) launch_kernel(&topk_merge_kernel, static_cast<unsigned>(merge_blocks), kTopkThreads, 0, s, t);
  return true;
}

}  // namespace dsv41::fast
