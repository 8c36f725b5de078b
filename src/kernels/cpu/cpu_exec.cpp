// CpuExec (see cpu_exec.h): the CPU check and the pool-or-inline loops.
#include "kernels/cpu/cpu_exec.h"

#include <algorithm>
#include <chrono>

namespace dsv41 {

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

CpuIsa cpu_best_isa() {
  // __builtin_cpu_supports also checks that the OS saves the 512-bit register state (XCR0).
  static const CpuIsa best = !cpu_has_avx2_fma() ? CpuIsa::kPortable
                             : (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
                                 ? CpuIsa::kAvx512
                                 : CpuIsa::kAvx2;
  return best;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable: return "portable";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAmx: return "amx";
  }
  return "?";
}

bool parse_cpu_isa(std::string_view name, CpuIsa* isa) {
  for (CpuIsa i : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAmx})
    if (name == cpu_isa_name(i)) {
      *isa = i;
      return true;
    }
  if (name == "scalar") {  // issue 13's spelling of the portable loops
    *isa = CpuIsa::kPortable;
    return true;
  }
  if (name == "auto") {
    *isa = CpuIsa::kAvx512;
    return true;
  }
  return false;
}

CpuIsa CpuExec::gemm_isa() const { return std::min(isa, cpu_best_isa()); }

bool CpuExec::use_amx() const { return isa == CpuIsa::kAmx && cpu_has_amx(); }

CpuExec CpuExec::serial() {
  CpuExec ex;
  ex.fast = cpu_has_avx2_fma();
  return ex;
}

namespace {

// pool.parallel_for, counted into the profile when there is one.
void run_on_pool(ThreadPool& pool, int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn,
                 StepProfile* profile) {
  // Only the caller's own jobs: a nested call runs inline on a worker (and must not write the
  // profile from two threads).
  if (!profile || (n + grain - 1) / grain < 2 || ThreadPool::inside_job()) return pool.parallel_for(n, grain, fn);
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(n, grain, fn, &profile->join_wait_seconds);
  profile->pool_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++profile->pool_jobs;
}

}  // namespace

bool CpuExec::use_fast() const { return fast && cpu_has_avx2_fma(); }

int CpuExec::threads() const { return pool ? pool->num_threads() : 1; }

void CpuExec::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn) const {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (pool) return run_on_pool(*pool, n, grain, fn, profile);
  // The pool's chunk boundaries, run in order on the caller.
  for (int64_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
}

void CpuExec::parallel_items(int64_t items, int64_t work_per_item,
                             FunctionRef<void(int64_t, int64_t)> fn) const {
  if (items <= 0) return;
  constexpr int64_t kMinChunkWork = int64_t{1} << 16;
  const int64_t grain = std::max<int64_t>(1, kMinChunkWork / std::max<int64_t>(1, work_per_item));
  if (items <= grain || pool == nullptr) return fn(0, items);
  run_on_pool(*pool, items, grain, fn, profile);
}

}  // namespace dsv41
