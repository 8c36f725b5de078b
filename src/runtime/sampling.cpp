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

Result<Sampler> Sampler::create(const SamplingParams& params) {
  if (!std::isfinite(params.temperature) || params.temperature < 0)
    return invalid_argument("sampling: temperature must be a finite value ≥ 0 (0 = greedy)");
  if (!(params.top_p > 0 && params.top_p <= 1)) return invalid_argument("sampling: top_p must be in (0, 1]");
  return Sampler(params);
}

int32_t Sampler::sample(std::span<const float> logits) {
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
  size_t keep = 0;
  double mass = 0;
  while (keep < n) {
    mass += p[order[keep]];
    ++keep;
    if (mass >= params_.top_p) break;
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
