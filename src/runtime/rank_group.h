// Several ranks in one process (issue 17, docs/PARALLEL.md): N engines over one Model, the routed
// experts spread over them (expert parallelism: rank r holds experts e ≡ r mod N), each owning its
// own sequences, caches and page pool (attention data parallelism), the MoE rows exchanged through
// a loopback communicator (parallel/loopback_communicator.h) or the caller's (NCCL ranks). The CPU form of what a multi-GPU
// run does with one rank per GPU over NCCL; here it is how that logic is tested without GPUs.
//
// Driving: forward() runs every rank's engine at once, one thread per rank (rank 0 on the
// caller), each with its own batch, empty batches included: an idle rank still takes part in
// every layer's exchange. Results are those of one engine holding every sequence, bit for bit
// (tests/expert_parallel_engine_test.cpp).
// Each rank has its own thread pool (threads_per_rank) and CpuExec (the Model's scalar/fast
// path and ISA cap). The Model is borrowed and must outlive the group: either one Model shared by
// every rank (each rank's backend only reaches its own routed experts) or one per rank, each
// loaded with only that rank's routed experts.
// Not thread-safe: one thread drives a group.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "base/function_ref.h"
#include "base/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "parallel/loopback_communicator.h"
#include "parallel/timed_communicator.h"

namespace dsv41 {

struct RankGroupOptions {
  int ranks = 2;
  int threads_per_rank = 1;
  EngineOptions engine;
  // How long a rank waits for the others at an exchange before the group fails.
  std::chrono::milliseconds timeout = std::chrono::seconds(120);
  // The ranks' communicators (rank r uses communicators[r], whose rank() must be r; borrowed,
  // must outlive the group): e.g. NcclCommunicator ranks. Empty: a LoopbackGroup of `ranks`.
  std::vector<Communicator*> communicators;
  // Each rank's backend, given its model, rank and communicator (for its MoE exchange): e.g. the
  // device backend, one per GPU. Null: the CPU backend over the rank's own pool.
  std::function<Result<std::unique_ptr<Backend>>(const Model& model, int rank, Communicator* experts)> backend;
  // Called on the thread that is about to work for rank r — before its backend is made, before
  // each of its steps, before its engine is destroyed: e.g. making GPU r the thread's current
  // CUDA device (one rank per GPU). An error fails the group's creation or that step (naming the
  // rank); a rank whose binding failed in a step still runs its part of it, so that no other rank
  // waits for it at an exchange. Null: nothing.
  std::function<Status(int rank)> bind_rank_thread;
  // Time every rank's exchanges (parallel/timed_communicator.h): exchange_totals() then says what
  // each rank's collectives cost it (wall time inside them, bytes to and from the others).
  bool time_exchanges = false;
};

class RankGroup {
 public:
  static Result<std::unique_ptr<RankGroup>> create(const Model& model, const RankGroupOptions& options);
  // One model per rank (borrowed, must outlive the group): models[r] holds every routed expert or
  // only rank r's (loaded with ModelLoadOptions expert_rank = r, expert_ranks = ranks), the
  // memory each rank of a multi-GPU run would hold. The models must share one config.
  static Result<std::unique_ptr<RankGroup>> create(std::span<const Model* const> models,
                                                   const RankGroupOptions& options);
  ~RankGroup();

  int ranks() const { return static_cast<int>(engines_.size()); }
  // RankGroupOptions::bind_rank_thread for rank r on the calling thread (a caller that drives the
  // engines itself, e.g. RankScheduler, calls it before working for r); its error names the rank.
  Status bind_thread(int rank) const;
  // fn(r) for every rank at once, each on its own thread bound first (bind_thread); a rank whose
  // binding failed still runs fn (the others would wait for its part of an exchange). Returns the
  // first binding error, naming its rank.
  Status run_bound(FunctionRef<void(int)> fn) const;
  Engine& engine(int rank) { return *engines_[static_cast<size_t>(rank)]; }
  // The loopback group the ranks exchange through (null with the caller's communicators).
  LoopbackGroup* loopback() { return group_.get(); }
  // With RankGroupOptions::time_exchanges: rank r's exchange totals since creation or the last
  // reset (zeros without it). Read between steps.
  ExchangeTotals exchange_totals(int rank) const;
  void reset_exchange_totals();

  // A new sequence on the rank that holds the fewest (ties: the lowest rank).
  struct Placed {
    int rank = 0;
    SequenceId id = -1;
  };
  Result<Placed> add_sequence(int64_t max_context);

  // One step: rank r's engine runs forward(batches[r]) for every rank at once (batches.size() must
  // be ranks(); an empty batch is an idle rank). out[r] = rank r's results (valid until the next
  // call). A failed thread binding fails the step (the results are then not to be trusted).
  Status forward(std::span<const std::span<const Segment>> batches,
                 std::vector<const std::vector<SegmentResult>*>& out);

 private:
  RankGroup() = default;
  // Members in construction order (destroyed in reverse: engines before the group and pools).
  std::vector<std::unique_ptr<ThreadPool>> pools_;
  std::vector<CpuExec> execs_;
  std::unique_ptr<LoopbackGroup> group_;
  std::vector<std::unique_ptr<TimedCommunicator>> timed_;  // time_exchanges: one per rank, over the group's
  std::vector<std::unique_ptr<Engine>> engines_;
  std::function<Status(int rank)> bind_;
};

}  // namespace dsv41
