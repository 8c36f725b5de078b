// Start-up profile of decode and verify steps (issue 15 item 3: "cost(k, batch) from the
// engine's measured step times (a profiled table refreshed online)"; system.md §4).
//
// Before a scheduler serves, a few scratch sequences run the step shapes it will run — plain
// steps of one row a sequence and, with DSpark, verify steps of 2 … block + 1 rows a sequence at
// each batch size it can reach — and the median time of each shape is kept. Why before:
// - the k* planner's table (runtime/step_cost.h) otherwise learns a shape only when it picks it,
//   and a shape's first steps pay first touches (on the device backend a CUDA graph made for a new
//   sequence of launches): on the H100 auto mixed 2–5-row verifies into a K = 5 run's first
//   hundred steps because its first 6-row samples were slow (docs/DSPARK.md, session 37);
// - auto's switch (runtime/auto_draft.h) otherwise compares drafting with plain steps it runs for
//   the purpose: 19 plain steps of a 1,024-token batch-1 run where drafting emits 2.9 tokens a
//   step — with the plain side profiled it samples drafting only.
// The scratch steps are what serving runs: the same batch composition (every sequence one
// segment), the drafter's own drafts as the verify rows when `draft` is on, greedy picks from
// the logits (a plain step's host work), and each verify step rolled back to one kept row, as a
// step that rejects every draft leaves it. Each shape runs warm_steps untimed first (first
// touches), then timed_steps timed; the sequences are removed afterwards, the engine is as before
// except for what it keeps warm (graphs, buffers). Results never depend on it (the engine's
// outputs do not depend on the batch or on its history of shapes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"

namespace dsv41 {

struct ShapeProfileOptions {
  std::vector<int> batch_sizes{1};  // sequences a step, each ≥ 1
  int max_rows_per_seq = 1;         // 1: plain steps only; r: verify steps of 2 … r rows as well
  bool draft = false;               // run the drafter before each verify step (needs EngineOptions::dspark)
  int64_t context = 96;             // prompt positions of each scratch sequence before the steps
  int warm_steps = 2;               // a shape's first steps, not timed
  int timed_steps = 5;              // then timed: the median is the shape's cost
};

struct ShapeProfile {
  struct Point {
    int seqs = 0, rows_per_seq = 0;
    double step_ms = 0;   // forward + greedy picks + rollback to one row a sequence (median)
    double draft_ms = 0;  // the drafter before it (median; 0 for plain steps or without draft)
    // Plain steps (one row) with `draft`: the step with the drafter's rings not fed, as auto's
    // plain phase runs it (median); step_ms feeds them, as a drafting step's rows do. Feeding is
    // part of drafting's cost: on this project's 2-vCPU VM a fed plain step of dsv41-mini took
    // 1.1–1.8 ms where an unfed one took 0.9–1.3, and auto compared drafting with the fed one
    // (session 41). Equal to step_ms otherwise.
    double unfed_ms = 0;
  };
  std::vector<Point> points;  // batch size major, rows minor, as profiled
  double wall_ms = 0;         // the whole profile, scratch prefills included

  // The point of a shape, or null when it was not profiled.
  const Point* find(int seqs, int rows_per_seq) const;
};

// Profiles every batch size × 1 … max_rows_per_seq rows on scratch sequences of `engine` (which
// must have room for the largest batch beside what it holds). Fails, naming the shape, on a
// forward or draft error; the scratch sequences are removed either way.
Result<ShapeProfile> profile_shapes(Engine& engine, const ShapeProfileOptions& options);

// Positions a scratch sequence needs beyond options.context: each step keeps one row (the unfed
// plain steps with `draft` are one more shape's worth), and the last step's rows on top.
int64_t scratch_positions(const ShapeProfileOptions& options);

// Drafting's predicted speed against plain decoding at `seqs` sequences a step, from the profile
// and the drafts' chances alone — before any confidence is seen: the best, over the profiled verify
// shapes of r rows a sequence, of
//   (1 + Σ_{i < r} Π_{u ≤ i} acceptance[u−1]) tokens a sequence / (draft_ms + step_ms)
// against 1 / the plain step's unfed_ms (auto's plain phase), acceptance[u] being slot u+1's rate of acceptance given the
// slots before it were accepted (the model's measured rates: SlotMap::acceptance). Shapes past the
// known rates are not counted. NaN when the plain step or every verify shape of `seqs` is
// missing, or the first rate is unknown.
double predicted_draft_speedup(const ShapeProfile& profile, int seqs, std::span<const double> acceptance);

}  // namespace dsv41
