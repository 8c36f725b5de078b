// What a serving loop (server/engine_loop.h) drives: continuous batching over one engine
// (OneEngineBatching, a Scheduler) or over the ranks of a RankGroup (RankScheduler, issue 17),
// behind the calls the loop makes. The requests' tokens are those of a Scheduler either way.
// Not thread-safe: one thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "base/status.h"
#include "engine/engine.h"
#include "runtime/scheduler.h"

namespace dsv41 {

class Batching {
 public:
  virtual ~Batching() = default;
  // Queues a request; returns its ticket.
  virtual int64_t submit(GenerationRequest request) = 0;
  // Scheduler::cancel / Scheduler::fail of the ticket (false when unknown or finished).
  virtual bool cancel(int64_t ticket, FinishReason reason = FinishReason::kCancelled) = 0;
  virtual bool fail(int64_t ticket, Status status) = 0;
  // One step (one round of every rank): false when nothing was left. An error: the step did not
  // run as a whole (a rank's device binding, a broken lockstep); the requests in it cannot go on.
  virtual Result<bool> step() = 0;
  // The result of a finished request (moved out; a second call returns nullopt).
  virtual std::optional<GenerationResult> take(int64_t ticket) = 0;
  virtual int active() const = 0;
  virtual int64_t queued() const = 0;
  // DSpark's counts (DsparkStats::add: counters and times, not the per-step traces).
  virtual DsparkStats dspark_totals() const = 0;
  // The page pools' use, summed over the engines.
  virtual PoolStats pool_stats() const = 0;
  // Scheduler::on_token for every request (with ranks, called from the ranks' threads one at a
  // time, during step()).
  virtual void on_token(Scheduler::TokenCallback callback) = 0;
};

// One engine's Scheduler (borrowed engine, owned scheduler).
class OneEngineBatching final : public Batching {
 public:
  static Result<std::unique_ptr<OneEngineBatching>> create(Engine& engine, const SchedulerOptions& options);
  Scheduler& scheduler() { return *scheduler_; }

  int64_t submit(GenerationRequest request) override { return scheduler_->submit(std::move(request)); }
  bool cancel(int64_t ticket, FinishReason reason) override { return scheduler_->cancel(ticket, reason); }
  bool fail(int64_t ticket, Status status) override { return scheduler_->fail(ticket, std::move(status)); }
  Result<bool> step() override { return scheduler_->step(); }
  std::optional<GenerationResult> take(int64_t ticket) override { return scheduler_->take(ticket); }
  int active() const override { return scheduler_->active(); }
  int64_t queued() const override { return scheduler_->queued(); }
  DsparkStats dspark_totals() const override;
  PoolStats pool_stats() const override { return engine_.pool_stats(); }
  void on_token(Scheduler::TokenCallback callback) override { scheduler_->on_token(std::move(callback)); }

 private:
  OneEngineBatching(Engine& engine, std::unique_ptr<Scheduler> scheduler)
      : engine_(engine), scheduler_(std::move(scheduler)) {}
  Engine& engine_;
  std::unique_ptr<Scheduler> scheduler_;
};

// Pool use of several engines, added (budgets too: 0 — unlimited — stays 0 if any is unlimited).
PoolStats add_pool_stats(const PoolStats& a, const PoolStats& b);

}  // namespace dsv41
