// Draft acceptance: greedy prefix match and speculative rejection sampling (see speculative.h).
#include "runtime/speculative.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace dsv41 {
namespace {

// The draft stream must not overlap the acceptance stream: a fixed odd offset of the seed gives
// an unrelated splitmix64 sequence.
constexpr uint64_t kDraftStreamOffset = 0xD5A7C0FFEE15ull;

bool usable(const TokenDistribution& d) { return d.total > 0 && std::isfinite(d.total) && !d.order.empty(); }

std::string row_name(const char* which, size_t row) { return std::string(which) + " row " + std::to_string(row); }

}  // namespace

SpeculativeSampler::SpeculativeSampler(const SamplingParams& params)
    : params_(params), rng_(params.seed), draft_rng_(params.seed + kDraftStreamOffset) {}

Result<SpeculativeSampler> SpeculativeSampler::create(const SamplingParams& params) {
  // One source of truth for what a valid SamplingParams is.
  auto check = Sampler::create(params);
  if (!check.ok()) return check.status();
  return SpeculativeSampler(params);
}

double SpeculativeSampler::uniform() {
  ++accept_draws_;
  return rng_.uniform();
}

void SpeculativeSampler::count(int32_t token, int delta) {
  auto it = std::find_if(counts_.begin(), counts_.end(), [&](const auto& c) { return c.first == token; });
  if (it == counts_.end()) {
    if (delta > 0) counts_.emplace_back(token, delta);
    return;
  }
  it->second += delta;
  if (it->second <= 0) counts_.erase(it);
}

void SpeculativeSampler::observe(int32_t token) {
  if (token >= 0 && (params_.presence_penalty != 0 || params_.frequency_penalty != 0)) count(token, +1);
}

// Mirrors Sampler::pick step by step (same double arithmetic, same order) so that the weights,
// the kept set and `total` are bit-identical to what the Sampler draws from.
void SpeculativeSampler::distribution(std::span<const float> raw, std::span<const int32_t> extra,
                                      TokenDistribution* out) {
  for (int32_t t : extra) observe(t);
  std::span<const float> logits = raw;
  if (!params_.logit_bias.empty() || !counts_.empty()) {
    biased_.assign(raw.begin(), raw.end());
    for (const auto& [id, bias] : params_.logit_bias)
      if (static_cast<size_t>(id) < biased_.size()) biased_[id] += bias;
    for (const auto& [id, n] : counts_)
      if (static_cast<size_t>(id) < biased_.size())
        biased_[id] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
    logits = biased_;
  }
  for (int32_t t : extra)
    if (t >= 0 && (params_.presence_penalty != 0 || params_.frequency_penalty != 0)) count(t, -1);
  const size_t n = logits.size();
  double mx = -INFINITY;
  for (float v : logits)
    if (!std::isnan(v)) mx = std::max(mx, double(v));
  std::vector<double>& p = out->weight;
  p.assign(n, 0.0);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::isnan(logits[i]) ? 0.0 : std::exp((double(logits[i]) - mx) / params_.temperature);
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  std::vector<int32_t>& order = out->order;
  order.resize(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  size_t limit = n;
  double threshold = params_.top_p;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    limit = static_cast<size_t>(params_.top_k);
    double top = 0;
    for (size_t k = 0; k < limit; ++k) top += p[order[k]];
    threshold = params_.top_p * top;
  }
  size_t keep = 0;
  double mass = 0;
  while (keep < limit) {
    mass += p[order[keep]];
    ++keep;
    if (mass >= threshold) break;
  }
  if (params_.min_p > 0 && keep > 0) {
    const double floor = params_.min_p * p[order[0]];
    while (keep > 1 && p[order[keep - 1]] < floor) --keep;
    mass = 0;
    for (size_t k = 0; k < keep; ++k) mass += p[order[k]];
  }
  for (size_t k = keep; k < n; ++k) p[order[k]] = 0.0;  // dropped by the filters
  order.resize(keep);
  out->total = mass;
}

int32_t SpeculativeSampler::pick(const TokenDistribution& d, double u) const {
  if (!usable(d)) return -1;
  const double target = u * d.total;
  double acc = 0;
  for (int32_t id : d.order) {
    acc += d.weight[id];
    if (target < acc) return id;
  }
  return d.order.back();
}

// normalise(max(p − q, 0)), walked in id order (no tie rule is needed: nothing else draws from
// it). Rounding can leave it empty when p ≈ q; p itself is the limit then.
int32_t SpeculativeSampler::pick_residual(const TokenDistribution& p, const TokenDistribution& q) {
  const size_t n = p.weight.size();
  residual_.assign(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    residual_[i] = std::max(p.prob(int32_t(i)) - q.prob(int32_t(i)), 0.0);
    total += residual_[i];
  }
  const double u = uniform();
  if (!(total > 0)) return pick(p, u);
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

int32_t SpeculativeSampler::greedy(std::span<const float> logits, std::span<const int32_t> extra) {
  if (params_.logit_bias.empty() && params_.presence_penalty == 0 && params_.frequency_penalty == 0)
    return argmax_logits(logits);
  for (int32_t t : extra) observe(t);
  biased_.assign(logits.begin(), logits.end());
  for (const auto& [id, bias] : params_.logit_bias)
    if (static_cast<size_t>(id) < biased_.size()) biased_[id] += bias;
  for (const auto& [id, n] : counts_)
    if (static_cast<size_t>(id) < biased_.size())
      biased_[id] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
  for (int32_t t : extra) count(t, -1);
  return argmax_logits(biased_);
}

int32_t SpeculativeSampler::sample(std::span<const float> logits) {
  int32_t token;
  if (params_.temperature == 0) {
    token = greedy(logits, {});
  } else {
    distribution(logits, {}, &p_);
    token = pick(p_, uniform());
  }
  observe(token);
  return token;
}

int32_t SpeculativeSampler::draft_token(std::span<const float> row, std::span<const int32_t> before) {
  if (params_.temperature == 0) return greedy(row, before);
  distribution(row, before, &q_);
  return pick(q_, draft_rng_.uniform());
}

Result<VerifyResult> SpeculativeSampler::verify(const VerifyInput& in) {
  const size_t k = in.drafts.size(), V = size_t(std::max(in.vocab, 0));
  const bool sampled = params_.temperature > 0 && in.pick == DraftPick::kSampled;
  if (V == 0) return invalid_argument("speculative verify: vocab must be > 0");
  if (in.target_logits.size() != (k + 1) * V)
    return invalid_argument("speculative verify: target logits have " + std::to_string(in.target_logits.size()) +
                            " values, expected [k+1, V] = [" + std::to_string(k + 1) + ", " + std::to_string(V) + "]");
  if (sampled && in.draft_logits.size() != k * V)
    return invalid_argument("speculative verify: draft logits have " + std::to_string(in.draft_logits.size()) +
                            " values, expected [k, V] = [" + std::to_string(k) + ", " + std::to_string(V) + "]");
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
    return invalid_argument("speculative verify: target " + row_name("logits", j) + " has no finite probability (all NaN?)");
  };
  VerifyResult r;
  size_t j = 0;
  for (; j < k; ++j) {
    const auto prefix = in.drafts.first(j);
    const int32_t d = in.drafts[j];
    if (params_.temperature == 0) {
      const int32_t best = greedy(target_row(j), prefix);
      if (best < 0) return fail(j);
      if (best != d) { r.next = best; break; }
      continue;
    }
    distribution(target_row(j), prefix, &p_);
    if (!usable(p_)) return fail(j);
    double qd = 1.0;  // kArgmax: q is the point mass on d
    if (sampled) {
      distribution(in.draft_logits.subspan(j * V, V), prefix, &q_);
      qd = usable(q_) ? q_.prob(d) : 0.0;
      if (!(qd > 0)) { r.next = pick(p_, uniform()); break; }  // an unusable draft row: stop here
    }
    if (uniform() < p_.prob(d) / qd) continue;
    if (!sampled) {  // point-mass q: the residual is p without d
      q_.weight.assign(V, 0.0);
      q_.weight[d] = 1.0;
      q_.order.assign(1, d);
      q_.total = 1.0;
    }
    r.next = pick_residual(p_, q_);
    break;
  }
  r.accepted = int32_t(j);
  if (j == k) {  // all accepted: the bonus from row k
    const auto prefix = in.drafts.first(k);
    if (params_.temperature == 0) {
      r.next = greedy(target_row(k), prefix);
    } else {
      distribution(target_row(k), prefix, &p_);
      r.next = usable(p_) ? pick(p_, uniform()) : -1;
    }
    if (r.next < 0) return fail(k);
  }
  for (size_t i = 0; i < j; ++i) observe(in.drafts[i]);
  observe(r.next);
  return r;
}

}  // namespace dsv41
