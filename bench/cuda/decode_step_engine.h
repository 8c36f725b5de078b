// The kernel-level decode step on the device backend's own kernels (decode_step_engine.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "bench/cuda/decode_step_common.cuh"

namespace dsv41::step_bench {

// One decode step of B sequences at context C as the engine runs it (the same geometry, plan and
// records as run_one's standalone kernels), timed as a CUDA graph: median of `iters` replays.
// early: kernels placed before the kernel they follow has ended (CudaExec's default).
// refine: the layers without a pool by filter and refine where it takes them (the backend's way);
// false ("engine-exact"), every score exact first.
// hints: the top-k's pools and floors (CudaExec::set_topk_hints; the same ids), or none.
// warpgroup: filter and refine's fast scores on warpgroup MMAs (CudaExec::set_index_warpgroup; the
// same bits), or each warp's own.
// chain: sequences a filter-and-refine chain (IndexSelectChain) takes, up to its kMax (the
// backend's) — fewer to measure what one launch over a batch-64 layer's rows saves.
struct EngineOptions {
  bool early = true, refine = true, hints = true, warpgroup = false;
  int chain = 64;
};
Result run_engine(int B, int64_t C, int iters, cudaStream_t s, const EngineOptions& o);

}  // namespace dsv41::step_bench
