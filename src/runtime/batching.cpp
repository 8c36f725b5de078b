// One engine's Scheduler behind the Batching calls (see batching.h).
#include "runtime/batching.h"

namespace dsv41 {

Result<std::unique_ptr<OneEngineBatching>> OneEngineBatching::create(Engine& engine, const SchedulerOptions& options) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> s, Scheduler::create(engine, options));
  return std::unique_ptr<OneEngineBatching>(new OneEngineBatching(engine, std::move(s)));
}

DsparkStats OneEngineBatching::dspark_totals() const {
  DsparkStats total;
  total.add(scheduler_->dspark_stats());
  return total;
}

PoolStats add_pool_stats(const PoolStats& a, const PoolStats& b) {
  PoolStats s;
  s.main_bytes = a.main_bytes + b.main_bytes;
  s.index_bytes = a.index_bytes + b.index_bytes;
  s.budget_bytes = a.budget_bytes > 0 && b.budget_bytes > 0 ? a.budget_bytes + b.budget_bytes : 0;
  s.sequences = a.sequences + b.sequences;
  return s;
}

}  // namespace dsv41
