// Which implementation the model blocks run (mHC, Engram, compressor, and the cache-record
// unpacking of cache/records.h; system spec: CPU forward pass): the fast path (AVX2/FMA inner
// loops in kernels/cpu/*_avx2.cpp, threaded over tokens on base/thread_pool) when the CPU has
// AVX2 and FMA, else the plain scalar reference.
// The reference can be forced for a whole process with DSV41_FORCE_SCALAR=1 in the environment
// (read once, at the first query), or by set_force_scalar() (tests, benchmarks).
// The GEMM and attention kernels keep their own dispatch (gemm.h, attention_kernels.h).
#pragma once

#include <cstdint>
#include <functional>

namespace dsv41 {

// True when the CPU reports both AVX2 and FMA.
bool cpu_has_avx2_fma();

// True when the blocks take their fast path: AVX2+FMA present and scalar not forced.
bool fast_blocks_enabled();

// Forces the scalar references (true) or returns to the CPU/environment choice (false).
// Call it between forward passes, never while one is running.
void set_force_scalar(bool force);

// Calls fn(begin, end) over [0, items) on default_pool() (base/thread_pool.h), in chunks of whole
// items big enough (≈ 64K units of `work_per_item` each) to pay for waking the pool; runs inline
// when the whole job is smaller. For the fast paths' per-token loops: items must be independent,
// so the result never depends on the chunking or the thread count.
void parallel_items(int64_t items, int64_t work_per_item, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace dsv41
