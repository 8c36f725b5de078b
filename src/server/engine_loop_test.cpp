// The engine thread: requests handed over from other threads get the tokens the scheduler gives
// them alone; a full queue is refused; cancel frees the sequence; stop(false) ends what is left.
#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "runtime/prefill.h"
#include "runtime/rank_group.h"
#include "store/store_test_util.h"
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

// Ids of `r` alone through a plain scheduler (cold).
// n sampled requests with logprobs: prompt i of 3 + 4i tokens (seed seed + i), 5 + extra + i tokens.
std::vector<GenerationRequest> sampled_requests(int n, uint32_t seed, int64_t extra) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < n; ++i)
    reqs.push_back(GenerationRequest{testing::test_tokens(3 + 4 * i, seed + uint32_t(i)), 5 + extra + i,
                                     {0.8f, 0.9f, uint64_t(i)}, true});
  return reqs;
}

std::vector<int32_t> alone(const GenerationRequest& r) {
  auto e = testing::make_test_engine();
  auto s = Scheduler::create(*e, options(1, 0).scheduler);
  const int64_t t = (*s)->submit(r);
  (*s)->run_to_completion();
  return (*s)->take(t)->ids;
}

// Each request submitted from its own thread with two top logprobs: every one gets `want[i]`,
// whole and streamed, with plausible logprobs.
void expect_tokens_alone(EngineLoop& loop, const std::vector<GenerationRequest>& reqs,
                         const std::vector<std::vector<int32_t>>& want, const std::string& what) {
  std::vector<std::thread> threads;
  std::vector<std::vector<int32_t>> got(reqs.size()), streamed(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] {
      std::vector<Job> jobs(1);
      jobs[0].request = reqs[i];
      jobs[0].top_logprobs = 2;
      auto ch = loop.submit(std::move(jobs));
      ASSERT_TRUE(ch.ok()) << ch.status().to_string();
      std::vector<TokenEvent> tokens;
      auto results = wait_all(**ch, &tokens);
      EXPECT_TRUE(results[0].result.status.ok()) << results[0].result.status.to_string();
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
    EXPECT_EQ(got[i], want[i]) << what << "request " << i;
    EXPECT_EQ(streamed[i], want[i]) << what << "request " << i;
  }
}

TEST(EngineLoop, ThreadsGetTheSchedulersTokens) {
  const std::vector<GenerationRequest> reqs = sampled_requests(6, 40, 1);
  // Alone, through the scheduler.
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : reqs) want.push_back(alone(r));
  auto engine = testing::make_test_engine();
  Metrics metrics;
  auto loop = EngineLoop::start(*engine, options(2, 8), &metrics);
  ASSERT_TRUE(loop.ok());
  expect_tokens_alone(**loop, reqs, want, "");
  EXPECT_EQ((*loop)->in_flight(), 0);
  // The longest request alone takes a step per token; every step is timed.
  EXPECT_GE((*loop)->stats().steps, 11);
  EXPECT_GT((*loop)->stats().busy_seconds, 0.0);
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

// Over a RankGroup (issue 17, `serve --ranks N`): requests from several threads get the tokens
// they get alone on one engine (sampled, with logprobs), spread over the ranks; a cancel ends a
// request on whichever rank it runs; the pools are empty at the end; the tiers are refused.
TEST(EngineLoop, RanksGiveEachRequestItsTokensAlone) {
  const std::vector<GenerationRequest> reqs = sampled_requests(5, 60, 0);
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : reqs) want.push_back(alone(r));
  for (int ranks : {2, 3}) {
    RankGroupOptions go;
    go.ranks = ranks;
    go.engine.rows_per_page = 2;
    auto group = RankGroup::create(testing::engine_test_model(), go);
    ASSERT_TRUE(group.ok()) << group.status().to_string();
    Metrics metrics;
    LoopOptions o = options(1, 8);
    o.scheduler.max_context = 1024;
    auto loop = EngineLoop::start(**group, o, &metrics);
    ASSERT_TRUE(loop.ok()) << loop.status().to_string();
    // A long request, cancelled once it has tokens (it runs on rank 0: the first submitted).
    std::vector<Job> long_job(1);
    long_job[0].request = GenerationRequest{testing::test_tokens(4, 9), 900, {}, true};
    auto cancelled = (*loop)->submit(std::move(long_job));
    ASSERT_TRUE(cancelled.ok());
    // Meanwhile, from threads, the sampled requests with logprobs.
    std::thread clients([&] { expect_tokens_alone(**loop, reqs, want, std::to_string(ranks) + " ranks, "); });
    std::vector<TokenEvent> long_tokens;
    std::vector<ChoiceResult> long_results;
    while (long_tokens.empty()) (*cancelled)->wait(&long_tokens, &long_results, std::chrono::milliseconds(50));
    (*loop)->cancel(*cancelled);
    auto rc = wait_all(**cancelled, &long_tokens);
    EXPECT_EQ(rc[0].result.finish, FinishReason::kCancelled);
    EXPECT_LT(rc[0].result.ids.size(), 900u);
    clients.join();
    EXPECT_EQ((*loop)->in_flight(), 0);
    EXPECT_GE((*loop)->stats().steps, 9);
    (*loop)->stop(true);
    for (int r = 0; r < ranks; ++r) EXPECT_EQ((*group)->engine(r).pool_stats().sequences, 0) << "rank " << r;
  }
  RankGroupOptions go;
  auto group = RankGroup::create(testing::engine_test_model(), go);
  ASSERT_TRUE(group.ok());
  ServeTurnTiers tiers;
  LoopOptions o = options(1, 8);
  o.tiers = &tiers;
  auto refused = EngineLoop::start(**group, o, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not served across ranks"), std::string::npos);
}

// A round of the ranks that cannot run (here rank 1's device binding fails) ends every request in
// flight with that error, and later requests are refused with it, instead of hanging.
TEST(EngineLoop, AFailedRoundOfTheRanksEndsTheRequestsWithItsError) {
  std::atomic<bool> broken{false};
  RankGroupOptions go;
  go.ranks = 2;
  go.bind_rank_thread = [&](int rank) {
    return rank == 1 && broken.load() ? internal_error("device 1 is gone") : ok_status();
  };
  auto group = RankGroup::create(testing::engine_test_model(), go);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  LoopOptions o = options(1, 8);
  o.scheduler.max_context = 1024;
  auto loop = EngineLoop::start(**group, o, nullptr);
  ASSERT_TRUE(loop.ok());
  std::vector<Job> jobs(1);
  jobs[0].request = GenerationRequest{testing::test_tokens(4, 3), 900, {}, true};
  auto ch = (*loop)->submit(std::move(jobs));
  ASSERT_TRUE(ch.ok());
  std::vector<TokenEvent> tokens;
  std::vector<ChoiceResult> results;
  while (tokens.empty()) (*ch)->wait(&tokens, &results, std::chrono::milliseconds(50));
  broken = true;
  results = wait_all(**ch, &tokens);
  EXPECT_EQ(results[0].result.finish, FinishReason::kError);
  EXPECT_NE(results[0].result.status.message().find("device 1 is gone"), std::string::npos)
      << results[0].result.status.to_string();
  EXPECT_NE(results[0].result.status.message().find("rank 1"), std::string::npos) << results[0].result.status.to_string();
  std::vector<Job> later(1);
  later[0].request = GenerationRequest{testing::test_tokens(4, 4), 3, {}, true};
  auto refused = (*loop)->submit(std::move(later));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("device 1 is gone"), std::string::npos);
  EXPECT_EQ((*loop)->in_flight(), 0);
}

std::vector<ChoiceResult> submit_and_wait(EngineLoop& loop, const GenerationRequest& r) {
  std::vector<Job> jobs(1);
  jobs[0].request = r;
  auto ch = loop.submit(std::move(jobs));
  EXPECT_TRUE(ch.ok());
  std::vector<TokenEvent> tokens;
  return ch.ok() ? wait_all(**ch, &tokens) : std::vector<ChoiceResult>{};
}

// With the cache tiers, at exact depth: a second turn that extends the first (its answer
// included) is forked from the kept sequence, prefilled in the batch and gives the cold ids; a
// request that runs out of pages while finished turns are kept gets them dropped and is served.
TEST(EngineLoop, CachedTurnsThroughTheLoop) {
  store_test::ScratchDir dir;
  SsdStoreOptions so;
  so.identity = store_test::test_identity(8);
  auto store = SsdStore::open(dir.path, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  DramPool dram;
  ServeTurnTiers tiers{store->get(), &dram, *so.identity, true};
  // The page budget: what one 44-token sequence holds, × 1.5 (two of them do not fit).
  int64_t one = 0;
  {
    auto probe = testing::make_test_engine();
    const SequenceId id = *probe->add_sequence(64);
    ASSERT_TRUE(prefill(*probe, id, testing::test_tokens(44, 1), PrefillOptions{PrefillDepth::kFull, 0, true}).ok());
    one = probe->pool_stats().main_bytes + probe->pool_stats().index_bytes;
  }
  ASSERT_GT(one, 0);
  const Model& m = testing::engine_test_model();
  EngineOptions eo;
  eo.rows_per_page = 2;
  eo.page_budget_bytes = one * 3 / 2;
  auto engine = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), eo);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  LoopOptions o = options(2, 4);
  o.tiers = &tiers;
  o.live_turns = 2;
  auto loop = EngineLoop::start(**engine, o, nullptr);
  ASSERT_TRUE(loop.ok());
  GenerationRequest first{testing::test_tokens(20, 50), 6, {}, true, PrefillDepth::kExact};
  auto r1 = submit_and_wait(**loop, first);
  ASSERT_EQ(r1.size(), 1u);
  ASSERT_TRUE(r1[0].result.status.ok()) << r1[0].result.status.to_string();
  EXPECT_EQ(r1[0].result.ids, alone(first));
  GenerationRequest second = first;
  second.prompt.insert(second.prompt.end(), r1[0].result.ids.begin(), r1[0].result.ids.end());
  for (int32_t x : testing::test_tokens(9, 51)) second.prompt.push_back(x);
  auto r2 = submit_and_wait(**loop, second);
  ASSERT_TRUE(r2[0].result.status.ok()) << r2[0].result.status.to_string();
  EXPECT_EQ(r2[0].result.ids, alone(second));
  ASSERT_TRUE(r2[0].turn.has_value());
  EXPECT_EQ(r2[0].turn->hit_tier, HitTier::kEngine);
  EXPECT_EQ(r2[0].turn->global_hit_tokens, 25);  // 20 + the 5 answer tokens fed back
  // The kept turns (25 + 40 positions) leave no room for a new 38 + 6: dropped, then served.
  GenerationRequest other{testing::test_tokens(38, 52), 6, {}, true, PrefillDepth::kExact};
  auto r3 = submit_and_wait(**loop, other);
  ASSERT_TRUE(r3[0].result.status.ok()) << r3[0].result.status.to_string();
  EXPECT_EQ(r3[0].result.ids, alone(other));
  (*loop)->stop(true);
}

}  // namespace
}  // namespace dsv41::server

namespace dsv41::server {
namespace {

// A channel that is not eager is woken by the result, not by each token: one wait with a long
// timeout returns every token and the result together.
TEST(EngineLoop, ALazyChannelWakesOnTheResultWithEveryToken) {
  auto engine = testing::make_test_engine();
  auto loop = EngineLoop::start(*engine, options(2, 8), nullptr);
  ASSERT_TRUE(loop.ok());
  std::vector<Job> jobs(1);
  jobs[0].request = GenerationRequest{testing::test_tokens(5, 7), 50, {}, true};
  auto ch = (*loop)->submit(std::move(jobs), /*eager=*/false);
  ASSERT_TRUE(ch.ok());
  std::vector<TokenEvent> tokens;
  std::vector<ChoiceResult> results;
  (*ch)->wait(&tokens, &results, std::chrono::seconds(60));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(tokens.size(), 50u);
  EXPECT_EQ(results[0].result.ids.size(), 50u);
}

}  // namespace
}  // namespace dsv41::server
