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
  const bool images = !options.token_types.empty();
  if (images && static_cast<int64_t>(options.token_types.size()) != N)
    return invalid_argument("prefill: " + std::to_string(options.token_types.size()) + " token types for a prompt of " +
                            std::to_string(N) + " tokens");
  // span_before[p]: span rows at positions < p (where a chunk's embeddings start).
  std::vector<int64_t> span_before;
  if (images) {
    span_before.assign(static_cast<size_t>(N + 1), 0);
    for (int64_t p = 0; p < N; ++p) {
      // Checked here for the whole prompt: a chunk without span rows goes to the engine as text.
      if ((options.token_types[p] >= 0) != (prompt[p] == c.image_token_id))
        return invalid_argument("prefill: position " + std::to_string(p) + " holds token " + std::to_string(prompt[p]) +
                                " with type " + std::to_string(options.token_types[p]) +
                                ": image-span rows and image_token_id positions must coincide");
      span_before[p + 1] = span_before[p] + (options.token_types[p] >= 0);
    }
    if (static_cast<int64_t>(options.image_embeddings.size()) != span_before[N] * c.hidden_size)
      return invalid_argument("prefill: " + std::to_string(options.image_embeddings.size()) +
                              " image embedding values for " + std::to_string(span_before[N]) + " span rows");
  }
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
      if (images) {
        s.token_types = options.token_types.subspan(b, e - b);
        s.image_embeddings = options.image_embeddings.subspan(span_before[b] * c.hidden_size,
                                                              (span_before[e] - span_before[b]) * c.hidden_size);
        // A chunk of text only is a plain text segment.
        if (span_before[e] == span_before[b]) s.token_types = {};
      }
      s.logits = want_all && !step.replay ? LogitRows::kAll
                 : last_step && e == step.end ? LogitRows::kLast
                                              : LogitRows::kNone;
      const SegmentResult& r = engine.forward(std::span<const Segment>(&s, 1)).front();
      if (!r.status.ok()) return r.status;
      out.work += r.work;
      out.timing.add(engine.last_timing(), step.replay);
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
