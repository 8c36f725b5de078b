// End-to-end prefill / decode speed (see speed_bench.h).
#include "runtime/speed_bench.h"

#include "runtime/prefill.h"

#include <chrono>
#include <string>

#include "base/rng.h"
#include "runtime/sampling.h"
#include "runtime/session.h"

namespace dsv41 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<int32_t> speed_bench_prompt(int64_t vocab_size, int64_t tokens, uint64_t seed) {
  // Ids 0..2 are BOS / EOS / pad in the shipped configs; skip them when the vocabulary allows.
  const int64_t lo = vocab_size > 3 ? 3 : 0;
  Xoshiro256 rng(seed);
  std::vector<int32_t> ids(tokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(lo + static_cast<int64_t>(rng.next() % (vocab_size - lo)));
  return ids;
}

Status check_speed_bench_options(const ModelConfig& config, const SpeedBenchOptions& o) {
  if (o.contexts.empty()) return invalid_argument("--contexts: give at least one context length");
  if (o.decode_tokens < 0) return invalid_argument("--decode must be ≥ 0, got " + std::to_string(o.decode_tokens));
  if (o.chunk < 0) return invalid_argument("--chunk must be ≥ 0, got " + std::to_string(o.chunk));
  const int64_t max_pos = config.max_position_embeddings;
  for (int64_t c : o.contexts)
    if (c < 1 || c + o.decode_tokens > max_pos)
      return invalid_argument("--contexts: " + std::to_string(c) + " (+ " + std::to_string(o.decode_tokens) +
                              " decoded) is outside 1.." + std::to_string(max_pos) + " (max_position_embeddings)");
  return ok_status();
}

Result<std::vector<SpeedPoint>> run_speed_bench(const Model& model, const SpeedBenchOptions& o,
                                                const SpeedProgress& progress) {
  DSV41_RETURN_IF_ERROR(check_speed_bench_options(model.config(), o));
  std::vector<SpeedPoint> points;
  for (int64_t c : o.contexts) {
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::create(model, c + o.decode_tokens));
    const std::vector<int32_t> prompt = speed_bench_prompt(model.vocab_size(), c, o.seed);
    SpeedPoint p;
    p.context = c;
    const auto t0 = std::chrono::steady_clock::now();
    PrefillOptions po;
    po.depth = o.depth;
    po.chunk = o.chunk > 0 ? o.chunk : 0;
    DSV41_ASSIGN_OR_RETURN(PrefillResult pre, prefill(session->engine(), session->sequence(), prompt, po));
    std::vector<float> logits = std::move(pre.last_logits);
    p.prefill_seconds = seconds_since(t0);
    p.prefill_work = pre.work;
    p.effective_depth = pre.effective;
    if (o.before_decode) o.before_decode(c);
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      DSV41_ASSIGN_OR_RETURN(logits, session->decode(argmax_logits(logits)));
      ++p.decode_tokens;
    }
    p.decode_seconds = seconds_since(t1);
    p.cache = session->cache_bytes();
    p.positions = session->length();
    if (progress) progress(p);
    points.push_back(p);
  }
  return points;
}

}  // namespace dsv41
