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
    s->schedulers_.push_back(std::move(one));
  }
  s->submitted_.assign(static_cast<size_t>(group.ranks()), 0);
  return s;
}

int64_t RankScheduler::submit(GenerationRequest request) {
  const int rank = static_cast<int>(std::min_element(submitted_.begin(), submitted_.end()) - submitted_.begin());
  ++submitted_[static_cast<size_t>(rank)];
  tickets_.push_back({rank, schedulers_[static_cast<size_t>(rank)]->submit(std::move(request))});
  return static_cast<int64_t>(tickets_.size()) - 1;
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
  if (ticket < 0 || ticket >= static_cast<int64_t>(tickets_.size())) return std::nullopt;
  const Ticket& t = tickets_[static_cast<size_t>(ticket)];
  return schedulers_[static_cast<size_t>(t.rank)]->take(t.ticket);
}

}  // namespace dsv41
