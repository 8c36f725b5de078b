// Measured cost of one decode/verify step, for choosing DSpark draft lengths (system.md §4:
// "cost(k) comes from the engine's measured throughput for the current batch").
//
// A step verifies `rows` target rows in total — Σ over the batch of (k_i + 1): the anchor plus
// k_i drafts per sequence — for `seqs` sequences. Its time depends on both (weights are read once
// per step, attention and experts grow with rows, per-sequence work with seqs), so the table is
// keyed by (seqs bucket = ⌊log2 seqs⌋, exact rows) and holds an exponential moving average of the
// step times seen, so it follows drift (contexts grow, other load comes and goes).
//
// A query between measured rows of its bucket interpolates linearly; beyond the measured rows it
// scales the nearest measurement by the prior's ratio; an empty bucket answers the prior,
// fixed + per_row · rows + per_seq · seqs. The default prior is shaped like a memory-bound GPU
// step (nearly flat in rows); the scheduler takes the backend's shape instead (engine/step_shape.h:
// the CPU backend's is compute-bound). It is only a start: profile() measures real shapes at start-up and
// record() keeps them fresh. A shape the scheduler never picks is never re-measured, so profile
// every batch bucket the server can reach (1, 2, 4, … max batch) and rows 1 … block size + 1.
#pragma once

#include <map>
#include <span>
#include <vector>

#include "base/function_ref.h"
#include "base/status.h"
#include "engine/step_shape.h"

namespace dsv41 {

struct StepCostPrior {
  double fixed_ms = 20.0;   // weight reads and launch overhead of a step
  double per_row_ms = 0.2;  // each verified row
  double per_seq_ms = 0.5;  // each sequence (its attention over the context)
};

// A backend's step shape as the prior (the scale is arbitrary: the planner compares ratios).
StepCostPrior step_cost_prior(const StepShape& shape);

// StepCost's unstored_steps for an option value (≥ 1: as given; otherwise by the backend): 2
// where steps pay for a switch (StepShape::switch_cost, the device backend) — on the H100
// (session 32, dsv41-mini, batch 1) the first two steps of each new verify row count both ran
// 1.3–1.7× the later ones (6 rows: 3.8 and 3.6 ms, then 2.3; 5 rows: 3.8 and 3.4, then 2.2), and a
// stored second step priced that count out for the rest of the run (auto verified 2 drafts a step
// where 5 cost the same: 1.51× off against K = 5's 1.71×) — else 1.
inline int unstored_steps_for(int option, bool switch_cost) { return option >= 1 ? option : switch_cost ? 2 : 1; }

class StepCost {
 public:
  // ema_alpha ∈ (0, 1]: the weight of a new measurement (1 = keep only the latest).
  // unstored_steps ≥ 1: the first steps of each shape that record() only notes (see there).
  explicit StepCost(StepCostPrior prior = {}, double ema_alpha = 0.1, int unstored_steps = 1);

  // Estimated ms of a step of `rows` total rows over `seqs` sequences (rows ≥ seqs ≥ 1).
  double cost(int rows, int seqs) const;

  // A measured step (wall time of the whole step, drafting included). Returns false and ignores
  // it when ms is not finite and positive, or the shape is impossible (seqs < 1, rows < seqs).
  // The first step of each shape (bucket, rows) is only noted, not stored: it pays first touches
  // (on the device backend a CUDA graph instantiated for a new row count: 5.5 ms against 3.1 for
  // the same 24-row step later, H200), and a shape whose table entry is too high is never picked
  // again, so never re-measured — at batch 8 the planner kept verifying 13 drafts, never the 16
  // that cost the same, because its one 24-row sample was a first touch.
  // With unstored_steps = 2 the second step is only noted too: on the H200 at batch 1 (session
  // 20's traces) the first two steps of a new row count both ran 2.4–2.8 ms against 1.6 later, the
  // planner stored the second, priced that count out and never verified it again (k = 3 in ≈ 390
  // of ≈ 410 steps where k = 4 cost the same).
  bool record(int rows, int seqs, double ms);

  // What a step of a shape never seen costs on top of cost() (its first touch), learned from the
  // shapes seen so far: an EMA of (first step − the shape's first stored step), floored at 0.
  // 0 for a shape already seen (recorded or profiled), and while nothing was learned (on the CPU
  // a first touch costs about what the next step does; on an H200 a 24-row verify step at batch
  // 8 ran 5.5 ms the first time and 3.1 ms after: a CUDA graph instantiated for the new row count).
  double first_touch_ms(int rows, int seqs) const;

  // Start-up profile: for each batch size b and r = 1 … max_rows_per_seq, runs step(r, b) — a
  // step with b sequences of r rows each, returning its ms — and stores it as a measurement
  // (replacing any earlier value). The first error from `step` is returned (the points measured
  // before it are kept).
  Status profile(std::span<const int> batch_sizes, int max_rows_per_seq,
                 FunctionRef<Result<double>(int rows_per_seq, int seqs)> step);

  double prior(int rows, int seqs) const;
  size_t measured_points() const;

  // Steps stored in the shape's bucket since its estimate was last refreshed (stored by a step or
  // the profile); −1 for a shape without an estimate. An estimate is refreshed only when its shape
  // is stepped, so one that is too high (a slow step stored, a profile taken in a noisy moment)
  // prices its shape out for good unless the planner steps it now and then
  // (DraftPlanRule::explore_after).
  long steps_since_refresh(int rows, int seqs) const;

 private:
  struct Entry {
    double ms = 0;
    long samples = 0;
    long stamp = 0;  // stored_[bucket] when last stored
  };
  static int bucket(int seqs);
  void store(int rows, int seqs, double ms, bool replace);
  // Counts a step of the shape (its first step's ms kept; NaN: profiled, past its first steps);
  // true while it is one of the first unstored_steps_.
  bool touch(int rows, int seqs, double ms);
  void learn_first_touch(int rows, int seqs, double stored_ms);  // at a shape's first stored step

  StepCostPrior prior_;
  double alpha_;
  std::vector<std::map<int, Entry>> table_;  // [bucket] → rows → EMA of ms
  std::vector<long> stored_;                 // [bucket] → steps stored so far
  struct Seen {
    double first_ms = 0;  // the shape's first step (not stored)
    int steps = 0;        // steps of the shape so far
  };
  std::vector<std::map<int, Seen>> touched_;  // [bucket] → rows seen
  int unstored_steps_ = 1;
  double first_touch_extra_ms_ = 0;  // EMA of a first touch's surcharge (first_touch_ms)
  long first_touch_samples_ = 0;
};

}  // namespace dsv41
