// `--dspark auto`'s decision to draft or not, from measurement (issue 15 item 3; system.md §4).
// The k* planner (runtime/draft_length.h) picks how many drafts pay given the confidences and a
// step-cost model; this switch decides whether drafting pays at all on this machine and batch,
// by timing it: decode-only steps with and without drafting, alternated over a measurement
// (the side with fewer samples goes next, so both see the same machine and the same batch),
// compared as emitted tokens per ms.
//
// What exploring costs is what `auto` loses against `off` where drafting never pays, so:
// - each batch-size bucket (⌊log2 sequences⌋) keeps its own verdict: a server whose batch
//   moves between sizes does not re-measure at every change, and batch 1 may draft where batch
//   8 does not;
// - a loss is taken fast and a win slowly: a drafting step that loses costs up to several plain
//   steps, so one sample a side that shows a 2× loss ends the measurement, while a win needs
//   kSamples a side and a kMargin lead (a noisy near tie is as likely a loss; a lead short of it
//   measures on, up to kMaxSamples a side, against a margin that shrinks). A first drafting
//   step slowed by first touches can only make a false loss, which the next measurement mends
//   (on the CPU the first drafting step measured no slower than the next);
// - a measurement that confirms the current choice doubles the wait before the next one (up to
//   kLongestWait steps of that bucket); one that changes it starts again from kFirstWait.
// A bucket's first verdict may come from its neighbours instead of a measurement: drafting pays
// less as the batch grows (a step's rows cost more once it stops being bound by reading the
// weights, while the drafter's gain per sequence stays), so a larger bucket that drafts says a
// smaller one would, and a smaller bucket that decodes plainly says a larger one would. A bucket
// that has never measured takes such a verdict (the nearest bucket that implies one; none where
// they disagree) and measures only after kFirstWait of its steps: a batch that drains as its
// requests finish (8 → 7 → … → 1) keeps drafting instead of measuring each bucket on its way
// down, paying plain runs at every size.
// While a bucket decodes plainly the drafter's rings are not fed (feeding() is false), except for
// a window's worth of steps before its next measurement, so that the probe's drafter sees what it
// normally sees; a bucket only drafts once the rings have been fed that long without a break.
// Steps that carry prefill chunks neither draft nor count while a bucket measures.
// With `settle` on, a measurement runs each side kRunSteps steps in a row and counts all but the
// first kSettleSteps: the first steps after a change of side pay for the change (on the device backend, graphs
// re-recorded for another sequence of launches, window copies rebuilt after the drafting step's
// rollback: on an H200 with dsv41-mini, plain samples taken between drafting steps ran ≈ 1.1 ms
// slower than plain steps in a row), which plain decoding or steady drafting never pay; strict
// alternation charged it to every sample, more to the plain side than to drafting, so at batch 8
// a near tie (fixed K = 2: 1.05× off) measured as a 1.4× win. (Pairs of steps, the second counted,
// were tried first, session 13: on the H200 at batch 1 they read drafting as a loss, 0.563 against
// 0.586 tok/ms after 4 samples a side, where steady drafting ran 1.29× plain decoding: runs of
// kRunSteps give more samples per switch. On the H200 at batch 8 the second plain step after a
// drafting one still ran ≈ 0.5 ms slower than the third, 3.09 against 2.60 ms, and a near tie
// read as a 1.19× win: two steps settle.)
// Drafting's tokens per step vary far more than its step times (1 to K + 1 tokens: a few samples
// of a 1.3× win read as a loss about one time in eight), so a drafting sample's yield is taken as
// the mean tokens of every decode-only drafting step of the measurement, counted or not (a switch
// or a first touch costs time, not accepted tokens), over the counted steps' time.
// Pure state, no clock: the scheduler reports each step's time (testable with made-up times).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace dsv41 {

class AutoDraftSwitch {
 public:
  enum class Phase { kMeasure, kPlain, kDrafting };
  static constexpr int64_t kSamples = 8;        // decode-only steps per side before a win is taken
  static constexpr int64_t kFirstWait = 1024;   // steps of a bucket before its verdict is re-measured
  static constexpr int64_t kLongestWait = 16384;
  static constexpr int kBuckets = 8;            // 1, 2–3, 4–7, …, ≥ 128 sequences
  // Drafting must win clearly: where it pays (a step bound by reading weights) it wins by
  // 1.5–2.5×, while a near tie over a few steps of a noisy machine is as likely a loss. The lead
  // it needs shrinks as the evidence grows (kMargin after kSamples a side, margin(n) after n): a
  // measurement that is ahead but not by the margin goes on, up to kMaxSamples a side, instead of
  // ending as a loss — on the H200 at batch 1 a 1.29× win (steady K = 4) measured 1.10× after 8
  // drafting samples of 2.0 tokens (2.5 in steady drafting) and decoded plainly for 1,024 steps.
  static constexpr double kMargin = 1.15;
  static constexpr int64_t kMaxSamples = 32;
  static double margin(int64_t samples_per_side);
  static constexpr int64_t kEmptyLoss = 2;
  static constexpr int64_t kRunSteps = 6;       // with settle: steps a side in a row,
  static constexpr int64_t kSettleSteps = 2;    // the first kSettleSteps of them not counted
  // The loss that ends a measurement after n samples a side: a clear one (½ as fast) after one,
  // then less clear ones as the evidence grows, 1 − kNearTie·√(4 / n) from four on; between it
  // and margin(n) the measurement goes on (after kMaxSamples a side, not a win is plain).
  static constexpr double kNearTie = 0.15;
  static double loss_bound(int64_t samples_per_side);

  // refill_steps: steps of fed rings before a bucket drafts (the drafter's window).
  // warmup_drafts: the first drafting steps of each bucket that are not counted — the first
  // draft at a batch size pays first touches (scratch, the device's feature copies) that can
  // make it look more than twice as slow, a false clear loss that one sample a side would take
  // and that only the next measurement (≥ kFirstWait steps later) would mend.
  // plain_samples: the counted plain steps a measurement takes at most; once it has them, only
  // drafting is sampled and the evidence is the drafting samples (the default, kMaxSamples, keeps
  // both sides even). The noise of a measurement is in drafting's yield (1 to K + 1 tokens a
  // step), not in a plain step's time: on the H200 at batch 8, a measurement of 8 + 8 samples in
  // runs of kRunSteps took 24 of a 128-token run's ≈ 80 steps, 12 of them plain.
  explicit AutoDraftSwitch(int64_t refill_steps, int64_t warmup_drafts = 0, bool settle = false,
                           int64_t plain_samples = kMaxSamples)
      : refill_steps_(refill_steps), fed_run_(refill_steps), settle_(settle),
        plain_samples_(std::max<int64_t>(plain_samples, 1)) {
    for (Bucket& b : buckets_) b.warmup = warmup_drafts;
  }

  // Before a step of `seqs` decoding sequences: whether it drafts. prefilling: the step carries
  // prefill chunks.
  bool want_draft(bool prefilling, int64_t seqs = 1);
  // After the step: its wall time and the tokens it emitted; measured only when decode-only.
  // drafted: the drafter ran this step; verified: the drafts the k* planner then kept. A
  // drafting step whose drafts the planner all dropped cannot win (it paid for the drafter and
  // gained nothing): kEmptyLoss of them in a row end the measurement as a loss.
  void record(bool drafted, bool decode_only, double ms, int64_t emitted, int64_t verified = 1);
  // Whether the engine should feed the drafter's rings during this step: a plain bucket feeds
  // them only for the window of steps before its next measurement.
  bool feeding() const {
    const Bucket& b = buckets_[current_];
    return b.phase != Phase::kPlain || b.steps > b.wait - refill_steps_;
  }
  // Plain steps' cost measured before serving (runtime/shape_profile.h): (sequences, ms of a
  // plain step) points, ascending sequences. A bucket's first measurement then samples drafting
  // only and compares each drafting sample of s sequences with the profiled plain step of s
  // sequences (linear between the points; sizes outside them sample plain steps as before): on
  // the H100 at batch 1 the plain side of a cold measurement was 19 plain steps of a 1,024-token
  // run in which drafting emits 2.9 tokens a step. Later measurements sample both sides again
  // (the profile's context is short, and a context that grows makes plain steps dearer).
  void set_profiled_plain(std::vector<std::pair<int64_t, double>> points);
  // The profiled plain step of `seqs` sequences (ms), NaN outside the profiled sizes.
  double profiled_plain_ms(int64_t seqs) const;
  // Drafting's predicted speed against plain decoding at profiled batch sizes ((sequences,
  // ratio) points; runtime/shape_profile.h predicted_draft_speedup: the profiled step costs and the
  // model's measured acceptance rates). A bucket that has never measured, and whose neighbours
  // imply no verdict, decodes plainly without a measurement where the prediction is a clear loss
  // (below kPredictedLoss; linear between the profiled sizes), and measures after kFirstWait of
  // its steps as an inherited verdict does. Why: a measurement's drafting step costs what it
  // costs whatever the verdict — on this project's 2-vCPU VM at batch 8 a drafting step took ≈ 16
  // ms against a 2.7-ms plain one, and the one or two a measurement needs to see the loss were
  // 4–7 % of a 128-step run (auto 0.93–0.96× off, session 41), a loss the profile predicted at
  // ≈ 0.5× before the first request.
  static constexpr double kPredictedLoss = 0.8;
  void set_predicted_speedup(std::vector<std::pair<int64_t, double>> points);
  double predicted_speedup(int64_t seqs) const;  // NaN outside the profiled sizes
  // Buckets that decoded plainly on a prediction (diagnostics), and the last one's bucket.
  int64_t predicted_verdicts() const { return predicted_verdicts_; }
  int last_predicted_bucket() const { return last_predicted_bucket_; }

  // The verdict of the bucket of the last want_draft (of `seqs` when given).
  Phase phase() const { return buckets_[current_].phase; }
  Phase phase(int64_t seqs) const { return buckets_[bucket(seqs)].phase; }
  int64_t wait() const { return buckets_[current_].wait; }
  // The last measurement's verdict (diagnostics: `dsv41 bench --dspark` prints them).
  struct Sample {  // one decode-only step of a measurement, as recorded
    bool drafted = false, counted = false;
    float ms = 0;
    int32_t emitted = 0;
  };
  static constexpr int kTraceSamples = 48;  // the first steps of a measurement kept for its verdict
  struct Verdict {
    int bucket = -1;
    bool won = false, empty = false;  // empty: ended by kEmptyLoss drafting steps that kept nothing
    int64_t samples[2] = {0, 0};      // [0] plain, [1] drafting
    double tokens_per_ms[2] = {0, 0};
    double draft_yield = 0;           // mean tokens of the measurement's drafting steps
    int trace_size = 0;
    std::array<Sample, kTraceSamples> trace{};
  };
  const Verdict& last_verdict() const { return verdict_; }
  int64_t verdicts() const { return verdicts_; }

 private:
  struct Bucket {
    Phase phase = Phase::kMeasure;
    double ms[2] = {0, 0};  // [0] plain, [1] drafting
    int64_t tokens[2] = {0, 0};
    int64_t samples[2] = {0, 0};
    int64_t yield_steps = 0, yield_tokens = 0;  // every decode-only drafting step of the measurement
    int trace_size = 0;
    std::array<Sample, kTraceSamples> trace{};
    int64_t empty_run = 0;        // drafting samples in a row whose drafts were all dropped
    int64_t steps = 0;            // steps in this phase
    int64_t wait = kFirstWait;    // steps before the next measurement
    bool measured = false;        // a verdict was reached before
    bool last_won = false;        // the verdict of the previous measurement
    bool inherited = false;       // the current verdict came from neighbours (implied_verdict) or the prediction
    bool profiled = true;         // its first measurement may take plain steps from the profile
    int64_t warmup = 0;           // drafting steps still to run uncounted
  };
  static int bucket(int64_t seqs);
  // The verdict bucket i's measured neighbours imply (kMeasure: none, or they disagree).
  Phase implied_verdict(int i) const;
  void enter(Bucket& b, Phase phase);
  void decide(Bucket& b);
  static double draft_yield(const Bucket& b);
  static double drafting_tokens_per_ms(const Bucket& b);
  // Samples a side that the verdict rests on: the fewer side's, or drafting's once plain has all
  // it takes (plain_samples_).
  int64_t evidence(const Bucket& b) const;
  bool plain_is_full(const Bucket& b) const { return b.samples[0] >= plain_samples_; }
  // Whether the current step's plain side comes from the profile (its bucket's first
  // measurement, a profiled batch size).
  bool plain_from_profile(const Bucket& b) const;

  int64_t refill_steps_;
  int64_t fed_run_;  // steps in a row so far with the rings fed (prefill feeds them from the start)
  std::array<Bucket, kBuckets> buckets_{};
  int current_ = 0;
  int64_t seqs_ = 1;  // sequences of the last want_draft
  std::vector<std::pair<int64_t, double>> profiled_plain_, predicted_speedup_;
  int64_t predicted_verdicts_ = 0;
  int last_predicted_bucket_ = -1;
  bool measuring_ = false;  // this step is a counted sample of the current bucket's measurement
  bool in_measurement_ = false;  // this step belongs to a measurement (counted or not)
  // settle: the measurement's open run (run_left_ more steps on run_side_ in bucket run_bucket_).
  bool settle_ = false;
  int64_t plain_samples_ = kMaxSamples;
  int64_t run_left_ = 0;
  bool run_counts_ = false;  // the open run counts from its first step (no change of side)
  bool last_measured_drafting_ = false;  // the last step was a measurement's drafting step
  bool run_side_ = false;
  int run_bucket_ = -1;
  Verdict verdict_;
  int64_t verdicts_ = 0;
};

}  // namespace dsv41
