// The auto switch on made-up step times: it drafts only where drafting wins clearly, ends a
// clear loss early, backs off after losses, measures only decode-only steps, alternates sides,
// and keeps the rings fed exactly while it may draft soon.
#include "runtime/auto_draft.h"

#include <gtest/gtest.h>

namespace dsv41 {
namespace {

using Phase = AutoDraftSwitch::Phase;

// Runs `steps` decode-only steps: a plain step takes 1 ms and emits 1 token, a drafting step
// takes draft_ms and emits draft_tokens. Returns how many steps drafted.
int run(AutoDraftSwitch& a, int steps, double draft_ms, int64_t draft_tokens) {
  int drafted = 0;
  for (int i = 0; i < steps; ++i) {
    const bool d = a.want_draft(false);
    drafted += d;
    a.record(d, true, d ? draft_ms : 1.0, d ? draft_tokens : 1);
  }
  return drafted;
}

TEST(AutoDraft, StartsMeasuringAlternatelyWithTheRingsFed) {
  AutoDraftSwitch a(64);
  EXPECT_EQ(a.phase(), Phase::kMeasure);
  EXPECT_TRUE(a.feeding());
  bool prev = !a.want_draft(false);
  for (int i = 0; i < 6; ++i) {
    // The side with fewer samples goes next: drafting, plain, drafting, ...
    a.record(!prev, true, 1.0, 1);
    const bool d = a.want_draft(false);
    EXPECT_NE(d, !prev) << i;
    prev = !d;
  }
}

TEST(AutoDraft, AClearWinDraftsUntilTheNextProbe) {
  AutoDraftSwitch a(64);
  run(a, 2 * AutoDraftSwitch::kSamples, 1.5, 3);  // 2 tokens per ms against 1
  EXPECT_EQ(a.phase(), Phase::kMeasure) << "a win is only taken after a full measurement";
  EXPECT_EQ(run(a, 1, 1.5, 3), 1);
  EXPECT_EQ(a.phase(), Phase::kDrafting);
  EXPECT_TRUE(a.feeding());
  EXPECT_EQ(run(a, 200, 1.5, 3), 200);
  run(a, AutoDraftSwitch::kProbeEvery - 200, 1.5, 3);
  EXPECT_EQ(a.phase(), Phase::kDrafting);
  run(a, 1, 1.5, 3);
  EXPECT_EQ(a.phase(), Phase::kMeasure) << "drafting is re-measured every kProbeEvery steps";
}

TEST(AutoDraft, ANearTieStaysPlain) {
  AutoDraftSwitch a(64);
  run(a, 2 * AutoDraftSwitch::kSamples + 1, 1.0, 1);  // 1.1× would be a win by 10 %: below the margin
  AutoDraftSwitch b(64);
  run(b, 2 * AutoDraftSwitch::kSamples + 1, 1.0 / 1.1, 1);
  EXPECT_EQ(a.phase(), Phase::kPlain);
  EXPECT_EQ(b.phase(), Phase::kPlain);
  EXPECT_FALSE(b.feeding());
}

TEST(AutoDraft, AClearLossEndsEarlyAndEachLossDoublesTheWait) {
  AutoDraftSwitch a(64);
  // Drafting steps twice as slow for the same tokens: a loss after kFirstLook samples a side.
  const int drafted = run(a, 2 * AutoDraftSwitch::kFirstLook + 1, 2.0, 1);
  EXPECT_EQ(drafted, AutoDraftSwitch::kFirstLook);
  EXPECT_EQ(a.phase(), Phase::kPlain);
  EXPECT_FALSE(a.feeding());
  int64_t plain = AutoDraftSwitch::kProbeEvery;
  for (int probe = 0; probe < 6; ++probe) {
    EXPECT_EQ(run(a, static_cast<int>(plain), 2.0, 1), 0) << probe;
    EXPECT_EQ(run(a, 1, 2.0, 1), 0);
    EXPECT_EQ(a.phase(), Phase::kRefill) << probe;
    EXPECT_TRUE(a.feeding());
    EXPECT_EQ(run(a, 64, 2.0, 1), 0) << "refilling the rings drafts nothing";
    EXPECT_EQ(run(a, 2 * AutoDraftSwitch::kFirstLook + 1, 2.0, 1), AutoDraftSwitch::kFirstLook);
    EXPECT_EQ(a.phase(), Phase::kPlain);
    plain = std::min<int64_t>(2 * plain, AutoDraftSwitch::kLongestWait);
  }
  EXPECT_EQ(a.wait(), AutoDraftSwitch::kLongestWait);
}

TEST(AutoDraft, PrefillStepsNeitherDraftNorCountWhileMeasuring) {
  AutoDraftSwitch a(64);
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(a.want_draft(true));
    a.record(false, false, 5.0, 1);  // not decode-only: not a sample
  }
  EXPECT_EQ(a.phase(), Phase::kMeasure);
  EXPECT_TRUE(a.want_draft(false)) << "the first decode-only step measures drafting";
}

}  // namespace
}  // namespace dsv41
