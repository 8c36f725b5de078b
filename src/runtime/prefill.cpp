// Prefill at a depth through an engine (see prefill.h).
#include "runtime/prefill.h"

#include <algorithm>
#include <string>

namespace dsv41 {

Result<PrefillResult> prefill(Engine& engine, SequenceId id, std::span<const int32_t> prompt,
                              const PrefillOptions& options) {
  DSV41_ASSIGN_OR_RETURN(int64_t h, engine.length(id));
  DSV41_ASSIGN_OR_RETURN(std::span<const int32_t> held, engine.tokens(id));
  const int64_t N = static_cast<int64_t>(prompt.size());
  if (N <= h)
    return invalid_argument("prefill: the prompt (" + std::to_string(N) + " tokens) adds nothing to the " +
                            std::to_string(h) + " the sequence holds");
  if (!std::equal(held.begin(), held.end(), prompt.begin()))
    return invalid_argument("prefill: the prompt does not continue the sequence's tokens");
  if (options.chunk < 0) return invalid_argument("prefill: chunk must be ≥ 0");
  const ModelConfig& c = engine.config();
  DSV41_ASSIGN_OR_RETURN(PrefillPlan plan, plan_prefill(engine.backend().plan(), c.sliding_window, N, h,
                                                        options.windows_present, options.depth));
  PrefillResult out;
  out.effective = plan.effective;
  const bool want_all = options.all_logits && plan.effective == PrefillDepth::kFull;
  int64_t total = 0, done = 0;
  for (const PrefillStep& step : plan.steps) total += step.end - step.begin;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const PrefillStep& step = plan.steps[k];
    const bool last_step = k + 1 == plan.steps.size();
    const int64_t chunk = options.chunk > 0 ? options.chunk : step.end - step.begin;
    for (int64_t b = step.begin; b < step.end; b += chunk) {
      const int64_t e = std::min(step.end, b + chunk);
      Segment s;
      s.sequence = id;
      s.start = b;
      s.tokens = prompt.subspan(b, e - b);
      s.replay = step.replay;
      s.depth = step.layers;
      s.logits = want_all && !step.replay ? LogitRows::kAll
                 : last_step && e == step.end ? LogitRows::kLast
                                              : LogitRows::kNone;
      const SegmentResult& r = engine.forward(std::span<const Segment>(&s, 1)).front();
      if (!r.status.ok()) return r.status;
      out.work += r.work;
      ++out.forwards;
      if (want_all && !step.replay) out.all_logits.insert(out.all_logits.end(), r.logits, r.logits + r.logit_rows * c.vocab_size);
      if (r.logit_rows > 0) {
        const float* last = r.logits + (r.logit_rows - 1) * c.vocab_size;
        out.last_logits.assign(last, last + c.vocab_size);
      }
      done += e - b;
      if (options.progress) options.progress(done, total);
    }
  }
  // The full-depth equivalent counts the new positions only (replays are extra work).
  out.work.full_depth = (N - h) * static_cast<int64_t>(engine.backend().plan().layers.size());
  return out;
}

}  // namespace dsv41
