// Wall time of a CPU forward by step, and how the thread pool spends it (issue 13: where a
// batch-1 decode token goes besides streaming weights). Opt-in diagnostics: a StepProfile is
// borrowed by CpuExec::profile (set from ModelLoadOptions::profile; `dsv41 bench --profile`),
// and with no profile attached nothing reads the clock. One caller at a time (the CPU backend's
// thread), like the pool it observes.
#pragma once

#include <chrono>
#include <cstdint>

namespace dsv41 {

// The backend steps of a layer walk (backends/cpu/cpu_backend.h) and, inside the FFN, the MoE's
// parts. kMoe* are nested inside kFfn, kIndexer and kSparseAttention inside kIndexAttend (their
// time is counted in both; the nested ones only where the caller runs them, not in pool jobs).
enum class StepPhase : uint8_t {
  kEngram,
  kAttentionInput,     // mHC coefficients + collapse + norm
  kProjections,        // wq_a, wq_b, wkv (+ norms, RoPE)
  kCompress,           // compressor step + publish
  kIndexAttend,        // indexer queries, scores, top-k, sparse sink attention
  kAttentionOutput,    // wo_a, wo_b, mHC expand
  kFfn,                // mHC + norm + MoE + expand
  kMoeRoute,           // inside kFfn: router product and selection
  kMoeExperts,         // inside kFfn: the routed and shared experts
  kIndexer,            // inside kIndexAttend: index queries, scores, top-k
  kSparseAttention,    // inside kIndexAttend: sparse sink attention
  kLogits,             // final collapse, norm, head
  kCount
};
const char* step_phase_name(StepPhase p);

struct StepProfile {
  double seconds[static_cast<int>(StepPhase::kCount)] = {};
  int64_t calls[static_cast<int>(StepPhase::kCount)] = {};
  // Thread-pool jobs (CpuExec::parallel_for and parallel_items that reached the pool): their
  // count, wall time, and the time the caller spent waiting at the join after its own chunks
  // ran out (the fork/join idle of a short or uneven job).
  int64_t pool_jobs = 0;
  double pool_seconds = 0;
  double join_wait_seconds = 0;

  void reset() { *this = StepProfile{}; }
};

// Adds the wall time of its scope to profile->seconds[phase]; no-op for a null profile.
class StepScope {
 public:
  StepScope(StepProfile* profile, StepPhase phase) : profile_(profile), phase_(phase) {
    if (profile_) t0_ = std::chrono::steady_clock::now();
  }
  ~StepScope() {
    if (!profile_) return;
    const int i = static_cast<int>(phase_);
    profile_->seconds[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    ++profile_->calls[i];
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  StepProfile* profile_;
  StepPhase phase_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace dsv41
