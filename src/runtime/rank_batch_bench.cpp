// Batched decode over ranks (see rank_batch_bench.h).
#include "runtime/rank_batch_bench.h"

#include <algorithm>
#include <chrono>

#include "runtime/sampling.h"
#include "runtime/speed_bench.h"

namespace dsv41 {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Placed {
  RankGroup::Placed at;
  int32_t next = -1;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
};

// One round: rank r runs its sequences' segments (the prompt, or the next token) at once; the
// greedy argmax of each sequence's last row becomes its next token.
Status round(RankGroup& group, std::vector<Placed>& seqs, bool prefill) {
  const int64_t V = group.engine(0).config().vocab_size;
  std::vector<std::vector<Segment>> batches(static_cast<size_t>(group.ranks()));
  std::vector<std::vector<size_t>> owner(static_cast<size_t>(group.ranks()));
  for (size_t i = 0; i < seqs.size(); ++i) {
    Placed& p = seqs[i];
    Engine& e = group.engine(p.at.rank);
    DSV41_ASSIGN_OR_RETURN(int64_t start, e.length(p.at.id));
    const std::span<const int32_t> tokens = prefill ? std::span<const int32_t>(p.prompt) : std::span<const int32_t>(&p.next, 1);
    batches[static_cast<size_t>(p.at.rank)].push_back({p.at.id, start, tokens, LogitRows::kLast});
    owner[static_cast<size_t>(p.at.rank)].push_back(i);
  }
  std::vector<std::span<const Segment>> spans(batches.begin(), batches.end());
  std::vector<const std::vector<SegmentResult>*> out;
  DSV41_RETURN_IF_ERROR(group.forward(spans, out));
  for (size_t r = 0; r < owner.size(); ++r)
    for (size_t j = 0; j < owner[r].size(); ++j) {
      const SegmentResult& res = (*out[r])[j];
      if (!res.status.ok()) return res.status;
      Placed& p = seqs[owner[r][j]];
      p.next = argmax_logits(std::span<const float>(res.logits, static_cast<size_t>(V)));
      p.generated.push_back(p.next);
    }
  return ok_status();
}

}  // namespace

Result<std::vector<RankBatchPoint>> run_rank_batch_bench(RankGroup& group, const BatchBenchOptions& o) {
  const ModelConfig& config = group.engine(0).config();
  DSV41_RETURN_IF_ERROR(check_batch_bench_options(config, o));
  const int64_t max_context = o.context + o.warmup_steps + o.steps + 2;
  std::vector<RankBatchPoint> points;
  for (int batch : o.batches) {
    std::vector<Placed> seqs(static_cast<size_t>(batch));
    Status st;
    for (int b = 0; b < batch && st.ok(); ++b) {
      auto at = group.add_sequence(max_context);
      if (!at.ok()) {
        st = at.status();
        break;
      }
      seqs[static_cast<size_t>(b)].at = *at;
      seqs[static_cast<size_t>(b)].prompt =
          speed_bench_prompt(config.vocab_size, o.context, o.seed + 7919 * static_cast<uint64_t>(b));
    }
    if (st.ok()) st = round(group, seqs, /*prefill=*/true);
    for (int64_t s = 0; s < o.warmup_steps && st.ok(); ++s) st = round(group, seqs, false);
    std::vector<double> step_seconds;
    group.reset_exchange_totals();
    const double t0 = now_seconds();
    for (int64_t s = 0; s < o.steps && st.ok(); ++s) {
      const double ts = now_seconds();
      st = round(group, seqs, false);
      step_seconds.push_back(now_seconds() - ts);
    }
    RankBatchPoint p;
    p.batch = batch;
    p.ranks = group.ranks();
    p.steps = o.steps;
    p.seconds = now_seconds() - t0;
    for (int r = 0; r < group.ranks(); ++r) {
      const ExchangeTotals t = group.exchange_totals(r);
      p.exchanges.add(t);
      p.max_rank_exchange_seconds = std::max(p.max_rank_exchange_seconds, t.seconds);
    }
    for (Placed& s : seqs) {
      if (s.at.id >= 0) (void)group.engine(s.at.rank).remove_sequence(s.at.id);
      p.generated.push_back(std::move(s.generated));
    }
    DSV41_RETURN_IF_ERROR(st);
    p.median_step_seconds = median_seconds(step_seconds);
    points.push_back(std::move(p));
  }
  return points;
}

}  // namespace dsv41
