// Lockstep continuous batching over ranks (see rank_scheduler.h).
#include "runtime/rank_scheduler.h"

#include <algorithm>
#include <string>

namespace dsv41 {

Result<std::unique_ptr<RankScheduler>> RankScheduler::create(RankGroup& group, const SchedulerOptions& options) {
  std::unique_ptr<RankScheduler> s(new RankScheduler());
  s->group_ = &group;
  for (int r = 0; r < group.ranks(); ++r) {
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> one, Scheduler::create(group.engine(r), options));
    // Tokens reach the caller's callback with the caller's ticket, one rank at a time.
    one->on_token([s = s.get(), r](int64_t ticket, int32_t token, std::span<const float> logits) {
      std::lock_guard lock(s->on_token_mu_);
      if (s->on_token_) s->on_token_(s->global_[static_cast<size_t>(r)][static_cast<size_t>(ticket)], token, logits);
    });
    s->schedulers_.push_back(std::move(one));
  }
  s->global_.resize(static_cast<size_t>(group.ranks()));
  return s;
}

void RankScheduler::on_token(Scheduler::TokenCallback callback) {
  std::lock_guard lock(on_token_mu_);
  on_token_ = std::move(callback);
}

int64_t RankScheduler::submit(GenerationRequest request) {
  int rank = 0;
  int64_t fewest = INT64_MAX;
  for (int r = 0; r < group_->ranks(); ++r) {
    const Scheduler& s = *schedulers_[static_cast<size_t>(r)];
    const int64_t in_flight = s.active() + s.queued();
    if (in_flight < fewest) fewest = in_flight, rank = r;
  }
  const int64_t local = schedulers_[static_cast<size_t>(rank)]->submit(std::move(request));
  const int64_t ticket = static_cast<int64_t>(tickets_.size());
  tickets_.push_back({rank, local});
  std::vector<int64_t>& map = global_[static_cast<size_t>(rank)];
  if (static_cast<int64_t>(map.size()) <= local) map.resize(static_cast<size_t>(local) + 1, -1);
  map[static_cast<size_t>(local)] = ticket;
  return ticket;
}

const RankScheduler::Ticket* RankScheduler::find(int64_t ticket) const {
  if (ticket < 0 || ticket >= static_cast<int64_t>(tickets_.size())) return nullptr;
  return &tickets_[static_cast<size_t>(ticket)];
}

bool RankScheduler::cancel(int64_t ticket, FinishReason reason) {
  const Ticket* t = find(ticket);
  return t && schedulers_[static_cast<size_t>(t->rank)]->cancel(t->ticket, reason);
}

bool RankScheduler::fail(int64_t ticket, Status status) {
  const Ticket* t = find(ticket);
  return t && schedulers_[static_cast<size_t>(t->rank)]->fail(t->ticket, std::move(status));
}

Result<bool> RankScheduler::step() {
  const int n = group_->ranks();
  std::vector<char> more(static_cast<size_t>(n), 0);
  std::vector<int64_t> forwards(static_cast<size_t>(n), 0);
  const Status bound = group_->run_bound([&](int r) {
    Engine& engine = group_->engine(r);
    const int64_t before = engine.forward_calls();
    more[r] = schedulers_[static_cast<size_t>(r)]->step();
    // A rank whose scheduler ran no forward (nothing active) still takes part in the exchanges.
    if (engine.forward_calls() == before) engine.forward({});
    forwards[r] = engine.forward_calls() - before;
  });
  DSV41_RETURN_IF_ERROR(bound);
  for (int r = 0; r < n; ++r)
    if (forwards[r] != 1)
      return internal_error("several ranks: rank " + std::to_string(r) + " ran " + std::to_string(forwards[r]) +
                            " forwards in one round (the ranks' exchanges must pair up)");
  // Another round while any rank has work (a rank that reported none runs empty forwards).
  return std::any_of(more.begin(), more.end(), [](char m) { return m != 0; });
}

int RankScheduler::active() const {
  int n = 0;
  for (const auto& s : schedulers_) n += s->active();
  return n;
}

int64_t RankScheduler::queued() const {
  int64_t n = 0;
  for (const auto& s : schedulers_) n += s->queued();
  return n;
}

PoolStats RankScheduler::pool_stats() const {
  PoolStats total = group_->engine(0).pool_stats();
  for (int r = 1; r < group_->ranks(); ++r) total = add_pool_stats(total, group_->engine(r).pool_stats());
  return total;
}

DsparkStats RankScheduler::dspark_stats() const {
  DsparkStats total;
  for (const auto& s : schedulers_) total.add(s->dspark_stats());
  return total;
}

double RankScheduler::draft_feed_ms() const {
  double ms = 0;
  for (int r = 0; r < group_->ranks(); ++r) ms += group_->engine(r).draft_feed_ms();
  return ms;
}

std::optional<GenerationResult> RankScheduler::take(int64_t ticket) {
  const Ticket* t = find(ticket);
  if (!t) return std::nullopt;
  return schedulers_[static_cast<size_t>(t->rank)]->take(t->ticket);
}

}  // namespace dsv41
