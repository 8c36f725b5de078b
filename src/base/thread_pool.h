// A small fixed thread pool for the CPU kernels (system spec: CPU forward pass, issue 3).
// `parallel_for` cuts [0, n) into chunks of `grain` items at fixed boundaries, hands them out to
// the pool's workers and to the calling thread, and returns when every chunk is done. Chunk
// boundaries depend only on (n, grain), never on the thread count, so a kernel whose per-item
// arithmetic is fixed gives the same bits with 1 or N threads.
// Owns its worker threads (joined in the destructor). Nothing fancy: no work stealing, no nesting
// (a parallel_for called from inside a chunk runs inline on that thread). Workers spin ~100 µs
// before sleeping and the caller as long at the join, yielding between rounds: a decode step runs
// ~60 short jobs back to back, and a sleep/wake round trip (30–40 µs on the VM) can cost as much
// as a short product (issue 13). `spin` lengthens both spins (300 µs / 1 ms; `--pool-spin`),
// which costs an oversubscribed machine the time slices the work needs, so it is opt-in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "base/function_ref.h"

namespace dsv41 {

class ThreadPool {
 public:
  // `num_threads` counts the caller: a pool of N starts N-1 workers. Values < 1 mean 1.
  explicit ThreadPool(int num_threads, bool spin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // True on a thread while it runs chunks of some pool's job (where a parallel_for runs inline).
  static bool inside_job();

  // Calls fn(begin, end) for the chunks [k·grain, min(n, (k+1)·grain)), k = 0.. ceil(n/grain)-1,
  // each exactly once, on some pool thread or the caller. grain < 1 means 1. Blocks until all
  // chunks have run. fn must not throw. One caller at a time per pool (concurrent callers on the
  // same pool are serialised by a mutex, not interleaved). fn is borrowed for the call; nothing
  // is allocated (decode steps call this for every product).
  // join_wait_seconds: when given, the seconds the caller waited at the join after running out of
  // chunks are added to it (a diagnostic, StepProfile; no clock is read without it).
  void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn,
                    double* join_wait_seconds = nullptr);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises parallel_for callers
  std::mutex mu_;       // guards everything below
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // bumped per job; a worker runs each generation once
  int slots_ = 0;            // workers the current job may still take (≤ its chunks − 1)
  int busy_workers_ = 0;     // workers that took a slot and are still inside the job
  bool stop_ = false;
  // Current job (valid while busy_workers_ > 0 or the caller is inside parallel_for).
  const FunctionRef<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, num_chunks_ = 0;
  std::atomic_int64_t next_chunk_{0};
  // Mirrors read without the lock by threads that spin before sleeping (thread_pool.cpp): the
  // latest generation_, and the workers inside the current job.
  std::atomic<uint64_t> published_generation_{0};
  std::atomic_int active_workers_{0};
  bool spin_ = false;
};

// std::thread::hardware_concurrency(), or 1 when it is unknown: the size of a pool asked for
// with 0 threads (ModelLoadOptions::threads, the benchmarks).
int hardware_threads();

}  // namespace dsv41
