// The pool the benchmarks run on: every core of the machine, built once per bench process (the
// library has no process-wide pool; a benchmark binary may keep one). Fast paths where the CPU
// has AVX2+FMA, as a model built with default options runs them.
#pragma once

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

inline const CpuExec& bench_exec() {
  static ThreadPool pool(hardware_threads());
  static const CpuExec ex = [] {
    CpuExec e = CpuExec::serial();
    e.pool = &pool;
    return e;
  }();
  return ex;
}

}  // namespace dsv41
