// The start-up prediction of drafting's speed on made-up profiles (profile_shapes itself runs on a
// real engine in tests/dspark_test.cpp).
#include "runtime/shape_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsv41 {
namespace {

// One batch size: a plain step of `plain` ms, verify shapes of 2 … 4 rows a sequence.
ShapeProfile profile_of(int seqs, double plain, std::vector<double> verify_ms, double draft_ms) {
  ShapeProfile p;
  p.points.push_back({seqs, 1, plain, 0, plain});
  for (size_t i = 0; i < verify_ms.size(); ++i) p.points.push_back({seqs, int(i) + 2, verify_ms[i], draft_ms});
  return p;
}

TEST(ShapeProfile, ThePredictionIsTheBestShapesExpectedTokensOverItsCost) {
  // Rows nearly free (a weight-bound step): every draft shape pays, the longest most.
  const ShapeProfile gpu = profile_of(1, 1.0, {1.1, 1.2, 1.3}, 0.4);
  const std::vector<double> half = {0.5, 0.5, 0.5};
  // 4 rows: 1 + 0.5 + 0.25 + 0.125 tokens in 1.7 ms against 1 in 1.0.
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(gpu, 1, half), 1.875 / 1.7);
  // Rows that cost a plain step each (a compute-bound step): a clear loss at every shape; the
  // best is 2 rows (1.5 tokens in 2.0 + 0.4 ms).
  const ShapeProfile cpu = profile_of(8, 1.0, {2.0, 3.0, 4.0}, 0.4);
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(cpu, 8, half), 1.5 / 2.4);
  // Certain drafts still lose there: 4 tokens in 4.4 ms.
  const std::vector<double> sure = {1, 1, 1};
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(cpu, 8, sure), 4 / 4.4);
}

TEST(ShapeProfile, UnknownRatesAndMissingShapesPredictNothingOrLess) {
  const ShapeProfile p = profile_of(1, 1.0, {1.1, 1.2, 1.3}, 0.4);
  const std::vector<double> one = {0.5}, none = {}, unknown_first = {NAN, 0.5}, gap = {0.5, NAN, 0.5};
  EXPECT_TRUE(std::isnan(predicted_draft_speedup(p, 2, one))) << "batch 2 not profiled";
  EXPECT_TRUE(std::isnan(predicted_draft_speedup(p, 1, none)));
  EXPECT_TRUE(std::isnan(predicted_draft_speedup(p, 1, unknown_first)));
  // Rates past the first unknown one are not used: 2 rows only.
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(p, 1, gap), 1.5 / 1.5);
  // More rates than profiled shapes: the shapes there are.
  const std::vector<double> certain(8, 1.0);
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(p, 1, certain), 4 / 1.7);
  // The plain side is the unfed plain step (auto's plain phase), not the fed one.
  ShapeProfile fed = p;
  fed.points[0].step_ms = 1.5;
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(fed, 1, certain), 4 / 1.7);
  fed.points[0].unfed_ms = 0.5;
  EXPECT_DOUBLE_EQ(predicted_draft_speedup(fed, 1, certain), 4 / 1.7 * 0.5);
  // Plain decoding not profiled: nothing to compare with.
  ShapeProfile no_plain = p;
  no_plain.points.erase(no_plain.points.begin());
  EXPECT_TRUE(std::isnan(predicted_draft_speedup(no_plain, 1, one)));
}

}  // namespace
}  // namespace dsv41
