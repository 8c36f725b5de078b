// The engine thread: requests handed over from other threads get the tokens the scheduler gives
// them alone; a full queue is refused; cancel frees the sequence; stop(false) ends what is left.
#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/test_models.h"

namespace dsv41::server {
namespace {

LoopOptions options(int parallel, int64_t max_queue) {
  LoopOptions o;
  o.scheduler.parallel = parallel;
  o.scheduler.max_context = 64;
  o.scheduler.eos_token_id = -1;
  o.max_queue = max_queue;
  return o;
}

// Waits for every choice of `c`; returns the results by choice and the tokens seen.
std::vector<ChoiceResult> wait_all(Channel& c, std::vector<TokenEvent>* tokens) {
  std::vector<ChoiceResult> results;
  while (static_cast<int>(results.size()) < c.choices()) c.wait(tokens, &results, std::chrono::milliseconds(100));
  std::sort(results.begin(), results.end(), [](auto& a, auto& b) { return a.choice < b.choice; });
  return results;
}

TEST(EngineLoop, ThreadsGetTheSchedulersTokens) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i)
    reqs.push_back(GenerationRequest{testing::test_tokens(3 + 4 * i, 40 + i), 6 + i, {0.8f, 0.9f, uint64_t(i)}, true});
  // Alone, through the scheduler.
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : reqs) {
    auto e = testing::make_test_engine();
    auto s = Scheduler::create(*e, options(1, 0).scheduler);
    const int64_t t = (*s)->submit(r);
    (*s)->run_to_completion();
    want.push_back((*s)->take(t)->ids);
  }
  auto engine = testing::make_test_engine();
  Metrics metrics;
  auto loop = EngineLoop::start(*engine, options(2, 8), &metrics);
  ASSERT_TRUE(loop.ok());
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> got(reqs.size()), streamed(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] {
      std::vector<Job> jobs(1);
      jobs[0].request = reqs[i];
      jobs[0].top_logprobs = 2;
      auto ch = (*loop)->submit(std::move(jobs));
      ASSERT_TRUE(ch.ok());
      std::vector<TokenEvent> tokens;
      auto results = wait_all(**ch, &tokens);
      got[i] = results[0].result.ids;
      for (const auto& t : tokens) {
        streamed[i].push_back(t.token);
        EXPECT_LE(t.logprob, 0.0f);
        EXPECT_EQ(t.top.size(), 2u);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[i], want[i]) << i;
    EXPECT_EQ(streamed[i], want[i]) << i;
  }
  EXPECT_EQ((*loop)->in_flight(), 0);
  EXPECT_NE(metrics.render({}).find("dsv41_generation_tokens_total " + std::to_string(6 + 7 + 8 + 9 + 10 + 11)),
            std::string::npos);
}

TEST(EngineLoop, FullQueueCancelAndStop) {
  auto engine = testing::make_test_engine();
  LoopOptions o = options(1, 1);
  o.scheduler.max_context = 1024;  // long requests: the cancel surely arrives before the end
  auto loop = EngineLoop::start(*engine, o, nullptr);
  ASSERT_TRUE(loop.ok());
  auto job = [](int64_t max_tokens) {
    std::vector<Job> jobs(1);
    jobs[0].request = GenerationRequest{testing::test_tokens(5, 1), max_tokens, {}, true};
    return jobs;
  };
  auto a = (*loop)->submit(job(1000));
  auto b = (*loop)->submit(job(1000));
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = (*loop)->submit(job(5));
  ASSERT_FALSE(c.ok()) << "parallel 1 + queue 1 are taken";
  EXPECT_EQ(c.status().kind(), ErrorKind::kOutOfRange);
  (*loop)->cancel(*a);
  std::vector<TokenEvent> tokens;
  auto ra = wait_all(**a, &tokens);
  EXPECT_EQ(ra[0].result.finish, FinishReason::kCancelled);
  EXPECT_LT(ra[0].result.ids.size(), 1000u);
  EXPECT_TRUE(ra[0].result.status.ok());
  (*loop)->stop(false);
  auto rb = wait_all(**b, &tokens);
  EXPECT_TRUE(rb[0].result.status.ok()) << rb[0].result.status.to_string();
  EXPECT_TRUE(rb[0].result.finish == FinishReason::kCancelled || rb[0].result.finish == FinishReason::kLength);
  EXPECT_EQ(engine->pool_stats().sequences, 0);
  EXPECT_FALSE((*loop)->submit(job(5)).ok()) << "stopped";
}

}  // namespace
}  // namespace dsv41::server
