// The batched decode over ranks generates, on 2 and 3 ranks, the ids one rank (one engine)
// generates for every sequence, and leaves no sequence behind.
#include "runtime/rank_batch_bench.h"

#include <gtest/gtest.h>

#include "tests/test_models.h"

namespace dsv41 {
namespace {

TEST(RankBatchBench, RanksGenerateOneEnginesIds) {
  BatchBenchOptions o;
  o.batches = {1, 4};
  o.context = 7;
  o.steps = 3;
  o.warmup_steps = 1;
  std::vector<std::vector<RankBatchPoint>> runs;
  for (int ranks : {1, 2, 3}) {
    RankGroupOptions go;
    go.ranks = ranks;
    go.time_exchanges = true;
    auto group = RankGroup::create(testing::engine_test_model(), go);
    ASSERT_TRUE(group.ok()) << group.status().to_string();
    auto points = run_rank_batch_bench(**group, o);
    ASSERT_TRUE(points.ok()) << points.status().to_string();
    ASSERT_EQ(points->size(), 2u);
    for (const RankBatchPoint& p : *points) {
      EXPECT_EQ(p.ranks, ranks);
      EXPECT_GT(p.tokens_per_s(), 0.0);
      // Three collectives a layer a timed step on every rank; bytes cross ranks only with two or more.
      EXPECT_EQ(p.exchanges.calls, int64_t{3} * ranks * testing::engine_test_model().config().num_hidden_layers * o.steps);
      EXPECT_GT(p.exchanges.seconds, 0.0);
      EXPECT_GE(p.exchanges.seconds, p.max_rank_exchange_seconds);
      if (ranks == 1) EXPECT_EQ(p.exchanges.bytes_sent, 0);
      else EXPECT_GT(p.exchanges.bytes_sent, 0);
      ASSERT_EQ(p.generated.size(), size_t(p.batch));
      for (const auto& g : p.generated) EXPECT_EQ(g.size(), 1u + 1u + 3u) << "prefill + warm-up + timed";
    }
    for (int r = 0; r < ranks; ++r) EXPECT_EQ((*group)->engine(r).pool_stats().sequences, 0);
    runs.push_back(std::move(*points));
  }
  for (size_t i = 1; i < runs.size(); ++i)
    for (size_t b = 0; b < runs[0].size(); ++b) EXPECT_EQ(runs[i][b].generated, runs[0][b].generated) << i + 1 << " ranks";
  // Bad options are refused before anything runs.
  RankGroupOptions go;
  auto group = RankGroup::create(testing::engine_test_model(), go);
  ASSERT_TRUE(group.ok());
  o.batches = {0};
  EXPECT_FALSE(run_rank_batch_bench(**group, o).ok());
}

}  // namespace
}  // namespace dsv41
