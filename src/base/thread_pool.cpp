// ThreadPool (see thread_pool.h): workers sleep on a condition variable between jobs and pull
// fixed chunks from an atomic counter; the caller pulls chunks too, then waits for the workers.
// A job of c chunks wakes at most c − 1 workers (one slot each): a 16-thread pool running a
// 2-chunk product must not wake, and then wait for, 15 threads — on small models that cost more
// than the product (docs/BENCHMARKS.md, batched decode on 16 cores).
#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace dsv41 {

namespace {
// True on a thread while it runs chunks of some pool: a nested parallel_for runs inline so a
// worker never waits on the pool it belongs to.
thread_local bool t_inside_pool = false;

// How long a worker spins for the next job before sleeping on the condition variable, and the
// caller for the workers to leave a job before blocking. A decode token's jobs come every few to
// a few hundred µs, most gaps between them are under 20 µs (the norms, copies and additions the
// caller runs alone), and a futex wake-up of a thread whose vCPU went idle costs ≈ 30–40 µs on
// the 2-vCPU VM (measured per job: the worker started that late in every job of a token, so
// the short MoE regions ran at one thread's speed; docs/BENCHMARKS.md, issue 13). So every pool
// spins briefly by default — enough to bridge those gaps and a last block at the join, little
// enough that an oversubscribed machine loses at most about a gap's time per job — and long
// with `spin` (ThreadPool(n, true), `--pool-spin`).
constexpr auto kWorkerSpinShort = std::chrono::microseconds(100);
constexpr auto kJoinSpinShort = std::chrono::microseconds(100);
constexpr auto kWorkerSpinLong = std::chrono::microseconds(300);
constexpr auto kJoinSpinLong = std::chrono::microseconds(1000);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A spin round (64 pauses, ≈ 1 µs) that took longer than this lost the core to another thread.
constexpr auto kContendedRound = std::chrono::microseconds(50);
// Jobs a worker sleeps through without spinning after it lost its core while spinning.
constexpr int kContendedBackoffJobs = 64;

enum class SpinEnd { kDone, kTimeout, kContended };

// Spins until done() or `limit` has passed. Between rounds of pauses it yields the core: on a
// quiet machine that returns at once, on an oversubscribed one it lets a thread waiting for this
// core run — often the very thread this one waits for (a pool's caller and worker sharing one
// core). A round that took much longer than its pauses means this thread was off its core: the
// machine has more runnable threads than cores, where spinning only takes time slices the work
// needs (docs/BENCHMARKS.md, issue 13), so the spin gives up (kContended) and the caller backs off.
template <typename Done>
SpinEnd spin_until(Done done, std::chrono::microseconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  auto last = t0;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return SpinEnd::kDone;
      cpu_relax();
    }
    const auto t = std::chrono::steady_clock::now();
    if (done()) return SpinEnd::kDone;
    if (t - last > kContendedRound) return SpinEnd::kContended;
    if (t - t0 > limit) return SpinEnd::kTimeout;
    last = t;
    std::this_thread::yield();
  }
}
}  // namespace

bool ThreadPool::inside_job() { return t_inside_pool; }

ThreadPool::ThreadPool(int num_threads, bool spin) : spin_(spin) {
  for (int t = 1; t < num_threads; ++t) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::run_chunks() {
  const bool was_inside = t_inside_pool;
  t_inside_pool = true;
  for (;;) {
    const int64_t k = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (k >= num_chunks_) break;
    const int64_t begin = k * grain_;
    const int64_t end = std::min(n_, begin + grain_);
    (*fn_)(begin, end);
  }
  t_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  int backoff = 0;  // jobs left to sleep through without spinning (the machine was oversubscribed)
  for (;;) {
    if (backoff > 0) {
      --backoff;
    } else if (spin_until([&] { return published_generation_.load(std::memory_order_acquire) != seen; },
                          spin_ ? kWorkerSpinLong : kWorkerSpinShort) == SpinEnd::kContended) {
      backoff = kContendedBackoffJobs;
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      // Woken late, or by another job's notification: join only while the job has a free slot.
      if (slots_ == 0) continue;
      --slots_;
      ++busy_workers_;
      active_workers_.fetch_add(1, std::memory_order_relaxed);
    }
    run_chunks();
    active_workers_.fetch_sub(1, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_workers_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> fn,
                              double* join_wait_seconds) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t num_chunks = (n + grain - 1) / grain;
  // One chunk, no workers, or a nested call: run inline with the same chunk boundaries.
  if (num_chunks == 1 || workers_.empty() || t_inside_pool) {
    for (int64_t begin = 0; begin < n; begin += grain) fn(begin, std::min(n, begin + grain));
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  int wakes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    num_chunks_ = num_chunks;
    next_chunk_.store(0, std::memory_order_relaxed);
    slots_ = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(workers_.size()), num_chunks - 1));
    ++generation_;
    published_generation_.store(generation_, std::memory_order_release);
    wakes = slots_;
  }
  for (int i = 0; i < wakes; ++i) wake_.notify_one();
  run_chunks();
  const auto t_join = join_wait_seconds ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  // Workers that joined are usually a few blocks from done: spin for them before blocking (a
  // late joiner is still handled below, under the lock).
  spin_until([&] { return active_workers_.load(std::memory_order_acquire) == 0; },
             spin_ ? kJoinSpinLong : kJoinSpinShort);
  // Close the job to workers still on their way (every chunk is taken), then wait for those that
  // joined to leave it before fn_ (the caller's object) goes out of scope.
  std::unique_lock<std::mutex> lock(mu_);
  slots_ = 0;
  done_.wait(lock, [&] { return busy_workers_ == 0; });
  fn_ = nullptr;
  if (join_wait_seconds)
    *join_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_join).count();
}

int hardware_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

}  // namespace dsv41
