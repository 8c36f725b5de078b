// How many DSpark drafts each sequence verifies this step (system.md §4).
//
// The drafter proposes B tokens per sequence with acceptance estimates p_1 … p_B (calibrated
// confidences: confidence_calibration.h). Verifying the first k yields E(k) = 1 + Σ_{i≤k} π_i
// tokens in expectation, π_i = Π_{u≤i} p_u, and costs a step of k + 1 rows. One sequence:
// k* = argmax_k E(k) / cost(k + 1 rows). A batch shares one step whose cost depends on its total
// rows, so slots compete across sequences: (sequence, slot) pairs are admitted in decreasing π
// (a sequence's π never rises along its slots, so each sequence admits a prefix), and the plan is
// the admitted prefix with the highest modelled throughput Σ E / cost(total rows, seqs) — DSPEC's
// greedy rule, taken over every prefix rather than stopping at the first dip, so a cost step
// (e.g. a new tile) that later rows amortise is not mistaken for the end. Ties keep fewer rows.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "runtime/step_cost.h"

namespace dsv41 {

struct DsparkMode {
  enum class Kind { kAuto, kOff, kFixed };
  Kind kind = Kind::kAuto;
  int k = 0;  // kFixed: drafts per step, 1 … block size
};

// "auto", "off" or a draft length "1" … block_size; anything else is an error naming them.
Result<DsparkMode> parse_dspark_mode(std::string_view text, int block_size);

// How kAuto plans a batch (the defaults are the planner above).
struct DraftPlanRule {
  // One cap K for every sequence (k_s = min(K, m_s)), the K of the highest modelled throughput,
  // instead of admitting (sequence, slot) pairs one by one: at batch b the steps then take at most
  // B + 1 shapes (b·(K + 1) rows) instead of any row count from b to b·(B + 1), and each new shape
  // pays a first touch on the device backend (a CUDA graph instantiated per row count).
  bool uniform_cap = false;
  // A plan whose shape (total rows, batch bucket) was never stepped pays StepCost::first_touch_ms
  // once; it is charged as a share 1 / kFirstTouchSteps of it, as if spread over the steps that
  // will reuse the shape (a guess: charged in full, the first shape picked would stay forever).
  bool charge_first_touch = false;
  static constexpr double kFirstTouchSteps = 8;
  // > 0: a plan whose next larger shape (one more row; one more slot per sequence under
  // uniform_cap) has an estimate not refreshed for explore_after steps of its bucket
  // (StepCost::steps_since_refresh) takes it instead — the smallest such shape —, so an estimate
  // that is too high is measured again instead of pricing its shape out for good. Session 40's
  // traces (H100, batch 1): after slow steps, auto verified 5 rows (or 2) for runs of 20–100 steps
  // where 6 rows cost the same (1.485 against 1.500 ms). Plans of one sequence only (draft_length.cpp
  // explores()). 0: never — the default, since session 41's A/B on the H100 (two alternations,
  // batch 1: auto 1.782 / 1.750× with 16 against 1.783 / 1.815× with 0; docs/DSPARK.md): the
  // explored steps cost more than the stale estimates they corrected. kExploreAfter is the
  // setting measured (`dsv41 bench --dspark-auto-explore-after`).
  int explore_after = 0;
  static constexpr int kExploreAfter = 16;
};

struct DraftPlan {
  std::vector<int> k;            // per sequence, 0 … its number of estimates
  double expected_tokens = 0;    // Σ E(k_s)
  double cost_ms = 0;            // sunk_ms + cost(Σ (k_s + 1), seqs) (+ the first-touch share)
};

// accept_probs[s] = p_1 … p_m of sequence s (m ≤ block size; empty: no drafts, k = 0). Values
// outside [0, 1] are clamped, NaN counts as 0. kFixed gives every sequence min(K, m); kOff 0.
// sunk_ms: time already spent this step whatever the plan (the drafter's), added to the cost of
// every plan, k = 0 included: E / (sunk + cost) is the step's throughput once the drafts exist.
DraftPlan plan_draft_lengths(std::span<const std::vector<double>> accept_probs, const StepCost& cost,
                             const DsparkMode& mode, double sunk_ms = 0, const DraftPlanRule& rule = {});

// A closed batch (every request admitted together, none waiting) ends when its slowest sequence
// is done, and on a weight-bound step a token of a sequence that is ahead shortens nothing: its
// drafts only make its step rows dearer and the batch drain sooner (session 16's H200 traces: auto
// left 35 % of a 128-token batch-8 run to steps of fewer than 8 sequences, K = 2 17 %). Scales
// each sequence's estimates by remaining_s / max remaining (its first p, so every π of it), so
// the planner values a leader's tokens less than a laggard's. remaining[s] ≤ 0 counts as 0.
void weigh_by_remaining(std::span<std::vector<double>> accept_probs, std::span<const int64_t> remaining);

// The one-sequence case of plan_draft_lengths.
int choose_draft_length(std::span<const double> accept_probs, const StepCost& cost, const DsparkMode& mode);

}  // namespace dsv41
