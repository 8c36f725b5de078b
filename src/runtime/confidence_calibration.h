// Online calibration of the DSpark confidence head (issue 15; system.md §4).
//
// The head emits one logit c_i per draft slot; in the release these are not calibrated, and the
// draft-length choice (draft_length.h) needs real acceptance probabilities. Each slot gets its own
// Platt map p_i = σ(a_i · c + b_i), starting at the identity (a = 1, b = 0: the raw sigmoid) and
// fitted online to observed outcomes by a Newton step per observation on the log-loss, with the
// curvature accumulated under exponential forgetting (λ = 0.999: about the last thousand
// observations of that slot count), so it settles fast and follows drift.
//
// What an outcome is: p_i estimates P(d_i accepted | d_1 … d_{i−1} accepted) — the factor of π_i.
// A verify step with k drafts of which j were accepted therefore says "accepted" for slots
// 1 … j and "rejected" for slot j + 1 (if j < k); slots after that were never judged and teach
// nothing.
//
// Starting fast (session 12): `--dspark auto` decides within its first ~10 drafting steps, and
// the head's raw σ(c) underestimates low confidences (0.06 where 0.39 is observed on dsv41-mini),
// so the planner's plans stay short unless the map moves within those steps. So the identity map
// is worth a few outcomes, not twenty (the offset b, the base rate, least), and a slot never judged yet reports the map of the nearest judged slot before
// it (the head's error is alike across slots) and starts from that map when first judged.
//
// Starting measured (session 20): a model may ship the maps measured on held-out text
// (`dspark_calibration.json` beside its weights, written by `dsv41 bench --dspark
// --dspark-calibration-out`): each slot it covers then starts from its measured map, worth
// `measured_weight` in both curvatures, instead of the identity, so a scheduler's first drafting
// steps already plan as later ones do (on dsv41-mini the raw σ(c) is a weak, flat predictor:
// observed acceptance 0.58–0.75 in every bucket on greedy text). The prior only sets how many
// drafts are verified, never which token is emitted: greedy verification emits plain decoding's
// tokens and the rejection rule keeps the target distribution whatever the plan.
#pragma once

#include <array>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// One slot's Platt map p = σ(scale · c + offset), and the slot's observed rate of acceptance in
// the run that fitted it (accepted / judged: P(accepted | the slots before it were); NaN where the
// file does not record it). The rate is a prior for a draft whose confidence is not known yet:
// auto's start-up prediction (runtime/shape_profile.h predicted_draft_speedup).
struct SlotMap {
  double scale = 1, offset = 0;
  double acceptance = NAN;
};

struct CalibrationOptions {
  double forgetting = 0.999;  // λ ∈ (0, 1]
  double prior_weight = 5;   // initial curvature of the scale a: how many observations a = 1 is worth
  double offset_prior_weight = 1;  // the same for the offset b = 0
  // Maps measured beforehand, slot 0 first (empty: the identity); slots past its end start as
  // described above (the nearest slot before them).
  std::vector<SlotMap> measured;
  // Their curvature (both a and b). The log-loss adds p(1 − p) ≤ ¼ per observation to b's, so 20
  // is worth ≈ 100 outcomes of a slot: at batch 8 slot 0 outweighs it after ≈ 12 steps, and the
  // map still follows text unlike the calibration's.
  double measured_weight = 20;
};

// The file a model ships its measured maps in (`<model dir>/dspark_calibration.json`):
// {"slots": [{"scale": a, "offset": b, "judged": n, "accepted": m}, …], …}; other keys are notes
// ("accepted" is optional: files written before session 41 lack it).
inline constexpr const char* kCalibrationFile = "dspark_calibration.json";
// The maps of `path`; an empty list when the file does not exist, an error when it is unreadable
// or malformed (a slot without finite scale and offset).
Result<std::vector<SlotMap>> load_calibration(const std::string& path);

class ConfidenceCalibrator {
 public:
  explicit ConfidenceCalibrator(int slots, CalibrationOptions options = {});

  // Calibrated acceptance probability of slot `slot` (0-based) for confidence logit `logit`.
  // A NaN logit or an unknown slot gives 0 (never draft on it).
  double probability(int slot, float logit) const;
  std::vector<double> probabilities(std::span<const float> logits) const;

  // One verify outcome (see above): `logits` are the confidences of the step's drafts (at least
  // `verified` of them), `verified` = k, `accepted` = j ≤ k.
  void observe(std::span<const float> logits, int verified, int accepted);

  // One slot's observation: logit → accepted or not.
  void observe_slot(int slot, float logit, bool accepted);

  double scale(int slot) const { return slots_[size_t(slot)].theta[0]; }   // a
  double offset(int slot) const { return slots_[size_t(slot)].theta[1]; }  // b
  // Outcomes seen for a slot. A slot the plan never verifies is never corrected: a caller can
  // verify one more slot now and then while this is small (cheap where the step cost is flat).
  long observations(int slot) const { return slots_[size_t(slot)].seen; }
  long acceptances(int slot) const { return slots_[size_t(slot)].accepted; }  // of those outcomes
  int slots() const { return int(slots_.size()); }
  // The map slot `slot` uses now (see map_of).
  SlotMap map(int slot) const;
  // The first `slots` maps as a calibration file's text (kCalibrationFile), with `note` as its
  // "what", each slot's observations as "judged" and its acceptances as "accepted".
  std::string to_json(int slots, const std::string& note) const;

 private:
  struct Slot {
    std::array<double, 2> theta = {1.0, 0.0};  // (a, b)
    std::array<double, 3> h;                   // curvature (h_aa, h_ab, h_bb)
    long seen = 0, accepted = 0;
    bool measured = false;  // started from a measured map: its own from the start
  };
  // The slot whose map `slot` uses: itself once judged or measured, else the nearest such slot
  // before it.
  const Slot& map_of(int slot) const;
  CalibrationOptions options_;
  std::vector<Slot> slots_;
};

}  // namespace dsv41
