// Continuous batching (issue 9 item 7): a request's tokens do not depend on how many sequences run
// together, on queue order or on its neighbours; bad requests fail alone.
#include "runtime/scheduler.h"
#include "runtime/serve_turn.h"

#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_backend.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

std::unique_ptr<Engine> make_engine() {
  const Model& m = testing::engine_test_model();
  auto e = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables());
  EXPECT_TRUE(e.ok());
  return std::move(*e);
}

std::vector<GenerationRequest> requests() {
  std::mt19937 rng(3);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 11; ++i) {
    GenerationRequest r;
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int t = 0; t < len; ++t) r.prompt.push_back(static_cast<int32_t>(rng() % 89));
    r.max_tokens = 1 + static_cast<int>(rng() % 9);
    r.ignore_eos = i % 3 == 0;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 1000 + i;
    }
    out.push_back(r);
  }
  return out;
}

std::vector<GenerationResult> run(int parallel, int64_t chunk, bool reversed, PrefillDepth depth = PrefillDepth::kFull) {
  auto engine = make_engine();
  SchedulerOptions o;
  o.parallel = parallel;
  o.prefill_chunk = chunk;
  o.max_prefill_tokens = chunk * 2;
  o.max_context = 64;
  o.eos_token_id = 1;
  auto s = Scheduler::create(*engine, o);
  EXPECT_TRUE(s.ok());
  auto reqs = requests();
  for (auto& r : reqs) r.depth = depth;
  std::vector<int64_t> tickets(reqs.size());
  for (size_t k = 0; k < reqs.size(); ++k) {
    const size_t i = reversed ? reqs.size() - 1 - k : k;
    tickets[i] = (*s)->submit(reqs[i]);
  }
  (*s)->run_to_completion();
  std::vector<GenerationResult> out;
  for (int64_t t : tickets) out.push_back(*(*s)->take(t));
  EXPECT_EQ(engine->pool_stats().sequences, 0) << "finished sequences leave the engine";
  EXPECT_EQ(engine->pool_stats().main_bytes, 0);
  return out;
}

TEST(Scheduler, TokensDoNotDependOnParallelismChunkingOrOrder) {
  const auto want = run(1, 64, false);
  int sampled = 0;
  for (const auto& r : want) {
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_FALSE(r.ids.empty() && r.finish == FinishReason::kLength);
    sampled += static_cast<int>(r.ids.size());
  }
  EXPECT_GT(sampled, 20);
  for (int parallel : {2, 4, 8}) {
    for (int64_t chunk : {int64_t{5}, int64_t{64}}) {
      const auto got = run(parallel, chunk, parallel == 4);
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i << " parallel " << parallel << " chunk " << chunk;
        EXPECT_EQ(got[i].finish, want[i].finish) << i;
      }
    }
  }
}

TEST(Scheduler, ExactDepthGivesFullDepthTokensAndBoundedDoesNotDependOnParallelism) {
  const auto full = run(1, 64, false, PrefillDepth::kFull);
  const auto exact = run(3, 4, false, PrefillDepth::kExact);
  const auto bounded1 = run(1, 64, false, PrefillDepth::kBounded);
  const auto bounded8 = run(8, 3, true, PrefillDepth::kBounded);
  int cheaper = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(exact[i].ids, full[i].ids) << i;
    EXPECT_EQ(bounded8[i].ids, bounded1[i].ids) << i;
    const TokenLayers& w = bounded1[i].prefill_work;
    EXPECT_EQ(w.full_depth, bounded1[i].prompt_tokens * 6) << i;
    cheaper += w.encoder + w.decoder < w.full_depth;
  }
  EXPECT_GT(cheaper, 3) << "prompts longer than the window cost less than full depth";
}

TEST(Scheduler, BadRequestsFailAloneAndLengthsAreHonoured) {
  auto engine = make_engine();
  SchedulerOptions o;
  o.parallel = 3;
  o.max_context = 16;
  o.eos_token_id = 1;
  auto s = Scheduler::create(*engine, o);
  ASSERT_TRUE(s.ok());
  GenerationRequest good{{0, 5, 9}, 4, {}, true};
  GenerationRequest too_long{std::vector<int32_t>(14, 3), 4, {}, false};
  GenerationRequest bad_id{{0, 89}, 2, {}, false};
  GenerationRequest bad_temp{{0}, 2, {-1.0f, 1.0f, 0}, false};
  GenerationRequest empty{{}, 2, {}, false};
  GenerationRequest zero{{0, 4}, 0, {}, false};
  const int64_t t_good = (*s)->submit(good), t_long = (*s)->submit(too_long), t_id = (*s)->submit(bad_id),
                t_temp = (*s)->submit(bad_temp), t_empty = (*s)->submit(empty), t_zero = (*s)->submit(zero);
  (*s)->run_to_completion();
  auto r = (*s)->take(t_good);
  ASSERT_TRUE(r && r->status.ok());
  EXPECT_EQ(r->ids.size(), 4u);
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ((*s)->take(t_long)->status.kind(), ErrorKind::kOutOfRange);
  EXPECT_NE((*s)->take(t_id)->status.message().find("89"), std::string::npos);
  EXPECT_FALSE((*s)->take(t_temp)->status.ok());
  EXPECT_FALSE((*s)->take(t_empty)->status.ok());
  auto z = (*s)->take(t_zero);
  EXPECT_TRUE(z->status.ok());
  EXPECT_TRUE(z->ids.empty());
  EXPECT_FALSE((*s)->take(t_zero).has_value());
  SchedulerOptions bad = o;
  bad.parallel = 0;
  EXPECT_FALSE(Scheduler::create(*engine, bad).ok());
}

// cancel() frees the sequence and its pages at once, keeps what was sampled, and leaves the
// other requests' tokens exactly as without the cancelled one.
TEST(Scheduler, CancelFreesTheSequenceAndLeavesOthersUnchanged) {
  auto engine = make_engine();
  SchedulerOptions o;
  o.parallel = 2;
  o.max_context = 64;
  o.eos_token_id = -1;
  auto s = Scheduler::create(*engine, o);
  ASSERT_TRUE(s.ok());
  GenerationRequest keep{testing::test_tokens(9, 1), 12, {}, true};
  GenerationRequest victim{testing::test_tokens(7, 2), 30, {0.8f, 0.9f, 5}, true};
  GenerationRequest queued{testing::test_tokens(5, 3), 3, {}, true};
  const int64_t tk = (*s)->submit(keep), tv = (*s)->submit(victim), tq = (*s)->submit(queued);
  std::vector<std::pair<int64_t, int32_t>> seen;
  (*s)->on_token([&](int64_t t, int32_t id, std::span<const float> logits) {
    EXPECT_EQ(logits.size(), 89u);
    seen.emplace_back(t, id);
  });
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*s)->step());
  EXPECT_EQ(engine->pool_stats().sequences, 2);
  EXPECT_TRUE((*s)->cancel(tq));  // still queued
  EXPECT_TRUE((*s)->cancel(tv));
  EXPECT_FALSE((*s)->cancel(tv)) << "already finished";
  EXPECT_FALSE((*s)->cancel(999));
  EXPECT_EQ(engine->pool_stats().sequences, 1);
  auto v = (*s)->take(tv);
  ASSERT_TRUE(v && v->status.ok());
  EXPECT_EQ(v->finish, FinishReason::kCancelled);
  EXPECT_FALSE(v->ids.empty());
  EXPECT_EQ((*s)->take(tq)->finish, FinishReason::kCancelled);
  (*s)->run_to_completion();
  EXPECT_EQ(engine->pool_stats().sequences, 0);
  EXPECT_EQ(engine->pool_stats().main_bytes, 0);
  auto k = (*s)->take(tk);
  // The same request alone.
  auto e2 = make_engine();
  auto s2 = Scheduler::create(*e2, o);
  const int64_t t2 = (*s2)->submit(keep);
  (*s2)->run_to_completion();
  EXPECT_EQ(k->ids, (*s2)->take(t2)->ids);
  int64_t victim_tokens = 0;
  for (auto& [t, id] : seen) victim_tokens += t == tv;
  EXPECT_EQ(victim_tokens, static_cast<int64_t>(v->ids.size()));
}

// A request prefilled elsewhere (serve_turn with no tiers: a cold prefill) and decoded by the
// scheduler gives the ids of the same request submitted whole, alongside other requests.
TEST(Scheduler, PrefilledRequestsDecodeLikeSubmittedOnes) {
  SchedulerOptions o;
  o.parallel = 3;
  o.max_context = 64;
  o.eos_token_id = 1;
  GenerationRequest a{testing::test_tokens(13, 7), 9, {0.7f, 0.9f, 11}, true};
  GenerationRequest b{testing::test_tokens(6, 8), 5, {}, false};
  auto e1 = make_engine();
  auto s1 = Scheduler::create(*e1, o);
  const int64_t ta = (*s1)->submit(a), tb = (*s1)->submit(b);
  (*s1)->run_to_completion();
  auto e2 = make_engine();
  auto s2 = Scheduler::create(*e2, o);
  ServeTurnOptions so;
  so.depth = PrefillDepth::kFull;
  so.max_context = 64;
  auto turn = serve_turn(*e2, ServeTurnTiers{}, a.prompt, so);
  ASSERT_TRUE(turn.ok()) << turn.status().to_string();
  const int64_t tb2 = (*s2)->submit(b);
  const int64_t ta2 = (*s2)->submit_prefilled(a, turn->sequence, turn->last_logits, turn->effective, turn->record.work);
  (*s2)->run_to_completion();
  auto ra = (*s2)->take(ta2);
  ASSERT_TRUE(ra && ra->status.ok()) << (ra ? ra->status.to_string() : "");
  EXPECT_EQ(ra->ids, (*s1)->take(ta)->ids);
  EXPECT_EQ((*s2)->take(tb2)->ids, (*s1)->take(tb)->ids);
  EXPECT_EQ(e2->pool_stats().sequences, 0);
  // Refused at once (bad logits): the sequence is removed, the error reported.
  auto t2 = serve_turn(*e2, ServeTurnTiers{}, a.prompt, so);
  const int64_t bad = (*s2)->submit_prefilled(a, t2->sequence, {1.0f}, t2->effective, {});
  EXPECT_FALSE((*s2)->take(bad)->status.ok());
  EXPECT_EQ(e2->pool_stats().sequences, 0);
}

}  // namespace
}  // namespace dsv41
