#include "runtime/draft_length.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "base/rng.h"

namespace dsv41 {
namespace {

const DsparkMode kAuto{DsparkMode::Kind::kAuto, 0};

TEST(DraftLength, ParsesModes) {
  auto a = parse_dspark_mode("auto", 5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, DsparkMode::Kind::kAuto);
  auto off = parse_dspark_mode("off", 5);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->kind, DsparkMode::Kind::kOff);
  for (int k = 1; k <= 5; ++k) {
    auto f = parse_dspark_mode(std::to_string(k), 5);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->kind, DsparkMode::Kind::kFixed);
    EXPECT_EQ(f->k, k);
  }
  for (const char* bad : {"6", "-1", "x", "0", "", "05", "Auto", "3 ", "10"}) {
    auto r = parse_dspark_mode(bad, 5);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("auto, off or a draft length 1..5"), std::string::npos);
    EXPECT_NE(r.status().message().find("block size is 5"), std::string::npos);
  }
  EXPECT_FALSE(parse_dspark_mode("4", 3).ok());
}

// E(k) / cost for one sequence, by brute force.
int brute_single(const std::vector<double>& p, const StepCost& cost) {
  int best_k = 0;
  double best = 1 / cost.cost(1, 1), tokens = 1, pi = 1;
  for (size_t k = 1; k <= p.size(); ++k) {
    tokens += pi *= p[k - 1];
    const double t = tokens / cost.cost(int(k) + 1, 1);
    if (t > best) best = t, best_k = int(k);
  }
  return best_k;
}

// An estimate priced too high (a slow step stored) keeps the planner one row short; once the
// bucket has stored explore_after steps since that estimate, the plan takes the row once, and the
// step it records (at its real cost) brings the planner back to it. Not at more sequences, nor
// with explore_after = 0 (the default).
TEST(DraftLength, AStaleEstimateAboveThePlanIsSteppedOnce) {
  StepCost cost({1, 0.01, 0}, 1.0);  // α = 1: the latest step is the estimate
  const int one[] = {1};
  ASSERT_TRUE(cost.profile(one, 6, [](int rows, int) -> Result<double> { return 1.0 + 0.01 * rows; }).ok());
  const std::vector<double> p = {0.9, 0.9, 0.9, 0.9, 0.3};
  EXPECT_EQ(choose_draft_length(p, cost, kAuto), 5);
  ASSERT_TRUE(cost.record(6, 1, 5.0));  // a slow 6-row step
  DraftPlanRule never;
  never.explore_after = 0;
  DraftPlanRule exploring;
  exploring.explore_after = DraftPlanRule::kExploreAfter;
  const std::vector<std::vector<double>> batch = {p};
  int explored_at = -1;
  for (int step = 0; step < 40 && explored_at < 0; ++step) {
    EXPECT_EQ(plan_draft_lengths(batch, cost, kAuto, 0, never).k[0], 4);
    const int k = plan_draft_lengths(batch, cost, kAuto, 0, exploring).k[0];
    if (k == 5) explored_at = step;
    else ASSERT_TRUE(cost.record(k + 1, 1, 1.05));
  }
  EXPECT_EQ(explored_at, exploring.explore_after) << "the 6-row estimate aged explore_after steps first";
  EXPECT_EQ(choose_draft_length(p, cost, kAuto), 4) << "the default rule never explores";
  ASSERT_TRUE(cost.record(6, 1, 1.06));
  EXPECT_EQ(choose_draft_length(p, cost, kAuto), 5) << "measured again at its real cost";
  // Two sequences: no exploration, however stale.
  StepCost two({1, 0.01, 0}, 1.0);
  const int b2[] = {2};
  ASSERT_TRUE(two.profile(b2, 6, [](int rows, int seqs) -> Result<double> { return 1.0 + 0.01 * rows * seqs; }).ok());
  ASSERT_TRUE(two.record(12, 2, 9.0));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(two.record(10, 2, 1.1));
  const std::vector<std::vector<double>> pair = {{0.9, 0.9, 0.9, 0.9, 0.9}, {0.9, 0.9, 0.9, 0.9, 0.9}};
  const DraftPlan plan = plan_draft_lengths(pair, two, kAuto, 0, exploring);
  EXPECT_LT(plan.k[0] + plan.k[1], 10);
}

// The one-cap rule explores the same way: the cap one above its best once that shape is stale.
TEST(DraftLength, TheOneCapRuleStepsAStaleLargerCapOnce) {
  StepCost cost({1, 0.01, 0}, 1.0);
  const int one[] = {1};
  ASSERT_TRUE(cost.profile(one, 6, [](int rows, int) -> Result<double> { return 1.0 + 0.01 * rows; }).ok());
  ASSERT_TRUE(cost.record(6, 1, 5.0));  // a slow 6-row step
  const std::vector<std::vector<double>> batch = {{0.9, 0.9, 0.9, 0.9, 0.3}};
  DraftPlanRule cap, never;
  cap.uniform_cap = never.uniform_cap = true;
  cap.explore_after = DraftPlanRule::kExploreAfter;
  for (int i = 0; i + 1 < cap.explore_after; ++i) ASSERT_TRUE(cost.record(5, 1, 1.05));
  EXPECT_EQ(plan_draft_lengths(batch, cost, kAuto, 0, cap).k[0], 4) << "15 steps old: not yet";
  ASSERT_TRUE(cost.record(5, 1, 1.05));
  EXPECT_EQ(plan_draft_lengths(batch, cost, kAuto, 0, cap).k[0], 5);
  EXPECT_EQ(plan_draft_lengths(batch, cost, kAuto, 0, never).k[0], 4);
}

TEST(DraftLength, SingleSequenceMatchesBruteForce) {
  Xoshiro256 r(1);
  for (int trial = 0; trial < 500; ++trial) {
    StepCost cost({r.uniform() * 20, r.uniform() * 5, 0.0});
    for (int rows = 1; rows <= 6; ++rows)
      if (r.uniform() < 0.5) cost.record(rows, 1, 1 + r.uniform() * 30);
    std::vector<double> p(r.next() % 6);
    for (double& v : p) v = r.uniform();
    EXPECT_EQ(choose_draft_length(p, cost, kAuto), brute_single(p, cost));
  }
}

TEST(DraftLength, SingleSequenceExtremes) {
  const std::vector<double> p = {0.9, 0.9, 0.9, 0.9, 0.9};
  EXPECT_EQ(choose_draft_length(p, StepCost({10.0, 0.0, 0.0}), kAuto), 5);  // flat cost: all
  EXPECT_EQ(choose_draft_length(p, StepCost({0.0, 1.0, 0.0}), kAuto), 0);   // cost ∝ rows: none pay
  EXPECT_EQ(choose_draft_length({}, StepCost(), kAuto), 0);
  const std::vector<double> bad = {NAN, 0.9};
  EXPECT_EQ(choose_draft_length(bad, StepCost({10.0, 0.0, 0.0}), kAuto), 0);  // NaN = 0: π stays 0
  EXPECT_EQ(choose_draft_length(p, StepCost(), {DsparkMode::Kind::kOff, 0}), 0);
  EXPECT_EQ(choose_draft_length(p, StepCost(), {DsparkMode::Kind::kFixed, 3}), 3);
  EXPECT_EQ(choose_draft_length(std::vector<double>{0.5}, StepCost(), {DsparkMode::Kind::kFixed, 3}), 1);
}

// Best Σ E / cost over every k vector (the batch is small enough to enumerate).
double brute_batch(const std::vector<std::vector<double>>& p, const StepCost& cost) {
  const int n = int(p.size());
  std::vector<int> k(n, 0);
  double best = 0;
  std::function<void(int)> walk = [&](int s) {
    if (s == n) {
      double tokens = n;
      int rows = n;
      for (int t = 0; t < n; ++t) {
        double pi = 1;
        for (int i = 0; i < k[t]; ++i) tokens += pi *= p[t][i], ++rows;
      }
      best = std::max(best, tokens / cost.cost(rows, n));
      return;
    }
    for (k[s] = 0; k[s] <= int(p[s].size()); ++k[s]) walk(s + 1);
    k[s] = 0;
  };
  walk(0);
  return best;
}

// For a cost that depends on (total rows, seqs) only, taking the largest π first is optimal at
// every total: the plan's modelled throughput must equal the exhaustive optimum.
// The drafter's time, once spent, is a cost of every plan (k = 0 included): verification rows
// that do not pay for themselves against a plain step pay once the drafter's cost is shared.
TEST(DraftLength, SunkDraftCostCountsForEveryLength) {
  const StepCost cost(StepCostPrior{.fixed_ms = 0.5, .per_row_ms = 0.5, .per_seq_ms = 0.0});  // 1 ms + 0.5 a row
  const std::vector<std::vector<double>> probs = {{0.4, 0.4, 0.4, 0.4, 0.4}};
  EXPECT_EQ(plan_draft_lengths(probs, cost, kAuto).k[0], 0);  // 1.4 / 1.5 < 1 / 1
  const DraftPlan sunk = plan_draft_lengths(probs, cost, kAuto, 2.0);  // 1.4 / 3.5 > 1 / 3
  EXPECT_GE(sunk.k[0], 1);
  const double e = 1 + 0.4 * (sunk.k[0] >= 1) + 0.16 * (sunk.k[0] >= 2) + 0.064 * (sunk.k[0] >= 3);
  EXPECT_NEAR(sunk.cost_ms, 2.0 + 1.0 + 0.5 * sunk.k[0], 1e-12);
  EXPECT_GT(sunk.expected_tokens, 1.0);
  for (int k = 0; k <= 5; ++k) {  // the plan is the best single length by E / (sunk + cost)
    double ek = 1, pi = 1;
    for (int i = 0; i < k; ++i) ek += pi *= 0.4;
    EXPECT_LE(ek / (2.0 + 1.0 + 0.5 * k), e / sunk.cost_ms + 1e-12) << k;
  }
}

TEST(DraftLength, BatchPlanIsOptimalForTotalRowCosts) {
  Xoshiro256 r(2);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(r.next() % 3);
    StepCost cost({r.uniform() * 20, r.uniform() * 4, r.uniform()});
    for (int rows = n; rows <= 6 * n; ++rows)
      if (r.uniform() < 0.3) cost.record(rows, n, 1 + r.uniform() * 40);
    std::vector<std::vector<double>> p(n);
    for (auto& v : p) {
      v.resize(r.next() % 6);
      for (double& x : v) x = r.uniform() < 0.2 ? 1.0 : r.uniform();
    }
    const DraftPlan plan = plan_draft_lengths(p, cost, kAuto);
    ASSERT_EQ(plan.k.size(), size_t(n));
    for (int s = 0; s < n; ++s) EXPECT_LE(plan.k[s], int(p[s].size()));
    EXPECT_NEAR(plan.expected_tokens / plan.cost_ms, brute_batch(p, cost), 1e-12);
  }
}

TEST(DraftLength, BatchSharesRowsByConfidence) {
  // Cost flat up to 8 rows, then steep: 4 sequences have 4 extra rows to share.
  StepCost cost({0.0, 0.0, 0.0});
  for (int rows = 4; rows <= 24; ++rows)
    for (int i = 0; i < 2; ++i) cost.record(rows, 4, rows <= 8 ? 10.0 : 10.0 + 5 * (rows - 8));  // past the first touch
  const std::vector<std::vector<double>> p = {
      {0.95, 0.9, 0.9, 0.5, 0.5}, {0.2, 0.9}, {0.99, 0.99, 0.1}, {}};
  const DraftPlan plan = plan_draft_lengths(p, cost, kAuto);
  EXPECT_EQ(plan.k, (std::vector<int>{2, 0, 2, 0}));  // π: .95 .855 | .2 | .99 .98
  EXPECT_DOUBLE_EQ(plan.cost_ms, 10.0);
  EXPECT_NEAR(plan.expected_tokens, 4 + 0.95 + 0.855 + 0.99 + 0.9801, 1e-12);
  const DraftPlan fixed = plan_draft_lengths(p, cost, {DsparkMode::Kind::kFixed, 3});
  EXPECT_EQ(fixed.k, (std::vector<int>{3, 2, 3, 0}));
  EXPECT_TRUE(plan_draft_lengths({}, cost, kAuto).k.empty());
}

// The backend's step shape decides what a plain step measured at batch 8 says about verifying
// more rows: on a streaming-bound step drafts of even confidence are worth their rows; on a
// compute-bound one (the CPU backend) only nearly certain ones are.
TEST(DraftLength, BackendShapeDecidesWhatAMeasuredPlainStepImplies) {
  const std::vector<std::vector<double>> even(8, std::vector<double>(5, 0.5));
  const std::vector<std::vector<double>> sure(8, std::vector<double>{0.97, 0.97, 0.2});
  for (const bool compute_bound : {false, true}) {
    StepCost cost(step_cost_prior(compute_bound ? kComputeBoundStep : kStreamingStep));
    for (int i = 0; i < 2; ++i) cost.record(8, 8, 6.0);  // only plain batch-8 steps measured so far
    const DraftPlan on_even = plan_draft_lengths(even, cost, kAuto);
    const DraftPlan on_sure = plan_draft_lengths(sure, cost, kAuto);
    int even_rows = 0;
    for (int s = 0; s < 8; ++s) even_rows += on_even.k[s];
    if (compute_bound) {
      EXPECT_EQ(even_rows, 0);  // +0.5 tokens for +1 row of ≈ 1/9.86 of the step: a loss
      EXPECT_EQ(on_sure.k, std::vector<int>(8, 2));  // 0.97, then 0.94: each worth a row
    } else {
      EXPECT_GT(even_rows, 8);  // rows ≈ 1 % of a step: worth it at π = 0.5
      EXPECT_EQ(on_sure.k, std::vector<int>(8, 3));  // even the 0.19 slots: +0.8 % tokens, +0.7 % time
    }
  }
}

// The uniform rule gives every sequence one cap K (its own estimates permitting), the best K by
// modelled throughput; the greedy rule shares the rows by confidence instead.
TEST(DraftLength, UniformCapIsTheBestSingleCapForTheBatch) {
  const DraftPlanRule uniform{.uniform_cap = true};
  Xoshiro256 r(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(r.next() % 8);
    StepCost cost({r.uniform() * 20, r.uniform() * 4, r.uniform()});
    for (int rows = n; rows <= 6 * n; ++rows)
      if (r.uniform() < 0.3) {
        const double ms = 1 + r.uniform() * 40;
        cost.record(rows, n, ms);
        cost.record(rows, n, ms);  // stored (past the first touch)
      }
    std::vector<std::vector<double>> p(static_cast<size_t>(n));
    for (auto& v : p) {
      v.resize(r.next() % 6);
      for (double& x : v) x = r.uniform();
    }
    const DraftPlan plan = plan_draft_lengths(p, cost, kAuto, 0.5, uniform);
    double best = 0;
    for (int cap = 0; cap <= 5; ++cap) {
      const DraftPlan fixed = plan_draft_lengths(p, cost, {DsparkMode::Kind::kFixed, std::max(cap, 1)}, 0.5);
      const double tokens = cap == 0 ? n : fixed.expected_tokens, ms = cap == 0 ? 0.5 + cost.cost(n, n) : fixed.cost_ms;
      best = std::max(best, tokens / ms);
    }
    EXPECT_NEAR(plan.expected_tokens / plan.cost_ms, best, 1e-12);
    int cap = 0;
    for (int s = 0; s < n; ++s) cap = std::max(cap, plan.k[size_t(s)]);
    for (int s = 0; s < n; ++s) EXPECT_EQ(plan.k[size_t(s)], std::min(cap, int(p[size_t(s)].size()))) << trial;
  }
  // The same case as BatchSharesRowsByConfidence: 8 rows flat, then steep.
  StepCost cost({0.0, 0.0, 0.0});
  for (int rows = 4; rows <= 24; ++rows)
    for (int i = 0; i < 2; ++i) cost.record(rows, 4, rows <= 8 ? 10.0 : 10.0 + 5 * (rows - 8));
  const std::vector<std::vector<double>> p = {{0.95, 0.9, 0.9, 0.5, 0.5}, {0.2, 0.9}, {0.99, 0.99, 0.1}, {}};
  EXPECT_EQ(plan_draft_lengths(p, cost, kAuto, 0, uniform).k, (std::vector<int>{1, 1, 1, 0}));
  EXPECT_EQ(plan_draft_lengths(p, cost, kAuto).k, (std::vector<int>{2, 0, 2, 0}));
}

// With the first-touch charge a plan keeps to a shape already seen unless an unseen one wins by
// more than its share of the learned first touch: at batch 8, 24 rows seen at 3.10 ms, 32 rows
// modelled at 3.19 ms (never stepped), a 1.0 ms first touch learned → 32 rows would yield 1.9 %
// more tokens a ms, less than its 0.125 ms share (3.9 %).
TEST(DraftLength, TheFirstTouchChargeKeepsToSeenShapes) {
  StepCost cost(StepCostPrior{3.0, 0.0125, 0.0});  // 24 rows 3.3, 32 rows 3.4
  cost.record(16, 8, 4.0);
  cost.record(16, 8, 3.0);  // learns a 1.0 ms first touch
  cost.record(24, 8, 4.1);
  cost.record(24, 8, 3.1);
  // 32 rows: the prior's slope from 24 measured rows: 3.1 · 3.4 / 3.3 ≈ 3.19 ms.
  const std::vector<std::vector<double>> p(8, std::vector<double>{0.9, 0.8, 0.18, 0.05, 0.05});
  for (const bool uniform : {false, true}) {
    const DraftPlan free_plan = plan_draft_lengths(p, cost, kAuto, 0, {.uniform_cap = uniform});
    const DraftPlan charged = plan_draft_lengths(p, cost, kAuto, 0, {.uniform_cap = uniform, .charge_first_touch = true});
    int free_rows = 0, charged_rows = 0;
    for (int s = 0; s < 8; ++s) free_rows += free_plan.k[size_t(s)] + 1, charged_rows += charged.k[size_t(s)] + 1;
    EXPECT_EQ(free_rows, 32) << uniform;
    EXPECT_EQ(charged_rows, 24) << uniform;
    EXPECT_NEAR(charged.cost_ms, 3.1, 1e-12) << "a seen shape pays no share";
  }
}

// Weighed by remaining tokens, a sequence 10 tokens from done (of a batch whose slowest has 100
// left) is worth a tenth: at 1 ms a row its drafts no longer pay, the laggard's still do.
TEST(DraftLength, RemainingTokensWeighTheLeadersDraftsDown) {
  const StepCost cost(StepCostPrior{.fixed_ms = 10.0, .per_row_ms = 1.0, .per_seq_ms = 0.0});
  std::vector<std::vector<double>> p = {{0.9, 0.9, 0.9}, {0.9, 0.9, 0.9}};
  EXPECT_EQ(plan_draft_lengths(p, cost, kAuto).k, (std::vector<int>{3, 3}));
  const std::vector<int64_t> remaining = {100, 10};
  weigh_by_remaining(p, remaining);
  EXPECT_DOUBLE_EQ(p[0][0], 0.9);
  EXPECT_DOUBLE_EQ(p[1][0], 0.09);
  EXPECT_DOUBLE_EQ(p[1][1], 0.9) << "the first estimate carries the weight into every π";
  EXPECT_EQ(plan_draft_lengths(p, cost, kAuto).k, (std::vector<int>{3, 0}));
  std::vector<std::vector<double>> q = {{NAN, 0.5}, {}, {0.5}};
  const std::vector<int64_t> done = {0, 0, -3};
  weigh_by_remaining(q, done);  // nothing left anywhere: unchanged
  EXPECT_TRUE(std::isnan(q[0][0]));
  EXPECT_DOUBLE_EQ(q[2][0], 0.5);
  const std::vector<int64_t> some = {4, 9, -3};
  weigh_by_remaining(q, some);
  EXPECT_DOUBLE_EQ(q[0][0], 0.0) << "NaN counts as 0";
  EXPECT_DOUBLE_EQ(q[2][0], 0.0) << "a negative remainder counts as 0";
}

}  // namespace
}  // namespace dsv41
