// Continuous batching over several ranks (issue 17, docs/PARALLEL.md): one Scheduler per rank of a
// RankGroup, each with its own requests and sequences (attention data parallelism), all stepped in
// lockstep so that every rank makes each step's MoE exchanges (expert parallelism): a rank with
// nothing to run takes part with an empty forward. Requests go to the rank holding the fewest
// in flight (queued or running; ties: the lowest), so a request's tokens do not depend on the
// number of ranks: each rank's engine computes what one engine holding every sequence computes,
// bit for bit.
//
// One forward per rank per round: a Scheduler step runs at most one Engine::forward (DSpark's
// drafts run the rank's own replicated drafter, its rollbacks touch only the rank's sequences; a
// round that breaks the rule is reported by step()). The prefix cache is not driven here
// (serve_turn's imports forward outside a step). The serving loop drives it as a Batching
// (runtime/batching.h): on_token's callback runs on the ranks' threads, one call at a time.
// Not thread-safe: one thread drives it (each round runs the ranks on their own threads).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/status.h"
#include "runtime/batching.h"
#include "runtime/rank_group.h"
#include "runtime/scheduler.h"

namespace dsv41 {

class RankScheduler final : public Batching {
 public:
  // group is borrowed and must outlive the scheduler.
  static Result<std::unique_ptr<RankScheduler>> create(RankGroup& group, const SchedulerOptions& options);

  // Queues a request on the rank with the fewest requests in flight; returns its ticket.
  int64_t submit(GenerationRequest request) override;
  bool cancel(int64_t ticket, FinishReason reason = FinishReason::kCancelled) override;
  bool fail(int64_t ticket, Status status) override;
  // One round: every rank's scheduler steps at once (an idle rank runs an empty forward). Returns
  // false when no rank had work left. An error here is a failed device binding (RankGroup) or a
  // broken lockstep (a step that ran more than one forward), reported rather than left to hang a
  // later exchange.
  Result<bool> step() override;
  std::optional<GenerationResult> take(int64_t ticket) override;
  int active() const override;
  int64_t queued() const override;
  DsparkStats dspark_totals() const override { return dspark_stats(); }
  PoolStats pool_stats() const override;
  void on_token(Scheduler::TokenCallback callback) override;

  int rank_of(int64_t ticket) const { return tickets_[static_cast<size_t>(ticket)].rank; }
  // DSpark's counts summed over the ranks (DsparkStats::add), and the ranks' engines' time feeding
  // the drafters' rings.
  DsparkStats dspark_stats() const;
  double draft_feed_ms() const;

 private:
  RankScheduler() = default;
  struct Ticket {
    int rank = 0;
    int64_t ticket = -1;  // in that rank's scheduler
  };
  const Ticket* find(int64_t ticket) const;
  RankGroup* group_ = nullptr;
  std::vector<std::unique_ptr<Scheduler>> schedulers_;
  std::vector<Ticket> tickets_;
  // Per rank: its scheduler's ticket t is tickets_[global_[rank][t]] (they count from 0 there).
  std::vector<std::vector<int64_t>> global_;
  Scheduler::TokenCallback on_token_;
  std::mutex on_token_mu_;  // the ranks' threads call on_token_ one at a time
};

}  // namespace dsv41
