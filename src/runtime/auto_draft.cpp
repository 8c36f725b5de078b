// `--dspark auto`'s measured switch (see auto_draft.h).
#include "runtime/auto_draft.h"

#include <algorithm>

namespace dsv41 {

void AutoDraftSwitch::enter(Phase phase) {
  phase_ = phase;
  steps_ = 0;
  ms_[0] = ms_[1] = 0;
  tokens_[0] = tokens_[1] = 0;
  samples_[0] = samples_[1] = 0;
}

void AutoDraftSwitch::decide() {
  if (samples_[0] < kFirstLook || samples_[1] < kFirstLook) return;
  const double plain = double(tokens_[0]) / ms_[0], drafting = double(tokens_[1]) / ms_[1];
  // A clear loss ends the measurement early (drafting steps are the expensive ones).
  const bool done = (samples_[0] >= kSamples && samples_[1] >= kSamples) || drafting < kClearLoss * plain;
  if (!done) return;
  if (drafting > kMargin * plain) {
    wait_ = kProbeEvery;
    enter(Phase::kDrafting);
    return;
  }
  // Each lost measurement doubles the wait before the next: where drafting does not pay (a
  // compute-bound CPU, a large batch) the probes fade to a vanishing share of the steps.
  plain_for_ = wait_;
  wait_ = std::min(2 * wait_, kLongestWait);
  enter(Phase::kPlain);
}

bool AutoDraftSwitch::want_draft(bool prefilling) {
  ++steps_;
  switch (phase_) {
    case Phase::kMeasure:
      decide();
      break;
    case Phase::kPlain:
      if (steps_ > plain_for_) enter(Phase::kRefill);
      break;
    case Phase::kRefill:
      // A window's worth of fed positions, so the probe's drafter sees what it normally sees.
      if (steps_ > refill_steps_) enter(Phase::kMeasure);
      break;
    case Phase::kDrafting:
      if (steps_ > kProbeEvery) enter(Phase::kMeasure);
      break;
  }
  if (phase_ == Phase::kMeasure) return !prefilling && samples_[1] <= samples_[0];
  return phase_ == Phase::kDrafting;
}

void AutoDraftSwitch::record(bool drafted, bool decode_only, double ms, int64_t emitted) {
  if (phase_ != Phase::kMeasure || !decode_only || ms <= 0 || emitted == 0) return;
  const int side = drafted ? 1 : 0;
  ms_[side] += ms;
  tokens_[side] += emitted;
  ++samples_[side];
}

}  // namespace dsv41
