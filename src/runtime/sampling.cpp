// Greedy / temperature / top-p sampling with a seeded xoshiro256** (see sampling.h).
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace dsv41 {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform() { return double(next() >> 11) * 0x1.0p-53; }

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
