// `--dspark auto`'s measured switch (see auto_draft.h).
#include "runtime/auto_draft.h"

#include <algorithm>
#include <bit>

namespace dsv41 {

double AutoDraftSwitch::loss_bound(int64_t samples_per_side) {
  // After four a side, drafting that is not even ahead will not reach the margin.
  constexpr double kBound[] = {0.5, 0.7, 0.85, 1.0};
  return kBound[std::clamp<int64_t>(samples_per_side, 1, 4) - 1];
}

int AutoDraftSwitch::bucket(int64_t seqs) {
  if (seqs <= 1) return 0;
  return std::min(kBuckets - 1, static_cast<int>(std::bit_width(static_cast<uint64_t>(seqs))) - 1);
}

void AutoDraftSwitch::enter(Bucket& b, Phase phase) {
  b.phase = phase;
  b.steps = 0;
  b.ms[0] = b.ms[1] = 0;
  b.tokens[0] = b.tokens[1] = 0;
  b.samples[0] = b.samples[1] = 0;
  b.empty_run = 0;
}

void AutoDraftSwitch::decide(Bucket& b) {
  const int64_t n = std::min(b.samples[0], b.samples[1]);
  bool won = false;
  if (b.empty_run < kEmptyLoss) {
    if (n < 1) return;
    const double plain = double(b.tokens[0]) / b.ms[0], drafting = double(b.tokens[1]) / b.ms[1];
    const bool lost = drafting < loss_bound(n) * plain;
    if (!lost && n < kSamples) return;
    won = !lost && drafting > kMargin * plain;
  }
  // Where the verdict holds (a compute-bound CPU never drafts, a weight-bound GPU always does)
  // the measurements fade to a vanishing share of the steps; a change starts the waits over.
  b.wait = b.measured && won == b.last_won ? std::min(2 * b.wait, kLongestWait) : kFirstWait;
  b.last_won = won;
  b.measured = true;
  verdict_ = {int(&b - buckets_.data()), won, b.empty_run >= kEmptyLoss, {b.samples[0], b.samples[1]},
              {b.ms[0] > 0 ? double(b.tokens[0]) / b.ms[0] : 0.0, b.ms[1] > 0 ? double(b.tokens[1]) / b.ms[1] : 0.0}};
  ++verdicts_;
  enter(b, won ? Phase::kDrafting : Phase::kPlain);
}

bool AutoDraftSwitch::want_draft(bool prefilling, int64_t seqs) {
  current_ = bucket(seqs);
  Bucket& b = buckets_[current_];
  ++b.steps;
  if (b.phase != Phase::kMeasure && b.steps > b.wait) enter(b, Phase::kMeasure);
  const bool ready = fed_run_ >= refill_steps_;
  fed_run_ = feeding() ? fed_run_ + 1 : 0;
  measuring_ = false;
  const bool pair = pair_open_ && pair_bucket_ == current_;
  pair_open_ = false;
  if (!ready) return false;
  if (b.phase == Phase::kDrafting) return true;
  if (b.phase != Phase::kMeasure || prefilling) return false;
  // The side with fewer samples goes next (drafting on a tie); with settle, twice in a row, the
  // second counted.
  const bool side = pair ? pair_side_ : b.samples[1] <= b.samples[0];
  measuring_ = !settle_ || pair;
  if (settle_ && !pair) {
    pair_open_ = true;
    pair_side_ = side;
    pair_bucket_ = current_;
  }
  return side;
}

void AutoDraftSwitch::record(bool drafted, bool decode_only, double ms, int64_t emitted, int64_t verified) {
  if (!measuring_ || !decode_only || ms <= 0 || emitted == 0) return;
  measuring_ = false;
  Bucket& b = buckets_[current_];
  if (drafted && b.warmup > 0) {
    --b.warmup;
    return;
  }
  const int side = drafted ? 1 : 0;
  b.ms[side] += ms;
  b.tokens[side] += emitted;
  ++b.samples[side];
  if (drafted) b.empty_run = verified > 0 ? 0 : b.empty_run + 1;
  decide(b);
}

}  // namespace dsv41
