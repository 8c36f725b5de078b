// `--dspark auto`'s measured switch (see auto_draft.h).
#include "runtime/auto_draft.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace dsv41 {

double AutoDraftSwitch::loss_bound(int64_t samples_per_side) {
  // Clear losses end early; from four a side the bound rises towards 1 as the margin falls
  // towards it (0.85 at 4, 0.89 at 8, 0.925 at 16, 0.947 at 32): a near tie measures on. On the H100
  // (session 32) a measurement at the start of a batch-1 run read 16 drafting steps of 1.6 tokens
  // (2.9 in steady drafting) as 1.0× plain and "not ahead after four" decoded plainly for the
  // 1,024 steps that K = 5 ran 1.66× faster; the yield of a request's first tokens is not the
  // yield of the rest.
  constexpr double kBound[] = {0.5, 0.7, 0.85};
  if (samples_per_side < 4) return kBound[std::max<int64_t>(samples_per_side, 1) - 1];
  const double n = double(std::min(samples_per_side, kMaxSamples));
  return 1.0 - kNearTie * std::sqrt(4.0 / n);
}

double AutoDraftSwitch::margin(int64_t samples_per_side) {
  // The yield's noise falls as 1/√n: so does the lead asked of it (1.15 at 8, 1.11 at 16, 1.075 at 32).
  const double n = double(std::clamp<int64_t>(samples_per_side, kSamples, kMaxSamples));
  return 1.0 + (kMargin - 1.0) * std::sqrt(double(kSamples) / n);
}

// Points with a batch size ≥ 1 and a finite positive value, ascending.
static std::vector<std::pair<int64_t, double>> valid_points(std::vector<std::pair<int64_t, double>> points) {
  std::erase_if(points, [](const auto& p) { return p.first < 1 || !(std::isfinite(p.second) && p.second > 0); });
  std::sort(points.begin(), points.end());
  return points;
}

// Linear between the points, NaN outside them.
static double interpolate(const std::vector<std::pair<int64_t, double>>& p, int64_t seqs) {
  if (p.empty() || seqs < p.front().first || seqs > p.back().first) return NAN;
  const auto hi = std::lower_bound(p.begin(), p.end(), seqs, [](const auto& q, int64_t s) { return q.first < s; });
  if (hi->first == seqs) return hi->second;
  const auto lo = std::prev(hi);
  const double t = double(seqs - lo->first) / double(hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

void AutoDraftSwitch::set_profiled_plain(std::vector<std::pair<int64_t, double>> points) {
  profiled_plain_ = valid_points(std::move(points));
}

double AutoDraftSwitch::profiled_plain_ms(int64_t seqs) const { return interpolate(profiled_plain_, seqs); }

void AutoDraftSwitch::set_predicted_speedup(std::vector<std::pair<int64_t, double>> points) {
  predicted_speedup_ = valid_points(std::move(points));
}

double AutoDraftSwitch::predicted_speedup(int64_t seqs) const { return interpolate(predicted_speedup_, seqs); }

bool AutoDraftSwitch::plain_from_profile(const Bucket& b) const {
  return b.profiled && !b.measured && std::isfinite(profiled_plain_ms(seqs_));
}

int AutoDraftSwitch::bucket(int64_t seqs) {
  if (seqs <= 1) return 0;
  return std::min(kBuckets - 1, static_cast<int>(std::bit_width(static_cast<uint64_t>(seqs))) - 1);
}

AutoDraftSwitch::Phase AutoDraftSwitch::implied_verdict(int i) const {
  bool draft = false, plain = false;
  for (int j = i + 1; j < kBuckets && !draft; ++j) draft = buckets_[j].measured && buckets_[j].last_won;
  for (int j = i - 1; j >= 0 && !plain; --j) plain = buckets_[j].measured && !buckets_[j].last_won;
  if (draft == plain) return Phase::kMeasure;
  return draft ? Phase::kDrafting : Phase::kPlain;
}

void AutoDraftSwitch::enter(Bucket& b, Phase phase) {
  b.phase = phase;
  b.steps = 0;
  b.ms[0] = b.ms[1] = 0;
  b.tokens[0] = b.tokens[1] = 0;
  b.samples[0] = b.samples[1] = 0;
  b.yield_steps = b.yield_tokens = 0;
  b.trace_size = 0;
  b.empty_run = 0;
}

double AutoDraftSwitch::draft_yield(const Bucket& b) {
  return b.yield_steps > 0 ? double(b.yield_tokens) / double(b.yield_steps) : 0.0;
}

// The counted drafting steps' time against the yield of every drafting step of the measurement
// (each counted step is one of them, so the yield is there once there is time).
double AutoDraftSwitch::drafting_tokens_per_ms(const Bucket& b) {
  return b.ms[1] > 0 ? draft_yield(b) * double(b.samples[1]) / b.ms[1] : 0.0;
}

int64_t AutoDraftSwitch::evidence(const Bucket& b) const {
  return plain_is_full(b) ? b.samples[1] : std::min(b.samples[0], b.samples[1]);
}

void AutoDraftSwitch::decide(Bucket& b) {
  const int64_t n = evidence(b);
  bool won = false;
  if (b.empty_run < kEmptyLoss) {
    if (n < 1) return;
    const double plain = double(b.tokens[0]) / b.ms[0], drafting = drafting_tokens_per_ms(b);
    const bool lost = drafting < loss_bound(n) * plain;
    won = !lost && n >= kSamples && drafting > margin(n) * plain;
    if (!lost && !won && n < kMaxSamples) return;
  }
  // Where the verdict holds (a compute-bound CPU never drafts, a weight-bound GPU always does)
  // the measurements fade to a vanishing share of the steps; a change starts the waits over.
  b.wait = b.measured && won == b.last_won ? std::min(2 * b.wait, kLongestWait) : kFirstWait;
  b.last_won = won;
  b.measured = true;
  b.profiled = false;
  b.inherited = false;
  verdict_ = {int(&b - buckets_.data()),
              won,
              b.empty_run >= kEmptyLoss,
              {b.samples[0], b.samples[1]},
              {b.ms[0] > 0 ? double(b.tokens[0]) / b.ms[0] : 0.0, drafting_tokens_per_ms(b)},
              draft_yield(b),
              b.trace_size,
              b.trace};
  ++verdicts_;
  enter(b, won ? Phase::kDrafting : Phase::kPlain);
}

bool AutoDraftSwitch::want_draft(bool prefilling, int64_t seqs) {
  current_ = bucket(seqs);
  seqs_ = std::max<int64_t>(seqs, 1);
  Bucket& b = buckets_[current_];
  ++b.steps;
  if (b.phase != Phase::kMeasure && b.steps > b.wait) enter(b, Phase::kMeasure);
  // A bucket that never measured and has not started to takes its neighbours' verdict, if they
  // imply one, else plain decoding where the profile predicts a clear loss.
  if (!b.measured && !b.inherited && b.phase == Phase::kMeasure && b.trace_size == 0 &&
      (run_left_ == 0 || run_bucket_ != current_)) {
    Phase implied = implied_verdict(current_);
    if (implied == Phase::kMeasure && predicted_speedup(seqs_) < kPredictedLoss) {
      implied = Phase::kPlain;
      ++predicted_verdicts_;
      last_predicted_bucket_ = current_;
    }
    if (implied != Phase::kMeasure) {
      enter(b, implied);
      b.inherited = true;
      b.wait = kFirstWait;
      b.steps = 1;
    }
  }
  const bool ready = fed_run_ >= refill_steps_;
  fed_run_ = feeding() ? fed_run_ + 1 : 0;
  measuring_ = in_measurement_ = false;
  const bool in_run = run_left_ > 0 && run_bucket_ == current_;
  const int64_t carried = run_left_;
  const bool after_drafting_run = last_measured_drafting_ && run_bucket_ == current_;
  run_left_ = 0;  // a run continues only through the steps that measure, in one bucket
  last_measured_drafting_ = false;
  if (!ready) return false;
  if (b.phase == Phase::kDrafting) return true;
  if (b.phase != Phase::kMeasure || prefilling) return false;
  // The side with fewer samples goes next (drafting on a tie, and once plain has plain_samples_);
  // with settle, kRunSteps times in a row, all but the first kSettleSteps counted — except a
  // drafting run right after one (plain full): there is no change of side to settle.
  const int64_t run = settle_ ? kRunSteps : 1;
  const int64_t left = in_run ? carried : run;
  const bool side = in_run ? run_side_ : b.samples[1] <= b.samples[0] || plain_is_full(b) || plain_from_profile(b);
  run_counts_ = in_run ? run_counts_ : side && after_drafting_run;
  measuring_ = run_counts_ || run - left >= (settle_ ? kSettleSteps : 0);
  last_measured_drafting_ = side;
  in_measurement_ = true;
  run_side_ = side;
  run_bucket_ = current_;
  run_left_ = left - 1;
  return side;
}

void AutoDraftSwitch::record(bool drafted, bool decode_only, double ms, int64_t emitted, int64_t verified) {
  if (!in_measurement_ || !decode_only || ms <= 0 || emitted == 0) return;
  in_measurement_ = false;
  Bucket& b = buckets_[current_];
  const bool warmup = measuring_ && drafted && b.warmup > 0;  // a sample's place, not counted
  const bool counted = measuring_ && !warmup;
  if (b.trace_size < kTraceSamples) b.trace[b.trace_size++] = {drafted, counted, float(ms), int32_t(emitted)};
  if (drafted) {
    ++b.yield_steps;
    b.yield_tokens += emitted;
  }
  measuring_ = false;
  if (warmup) --b.warmup;
  if (!counted) return;
  const int side = drafted ? 1 : 0;
  b.ms[side] += ms;
  b.tokens[side] += emitted;
  ++b.samples[side];
  if (drafted && plain_from_profile(b)) {  // the plain step of as many sequences, as profiled
    b.ms[0] += profiled_plain_ms(seqs_);
    b.tokens[0] += seqs_;
    ++b.samples[0];
  }
  if (drafted) b.empty_run = verified > 0 ? 0 : b.empty_run + 1;
  decide(b);
}

}  // namespace dsv41
