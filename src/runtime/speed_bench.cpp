// End-to-end prefill / decode speed (see speed_bench.h).
#include "runtime/speed_bench.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "base/rng.h"
#include "runtime/prefill.h"
#include "runtime/sampling.h"
#include "runtime/session.h"

namespace dsv41 {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The returning turns after a cold prefill of `prompt` in `held`: each a sequence holding only the
// prompt's global KV (Engine::fork_prefix: what an SSD hit imports), served prompt + suffix.
Result<std::vector<ReturningTurn>> time_returning_turns(Engine& engine, SequenceId held,
                                                        const std::vector<int32_t>& prompt,
                                                        const SpeedBenchOptions& o) {
  std::vector<int32_t> longer = prompt;
  const std::vector<int32_t> suffix = speed_bench_prompt(engine.config().vocab_size, o.returning_suffix, o.seed + 1);
  longer.insert(longer.end(), suffix.begin(), suffix.end());
  std::vector<ReturningTurn> out;
  for (PrefillDepth depth : o.returning_depths) {
    DSV41_ASSIGN_OR_RETURN(SequenceId id, engine.fork_prefix(held, static_cast<int64_t>(prompt.size())));
    PrefillOptions po;
    po.depth = depth;
    po.chunk = o.chunk;
    po.windows_present = false;
    const auto t0 = std::chrono::steady_clock::now();
    auto turn = prefill(engine, id, longer, po);
    const double seconds = seconds_since(t0);
    (void)engine.remove_sequence(id);
    if (!turn.ok()) return turn.status();
    out.push_back({depth, seconds, turn->work});
  }
  return out;
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
  if (o.returning_suffix < 0)
    return invalid_argument("--returning must be ≥ 0, got " + std::to_string(o.returning_suffix));
  const int64_t max_pos = config.max_position_embeddings;
  for (int64_t c : o.contexts)
    if (c < 1 || c + std::max(o.decode_tokens, o.returning_suffix) > max_pos)
      return invalid_argument("--contexts: " + std::to_string(c) + " (+ " +
                              std::to_string(std::max(o.decode_tokens, o.returning_suffix)) +
                              " decoded or returning) is outside 1.." + std::to_string(max_pos) +
                              " (max_position_embeddings)");
  return ok_status();
}

Result<std::vector<SpeedPoint>> run_speed_bench(const Model& model, const SpeedBenchOptions& o,
                                                const SpeedProgress& progress) {
  DSV41_RETURN_IF_ERROR(check_speed_bench_options(model.config(), o));
  std::vector<SpeedPoint> points;
  for (int64_t c : o.contexts) {
    const int64_t capacity = c + std::max(o.decode_tokens, o.returning_suffix);
    std::unique_ptr<Session> session;
    if (o.make_backend) {
      DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, o.make_backend());
      DSV41_ASSIGN_OR_RETURN(session, Session::create(std::move(backend), model, capacity));
    } else {
      DSV41_ASSIGN_OR_RETURN(session, Session::create(model, capacity));
    }
    const std::vector<int32_t> prompt = speed_bench_prompt(model.vocab_size(), c, o.seed);
    SpeedPoint p;
    p.context = c;
    if (o.before_prefill) o.before_prefill(c);
    const auto t0 = std::chrono::steady_clock::now();
    PrefillOptions po;
    po.depth = o.depth;
    po.chunk = o.chunk > 0 ? o.chunk : 0;
    DSV41_ASSIGN_OR_RETURN(PrefillResult pre, prefill(session->engine(), session->sequence(), prompt, po));
    std::vector<float> logits = std::move(pre.last_logits);
    p.prefill_seconds = seconds_since(t0);
    p.prefill_work = pre.work;
    p.effective_depth = pre.effective;
    if (o.returning_suffix > 0) {
      DSV41_ASSIGN_OR_RETURN(p.returning, time_returning_turns(session->engine(), session->sequence(), prompt, o));
    }
    if (o.before_decode) o.before_decode(c);
    const auto t1 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < o.decode_tokens; ++i) {
      p.decoded.push_back(argmax_logits(logits));
      DSV41_ASSIGN_OR_RETURN(logits, session->decode(p.decoded.back()));
      ++p.decode_tokens;
    }
    p.decode_seconds = seconds_since(t1);
    if (o.backend_status)
      if (Status st = o.backend_status(session->engine().backend()); !st.ok())
        return st.with_context("context " + std::to_string(c));
    p.cache = session->cache_bytes();
    p.positions = session->length();
    if (progress) progress(p);
    points.push_back(p);
  }
  return points;
}

}  // namespace dsv41
