// Per-slot online Platt scaling of DSpark confidences (see confidence_calibration.h).
#include "runtime/confidence_calibration.h"

#include <algorithm>
#include <cmath>

namespace dsv41 {
namespace {

double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }

// Logits far out add nothing but rounding: the head's values sit well inside this.
constexpr double kMaxLogit = 30;

}  // namespace

ConfidenceCalibrator::ConfidenceCalibrator(int slots, CalibrationOptions options) : options_(options) {
  if (!(options_.forgetting > 0 && options_.forgetting <= 1)) options_.forgetting = 0.999;
  if (!(options_.prior_weight > 0)) options_.prior_weight = 20;
  if (!(options_.offset_prior_weight > 0)) options_.offset_prior_weight = 2;
  Slot s;
  s.h = {options_.prior_weight, 0.0, options_.offset_prior_weight};
  slots_.assign(size_t(std::max(slots, 0)), s);
}

const ConfidenceCalibrator::Slot& ConfidenceCalibrator::map_of(int slot) const {
  while (slot > 0 && slots_[size_t(slot)].seen == 0) --slot;
  return slots_[size_t(slot)];
}

double ConfidenceCalibrator::probability(int slot, float logit) const {
  if (slot < 0 || size_t(slot) >= slots_.size() || std::isnan(logit)) return 0.0;
  const auto& t = map_of(slot).theta;
  const double c = std::clamp(double(logit), -kMaxLogit, kMaxLogit);
  return sigmoid(t[0] * c + t[1]);
}

std::vector<double> ConfidenceCalibrator::probabilities(std::span<const float> logits) const {
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) p[i] = probability(int(i), logits[i]);
  return p;
}

void ConfidenceCalibrator::observe_slot(int slot, float logit, bool accepted) {
  if (slot < 0 || size_t(slot) >= slots_.size() || std::isnan(logit)) return;
  Slot& s = slots_[size_t(slot)];
  if (s.seen == 0) s.theta = map_of(slot).theta;  // starts where its estimates were
  const double c = std::clamp(double(logit), -kMaxLogit, kMaxLogit);
  const double p = sigmoid(s.theta[0] * c + s.theta[1]);
  // Curvature of the log-loss at this point, floored so a saturated prediction still moves.
  const double w = std::max(p * (1 - p), 1e-3), lam = options_.forgetting;
  s.h = {lam * s.h[0] + w * c * c, lam * s.h[1] + w * c, lam * s.h[2] + w};
  ++s.seen;
  const double g = p - (accepted ? 1.0 : 0.0);  // gradient = g · (c, 1)
  const double det = s.h[0] * s.h[2] - s.h[1] * s.h[1];
  if (!(det > 0)) return;
  s.theta[0] -= (s.h[2] * g * c - s.h[1] * g) / det;
  s.theta[1] -= (s.h[0] * g - s.h[1] * g * c) / det;
}

void ConfidenceCalibrator::observe(std::span<const float> logits, int verified, int accepted) {
  verified = std::min(verified, int(logits.size()));
  for (int i = 0; i < verified && i <= accepted; ++i) observe_slot(i, logits[size_t(i)], i < accepted);
}

}  // namespace dsv41
