// How a CPU kernel or model block runs (system spec: CPU forward pass): on which thread pool, and
// whether the blocks (mHC, Engram, compressor) take their fast paths (AVX2/FMA inner loops in
// kernels/cpu/*_avx2.cpp, threaded over tokens) or their plain scalar references. A plain value
// handed to every dispatching function as its first parameter: nothing here is process-wide, so
// two engines with different pools and paths live side by side in one process.
// The GEMM (gemm.h) picks its inner loop from CPUID alone and only borrows the pool; `fast`
// selects the blocks' path (each block's header says how the two agree).
// Owns nothing: the pool is borrowed.
#pragma once

#include <cstdint>

#include "base/function_ref.h"
#include "base/thread_pool.h"

namespace dsv41 {

// True when the CPU reports both AVX2 and FMA (a constant of the machine, read once).
bool cpu_has_avx2_fma();

struct CpuExec {
  ThreadPool* pool = nullptr;  // borrowed, must outlive every call; null = run inline on the caller
  bool fast = false;           // true: AVX2/FMA fast paths (only honoured when the CPU has AVX2+FMA)

  // No pool; fast iff the CPU has AVX2+FMA (a plain value, no global state).
  static CpuExec serial();
  // fast && cpu_has_avx2_fma().
  bool use_fast() const;
  // pool ? pool->num_threads() : 1.
  int threads() const;
  // Calls fn(begin, end) over [0, items) in chunks of whole items big enough (≈ 64K units of
  // `work_per_item` each) to pay for waking the pool; inline when the whole job is smaller or
  // there is no pool. For the fast paths' per-token loops: items must be independent, so the
  // result never depends on the chunking or the thread count. fn is borrowed for the call; no
  // allocation either way.
  void parallel_items(int64_t items, int64_t work_per_item, FunctionRef<void(int64_t, int64_t)> fn) const;
  // ThreadPool::parallel_for on the pool (same fixed chunk boundaries), or inline without one.
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) const;
};

}  // namespace dsv41
