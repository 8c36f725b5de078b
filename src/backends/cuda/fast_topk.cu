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

// −inf and NaN are never selected (select_topk): both map to the ineligible key. (ordered_key
// alone would rank a positive NaN above +inf.)
__device__ __forceinline__ uint32_t selection_key(float v) { return v > -INFINITY ? cuda::ordered_key(v) : 0u; }

struct ChunkShared {
  uint32_t keys[kChunk];
  uint32_t out_keys[kMaxWidth];  // the selected keys of a one-chunk row (only the ids are kept)
  cuda::SelectShared<kTopkThreads> sel;
};

// Block b of the chunk kernel: jobs' (row, chunk) blocks one job after another, row-major.
struct ChunkPlace {
  int job;
  int64_t row, chunk;
};
__device__ ChunkPlace chunk_place(const dk::TopkBatch& t, int64_t b) {
  int j = 0;
  for (; j + 1 < t.n; ++j) {
    const int64_t blocks = t.jobs[j].rows * t.jobs[j].chunks();
    if (b < blocks) break;
    b -= blocks;
  }
  const int64_t chunks = t.jobs[j].chunks();
  return {j, b / chunks, b % chunks};
}

__global__ void __launch_bounds__(kTopkThreads) topk_chunk_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ ChunkShared sm;
  const ChunkPlace p = chunk_place(t, blockIdx.x);
  const dk::TopkBatch::Job job = t.jobs[p.job];
  const int64_t p0 = p.chunk * kChunk;
  const int n = static_cast<int>(job.size - p0 < kChunk ? job.size - p0 : kChunk);
  const float* scores = job.v + p.row * job.size + p0;
  for (int i = threadIdx.x; i < n; i += kTopkThreads) sm.keys[i] = selection_key(scores[i]);
  __syncthreads();
  if (job.chunks() == 1) {
    cuda::block_select_topk<kTopkThreads>(sm.keys, nullptr, 0, n, job.width, sm.out_keys,
                                          job.out + p.row * job.width, sm.sel);
    return;
  }
  const int64_t at = (p.row * job.chunks() + p.chunk) * job.width;
  cuda::block_select_topk<kTopkThreads>(sm.keys, nullptr, p0, n, job.width, job.candidate_keys() + at,
                                        job.candidate_ids() + at, sm.sel);
}

// Block b of the group kernel: the (row, group) pairs of the jobs of more than kGroup chunks, one
// job after another, row-major.
__global__ void __launch_bounds__(kTopkThreads) topk_group_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t b = blockIdx.x;
  int j = 0;
  for (; j + 1 < t.n; ++j) {
    if (t.jobs[j].chunks() <= kGroup) continue;
    const int64_t blocks = t.jobs[j].rows * t.jobs[j].groups();
    if (b < blocks) break;
    b -= blocks;
  }
  const dk::TopkBatch::Job job = t.jobs[j];
  const int64_t chunks = job.chunks(), groups = job.groups(), row = b / groups, group = b % groups;
  const int64_t first = group * kGroup, count = min(kGroup, chunks - first);
  const int64_t at = (row * chunks + first) * job.width, out = (row * groups + group) * job.width;
  cuda::block_select_topk<kTopkThreads>(job.candidate_keys() + at, job.candidate_ids() + at, 0,
                                        static_cast<int>(count * job.width), job.width, job.group_keys() + out,
                                        job.group_ids() + out, sel);
}

// Block b of the merge kernel: the rows of the jobs of more than one chunk, one job after another.
__global__ void __launch_bounds__(kTopkThreads) topk_merge_kernel(const dk::TopkBatch t) {
  await_previous_kernel();
  __shared__ uint32_t out_keys[kMaxWidth];
  __shared__ cuda::SelectShared<kTopkThreads> sel;
  int64_t row = blockIdx.x;
  int j = 0;
  for (; j + 1 < t.n; ++j) {
    if (t.jobs[j].chunks() == 1) continue;
    if (row < t.jobs[j].rows) break;
    row -= t.jobs[j].rows;
  }
  const dk::TopkBatch::Job job = t.jobs[j];
  const bool grouped = job.chunks() > kGroup;
  const int64_t list = (grouped ? job.groups() : job.chunks()) * job.width, at = row * list;
  cuda::block_select_topk<kTopkThreads>((grouped ? job.group_keys() : job.candidate_keys()) + at,
                                        (grouped ? job.group_ids() : job.candidate_ids()) + at, 0,
                                        static_cast<int>(list), job.width, out_keys, job.out + row * job.width,
                                        sel);
}

}  // namespace

bool launch_chain(const dk::TopkBatch& t, Stream s) {
  int64_t chunk_blocks = 0, group_blocks = 0, merge_blocks = 0;
  for (int j = 0; j < t.n; ++j) {
    const dk::TopkBatch::Job& job = t.jobs[j];
    if (job.rows == 0) continue;
    if (job.rows < 0 || job.size < 1 || job.width < 1 || job.width > kMaxWidth ||
        job.chunks() * job.width > (int64_t{1} << 30))
      return false;
    chunk_blocks += job.rows * job.chunks();
    group_blocks += job.chunks() > kGroup ? job.rows * job.groups() : 0;
    merge_blocks += job.chunks() > 1 ? job.rows : 0;
  }
  if (chunk_blocks == 0 || chunk_blocks > 0x7FFFFFFF) return false;  // (nothing to do: neither path launches)
  launch_kernel(&topk_chunk_kernel, static_cast<unsigned>(chunk_blocks), kTopkThreads, 0, s, t);
  if (group_blocks > 0) launch_kernel(&topk_group_kernel, static_cast<unsigned>(group_blocks), kTopkThreads, 0, s, t);
  if (merge_blocks > 0) launch_kernel(&topk_merge_kernel, static_cast<unsigned>(merge_blocks), kTopkThreads, 0, s, t);
  return true;
}

}  // namespace dsv41::fast
