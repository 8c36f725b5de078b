// N engines of one process with expert parallelism over a loopback group (see rank_group.h).
#include "runtime/rank_group.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "parallel/run_ranks.h"

namespace dsv41 {

Result<std::unique_ptr<RankGroup>> RankGroup::create(const Model& model, const RankGroupOptions& options) {
  const std::vector<const Model*> models(static_cast<size_t>(std::max(options.ranks, 0)), &model);
  return create(models, options);
}

Result<std::unique_ptr<RankGroup>> RankGroup::create(std::span<const Model* const> models,
                                                     const RankGroupOptions& options) {
  if (options.ranks < 1) return invalid_argument("rank group: ranks must be ≥ 1, got " + std::to_string(options.ranks));
  if (options.threads_per_rank < 1)
    return invalid_argument("rank group: threads per rank must be ≥ 1, got " + std::to_string(options.threads_per_rank));
  if (static_cast<int>(models.size()) != options.ranks)
    return invalid_argument("rank group: " + std::to_string(models.size()) + " models for " +
                            std::to_string(options.ranks) + " ranks");
  for (int r = 0; r < options.ranks; ++r) {
    const Model& m = *models[r];
    if (config_fingerprint(m.config()) != config_fingerprint(models[0]->config()))
      return invalid_argument("rank group: rank " + std::to_string(r) + "'s model has another config than rank 0's");
    if (m.expert_ranks() != 1 && (m.expert_ranks() != options.ranks || m.expert_rank() != r))
      return invalid_argument("rank group: rank " + std::to_string(r) + "'s model holds the experts of rank " +
                              std::to_string(m.expert_rank()) + " of " + std::to_string(m.expert_ranks()));
  }
  std::unique_ptr<RankGroup> g(new RankGroup());
  g->bind_ = options.bind_rank_thread;
  std::vector<Communicator*> comms = options.communicators;
  if (comms.empty()) {
    DSV41_ASSIGN_OR_RETURN(g->group_, LoopbackGroup::create(options.ranks, options.timeout));
    for (int r = 0; r < options.ranks; ++r) comms.push_back(&g->group_->communicator(r));
  }
  if (static_cast<int>(comms.size()) != options.ranks)
    return invalid_argument("rank group: " + std::to_string(comms.size()) + " communicators for " +
                            std::to_string(options.ranks) + " ranks");
  for (int r = 0; r < options.ranks; ++r)
    if (!comms[r] || comms[r]->rank() != r || comms[r]->size() != options.ranks)
      return invalid_argument("rank group: communicator " + std::to_string(r) + " is not rank " + std::to_string(r) +
                              " of " + std::to_string(options.ranks));
  if (options.time_exchanges)
    for (int r = 0; r < options.ranks; ++r) {
      g->timed_.push_back(std::make_unique<TimedCommunicator>(*comms[r]));
      comms[r] = g->timed_.back().get();
    }
  g->execs_.reserve(static_cast<size_t>(options.ranks));
  for (int r = 0; r < options.ranks; ++r) {
    g->pools_.push_back(std::make_unique<ThreadPool>(options.threads_per_rank));
    CpuExec ex = models[r]->exec();
    ex.pool = g->pools_.back().get();
    g->execs_.push_back(ex);
  }
  for (int r = 0; r < options.ranks; ++r) {
    const Model& model = *models[r];
    std::unique_ptr<Backend> backend;
    DSV41_RETURN_IF_ERROR(g->bind_thread(r));
    if (options.backend) {
      auto made = options.backend(model, r, comms[r]);
      if (!made.ok()) return made.status().with_context("rank group: rank " + std::to_string(r) + "'s backend");
      backend = std::move(*made);
      if (!backend) return invalid_argument("rank group: no backend for rank " + std::to_string(r));
    } else {
      CpuBackendOptions backend_options;
      backend_options.experts = comms[r];
      backend = std::make_unique<CpuBackend>(model, &g->execs_[static_cast<size_t>(r)], backend_options);
    }
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e,
                           Engine::create(std::move(backend), model.engram_tables(), options.engine));
    g->engines_.push_back(std::move(e));
  }
  return g;
}

RankGroup::~RankGroup() {
  // Each engine (and its backend's device memory) released on its rank's binding (where that
  // fails there is no better place to release it: the error is dropped).
  for (int r = ranks() - 1; r >= 0; --r) {
    (void)bind_thread(r);
    engines_[static_cast<size_t>(r)].reset();
  }
}

Status RankGroup::bind_thread(int rank) const {
  if (!bind_) return ok_status();
  Status st = bind_(rank);
  return st.ok() ? st : st.with_context("rank " + std::to_string(rank) + "'s thread");
}

Status RankGroup::run_bound(FunctionRef<void(int)> fn) const {
  std::vector<Status> bound(static_cast<size_t>(ranks()));
  run_ranks(ranks(), [&](int r) {
    bound[r] = bind_thread(r);
    fn(r);
  });
  for (const Status& st : bound) DSV41_RETURN_IF_ERROR(st);
  return ok_status();
}

ExchangeTotals RankGroup::exchange_totals(int rank) const {
  return timed_.empty() ? ExchangeTotals{} : timed_[static_cast<size_t>(rank)]->totals();
}

void RankGroup::reset_exchange_totals() {
  for (auto& t : timed_) t->reset();
}

Result<RankGroup::Placed> RankGroup::add_sequence(int64_t max_context) {
  int best = 0;
  for (int r = 1; r < ranks(); ++r)
    if (engines_[r]->pool_stats().sequences < engines_[best]->pool_stats().sequences) best = r;
  DSV41_ASSIGN_OR_RETURN(SequenceId id, engines_[best]->add_sequence(max_context));
  return Placed{best, id};
}

Status RankGroup::forward(std::span<const std::span<const Segment>> batches,
                          std::vector<const std::vector<SegmentResult>*>& out) {
  if (static_cast<int>(batches.size()) != ranks())
    return invalid_argument("rank group: " + std::to_string(batches.size()) + " batches for " +
                            std::to_string(ranks()) + " ranks (one per rank, empty for an idle rank)");
  out.assign(static_cast<size_t>(ranks()), nullptr);
  return run_bound([&](int r) { out[r] = &engines_[r]->forward(batches[r]); });
}

}  // namespace dsv41
