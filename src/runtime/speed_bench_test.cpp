// End-to-end speed harness (runtime/speed_bench.h) on the f32 golden fixture: one point per
// context with the right positions and a cache that grows with the context; the prompt is
// deterministic and avoids the special ids; bad options fail before anything runs.
#include "runtime/speed_bench.h"

#include <gtest/gtest.h>

#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

TEST(SpeedBench, OnePointPerContext) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto model = Model::load(kDir).value();
  SpeedBenchOptions o;
  o.contexts = {5, 40};
  o.decode_tokens = 3;
  o.chunk = 16;
  int calls = 0;
  std::vector<int64_t> before;
  std::vector<int64_t> before_prefill;
  o.before_prefill = [&](int64_t c) {
    before_prefill.push_back(c);
    EXPECT_EQ(before.size() + 1, before_prefill.size());  // each prefill's hook before its decode's
  };
  o.before_decode = [&](int64_t c) {
    before.push_back(c);
    EXPECT_EQ(calls, static_cast<int>(before.size()) - 1);  // after the previous point, before this one
  };
  auto r = run_speed_bench(*model, o, [&](const SpeedPoint&) { ++calls; });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(before, o.contexts);
  EXPECT_EQ(before_prefill, o.contexts);
  for (size_t i = 0; i < 2; ++i) {
    const SpeedPoint& p = (*r)[i];
    EXPECT_EQ(p.context, o.contexts[i]);
    EXPECT_EQ(p.decode_tokens, 3);
    EXPECT_EQ(p.positions, o.contexts[i] + 3);
    EXPECT_GT(p.prefill_tokens_per_s(), 0);
    EXPECT_GT(p.decode_tokens_per_s(), 0);
    EXPECT_GT(p.cache.total(), 0);
  }
  EXPECT_GT((*r)[1].cache.main + (*r)[1].cache.index, 0);
  EXPECT_GE((*r)[1].cache.total(), (*r)[0].cache.total());
}

TEST(SpeedBench, PromptIsDeterministicAndAvoidsSpecialIds) {
  const auto a = speed_bench_prompt(643, 500, 9), b = speed_bench_prompt(643, 500, 9);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, speed_bench_prompt(643, 500, 10));
  for (int32_t id : a) {
    EXPECT_GE(id, 3);
    EXPECT_LT(id, 643);
  }
}

TEST(SpeedBench, BadOptionsFail) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto model = Model::load(kDir).value();
  SpeedBenchOptions o;
  EXPECT_FALSE(run_speed_bench(*model, o).ok());  // no contexts
  o.contexts = {0};
  EXPECT_FALSE(run_speed_bench(*model, o).ok());
  o.contexts = {4};
  o.decode_tokens = -1;
  EXPECT_FALSE(run_speed_bench(*model, o).ok());
  o.decode_tokens = 1;
  o.contexts = {model->config().max_position_embeddings};
  EXPECT_FALSE(run_speed_bench(*model, o).ok());
}

}  // namespace
}  // namespace dsv41
