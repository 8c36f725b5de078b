#include "runtime/step_cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsv41 {
namespace {

TEST(StepCost, PriorBeforeMeasurements) {
  StepCost c({10.0, 1.0, 2.0});
  EXPECT_DOUBLE_EQ(c.cost(6, 1), 10 + 6 + 2);
  EXPECT_DOUBLE_EQ(c.cost(24, 4), 10 + 24 + 8);
  EXPECT_DOUBLE_EQ(c.cost(0, 0), 10 + 1 + 2);  // clamped to one row of one sequence
  EXPECT_EQ(c.measured_points(), 0u);
}

TEST(StepCost, EmaExactInterpolatedAndScaled) {
  StepCost c({10.0, 1.0, 0.0}, 0.5);
  EXPECT_TRUE(c.record(2, 1, 99.0));  // first touches: not stored
  EXPECT_TRUE(c.record(6, 1, 99.0));
  EXPECT_EQ(c.measured_points(), 0u);
  EXPECT_TRUE(c.record(2, 1, 10.0));
  EXPECT_TRUE(c.record(2, 1, 20.0));
  EXPECT_DOUBLE_EQ(c.cost(2, 1), 15.0);  // EMA with α = 0.5
  EXPECT_TRUE(c.record(6, 1, 35.0));
  EXPECT_DOUBLE_EQ(c.cost(4, 1), 25.0);  // halfway between 15 and 35
  // Beyond the measured rows: measured level × prior ratio (10 + 1·rows).
  EXPECT_DOUBLE_EQ(c.cost(1, 1), 15.0 * 11 / 12);
  EXPECT_DOUBLE_EQ(c.cost(8, 1), 35.0 * 18 / 16);
  EXPECT_EQ(c.measured_points(), 2u);
}

TEST(StepCost, BatchBucketsArePowersOfTwo) {
  StepCost c({10.0, 1.0, 0.0});
  c.record(8, 4, 90.0);  // a first touch
  c.record(8, 4, 50.0);
  EXPECT_DOUBLE_EQ(c.cost(8, 7), 50.0);     // 4 … 7 share a bucket
  EXPECT_DOUBLE_EQ(c.cost(8, 8), 10 + 8.0);  // 8 … 15 is empty: the prior
  EXPECT_DOUBLE_EQ(c.cost(4, 1), 14.0);
}

// A shape's first step (a CUDA graph instantiated, buffers first touched) is not its cost: were
// it stored, a shape that measured high once would never be picked, so never measured again.
TEST(StepCost, TheFirstStepOfAShapeIsNotStored) {
  StepCost c({10.0, 0.0, 0.0}, 0.1);
  EXPECT_TRUE(c.record(24, 8, 55.0));
  EXPECT_EQ(c.measured_points(), 0u);
  EXPECT_DOUBLE_EQ(c.cost(24, 8), 10.0) << "still the prior";
  EXPECT_TRUE(c.record(24, 8, 31.0));
  EXPECT_DOUBLE_EQ(c.cost(24, 8), 31.0);
  EXPECT_TRUE(c.record(24, 4, 40.0)) << "another bucket: its own first touch";
  EXPECT_DOUBLE_EQ(c.cost(24, 4), 10.0);
  EXPECT_TRUE(c.record(21, 8, 30.0));
  EXPECT_EQ(c.measured_points(), 1u);
}

// unstored_steps = 2 (session 20): a shape's first two steps (both slow on the H200 at a new row
// count) are only noted, the third is the first stored; a profiled shape stores at once.
TEST(StepCost, TheFirstTwoStepsOfAShapeCanBeLeftUnstored) {
  StepCost c({10.0, 0.0, 0.0}, 0.1, 2);
  EXPECT_TRUE(c.record(5, 1, 2.6));
  EXPECT_TRUE(c.record(5, 1, 2.4));
  EXPECT_EQ(c.measured_points(), 0u);
  EXPECT_DOUBLE_EQ(c.cost(5, 1), 10.0) << "still the prior";
  EXPECT_TRUE(c.record(5, 1, 1.6));
  EXPECT_DOUBLE_EQ(c.cost(5, 1), 1.6);
  EXPECT_DOUBLE_EQ(c.first_touch_ms(5, 1), 0.0) << "seen";
  EXPECT_TRUE(c.profile(std::vector<int>{8}, 1, [](int, int) -> Result<double> { return 3.0; }).ok());
  EXPECT_TRUE(c.record(8, 8, 3.5));
  EXPECT_DOUBLE_EQ(c.cost(8, 8), 0.9 * 3.0 + 0.1 * 3.5) << "a profiled shape stores its next step";
  StepCost one({10.0, 0.0, 0.0}, 0.1);  // the default: only the first
  one.record(5, 1, 2.6);
  one.record(5, 1, 2.4);
  EXPECT_DOUBLE_EQ(one.cost(5, 1), 2.4);
}

// The scheduler's default (session 32): two unstored steps where a backend's steps pay for a
// switch (the device backend), one on the CPU; an explicit option wins.
TEST(StepCost, UnstoredStepsByTheBackendUnlessGiven) {
  EXPECT_EQ(unstored_steps_for(-1, kStreamingStep.switch_cost), 2);
  EXPECT_EQ(unstored_steps_for(-1, kComputeBoundStep.switch_cost), 1);
  EXPECT_EQ(unstored_steps_for(1, true), 1);
  EXPECT_EQ(unstored_steps_for(3, false), 3);
}

TEST(StepCost, RecordIgnoresBadMeasurements) {
  StepCost c;
  EXPECT_FALSE(c.record(2, 1, NAN));
  EXPECT_FALSE(c.record(2, 1, INFINITY));
  EXPECT_FALSE(c.record(2, 1, 0.0));
  EXPECT_FALSE(c.record(2, 1, -3.0));
  EXPECT_FALSE(c.record(1, 2, 5.0));  // fewer rows than sequences
  EXPECT_FALSE(c.record(1, 0, 5.0));
  EXPECT_EQ(c.measured_points(), 0u);
}

TEST(StepCost, EmaFollowsDrift) {
  StepCost c({}, 0.1);
  for (int i = 0; i < 20; ++i) c.record(3, 1, 10.0);
  for (int i = 0; i < 100; ++i) c.record(3, 1, 30.0);
  EXPECT_NEAR(c.cost(3, 1), 30.0, 0.01);
}

TEST(StepCost, ProfileMeasuresEveryShape) {
  StepCost c({1.0, 0.0, 0.0});
  std::vector<std::pair<int, int>> calls;
  const std::vector<int> batches = {1, 2, 4};
  auto step = [&](int rows, int seqs) -> Result<double> {
    calls.emplace_back(rows, seqs);
    return 5.0 + rows * seqs;
  };
  ASSERT_TRUE(c.profile(batches, 6, step).ok());
  EXPECT_EQ(calls.size(), 18u);
  EXPECT_EQ(c.measured_points(), 18u);
  EXPECT_DOUBLE_EQ(c.cost(24, 4), 29.0);
  EXPECT_DOUBLE_EQ(c.cost(3, 1), 8.0);
  c.record(3, 1, 18.0);  // online refresh on top of the profile (α = 0.1)
  EXPECT_DOUBLE_EQ(c.cost(3, 1), 9.0);
  ASSERT_TRUE(c.profile(batches, 6, step).ok());  // a new profile replaces
  EXPECT_DOUBLE_EQ(c.cost(3, 1), 8.0);
}

// A shape's estimate ages by the steps its bucket stores after it was last stored (by a step or
// the profile); other buckets do not age it; a shape without an estimate has no age.
TEST(StepCost, StepsSinceRefreshCountTheBucketsStoredSteps) {
  StepCost c({1, 1, 0}, 0.5);
  const int batches[] = {1, 4};
  ASSERT_TRUE(c.profile(batches, 6, [](int rows, int seqs) -> Result<double> { return 1.0 + rows * seqs; }).ok());
  EXPECT_EQ(c.steps_since_refresh(6, 1), 0);
  EXPECT_EQ(c.steps_since_refresh(1, 1), 5);  // the profile's five later shapes of the bucket
  EXPECT_EQ(c.steps_since_refresh(7, 1), -1);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c.record(5, 1, 3.0));
  EXPECT_EQ(c.steps_since_refresh(6, 1), 10);
  EXPECT_EQ(c.steps_since_refresh(5, 1), 0);
  EXPECT_EQ(c.steps_since_refresh(24, 4), 0) << "another bucket";
  ASSERT_TRUE(c.record(6, 1, 3.0));
  EXPECT_EQ(c.steps_since_refresh(6, 1), 0);
  EXPECT_EQ(c.steps_since_refresh(5, 1), 1);
}

TEST(StepCost, ProfileReportsErrors) {
  StepCost c;
  const std::vector<int> batches = {1, 2};
  auto failing = [](int rows, int seqs) -> Result<double> {
    if (seqs == 2 && rows == 3) return internal_error("device lost");
    return 1.0;
  };
  Status s = c.profile(batches, 4, failing);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("device lost"), std::string::npos);
  EXPECT_NE(s.message().find("2 × 3 rows"), std::string::npos) << s.message();
  EXPECT_EQ(c.measured_points(), 6u);  // 4 + 2 before the failure
  auto nan_step = [](int, int) -> Result<double> { return NAN; };
  EXPECT_FALSE(c.profile(batches, 4, nan_step).ok());
  const std::vector<int> zero = {0};
  EXPECT_FALSE(c.profile(zero, 4, nan_step).ok());
  EXPECT_FALSE(c.profile(batches, 0, nan_step).ok());
}

// A first touch's surcharge is learned from shapes seen twice (first step − the first stored
// one) and charged only to shapes never seen; a profiled shape counts as seen.
TEST(StepCost, AFirstTouchSurchargeIsLearnedAndChargedToUnseenShapes) {
  StepCost c(StepCostPrior{1.0, 0.0, 0.0});
  EXPECT_EQ(c.first_touch_ms(24, 8), 0.0) << "nothing learned yet";
  c.record(24, 8, 5.5);  // a graph instantiated
  EXPECT_EQ(c.first_touch_ms(32, 8), 0.0) << "one step of a shape teaches nothing";
  c.record(24, 8, 3.1);
  EXPECT_NEAR(c.first_touch_ms(32, 8), 2.4, 1e-12);
  EXPECT_EQ(c.first_touch_ms(24, 8), 0.0) << "seen";
  EXPECT_NEAR(c.first_touch_ms(4, 2), 2.4, 1e-12) << "learned across buckets";
  c.record(24, 8, 3.0);  // a later step of a stored shape is not a first touch
  EXPECT_NEAR(c.first_touch_ms(32, 8), 2.4, 1e-12);
  c.record(16, 8, 3.0);
  c.record(16, 8, 3.4);  // a first step faster than the next: no surcharge, floored at 0
  EXPECT_NEAR(c.first_touch_ms(32, 8), 0.9 * 2.4, 1e-12);
  const int batch[] = {8};
  ASSERT_TRUE(c.profile(batch, 5, [](int, int) -> Result<double> { return 3.0; }).ok());
  EXPECT_EQ(c.first_touch_ms(40, 8), 0.0) << "profiled";
}

}  // namespace
}  // namespace dsv41
