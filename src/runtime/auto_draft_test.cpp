// The auto switch on made-up step times: it drafts only where drafting wins clearly, takes a
// clear loss after one sample a side, backs off while its verdict holds, keeps one verdict per
// batch-size bucket, measures only decode-only steps, alternates sides, and keeps the rings fed
// exactly while a bucket may draft soon.
#include "runtime/auto_draft.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsv41 {
namespace {

using Phase = AutoDraftSwitch::Phase;
constexpr int64_t kRefill = 64;

// Runs `steps` decode-only steps of `seqs` sequences: a plain step takes 1 ms and emits a token
// per sequence, a drafting step takes draft_ms and emits draft_tokens. Returns how many steps drafted.
int run(AutoDraftSwitch& a, int64_t steps, double draft_ms, int64_t draft_tokens, int64_t seqs = 1) {
  int drafted = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const bool d = a.want_draft(false, seqs);
    drafted += d;
    a.record(d, true, d ? draft_ms : 1.0, d ? draft_tokens : seqs);
  }
  return drafted;
}

TEST(AutoDraft, StartsMeasuringAlternatelyWithTheRingsFed) {
  AutoDraftSwitch a(kRefill);
  EXPECT_EQ(a.phase(), Phase::kMeasure);
  EXPECT_TRUE(a.feeding());
  bool prev = false;
  for (int i = 0; i < 8; ++i) {
    const bool d = a.want_draft(false, 1);
    if (i == 0) {
      EXPECT_TRUE(d) << "drafting is measured first";
    } else {
      EXPECT_NE(d, prev) << i;  // then the side with fewer samples goes next
    }
    EXPECT_TRUE(a.feeding());
    a.record(d, true, 1.0, 1);
    prev = d;
  }
}

TEST(AutoDraft, AClearLossEndsAfterOneSampleASide) {
  AutoDraftSwitch a(kRefill);
  // Drafting steps 2.5× slower for the same tokens: one drafting sample, one plain.
  EXPECT_EQ(run(a, 2, 2.5, 1), 1);
  EXPECT_EQ(a.phase(), Phase::kPlain);
  EXPECT_FALSE(a.feeding());
  EXPECT_EQ(a.wait(), AutoDraftSwitch::kFirstWait);
  // A milder loss (1.25× slower: 0.8 as fast) needs three samples a side, a slighter one (0.87)
  // six (loss_bound(6) = 0.878), a slight one (0.95) all kMaxSamples.
  AutoDraftSwitch b(kRefill);
  EXPECT_EQ(run(b, 2 * 3, 1.25, 1), 3);
  EXPECT_EQ(b.phase(), Phase::kPlain);
  AutoDraftSwitch c(kRefill);
  EXPECT_EQ(run(c, 2 * 5, 1 / 0.87, 1), 5);
  EXPECT_EQ(c.phase(), Phase::kMeasure);
  run(c, 2, 1 / 0.87, 1);
  EXPECT_EQ(c.phase(), Phase::kPlain);
  AutoDraftSwitch d(kRefill);
  run(d, 2 * (AutoDraftSwitch::kMaxSamples - 1), 1 / 0.95, 1);
  EXPECT_EQ(d.phase(), Phase::kMeasure) << "0.95× is a near tie: it measures on";
  run(d, 2, 1 / 0.95, 1);
  EXPECT_EQ(d.phase(), Phase::kPlain);
  EXPECT_EQ(d.last_verdict().samples[1], AutoDraftSwitch::kMaxSamples);
}

// Session 32's H100 trace: a batch-1 measurement at the start of a run read drafting as a tie (a
// request's first tokens are drafted worse than the rest) and the old bound, "not ahead after
// four", decoded plainly where drafting ran 1.66× faster. A tie over the first samples now
// measures on, and the drafting that wins once the text settles is taken.
TEST(AutoDraft, ATieAtTheStartMeasuresOnAndAWinThatFollowsIsTaken) {
  AutoDraftSwitch a(kRefill);
  EXPECT_EQ(run(a, 2 * 8, 1 / 0.95, 1), 8);
  EXPECT_EQ(a.phase(), Phase::kMeasure) << "0.95× after 8 a side is neither a loss nor a win";
  run(a, 2 * 16, 1 / 0.95, 2);  // drafting now emits 2 tokens a step in the same time
  EXPECT_EQ(a.phase(), Phase::kDrafting);
  EXPECT_GT(AutoDraftSwitch::loss_bound(4), 0.84);
  EXPECT_LT(AutoDraftSwitch::loss_bound(AutoDraftSwitch::kMaxSamples), AutoDraftSwitch::margin(AutoDraftSwitch::kMaxSamples));
  for (int64_t n = 1; n < AutoDraftSwitch::kMaxSamples; ++n)
    EXPECT_LE(AutoDraftSwitch::loss_bound(n), AutoDraftSwitch::loss_bound(n + 1)) << n;
}

TEST(AutoDraft, DraftsThePlannerDropsEndTheMeasurement) {
  AutoDraftSwitch a(kRefill);
  int drafted = 0;
  for (int i = 0; i < 3; ++i) {
    const bool d = a.want_draft(false, 8);
    drafted += d;
    // Drafting costs 10 % more and the planner keeps no draft: a near tie on the clock.
    a.record(d, true, d ? 1.1 : 1.0, 8, d ? 0 : 1);
  }
  EXPECT_EQ(drafted, 2) << "two drafting steps that verified nothing";
  EXPECT_EQ(a.phase(8), Phase::kPlain);
}

TEST(AutoDraft, AWinNeedsAFullMeasurementAndDraftsUntilTheWaitEnds) {
  AutoDraftSwitch a(kRefill);
  run(a, 2 * AutoDraftSwitch::kSamples - 1, 1.5, 3);  // 2 tokens per ms against 1
  EXPECT_EQ(a.phase(), Phase::kMeasure) << "a win is only taken after kSamples a side";
  run(a, 1, 1.5, 3);
  EXPECT_EQ(a.phase(), Phase::kDrafting);
  EXPECT_TRUE(a.feeding());
  EXPECT_EQ(run(a, AutoDraftSwitch::kFirstWait, 1.5, 3), AutoDraftSwitch::kFirstWait);
  run(a, 1, 1.5, 3);
  EXPECT_EQ(a.phase(), Phase::kMeasure) << "drafting is re-measured after the wait";
  run(a, 2 * AutoDraftSwitch::kSamples, 1.5, 3);
  EXPECT_EQ(a.phase(), Phase::kDrafting);
  EXPECT_EQ(a.wait(), 2 * AutoDraftSwitch::kFirstWait) << "a confirmed win doubles the wait";
}

TEST(AutoDraft, ANearWinStaysPlain) {
  for (double speed : {1.07, 1.05, 1.0}) {
    AutoDraftSwitch a(kRefill);
    run(a, 2 * AutoDraftSwitch::kMaxSamples, 1.0 / speed, 1);
    EXPECT_EQ(a.phase(), Phase::kPlain) << speed;
    EXPECT_FALSE(a.feeding()) << speed;
  }
}

// A lead short of kMargin after kSamples a side is not yet a loss: the measurement goes on, and a
// steady 12 % lead wins once the margin has shrunk below it (margin(n) < 1.12 from n = 13 a side).
TEST(AutoDraft, AModestLeadMeasuresOnAndWins) {
  AutoDraftSwitch a(kRefill);
  run(a, 2 * AutoDraftSwitch::kSamples, 1.0 / 1.12, 1);
  EXPECT_EQ(a.phase(), Phase::kMeasure) << "1.12× after 8 a side: neither a win nor a loss yet";
  run(a, 2 * (AutoDraftSwitch::kMaxSamples - AutoDraftSwitch::kSamples), 1.0 / 1.12, 1);
  EXPECT_EQ(a.phase(), Phase::kDrafting);
  EXPECT_EQ(a.last_verdict().samples[1], 13);
  EXPECT_GT(AutoDraftSwitch::margin(12), 1.12);
  EXPECT_LT(AutoDraftSwitch::margin(13), 1.12);
  EXPECT_DOUBLE_EQ(AutoDraftSwitch::margin(8), AutoDraftSwitch::kMargin);
}

TEST(AutoDraft, EachConfirmedLossDoublesTheWaitAfterRefillingTheRings) {
  AutoDraftSwitch a(kRefill);
  run(a, 2, 2.5, 1);
  ASSERT_EQ(a.phase(), Phase::kPlain);
  int64_t wait = AutoDraftSwitch::kFirstWait;
  for (int probe = 0; probe < 6; ++probe) {
    ASSERT_EQ(a.wait(), wait) << probe;
    EXPECT_EQ(run(a, wait - kRefill, 2.5, 1), 0) << probe;
    EXPECT_FALSE(a.feeding()) << probe;
    EXPECT_EQ(run(a, kRefill, 2.5, 1), 0) << "refilling the rings drafts nothing";
    EXPECT_TRUE(a.feeding()) << probe;
    EXPECT_EQ(run(a, 2, 2.5, 1), 1) << "the measurement starts at once on fed rings";
    EXPECT_EQ(a.phase(), Phase::kPlain) << probe;
    wait = std::min(2 * wait, AutoDraftSwitch::kLongestWait);
  }
  EXPECT_EQ(a.wait(), AutoDraftSwitch::kLongestWait);
}

TEST(AutoDraft, AChangedVerdictStartsTheWaitsOver) {
  AutoDraftSwitch a(kRefill);
  run(a, 2 * AutoDraftSwitch::kSamples, 1.5, 3);
  ASSERT_EQ(a.phase(), Phase::kDrafting);
  run(a, AutoDraftSwitch::kFirstWait + 2 * AutoDraftSwitch::kSamples, 1.5, 3);
  ASSERT_EQ(a.wait(), 2 * AutoDraftSwitch::kFirstWait);
  run(a, 2 * AutoDraftSwitch::kFirstWait + 1, 1.5, 3);
  ASSERT_EQ(a.phase(), Phase::kMeasure);
  run(a, 2, 40.0, 1);  // the machine got busy: drafting now loses clearly
  EXPECT_EQ(a.phase(), Phase::kPlain);
  EXPECT_EQ(a.wait(), AutoDraftSwitch::kFirstWait);
}

TEST(AutoDraft, EachBatchBucketKeepsItsOwnVerdict) {
  AutoDraftSwitch a(kRefill);
  run(a, 2 * AutoDraftSwitch::kSamples, 1.5, 3, 1);  // batch 1: drafting wins
  ASSERT_EQ(a.phase(1), Phase::kDrafting);
  run(a, 2, 4.0, 8, 8);  // batch 8 (8 tokens a plain step): drafting loses
  ASSERT_EQ(a.phase(8), Phase::kPlain);
  EXPECT_EQ(a.phase(9), Phase::kPlain) << "9 is in 8's bucket";
  EXPECT_EQ(a.phase(1), Phase::kDrafting) << "batch 1 keeps its verdict";
  EXPECT_FALSE(a.feeding());
  EXPECT_EQ(run(a, 5, 4.0, 8, 8), 0);
  // Back at batch 1 the rings were not fed during the plain batch-8 steps: refill, then draft.
  EXPECT_EQ(run(a, kRefill, 1.5, 3, 1), 0);
  EXPECT_TRUE(a.feeding());
  EXPECT_EQ(run(a, 10, 1.5, 3, 1), 10);
  EXPECT_EQ(a.phase(16), Phase::kMeasure) << "an unseen bucket starts by measuring";
}

// Drafting pays less as the batch grows: a drafting bucket's verdict holds for the smaller
// buckets a draining batch passes through, a plain one's for the larger ones, until each has
// waited kFirstWait of its own steps and measures.
TEST(AutoDraft, ABucketTakesTheVerdictItsNeighboursImplyUntilItMeasures) {
  AutoDraftSwitch a(kRefill);
  run(a, 2 * AutoDraftSwitch::kSamples, 1.5, 24, 8);  // batch 8 drafts
  ASSERT_EQ(a.phase(8), Phase::kDrafting);
  const int64_t verdicts = a.verdicts();
  EXPECT_EQ(run(a, 10, 1.5, 12, 4), 10) << "batch 4 drafts at once, no plain samples";
  EXPECT_EQ(a.phase(4), Phase::kDrafting);
  EXPECT_EQ(run(a, 3, 1.5, 3, 1), 3) << "so does batch 1";
  EXPECT_EQ(a.verdicts(), verdicts) << "nothing measured";
  // Batch 4's own measurement comes after its wait (steps at batch 4 only).
  run(a, AutoDraftSwitch::kFirstWait - 10, 1.5, 12, 4);
  EXPECT_EQ(a.phase(4), Phase::kDrafting);
  a.want_draft(false, 4);
  EXPECT_EQ(a.phase(4), Phase::kMeasure) << "an inherited verdict is measured after kFirstWait";
  // A bucket never takes a verdict the other way: a drafting batch 1 says nothing of batch 8.
  AutoDraftSwitch b(kRefill);
  run(b, 2 * AutoDraftSwitch::kSamples, 1.5, 3, 1);
  ASSERT_EQ(b.phase(1), Phase::kDrafting);
  b.want_draft(false, 8);
  EXPECT_EQ(b.phase(8), Phase::kMeasure);
  // A plain batch 1 says batch 8 is plain too.
  AutoDraftSwitch c(kRefill);
  run(c, 2, 2.5, 1, 1);
  ASSERT_EQ(c.phase(1), Phase::kPlain);
  EXPECT_EQ(run(c, 20, 1.5, 24, 8), 0) << "inherited plain: no drafting sample";
  EXPECT_EQ(c.phase(8), Phase::kPlain);
  // Neighbours that disagree imply nothing: batch 16 drafts, batch 1 (after its inherited
  // drafting and its own measurement) decodes plainly, so batch 4 measures.
  AutoDraftSwitch d(kRefill);
  run(d, 2 * AutoDraftSwitch::kSamples, 1.5, 48, 16);
  ASSERT_EQ(d.phase(16), Phase::kDrafting);
  run(d, AutoDraftSwitch::kFirstWait + 2, 2.5, 1, 1);
  ASSERT_EQ(d.phase(1), Phase::kPlain);
  d.want_draft(false, 4);
  EXPECT_EQ(d.phase(4), Phase::kMeasure);
}

// A predicted clear loss (below kPredictedLoss) decodes plainly without a drafting sample until
// the bucket's wait is over, then measures; a near prediction, a size outside the profile, or a
// neighbour's measured verdict leave the bucket as it was.
TEST(AutoDraft, APredictedClearLossDecodesPlainlyUntilTheBucketMeasures) {
  AutoDraftSwitch a(kRefill);
  a.set_predicted_speedup({{1, 1.9}, {2, 0.9}, {8, 0.45}});
  EXPECT_DOUBLE_EQ(a.predicted_speedup(4), 0.9 + (0.45 - 0.9) * 2.0 / 6.0);
  EXPECT_TRUE(std::isnan(a.predicted_speedup(16)));
  EXPECT_EQ(run(a, 100, 20.0, 16, 8), 0) << "batch 8: plain from the first step, no drafting sample";
  EXPECT_EQ(a.phase(8), Phase::kPlain);
  EXPECT_EQ(a.verdicts(), 0) << "nothing measured";
  EXPECT_EQ(a.predicted_verdicts(), 1);
  EXPECT_EQ(a.last_predicted_bucket(), 3);
  EXPECT_EQ(run(a, 2, 20.0, 16, 4), 0) << "batch 4 (0.75x predicted): plain as well";
  run(a, AutoDraftSwitch::kFirstWait - 100, 20.0, 16, 8);
  a.want_draft(false, 8);
  EXPECT_EQ(a.phase(8), Phase::kMeasure) << "measured after kFirstWait, as an inherited verdict";
  EXPECT_EQ(a.predicted_verdicts(), 2) << "the measurement does not predict again";
  // Batch 2 (0.9x: not a clear loss) and batch 16 (not profiled) measure as before.
  AutoDraftSwitch b(kRefill);
  b.set_predicted_speedup({{1, 1.9}, {2, 0.9}, {8, 0.45}});
  b.want_draft(false, 2);
  EXPECT_EQ(b.phase(2), Phase::kMeasure);
  b.want_draft(false, 16);
  EXPECT_EQ(b.phase(16), Phase::kMeasure);
  EXPECT_EQ(b.predicted_verdicts(), 0);
  // A measured neighbour's verdict comes first: batch 16 drafts, so batch 8 drafts however the
  // profile predicted it.
  AutoDraftSwitch c(kRefill);
  c.set_predicted_speedup({{8, 0.45}, {16, 0.45}});
  c.set_predicted_speedup({});  // cleared: batch 16 measures
  run(c, 2 * AutoDraftSwitch::kSamples, 1.5, 48, 16);
  ASSERT_EQ(c.phase(16), Phase::kDrafting);
  c.set_predicted_speedup({{8, 0.45}});
  EXPECT_EQ(run(c, 10, 1.5, 24, 8), 10);
  EXPECT_EQ(c.predicted_verdicts(), 0);
}

TEST(AutoDraft, WarmupDraftsAreNotCounted) {
  // The first drafting step of each bucket is 10× slower (first touches), the later ones win.
  AutoDraftSwitch a(kRefill, /*warmup_drafts=*/1);
  auto first_slow = [&](int64_t seqs) {
    const bool d = a.want_draft(false, seqs);
    ASSERT_TRUE(d) << "a measurement starts with a drafting step";
    a.record(true, true, 10.0, seqs);
    EXPECT_EQ(a.phase(seqs), Phase::kMeasure) << "the warm-up draft took no loss";
    EXPECT_TRUE(a.want_draft(false, seqs)) << "the first counted sample drafts too";
    a.record(true, true, 1.5, 3 * seqs);
  };
  first_slow(1);
  run(a, 2 * AutoDraftSwitch::kSamples - 1, 1.5, 3);
  EXPECT_EQ(a.phase(1), Phase::kDrafting);
  first_slow(8);
  run(a, 2 * AutoDraftSwitch::kSamples - 1, 1.5, 24, 8);
  EXPECT_EQ(a.phase(8), Phase::kDrafting) << "each bucket has its own warm-up";
  // Without the warm-up the same slow first draft is a clear loss after one sample a side.
  AutoDraftSwitch b(kRefill);
  ASSERT_TRUE(b.want_draft(false, 1));
  b.record(true, true, 10.0, 1);
  run(b, 1, 1.5, 3);
  EXPECT_EQ(b.phase(1), Phase::kPlain);
}

// The last verdict says which bucket decided what, on how many samples and at what speeds.
TEST(AutoDraft, LastVerdictReportsTheMeasurement) {
  AutoDraftSwitch a(kRefill);
  EXPECT_EQ(a.verdicts(), 0);
  ASSERT_TRUE(a.want_draft(false, 8));
  a.record(true, true, 10.0, 8);  // drafting: 0.8 tokens per ms
  ASSERT_FALSE(a.want_draft(false, 8));
  a.record(false, true, 2.0, 8);  // plain: 4 tokens per ms, a clear loss after one sample a side
  ASSERT_EQ(a.verdicts(), 1);
  const AutoDraftSwitch::Verdict& v = a.last_verdict();
  EXPECT_EQ(v.bucket, 3);
  EXPECT_FALSE(v.won);
  EXPECT_FALSE(v.empty);
  EXPECT_EQ(v.samples[0], 1);
  EXPECT_EQ(v.samples[1], 1);
  EXPECT_DOUBLE_EQ(v.tokens_per_ms[0], 4.0);
  EXPECT_DOUBLE_EQ(v.tokens_per_ms[1], 0.8);
}

TEST(AutoDraft, PrefillStepsNeitherDraftNorCountWhileMeasuring) {
  AutoDraftSwitch a(kRefill);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(a.want_draft(true, 1));
    a.record(false, false, 5.0, 1);  // not decode-only: not a sample
  }
  EXPECT_EQ(a.phase(), Phase::kMeasure);
  EXPECT_TRUE(a.want_draft(false, 1)) << "the first decode-only step measures drafting";
}

// With settle, each side runs kRunSteps steps in a row and the first kSettleSteps of each run do
// not count: a cost paid on the first two steps after a change of side (here 1 ms each after
// drafting steps, 0.2 ms after plain ones) no longer decides the verdict. Drafting ties with plain decoding on steady
// steps: plain wins (no 15 % lead), where strict alternation, charged the switches, measures
// drafting 1.6× ahead.
TEST(AutoDraft, SettleCountsAllButTheFirstStepsOfEachRun) {
  const auto measure = [](bool settle, std::vector<bool>* sides) {
    AutoDraftSwitch a(kRefill, 0, settle);
    bool last = false;
    int64_t since_switch = 0;
    for (int i = 0; i < 256 && a.phase(1) == Phase::kMeasure; ++i) {
      const bool d = a.want_draft(false, 1);
      if (sides) sides->push_back(d);
      since_switch = i > 0 && d != last ? 0 : since_switch + 1;
      const double switch_ms = i == 0 || since_switch > 1 ? 0.0 : (d ? 0.2 : 1.0);
      a.record(d, true, (d ? 1.05 : 1.0) + switch_ms, 1);
      last = d;
    }
    return a.phase(1);
  };
  std::vector<bool> sides;
  EXPECT_EQ(measure(true, &sides), Phase::kPlain);
  const size_t run = AutoDraftSwitch::kRunSteps;
  ASSERT_GE(sides.size(), 2 * run);
  for (size_t i = 0; i < sides.size(); ++i) EXPECT_EQ(sides[i], sides[i - i % run]) << "step " << i;
  EXPECT_TRUE(sides[0]) << "drafting is measured first";
  EXPECT_NE(sides[0], sides[run]) << "then the other side";
  EXPECT_EQ(measure(false, nullptr), Phase::kDrafting) << "alternation charged the switches (the old measurement)";
}

// A drafting sample's tokens are the mean of every drafting step of the measurement, the uncounted
// first steps of each run included: here they emit 4 tokens and the counted ones 2, in 2 ms each
// (8 + 8 of 6 steps: 1.33 tokens per ms against plain's 1, a win), where the counted steps alone
// (1 per ms) read as no lead.
TEST(AutoDraft, DraftingYieldCountsEveryDraftingStep) {
  AutoDraftSwitch a(kRefill, 0, /*settle=*/true);
  bool last = false;
  int64_t in_run = 0;
  for (int i = 0; i < 128 && a.phase(1) == Phase::kMeasure; ++i) {
    const bool d = a.want_draft(false, 1);
    in_run = i > 0 && d == last ? in_run + 1 : 0;
    a.record(d, true, d ? 2.0 : 1.0, d ? (in_run < AutoDraftSwitch::kSettleSteps ? 4 : 2) : 1);
    last = d;
  }
  EXPECT_EQ(a.phase(1), Phase::kDrafting);
  const AutoDraftSwitch::Verdict& v = a.last_verdict();
  EXPECT_DOUBLE_EQ(v.draft_yield, 16.0 / 6.0);
  EXPECT_DOUBLE_EQ(v.tokens_per_ms[1], 4.0 / 3.0);
  ASSERT_GT(v.trace_size, 2);
  EXPECT_TRUE(v.trace[0].drafted);
  EXPECT_FALSE(v.trace[0].counted) << "the first steps of a run are not counted";
  EXPECT_FALSE(v.trace[1].counted);
  EXPECT_TRUE(v.trace[2].counted);
  EXPECT_EQ(v.trace[0].emitted, 4);
}

// With plain_samples = 4 a settled measurement takes one plain run (4 counted steps) and then
// samples only drafting: a 2× win is taken after runs D, P, D (8 drafting samples, 4 plain; 6
// plain steps of 18), where even sides take runs D, P, D, P (12 plain steps of 24).
TEST(AutoDraft, APlainSideOfFourSamplesLetsDraftingDecide) {
  const auto measure = [](int64_t plain_samples, int* plain_steps) {
    AutoDraftSwitch a(kRefill, 0, /*settle=*/true, plain_samples);
    int steps = 0;
    *plain_steps = 0;
    for (; steps < 256 && a.phase(8) == Phase::kMeasure; ++steps) {
      const bool d = a.want_draft(false, 8);
      *plain_steps += !d;
      a.record(d, true, d ? 1.5 : 1.0, d ? 24 : 8);
    }
    EXPECT_EQ(a.phase(8), Phase::kDrafting) << plain_samples;
    return steps;
  };
  int plain = 0;
  const int64_t run = AutoDraftSwitch::kRunSteps;
  EXPECT_EQ(measure(4, &plain), 3 * run);
  EXPECT_EQ(plain, run);
  EXPECT_EQ(measure(AutoDraftSwitch::kMaxSamples, &plain), 4 * run);
  EXPECT_EQ(plain, 2 * run);
}

// The evidence is drafting's samples once plain has its four: a modest lead measures on with
// drafting alone (no further plain steps) and a loss is still taken from the first plain run.
TEST(AutoDraft, AFullPlainSideStillTakesLossesAndMeasuresModestLeadsOn) {
  AutoDraftSwitch lose(kRefill, 0, /*settle=*/true, 4);
  int plain_steps = 0, steps = 0;
  for (; steps < 256 && lose.phase(8) == Phase::kMeasure; ++steps) {
    const bool d = lose.want_draft(false, 8);
    plain_steps += !d;
    lose.record(d, true, d ? 1.0 / 0.8 : 1.0, 8);  // drafting 0.8× plain
  }
  EXPECT_EQ(lose.phase(8), Phase::kPlain);
  EXPECT_GT(plain_steps, AutoDraftSwitch::kSettleSteps);
  EXPECT_LE(plain_steps, AutoDraftSwitch::kRunSteps) << "decided within the first plain run";
  AutoDraftSwitch modest(kRefill, 0, /*settle=*/true, 4);
  plain_steps = 0;
  for (steps = 0; steps < 512 && modest.phase(8) == Phase::kMeasure; ++steps) {
    const bool d = modest.want_draft(false, 8);
    plain_steps += !d;
    modest.record(d, true, d ? 1.0 / 1.12 : 1.0, 8);
  }
  EXPECT_EQ(modest.phase(8), Phase::kDrafting);
  EXPECT_EQ(plain_steps, AutoDraftSwitch::kRunSteps);
  EXPECT_EQ(steps, 3 * AutoDraftSwitch::kRunSteps + 5) << "drafting runs after drafting runs count every step";
  EXPECT_EQ(modest.last_verdict().samples[0], 4);
  EXPECT_EQ(modest.last_verdict().samples[1], 13) << "margin(13) < 1.12 ≤ margin(12)";
}

// A profiled plain side (the scheduler's start-up profile, runtime/shape_profile.h): the points
// interpolate linearly and say nothing outside their sizes.
TEST(AutoDraft, ProfiledPlainStepsInterpolateBetweenTheirSizes) {
  AutoDraftSwitch a(kRefill);
  EXPECT_TRUE(std::isnan(a.profiled_plain_ms(1))) << "no profile";
  a.set_profiled_plain({{4, 2.0}, {1, 1.0}, {8, -1.0}});  // unordered; a bad point dropped
  EXPECT_DOUBLE_EQ(a.profiled_plain_ms(1), 1.0);
  EXPECT_DOUBLE_EQ(a.profiled_plain_ms(2), 1.0 + 1.0 / 3);
  EXPECT_DOUBLE_EQ(a.profiled_plain_ms(4), 2.0);
  EXPECT_TRUE(std::isnan(a.profiled_plain_ms(5)));
  EXPECT_TRUE(std::isnan(a.profiled_plain_ms(0)));
}

// With the plain side profiled, a bucket's first measurement runs no plain step: a win (3 tokens
// in 1.5 ms against the profile's 1 in 1 ms) is taken after kSamples drafting steps, a clear loss
// after one. Its next measurement samples plain steps again (a profile's context is short).
TEST(AutoDraft, AProfiledPlainSideMeasuresDraftingAlone) {
  AutoDraftSwitch win(kRefill);
  win.set_profiled_plain({{1, 1.0}});
  EXPECT_EQ(run(win, AutoDraftSwitch::kSamples, 1.5, 3), AutoDraftSwitch::kSamples) << "every step drafted";
  EXPECT_EQ(win.phase(), Phase::kDrafting);
  EXPECT_EQ(win.last_verdict().samples[0], AutoDraftSwitch::kSamples) << "one profiled plain step a drafting sample";
  EXPECT_NEAR(win.last_verdict().tokens_per_ms[0], 1.0, 1e-12);
  EXPECT_NEAR(win.last_verdict().tokens_per_ms[1], 2.0, 1e-12);
  // The next measurement (after the wait) alternates with real plain steps.
  run(win, win.wait(), 1.5, 3);
  EXPECT_EQ(run(win, 2 * AutoDraftSwitch::kSamples, 1.5, 3), AutoDraftSwitch::kSamples);
  EXPECT_EQ(win.phase(), Phase::kDrafting);

  AutoDraftSwitch lose(kRefill);
  lose.set_profiled_plain({{1, 1.0}});
  EXPECT_EQ(run(lose, 1, 2.5, 1), 1);
  EXPECT_EQ(lose.phase(), Phase::kPlain) << "a clear loss against the profile after one drafting sample";
  // The same loss against a profile that makes plain steps dear is a win: the profile decides.
  AutoDraftSwitch dear(kRefill);
  dear.set_profiled_plain({{1, 4.0}});
  EXPECT_EQ(run(dear, AutoDraftSwitch::kSamples, 2.5, 1), AutoDraftSwitch::kSamples);
  EXPECT_EQ(dear.phase(), Phase::kDrafting);
}

// A batch size outside the profiled ones measures both sides as before; one inside compares each
// drafting sample with the plain step of as many sequences.
TEST(AutoDraft, OnlyProfiledBatchSizesTakeTheirPlainSideFromTheProfile) {
  AutoDraftSwitch a(kRefill);
  a.set_profiled_plain({{1, 1.0}, {2, 1.0}});
  int plain_steps = 0;
  for (int i = 0; i < 8; ++i) {
    const bool d = a.want_draft(false, 3);  // bucket 1 (2–3 sequences), 3 not profiled
    plain_steps += !d;
    a.record(d, true, 1.0, 3);  // a tie: the measurement goes on
  }
  EXPECT_EQ(plain_steps, 4) << "alternating";
  AutoDraftSwitch b(kRefill);
  b.set_profiled_plain({{1, 1.0}, {2, 2.0}});
  // Two sequences: drafting emits 3 tokens in 1.5 ms (2 / ms) against the profile's 2 in 2 ms.
  for (int i = 0; i < AutoDraftSwitch::kSamples; ++i) {
    ASSERT_TRUE(b.want_draft(false, 2)) << i;
    b.record(true, true, 1.5, 3);
  }
  EXPECT_EQ(b.phase(2), Phase::kDrafting);
  EXPECT_NEAR(b.last_verdict().tokens_per_ms[0], 1.0, 1e-12) << "the profiled plain step of 2 sequences";
}

}  // namespace
}  // namespace dsv41
