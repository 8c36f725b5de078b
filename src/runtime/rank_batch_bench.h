// Batched decode over the ranks of a RankGroup (issue 17 item 2: `dsv41 bench --batches 1,8
// --ranks N` / `--gpus N`): for each batch size B, B sequences placed on the ranks (the fewest
// first), each prefilled with `context` pseudo-random ids (speed_bench_prompt, the seeds of
// batch_bench.h), then `steps` timed rounds in which every rank decodes its sequences' greedy
// argmax in one forward while the ranks exchange the MoE rows. Aggregate rate = B · steps / time.
// The ids each sequence generated are returned, so that a run on N ranks can be checked against
// one engine's (the same, bit for bit, on the CPU), and, with a timed group, what the exchanges
// cost (issue 17 item 4's all-to-all time per layer: three collectives per MoE layer a step).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "runtime/batch_bench.h"
#include "runtime/rank_group.h"

namespace dsv41 {

struct RankBatchPoint : DecodeRate {
  int ranks = 0;
  std::vector<std::vector<int32_t>> generated;  // per sequence, warm-up and timed steps
  // Over the timed steps, when the group times its exchanges (RankGroupOptions::time_exchanges):
  // every rank's collectives added (calls, wall time inside them, bytes to and from the others),
  // and the most any one rank spent in them.
  ExchangeTotals exchanges;
  double max_rank_exchange_seconds = 0;
};

// options.batches, context, steps, warmup_steps and seed count; the mixed step is not measured.
// The sequences leave the engines after each batch size.
Result<std::vector<RankBatchPoint>> run_rank_batch_bench(RankGroup& group, const BatchBenchOptions& options);

}  // namespace dsv41
