// Expert parallelism + attention data parallelism on the CPU (issue 17 items 3 and 5): N engine
// replicas in one process (runtime/rank_group.h), routed experts spread over them, each owning its
// own sequences, against one engine holding every sequence. Sequences join at different steps
// (prefill chunks and decode tokens mixed in one batch), odd ones ask for every row's logits; with
// 5 sequences some ranks of 8 never hold one and every rank is idle at some step. Every logit is
// compared bit for bit, and the greedy ids must be the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "runtime/rank_group.h"
#include "tests/rank_schedule.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

using testing::random_prompt;
using testing::run_one_engine;
using testing::run_ranks_group;
using testing::Schedule;
using testing::Trace;

void expect_ranks_match_one_engine(const Model& model, const Schedule& plan, const EngineOptions& options) {
  const Trace one = run_one_engine(model, plan, options);
  size_t generated = 0;
  for (const auto& g : one.generated) generated += g.size();
  ASSERT_GT(generated, 5u);  // the schedule reaches decode
  for (int ranks : {1, 2, 3, 4, 8}) {
    int64_t collectives = 0;
    const Trace got = run_ranks_group(model, plan, options, ranks, &collectives);
    testing::expect_same(one, got, ranks);
    // Three exchanges per layer per step on every rank, idle or not.
    EXPECT_EQ(collectives, int64_t(3) * model.config().num_hidden_layers * plan.steps);
  }
}

// The random engine-test model: ratio-2 and ratio-1 kv sources, a restricted Reindex layer,
// Engram, 4 experts (top 2) — so 8 ranks leave 4 without an expert.
TEST(ExpertParallelEngine, RandomModelMatchesOneEngine) {
  const Model& m = testing::engine_test_model();
  Schedule plan;
  for (int s = 0; s < 5; ++s) plan.prompts.push_back(random_prompt(std::vector<int>{9, 4, 13, 6, 11}[s], 89, 40 + s));
  plan.chunk = 4;
  plan.steps = 11;
  EngineOptions o;
  o.rows_per_page = 2;
  expect_ranks_match_one_engine(m, plan, o);
}

// dsv41-mini: 8 experts (top 2), so 8 ranks hold one each; window 64, prompts past it.
TEST(ExpertParallelEngine, MiniModelMatchesOneEngine) {
  auto m = Model::load(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int64_t V = (*m)->config().vocab_size;
  Schedule plan;
  for (int s = 0; s < 5; ++s) plan.prompts.push_back(random_prompt(std::vector<int>{70, 9, 33, 17, 25}[s], V, 50 + s));
  plan.chunk = 24;
  plan.steps = 9;
  expect_ranks_match_one_engine(**m, plan, EngineOptions{});
}

// One rank's engine driven alone (the other never joins): the exchange times out, the segment
// fails with that reason, its sequence is reset, and the group stays failed.
TEST(ExpertParallelEngine, MissingRankFailsTheBatchNotTheProcess) {
  const Model& m = testing::engine_test_model();
  RankGroupOptions o;
  o.ranks = 2;
  o.timeout = std::chrono::milliseconds(100);
  auto group = RankGroup::create(m, o);
  ASSERT_TRUE(group.ok());
  const SequenceId id = (*group)->engine(0).add_sequence(64).value();
  const std::vector<int32_t> prompt = {1, 2, 3};
  Segment seg;
  seg.sequence = id;
  seg.tokens = prompt;
  const auto& res = (*group)->engine(0).forward(std::span<const Segment>(&seg, 1));
  ASSERT_EQ(res.size(), 1u);
  ASSERT_FALSE(res[0].status.ok());
  EXPECT_NE(res[0].status.message().find("waited 100 ms"), std::string::npos) << res[0].status.to_string();
  EXPECT_NE(res[0].status.message().find("the sequence was reset"), std::string::npos) << res[0].status.to_string();
  EXPECT_EQ((*group)->engine(0).length(id).value(), 0);
  std::vector<std::span<const Segment>> batches(2);
  std::vector<const std::vector<SegmentResult>*> out;
  EXPECT_FALSE((*group)->forward(std::span<const std::span<const Segment>>(batches.data(), 1), out).ok());
}

TEST(ExpertParallelEngine, RejectsBadGroups) {
  const Model& m = testing::engine_test_model();
  RankGroupOptions o;
  o.ranks = 0;
  EXPECT_FALSE(RankGroup::create(m, o).ok());
  o.ranks = 2;
  o.threads_per_rank = 0;
  EXPECT_FALSE(RankGroup::create(m, o).ok());
}

}  // namespace
}  // namespace dsv41
