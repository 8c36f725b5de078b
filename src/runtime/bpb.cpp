// Bits per byte with sliding windows (see bpb.h for the scoring rule).
#include "runtime/bpb.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "base/file_io.h"
#include "runtime/session.h"

namespace dsv41 {

Result<BpbOptions> resolve_bpb_options(const ModelConfig& config, BpbOptions o) {
  if (o.context < 0) return invalid_argument("--context must be ≥ 2, got " + std::to_string(o.context));
  if (o.stride < 0) return invalid_argument("--stride must be ≥ 1, got " + std::to_string(o.stride));
  if (o.context == 0) o.context = std::min<int64_t>(config.max_position_embeddings, 1024);
  if (o.context < 2)
    return invalid_argument("--context must be ≥ 2 (one token of history and one to score), got " +
                            std::to_string(o.context));
  if (o.context > config.max_position_embeddings)
    return invalid_argument("--context " + std::to_string(o.context) + " exceeds the model's max_position_embeddings " +
                            std::to_string(config.max_position_embeddings));
  if (o.stride == 0) o.stride = o.context / 2;
  if (o.stride >= o.context)
    return invalid_argument("--stride " + std::to_string(o.stride) + " must be below --context " +
                            std::to_string(o.context) + " (a larger step would leave tokens unscored)");
  return o;
}

Result<std::vector<ScoreWindow>> plan_score_windows(int64_t n_positions, const BpbOptions& o) {
  if (o.context < 2 || o.stride < 1 || o.stride >= o.context)
    return invalid_argument("score windows need context ≥ 2 and 1 ≤ stride < context (got " +
                            std::to_string(o.context) + ", " + std::to_string(o.stride) + ")");
  if (n_positions < 2) return invalid_argument("nothing to score: a sequence needs BOS and at least one token");
  std::vector<ScoreWindow> windows;
  int64_t scored_to = 1;  // positions [1, scored_to) are done; BOS (0) is never scored
  for (int64_t b = 0;; b += o.stride) {
    const int64_t e = std::min(b + o.context, n_positions);
    windows.push_back({b, e, std::max(b + 1, scored_to)});
    scored_to = e;
    if (e == n_positions) break;
  }
  return windows;
}

double log_prob(std::span<const float> logits, int32_t target) {
  double m = -INFINITY;
  for (float v : logits) m = std::max(m, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - m);
  return static_cast<double>(logits[target]) - m - std::log(sum);
}

Result<BpbTotals> score_token_bits(const Model& model, std::span<const int32_t> ids, const BpbOptions& options,
                                   const BpbProgress& progress) {
  const int64_t N = static_cast<int64_t>(ids.size());
  DSV41_ASSIGN_OR_RETURN(std::vector<ScoreWindow> windows, plan_score_windows(N, options));
  const int64_t V = model.vocab_size();
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::create(model, std::min(options.context, N)));
  BpbTotals totals;
  std::vector<float> logits;  // [window tokens, V]
  for (const ScoreWindow& w : windows) {
    session->reset();
    DSV41_RETURN_IF_ERROR(session->prefill(ids.subspan(w.begin, w.end - w.begin), 0, &logits).status());
    // Position t is predicted by the logits of position t − 1, row t − 1 − begin of the window.
    for (int64_t t = w.first_scored; t < w.end; ++t) {
      const std::span<const float> row(logits.data() + (t - 1 - w.begin) * V, V);
      totals.bits -= log_prob(row, ids[t]) / std::numbers::ln2;
      ++totals.tokens;
    }
    if (progress) progress(w.end - 1, N - 1, totals.bits);
  }
  return totals;
}

Result<BpbTotals> score_file_bpb(const Model& model, const Tokenizer& tokenizer, const std::string& path,
                                 const BpbOptions& options, const BpbProgress& progress) {
  DSV41_ASSIGN_OR_RETURN(std::string text, read_file(path));
  if (text.empty()) return invalid_argument(path + ": empty file, no bytes to score");
  TokenizerEncodeOptions enc;
  enc.match_special_tokens = false;  // the file is data, not a prompt: no control tokens
  auto tokens = tokenizer.encode(text, enc);
  if (!tokens.ok()) return tokens.status().with_context(path);
  std::vector<int32_t> ids;
  ids.reserve(tokens->size() + 1);
  ids.push_back(static_cast<int32_t>(model.config().bos_token_id));
  ids.insert(ids.end(), tokens->begin(), tokens->end());
  auto totals = score_token_bits(model, ids, options, progress);
  if (!totals.ok()) return totals.status().with_context(path);
  totals->bytes = static_cast<int64_t>(text.size());
  return totals;
}

}  // namespace dsv41
