// RoPE tables (main / compress with YaRN) and the adjacent-pair rotation. Spec: model.md §3.6.
#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dsv41 {
namespace {

// f_i = θ^(−2i/d) in float32 steps, as the reference builds it (exponent in fp32, power, 1/x).
std::vector<float> base_frequencies(double theta, int dim, std::vector<float>* pos_freqs_out) {
  std::vector<float> inv(dim / 2), pos(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos[i] = static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    inv[i] = 1.0f / pos[i];
  }
  if (pos_freqs_out) *pos_freqs_out = pos;
  return inv;
}

// Number of the dimension at which `rotations` full turns fit in the original context.
double correction_dim(double rotations, int dim, double theta, double original_len) {
  return dim * std::log(original_len / (rotations * 2 * M_PI)) / (2 * std::log(theta));
}

}  // namespace

Result<Rope> Rope::create(const ModelConfig& config) {
  const int d = config.qk_rope_head_dim;
  if (d <= 0 || d % 2 != 0)
    return invalid_argument(config.source + ": qk_rope_head_dim must be a positive even number, got " +
                            std::to_string(d));
  if (!(config.rope_theta > 1) || !(config.compress_rope_theta > 1))
    return invalid_argument(config.source + ": rope_theta and compress_rope_theta must be > 1");
  Rope rope;
  rope.rope_dim_ = d;
  rope.main_ = base_frequencies(config.rope_theta, d, nullptr);
  std::vector<float> pos;
  rope.compress_ = base_frequencies(config.compress_rope_theta, d, &pos);
  if (config.rope_scaling) {
    const YarnScaling& y = *config.rope_scaling;
    if (!(y.factor > 0) || !(y.beta_fast > 0) || !(y.beta_slow > 0) || y.original_max_position_embeddings <= 0)
      return invalid_argument(config.source + ": rope_scaling needs positive factor, beta_fast, beta_slow and "
                                              "original_max_position_embeddings");
    const double theta = config.compress_rope_theta;
    const double len = static_cast<double>(y.original_max_position_embeddings);
    double low = std::floor(correction_dim(y.beta_fast, d, theta, len));
    double high = std::ceil(correction_dim(y.beta_slow, d, theta, len));
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(d - 1));
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    const float flow = static_cast<float>(low), fhigh = static_cast<float>(high);
    const float factor = static_cast<float>(y.factor);
    for (int i = 0; i < d / 2; ++i) {
      // γ_i: 0 below `low` (keep f_i: extrapolation), 1 above `high` (f_i/factor: interpolation).
      const float gamma = std::clamp((static_cast<float>(i) - flow) / (fhigh - flow), 0.0f, 1.0f);
      const float extrapolation_weight = 1.0f - gamma;
      const float interpolated = 1.0f / (factor * pos[i]);
      rope.compress_[i] = interpolated * (1.0f - extrapolation_weight) + rope.compress_[i] * extrapolation_weight;
    }
  }
  return rope;
}

void Rope::cos_sin(RopeKind kind, int64_t pos, float* cos, float* sin) const {
  const std::vector<float>& f = inv_freq(kind);
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < f.size(); ++i) {
    const float angle = p * f[i];  // fp32 product, as the reference's fp32 matmul
    cos[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

void Rope::apply(RopeKind kind, float* x, int64_t dim, int64_t pos, bool inverse) const {
  float cs[256], sn[256];
  std::vector<float> big_c, big_s;
  float* c = cs;
  float* s = sn;
  if (rope_dim_ / 2 > 256) {
    big_c.resize(rope_dim_ / 2);
    big_s.resize(rope_dim_ / 2);
    c = big_c.data();
    s = big_s.data();
  }
  cos_sin(kind, pos, c, s);
  rope_rotate(x, dim, rope_dim_, c, s, inverse);
}

void rope_rotate(float* x, int64_t dim, int rope_dim, const float* cos, const float* sin, bool inverse) {
  float* tail = x + (dim - rope_dim);
  for (int i = 0; i < rope_dim / 2; ++i) {
    const float even = tail[2 * i], odd = tail[2 * i + 1];
    const float s = inverse ? -sin[i] : sin[i];
    tail[2 * i] = even * cos[i] - odd * s;
    tail[2 * i + 1] = even * s + odd * cos[i];
  }
}

}  // namespace dsv41
