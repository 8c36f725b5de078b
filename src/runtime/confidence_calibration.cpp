// Per-slot online Platt scaling of DSpark confidences (see confidence_calibration.h).
#include "runtime/confidence_calibration.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "base/file_io.h"

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
  if (!(options_.measured_weight > 0)) options_.measured_weight = 20;
  Slot s;
  s.h = {options_.prior_weight, 0.0, options_.offset_prior_weight};
  slots_.assign(size_t(std::max(slots, 0)), s);
  for (size_t i = 0; i < slots_.size() && i < options_.measured.size(); ++i) {
    const SlotMap& m = options_.measured[i];
    if (!std::isfinite(m.scale) || !std::isfinite(m.offset)) break;  // the slots after it fall back too
    slots_[i].theta = {m.scale, m.offset};
    slots_[i].h = {options_.measured_weight, 0.0, options_.measured_weight};
    slots_[i].measured = true;
  }
}

const ConfidenceCalibrator::Slot& ConfidenceCalibrator::map_of(int slot) const {
  while (slot > 0 && slots_[size_t(slot)].seen == 0 && !slots_[size_t(slot)].measured) --slot;
  return slots_[size_t(slot)];
}

SlotMap ConfidenceCalibrator::map(int slot) const {
  if (slot < 0 || size_t(slot) >= slots_.size()) return {};
  const auto& t = map_of(slot).theta;
  return {t[0], t[1]};
}

std::string ConfidenceCalibrator::to_json(int slots, const std::string& note) const {
  nlohmann::json out = {{"what", note}, {"slots", nlohmann::json::array()}};
  for (int i = 0; i < std::min(slots, int(slots_.size())); ++i) {
    const SlotMap m = map(i);
    out["slots"].push_back({{"scale", m.scale}, {"offset", m.offset}, {"judged", slots_[size_t(i)].seen},
                            {"accepted", slots_[size_t(i)].accepted}});
  }
  return out.dump(1) + "\n";
}

// A slot's "accepted" / "judged" (NaN without "accepted", or when nothing was judged); an error
// for counts that are not whole numbers with 0 ≤ accepted ≤ judged.
static Result<double> recorded_acceptance(const std::string& path, const nlohmann::json& slot, int number) {
  if (!slot.contains("accepted")) return double(NAN);
  const auto& a = slot["accepted"];
  const auto& j = slot.contains("judged") ? slot["judged"] : nlohmann::json();
  if (!a.is_number_integer() || !j.is_number_integer() || a.get<int64_t>() < 0 || a.get<int64_t>() > j.get<int64_t>())
    return corrupt(path + ": slot " + std::to_string(number) +
                   " needs whole numbers 0 ≤ \"accepted\" ≤ \"judged\"");
  return j.get<int64_t>() > 0 ? double(a.get<int64_t>()) / double(j.get<int64_t>()) : double(NAN);
}

Result<std::vector<SlotMap>> load_calibration(const std::string& path) {
  if (!is_regular_file(path)) return std::vector<SlotMap>{};
  DSV41_ASSIGN_OR_RETURN(std::string text, read_file(path));
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("slots") || !doc["slots"].is_array())
    return corrupt(path + ": not a DSpark calibration (an object with a \"slots\" array)");
  std::vector<SlotMap> maps;
  for (const nlohmann::json& slot : doc["slots"]) {
    const bool numbers = slot.is_object() && slot.contains("scale") && slot.contains("offset") &&
                         slot["scale"].is_number() && slot["offset"].is_number();
    const SlotMap m = numbers ? SlotMap{slot["scale"].get<double>(), slot["offset"].get<double>()} : SlotMap{NAN, NAN};
    if (!std::isfinite(m.scale) || !std::isfinite(m.offset))
      return corrupt(path + ": slot " + std::to_string(maps.size() + 1) + " needs finite numbers \"scale\" and \"offset\"");
    maps.push_back(m);
    DSV41_ASSIGN_OR_RETURN(maps.back().acceptance, recorded_acceptance(path, slot, int(maps.size())));
  }
  return maps;
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
  if (s.seen == 0) s.theta = map_of(slot).theta;  // starts where its estimates were (its own if measured)
  const double c = std::clamp(double(logit), -kMaxLogit, kMaxLogit);
  const double p = sigmoid(s.theta[0] * c + s.theta[1]);
  // Curvature of the log-loss at this point, floored so a saturated prediction still moves.
  const double w = std::max(p * (1 - p), 1e-3), lam = options_.forgetting;
  s.h = {lam * s.h[0] + w * c * c, lam * s.h[1] + w * c, lam * s.h[2] + w};
  ++s.seen;
  s.accepted += accepted ? 1 : 0;
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
