// app/progress.h: what `dsv41 run` writes to stderr during a long prefill, with times given
// (no clock): nothing for a quick prefill, a line rewritten in place on a terminal, one final
// line otherwise.
#include "app/progress.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv41::app {
namespace {

TEST(FormatDuration, WholeSecondsLargestTwoUnits) {
  EXPECT_EQ(format_duration(0), "0 s");
  EXPECT_EQ(format_duration(-3), "0 s");
  EXPECT_EQ(format_duration(44.6), "45 s");
  EXPECT_EQ(format_duration(59.4), "59 s");
  EXPECT_EQ(format_duration(60), "1 min 00 s");
  EXPECT_EQ(format_duration(545), "9 min 05 s");
  EXPECT_EQ(format_duration(3600 + 7 * 60 + 59), "1 h 07 min");
}

TEST(PrefillProgress, QuickPrefillPrintsNothing) {
  for (bool live : {true, false}) {
    PrefillProgress p(2048, live);
    EXPECT_EQ(p.update(512, 0.4), "");
    EXPECT_EQ(p.update(2048, 1.9), "");
    EXPECT_EQ(p.finish(1.9), "");
    EXPECT_FALSE(p.shown());
  }
}

TEST(PrefillProgress, TerminalGetsALiveLineWithRateAndTimeLeft) {
  PrefillProgress p(86000, /*live=*/true);
  EXPECT_EQ(p.update(512, 1.0), "");  // within the quiet first seconds
  // 2048 tokens in 16 s: 128 tok/s, 83952 left -> 655.9 s.
  EXPECT_EQ(p.update(2048, 16.0), "\rprefill: 2048/86000 tokens (2%), 128.0 tok/s, 10 min 56 s left\x1b[K");
  EXPECT_TRUE(p.shown());
  EXPECT_EQ(p.update(86000, 540.0).substr(0, 40), "\rprefill: 86000/86000 tokens (100%), 159");
  EXPECT_EQ(p.finish(540.0), "\rprefill: 86000 tokens in 9 min 00 s (159.3 tok/s)\x1b[K\n");
}

TEST(PrefillProgress, NotATerminalGetsOnlyTheFinalLine) {
  PrefillProgress p(86000, /*live=*/false);
  EXPECT_EQ(p.update(2048, 16.0), "");
  EXPECT_EQ(p.update(86000, 540.0), "");
  EXPECT_EQ(p.finish(540.0), "prefill: 86000 tokens in 9 min 00 s (159.3 tok/s)\n");
}

TEST(PrefillProgress, ALiveLineIsErasedWhenThePrefillEndsQuickly) {
  // Not reachable with monotonic times past kQuietSeconds, but finish() must not leave a stale
  // line if a caller reports a shorter total than an update did.
  PrefillProgress p(100, /*live=*/true);
  EXPECT_NE(p.update(50, 2.5), "");
  EXPECT_EQ(p.finish(1.0), "\r\x1b[K");
}

}  // namespace
}  // namespace dsv41::app
