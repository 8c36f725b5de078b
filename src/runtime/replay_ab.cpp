// The bounded-versus-exact replay experiment (see replay_ab.h).
#include "runtime/replay_ab.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "runtime/prefill.h"
#include "runtime/sampling.h"

namespace dsv41 {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One prompt prefilled at one depth after a hit of h tokens, ready to decode.
struct Arm {
  std::unique_ptr<Engine> engine;
  SequenceId id = -1;
  std::vector<float> logits;  // next-token logits
  TokenLayers work;
  double seconds = 0;
};

Result<Arm> prefill_arm(const Model& model, std::span<const int32_t> prompt, int64_t hit, PrefillDepth depth,
                        int64_t chunk, int64_t max_context) {
  Arm a;
  DSV41_ASSIGN_OR_RETURN(a.engine, Engine::create(std::make_unique<CpuBackend>(model), model.engram_tables()));
  DSV41_ASSIGN_OR_RETURN(a.id, a.engine->add_sequence(max_context));
  PrefillOptions o{depth, chunk, true};
  if (hit > 0) {
    // The hit: its global KV only (as after a restart with the SSD tier), no window state.
    PrefillOptions full{PrefillDepth::kFull, chunk, true};
    DSV41_RETURN_IF_ERROR(prefill(*a.engine, a.id, prompt.subspan(0, hit), full).status());
    DSV41_ASSIGN_OR_RETURN(SequenceId b, a.engine->fork_prefix(a.id, hit));
    DSV41_RETURN_IF_ERROR(a.engine->remove_sequence(a.id));
    a.id = b;
    o.windows_present = false;
  }
  const double t0 = now_seconds();
  DSV41_ASSIGN_OR_RETURN(PrefillResult r, prefill(*a.engine, a.id, prompt, o));
  a.seconds = now_seconds() - t0;
  a.logits = std::move(r.last_logits);
  a.work = r.work;
  return a;
}

Status step(Arm& a, int32_t token) {
  Segment s{a.id, *a.engine->length(a.id), std::span<const int32_t>(&token, 1), LogitRows::kLast};
  const SegmentResult& r = a.engine->forward(std::span<const Segment>(&s, 1)).front();
  if (!r.status.ok()) return r.status;
  a.logits.assign(r.logits, r.logits + a.engine->config().vocab_size);
  return ok_status();
}

}  // namespace

double kl_divergence_of_logits(std::span<const float> p_logits, std::span<const float> q_logits) {
  auto log_softmax = [](std::span<const float> x) {
    double m = -INFINITY;
    for (float v : x) m = std::max(m, double(v));
    double z = 0;
    for (float v : x) z += std::exp(double(v) - m);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - m - std::log(z);
    return out;
  };
  const std::vector<double> lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

Result<std::vector<ReplayAbCase>> run_replay_ab(const Model& model, const std::vector<std::vector<int32_t>>& texts,
                                                const ReplayAbOptions& o) {
  if (o.tokens < 0) return invalid_argument("--tokens must be ≥ 0");
  std::vector<ReplayAbCase> out;
  for (int ti = 0; ti < static_cast<int>(texts.size()); ++ti) {
    const std::vector<int32_t>& text = texts[ti];
    for (int64_t length : o.lengths) {
     for (int64_t k = 0; k < o.prompts_per_text; ++k) {
      const int64_t offset = k * (length + o.tokens);
      if (length < 2 || offset + length + o.tokens > static_cast<int64_t>(text.size())) continue;
      for (int64_t hit : o.hits) {
        if (hit < 0 || hit >= length) continue;
        ReplayAbCase c;
        c.text = ti;
        c.offset = offset;
        c.length = length;
        c.hit = hit;
        const std::span<const int32_t> prompt(text.data() + offset, length);
        const int64_t ctx = length + o.tokens + 1;
        DSV41_ASSIGN_OR_RETURN(Arm full, prefill_arm(model, prompt, hit, PrefillDepth::kFull, o.chunk, ctx));
        DSV41_ASSIGN_OR_RETURN(Arm exact, prefill_arm(model, prompt, hit, PrefillDepth::kExact, o.chunk, ctx));
        DSV41_ASSIGN_OR_RETURN(Arm bounded, prefill_arm(model, prompt, hit, PrefillDepth::kBounded, o.chunk, ctx));
        c.work_full = full.work;
        c.work_exact = exact.work;
        c.work_bounded = bounded.work;
        c.seconds_full = full.seconds;
        c.seconds_exact = exact.seconds;
        c.seconds_bounded = bounded.seconds;
        int64_t agree = 0, positions = 0;
        double kl_sum = 0;
        for (int64_t s = 0; s <= o.tokens; ++s) {
          const double kl = kl_divergence_of_logits(exact.logits, bounded.logits);
          kl_sum += kl;
          c.kl_max = std::max(c.kl_max, kl);
          const int32_t e = argmax_logits(exact.logits), b = argmax_logits(bounded.logits);
          agree += e == b;
          ++positions;
          for (size_t i = 0; i < exact.logits.size(); ++i)
            c.full_vs_exact_max_abs = std::max(c.full_vs_exact_max_abs, std::fabs(double(full.logits[i]) - exact.logits[i]));
          // Until the first step where bounded's own greedy token differs, a free-running bounded
          // decode has seen exactly exact's tokens: that step is where free-running diverges.
          if (c.first_divergence < 0 && b != e) c.first_divergence = s;
          if (s == o.tokens) break;
          DSV41_RETURN_IF_ERROR(step(full, e));
          DSV41_RETURN_IF_ERROR(step(exact, e));
          DSV41_RETURN_IF_ERROR(step(bounded, e));  // teacher-forced on exact's tokens
        }
        c.kl_mean = kl_sum / double(positions);
        c.top1_agreement = double(agree) / double(positions);
        out.push_back(c);
      }
     }
    }
  }
  if (out.empty()) return invalid_argument("replay-ab: no text holds a prompt of the given lengths plus --tokens");
  return out;
}

}  // namespace dsv41
