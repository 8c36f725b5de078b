// Draft acceptance: greedy prefix match and speculative rejection sampling (see speculative.h).
#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dsv41 {
namespace {

// The draft stream must not overlap the acceptance stream: a fixed offset of the seed gives an
// unrelated splitmix64 sequence.
constexpr uint64_t kDraftStreamOffset = 0xD5A7C0FFEE15ull;

// (Built by appends: GCC 12 warns falsely (-Wrestrict) on "[" + std::to_string(...).)
std::string shape(size_t rows, size_t v) {
  std::string s = "[";
  s += std::to_string(rows);
  s += ", ";
  s += std::to_string(v);
  s += "]";
  return s;
}

}  // namespace

SpeculativeSampler::SpeculativeSampler(const SamplingParams& params)
    : params_(params), rng_(params.seed), draft_rng_(params.seed + kDraftStreamOffset) {}

Result<SpeculativeSampler> SpeculativeSampler::create(const SamplingParams& params) {
  auto check = Sampler::create(params);  // one source of truth for valid parameters
  if (!check.ok()) return check.status();
  // Its distributions (token_distribution.h) know no context; the scheduler verifies such requests
  // by sample-and-match with their Sampler instead.
  if (params.repetition_penalty != 1.0f)
    return unsupported("speculative sampling: repetition_penalty is not applied under the rejection rule");
  return SpeculativeSampler(params);
}

double SpeculativeSampler::uniform() {
  ++accept_draws_;
  return rng_.uniform();
}

void SpeculativeSampler::observe(int32_t token) {
  if (token < 0 || !penalised()) return;
  auto it = std::find_if(counts_.begin(), counts_.end(), [&](const auto& c) { return c.first == token; });
  if (it == counts_.end()) counts_.emplace_back(token, 1);
  else ++it->second;
}

const TokenCounts& SpeculativeSampler::counts_with(std::span<const int32_t> extra) {
  if (extra.empty() || !penalised()) return counts_;
  row_counts_ = counts_;
  for (int32_t t : extra) {
    auto it = std::find_if(row_counts_.begin(), row_counts_.end(), [&](const auto& c) { return c.first == t; });
    if (it == row_counts_.end()) row_counts_.emplace_back(t, 1);
    else ++it->second;
  }
  return row_counts_;
}

std::span<const float> SpeculativeSampler::processed(std::span<const float> logits, std::span<const int32_t> extra) {
  return bias_and_penalise(logits, params_, counts_with(extra), &biased_);
}

int32_t SpeculativeSampler::pick_exact(std::span<const float> logits, std::span<const int32_t> extra) {
  sampler_distribution(processed(logits, extra), params_, &p_);
  if (!p_.usable()) return -1;
  return pick_ordered(p_, uniform());
}

int32_t SpeculativeSampler::pick_fast(std::span<const float> logits, std::span<const int32_t> extra) {
  fast_distribution(processed(logits, extra), params_, &p_);
  if (!p_.usable()) return -1;
  return pick_ordered(p_, uniform());
}

// normalise(max(p − q, 0)), walked in id order (nothing else draws from it, so no tie rule is
// needed). Rounding can leave it empty when p ≈ q; p itself is the limit then.
int32_t SpeculativeSampler::pick_residual(const TokenDistribution& p, const TokenDistribution& q) {
  const size_t n = p.weight.size();
  residual_.assign(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += residual_[i] = std::max(p.prob(int32_t(i)) - q.prob(int32_t(i)), 0.0);
  const double u = uniform();
  if (!(total > 0)) return pick_by_id(p, u);
  const double target = u * total;
  double acc = 0;
  int32_t last = -1;
  for (size_t i = 0; i < n; ++i) {
    if (residual_[i] <= 0) continue;
    acc += residual_[i];
    last = int32_t(i);
    if (target < acc) return last;
  }
  return last;
}

int32_t SpeculativeSampler::sample(std::span<const float> logits) {
  const int32_t token = params_.temperature == 0 ? argmax_logits(processed(logits, {})) : pick_exact(logits, {});
  observe(token);
  return token;
}

int32_t SpeculativeSampler::draft_token(std::span<const float> row, std::span<const int32_t> before) {
  if (params_.temperature == 0) return argmax_logits(processed(row, before));
  fast_distribution(processed(row, before), params_, &q_);
  return pick_by_id(q_, draft_rng_.uniform());
}

Result<VerifyResult> SpeculativeSampler::verify(const VerifyInput& in) {
  const size_t k = in.drafts.size(), V = size_t(std::max(in.vocab, 0));
  const bool sampled = params_.temperature > 0 && in.pick == DraftPick::kSampled;
  if (V == 0) return invalid_argument("speculative verify: vocab must be > 0");
  if (in.target_logits.size() != (k + 1) * V)
    return invalid_argument("speculative verify: target logits have " + std::to_string(in.target_logits.size()) +
                            " values, expected [k+1, V] = " + shape(k + 1, V));
  if (sampled && in.draft_logits.size() != k * V)
    return invalid_argument("speculative verify: draft logits have " + std::to_string(in.draft_logits.size()) +
                            " values, expected [k, V] = " + shape(k, V));
  for (size_t j = 0; j < k; ++j)
    if (in.drafts[j] < 0 || size_t(in.drafts[j]) >= V)
      return invalid_argument("speculative verify: draft " + std::to_string(j + 1) + " is token " +
                              std::to_string(in.drafts[j]) + ", outside the vocabulary 0.." + std::to_string(V - 1));
  // A failed call leaves the object as it was: keep the RNG to restore it.
  const Xoshiro256 rng_before = rng_;
  const uint64_t draws_before = accept_draws_;
  auto target_row = [&](size_t j) { return in.target_logits.subspan(j * V, V); };
  auto fail = [&](size_t j) {
    rng_ = rng_before;
    accept_draws_ = draws_before;
    return invalid_argument("speculative verify: target logits row " + std::to_string(j) +
                            " has no finite probability (all NaN, or +inf)");
  };
  VerifyResult r;
  size_t j = 0;
  for (; j < k; ++j) {
    const auto prefix = in.drafts.first(j);
    const int32_t d = in.drafts[j];
    if (params_.temperature == 0) {
      const int32_t best = argmax_logits(processed(target_row(j), prefix));
      if (best < 0) return fail(j);
      if (best != d) { r.next = best; break; }
      continue;
    }
    fast_distribution(processed(target_row(j), prefix), params_, &p_);
    if (!p_.usable()) return fail(j);
    double qd = 1.0;  // kArgmax: q is the point mass on d
    if (sampled) {
      fast_distribution(processed(in.draft_logits.subspan(j * V, V), prefix), params_, &q_);
      qd = q_.usable() ? q_.prob(d) : 0.0;
      if (!(qd > 0)) { r.next = pick_ordered(p_, uniform()); break; }  // unusable draft row: stop
    }
    if (uniform() < p_.prob(d) / qd) continue;
    if (!sampled) {  // point-mass q: the residual is p without d
      q_.weight.assign(V, 0.0);
      q_.weight[size_t(d)] = 1.0;
      q_.total = 1.0;
    }
    r.next = pick_residual(p_, q_);
    break;
  }
  r.accepted = int32_t(j);
  if (j == k) {  // all accepted: the bonus from row k
    const auto prefix = in.drafts.first(k);
    r.next = params_.temperature == 0 ? argmax_logits(processed(target_row(k), prefix)) : pick_fast(target_row(k), prefix);
  }
  if (r.next < 0) return fail(j);
  for (size_t i = 0; i < j; ++i) observe(in.drafts[i]);
  observe(r.next);
  return r;
}

}  // namespace dsv41
