// Greedy / temperature / top-p sampling with a seeded xoshiro256** (see sampling.h).
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace dsv41 {

int32_t argmax_logits(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Result<Sampler> Sampler::create(const SamplingParams& params, std::span<const int32_t> context) {
  if (!std::isfinite(params.temperature) || params.temperature < 0)
    return invalid_argument("sampling: temperature must be a finite value ≥ 0 (0 = greedy)");
  if (!(params.top_p > 0 && params.top_p <= 1)) return invalid_argument("sampling: top_p must be in (0, 1]");
  if (params.top_k < 0) return invalid_argument("sampling: top_k must be ≥ 0 (0 = off)");
  if (!(params.min_p >= 0 && params.min_p <= 1)) return invalid_argument("sampling: min_p must be in [0, 1]");
  for (float pen : {params.presence_penalty, params.frequency_penalty})
    if (!(pen >= -2 && pen <= 2)) return invalid_argument("sampling: presence and frequency penalties must be in [-2, 2]");
  if (!(params.repetition_penalty > 0 && std::isfinite(params.repetition_penalty)))
    return invalid_argument("sampling: repetition_penalty must be a finite value > 0 (1 = off)");
  for (const auto& [id, bias] : params.logit_bias)
    if (id < 0 || !std::isfinite(bias))
      return invalid_argument("sampling: logit_bias needs token ids ≥ 0 and finite biases");
  Sampler s(params);
  if (params.repetition_penalty != 1.0f) {
    s.context_.assign(context.begin(), context.end());
    std::sort(s.context_.begin(), s.context_.end());
    s.context_.erase(std::unique(s.context_.begin(), s.context_.end()), s.context_.end());
  }
  return s;
}

bool Sampler::penalised() const {
  return params_.presence_penalty != 0 || params_.frequency_penalty != 0 || params_.repetition_penalty != 1.0f;
}

// Every distinct id of the context and of the returned tokens once (biased_ holds the logits).
void Sampler::penalise_repetitions() {
  const float r = params_.repetition_penalty;
  const auto scale = [&](int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= biased_.size()) return;
    float& v = biased_[size_t(id)];
    v = v > 0 ? v / r : v * r;
  };
  for (int32_t id : context_) scale(id);
  for (const auto& [id, n] : counts_)
    if (!std::binary_search(context_.begin(), context_.end(), id)) scale(id);
}

int32_t Sampler::sample(std::span<const float> raw) {
  const int32_t token = pick(raw);
  if (penalised() && token >= 0) {
    auto it = std::find_if(counts_.begin(), counts_.end(), [&](const auto& c) { return c.first == token; });
    if (it == counts_.end()) counts_.emplace_back(token, 1);
    else ++it->second;
  }
  return token;
}

int32_t Sampler::pick(std::span<const float> raw) {
  std::span<const float> logits = raw;
  if (!params_.logit_bias.empty() || !counts_.empty() || !context_.empty()) {
    biased_.assign(raw.begin(), raw.end());
    for (const auto& [id, bias] : params_.logit_bias)
      if (static_cast<size_t>(id) < biased_.size()) biased_[id] += bias;
    if (params_.repetition_penalty != 1.0f) penalise_repetitions();
    for (const auto& [id, n] : counts_)
      if (static_cast<size_t>(id) < biased_.size())
        biased_[id] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
    logits = biased_;
  }
  if (params_.temperature == 0) return argmax_logits(logits);
  const size_t n = logits.size();
  double mx = -INFINITY;
  for (float v : logits)
    if (!std::isnan(v)) mx = std::max(mx, double(v));
  std::vector<double> p(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::isnan(logits[i]) ? 0.0 : std::exp((double(logits[i]) - mx) / params_.temperature);
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  std::vector<int32_t> order(n);
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
  if (params_.min_p > 0) {
    const double floor = params_.min_p * p[order[0]];
    while (keep > 1 && p[order[keep - 1]] < floor) --keep;
    mass = 0;
    for (size_t k = 0; k < keep; ++k) mass += p[order[k]];
  }
  const double u = rng_.uniform() * mass;
  double acc = 0;
  for (size_t k = 0; k < keep; ++k) {
    acc += p[order[k]];
    if (u < acc) return order[k];
  }
  return order[keep - 1];
}

}  // namespace dsv41
