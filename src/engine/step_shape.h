// How a step's time grows with its shape, in relative units: fixed + per_row · rows +
// per_seq · sequences. A backend says which kind of step it runs (Backend::step_shape()); the
// DSpark planner starts from that before it has measured a shape (runtime/step_cost.h), so it
// must say whether extra verified rows are nearly free (a step that streams its weights: a GPU,
// a big model) or cost about a row each (a compute-bound step: a small model on CPU cores).
#pragma once

namespace dsv41 {

struct StepShape {
  double fixed = 20.0, per_row = 0.2, per_seq = 0.5;
  // Whether the first steps after a switch between drafting and plain decoding run slower than
  // steady ones (a device backend: graphs recorded anew, window copies rebuilt after a rollback).
  // DSpark auto's measurement then lets them settle and skips a bucket's first draft
  // (runtime/auto_draft.h); where they do not, those uncounted steps are only cost.
  bool switch_cost = true;
};

// Streaming-bound: reading the weights dominates; a row adds 1 % of a step, a sequence 2.5 %
// (its attention over the context).
inline constexpr StepShape kStreamingStep{};

// Compute-bound: measured on dsv41-mini on CPU cores (the VM and the 16-core Xeon,
// docs/BENCHMARKS.md "DSpark speculative decoding"): verifying k + 1 rows of one sequence costs
// ≈ 1 + 0.35·k plain steps, and at batch 8 each extra row costs nearly a full row's share, so
// fixed ≈ 1.86 rows and the per-sequence part is small.
// Nothing is recorded or copied per step shape on the CPU: the first drafting step measured no
// slower than the next (runtime/auto_draft.h), so no switch cost.
inline constexpr StepShape kComputeBoundStep{.fixed = 1.86, .per_row = 1.0, .per_seq = 0.0, .switch_cost = false};

}  // namespace dsv41
