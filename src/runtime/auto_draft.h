// `--dspark auto`'s decision to draft or not, from measurement (issue 15 item 3; system.md §4).
// The k* planner (runtime/draft_length.h) picks how many drafts pay given the confidences and a
// step-cost model; this switch decides whether drafting pays at all on this machine and batch,
// by timing it: decode-only steps with and without drafting, alternated over a measurement
// (the side with fewer samples goes next, so both see the same machine and the same batch),
// compared as emitted tokens per ms. Drafting must win by a margin; a clear loss ends the
// measurement early. While plain decoding wins the drafter's rings are not fed (feeding() is
// false): auto then costs a probe now and then — the rings refilled for a window of steps, then
// measured — and each lost probe doubles the wait before the next. A step that carries prefill
// chunks is not measured and does not draft while drafting is only being measured.
// Pure state, no clock: the scheduler reports each step's time (testable with made-up times).
#pragma once

#include <cstdint>

namespace dsv41 {

class AutoDraftSwitch {
 public:
  enum class Phase { kMeasure, kPlain, kRefill, kDrafting };
  static constexpr int64_t kSamples = 8;       // decode-only steps per side in a full measurement
  static constexpr int64_t kFirstLook = 3;     // per side before a clear loss may end it
  static constexpr int64_t kProbeEvery = 256;  // steps of drafting between measurements
  static constexpr int64_t kLongestWait = 4096;
  // Drafting must win clearly: where it pays (a step bound by reading weights) it wins by
  // 1.5–2.5×, while a near tie over a few steps of a noisy machine is as likely a loss.
  static constexpr double kMargin = 1.15, kClearLoss = 0.75;

  // refill_steps: steps of fed rings before a probe measures (the drafter's window).
  explicit AutoDraftSwitch(int64_t refill_steps) : refill_steps_(refill_steps) {}

  // Before a step: whether it drafts. prefilling: the step carries prefill chunks.
  bool want_draft(bool prefilling);
  // After the step: its wall time and the tokens it emitted; measured only when decode-only.
  void record(bool drafted, bool decode_only, double ms, int64_t emitted);
  // Whether the engine should feed the drafter's rings now.
  bool feeding() const { return phase_ != Phase::kPlain; }
  Phase phase() const { return phase_; }
  int64_t wait() const { return wait_; }

 private:
  void enter(Phase phase);
  void decide();

  int64_t refill_steps_;
  Phase phase_ = Phase::kMeasure;
  double ms_[2] = {0, 0};  // [0] plain, [1] drafting
  int64_t tokens_[2] = {0, 0};
  int64_t samples_[2] = {0, 0};
  int64_t steps_ = 0;       // steps in this phase
  int64_t wait_ = kProbeEvery;       // plain steps after the next lost measurement
  int64_t plain_for_ = kProbeEvery;  // plain steps of the current kPlain phase
};

}  // namespace dsv41
