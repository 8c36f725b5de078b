// Expert parallelism of the MoE on the loopback group: the dispatch plan's bookkeeping, and the
// whole exchange against moe_forward on one rank, bit for bit, for 1–8 ranks over random shapes,
// ranks without tokens, ranks without experts, every token to one expert, image rows.
#include "parallel/expert_parallel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "model/moe_test_util.h"
#include "parallel/loopback_communicator.h"
#include "parallel/run_ranks.h"

namespace dsv41 {
namespace {

using testing_moe::random_vec;
using testing_moe::RandomMoe;

RandomMoe make_moe(int dim, int inter, int experts, int k, int n_shared, std::mt19937& rng) {
  return testing_moe::make_random_moe(dim, inter, experts, k, n_shared, MoeShape{}.scoring, rng);
}

TEST(DispatchPlan, RecordsPerRankAndReturnRows) {
  // 3 ranks, 6 experts (rank r holds r and r + 3), k = 2, 4 tokens.
  const std::vector<int32_t> chosen = {0, 3,   // token 0: both on rank 0 (one record, 2 slots)
                                       1, 5,   // token 1: ranks 1 and 2
                                       4, 2,   // token 2: ranks 1 and 2
                                       3, 1};  // token 3: ranks 0 and 1
  DispatchPlan plan;
  ASSERT_TRUE(plan_dispatch({0, 3}, 6, 2, chosen.data(), 4, plan).ok());
  EXPECT_EQ(plan.rank_records, (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(plan.rank_begin, (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(plan.record_token, (std::vector<int64_t>{0, 3, 1, 2, 3, 1, 2}));
  EXPECT_EQ(plan.record_slots, (std::vector<int32_t>{2, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(plan.record_row, (std::vector<int64_t>{0, 2, 3, 4, 5, 6, 7}));
  // Pair (t, j) → its row: token 0's two experts at rows 0, 1 in choice order.
  EXPECT_EQ(plan.pair_row, (std::vector<int64_t>{0, 1, 3, 6, 4, 7, 2, 5}));
}

TEST(DispatchPlan, EmptyRanksNoTokensAndBadChoices) {
  DispatchPlan plan;
  // Every token on experts 0 and 4 of 8 over 4 ranks: only rank 0 gets records.
  std::vector<int32_t> chosen;
  for (int t = 0; t < 5; ++t) chosen.insert(chosen.end(), {4, 0});
  ASSERT_TRUE(plan_dispatch({2, 4}, 8, 2, chosen.data(), 5, plan).ok());
  EXPECT_EQ(plan.rank_records, (std::vector<int64_t>{5, 0, 0, 0}));
  EXPECT_EQ(plan.return_rows(), 10);
  ASSERT_TRUE(plan_dispatch({0, 4}, 8, 2, chosen.data(), 0, plan).ok());
  EXPECT_EQ(plan.records(), 0);
  EXPECT_EQ(plan.rank_records, (std::vector<int64_t>{0, 0, 0, 0}));
  const std::vector<int32_t> bad_id = {0, 8}, twice = {3, 3};
  Status st = plan_dispatch({0, 2}, 8, 2, bad_id.data(), 1, plan);
  EXPECT_NE(st.message().find("chose expert 8 of 8"), std::string::npos) << st.to_string();
  st = plan_dispatch({0, 2}, 8, 2, twice.data(), 1, plan);
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st.to_string();
  EXPECT_FALSE(plan_dispatch({2, 2}, 8, 2, twice.data(), 0, plan).ok());
}

TEST(ExpertShard, RoundRobinCounts) {
  for (int n : {1, 2, 3, 4, 8})
    for (int e : {1, 4, 8, 9}) {
      int total = 0;
      for (int r = 0; r < n; ++r) {
        const ExpertShard s{r, n};
        int held = 0;
        for (int x = 0; x < e; ++x) held += s.owns(x);
        EXPECT_EQ(held, s.local_experts(e)) << n << " ranks, " << e << " experts, rank " << r;
        total += held;
      }
      EXPECT_EQ(total, e);
    }
}

// Every rank's tokens through moe_forward_ep (weights sharded: a rank reading an expert it does
// not hold would crash) against moe_forward of all tokens on one rank, on a pool of 2 (so the
// reference takes its side-by-side path where the token count allows).
void expect_ep_matches_one_rank(const RandomMoe& m, int ranks, const std::vector<int64_t>& tokens_per_rank,
                                uint32_t seed, bool images) {
  std::mt19937 rng(seed);
  const int64_t dim = m.shape.dim, k = m.shape.top_k;
  int64_t T = 0;
  for (int64_t t : tokens_per_rank) T += t;
  const std::vector<float> x = random_vec(static_cast<size_t>(T * dim), rng, 1.5f);
  std::vector<uint8_t> image(static_cast<size_t>(T), 0);
  if (images)
    for (int64_t t = 0; t < T; t += 3) image[t] = 1;
  ThreadPool pool(2);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  std::vector<float> y(T * dim);
  std::vector<int32_t> e(T * k);
  std::vector<float> w(T * k);
  moe_forward(ex, m.shape, m.weights, x.data(), T, images ? image.data() : nullptr, y.data(), e.data(), w.data());

  auto g = LoopbackGroup::create(ranks);
  ASSERT_TRUE(g.ok());
  std::vector<int64_t> first(ranks, 0);
  for (int r = 1; r < ranks; ++r) first[r] = first[r - 1] + tokens_per_rank[r - 1];
  std::vector<float> y_ep(T * dim, -1.0f);
  std::vector<int32_t> e_ep(T * k);
  std::vector<float> w_ep(T * k);
  std::vector<Status> st(ranks);
  run_ranks(ranks, [&](int r) {
    const MoeWeights sharded = shard_moe_weights(m.weights, {r, ranks});
    ExpertParallelScratch scratch;
    const int64_t t0 = first[r];
    // Twice with one scratch: the second call reuses its buffers.
    for (int pass = 0; pass < 2 && st[r].ok(); ++pass)
      st[r] = moe_forward_ep(CpuExec::serial(), m.shape, sharded, (*g)->communicator(r), x.data() + t0 * dim,
                             tokens_per_rank[r], images ? image.data() + t0 : nullptr, y_ep.data() + t0 * dim,
                             e_ep.data() + t0 * k, w_ep.data() + t0 * k, &scratch);
  });
  for (int r = 0; r < ranks; ++r) ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  EXPECT_EQ(e_ep, e);
  // Bit for bit (memcmp: −0 ≠ +0, NaN = NaN); no tokens leaves the vectors empty (null data).
  EXPECT_TRUE(w.empty() || std::memcmp(w_ep.data(), w.data(), w.size() * sizeof(float)) == 0);
  EXPECT_TRUE(y.empty() || std::memcmp(y_ep.data(), y.data(), y.size() * sizeof(float)) == 0)
      << ranks << " ranks: outputs differ from one rank";
  EXPECT_EQ((*g)->completed_calls(), 6);  // 2 passes × (counts, dispatch, combine)
}

TEST(ExpertParallel, MatchesOneRankBitForBit) {
  struct Case { int dim, inter, experts, k, shared; };
  const Case cases[] = {{16, 8, 8, 2, 1}, {33, 7, 5, 3, 2}, {12, 6, 4, 4, 0}, {24, 5, 9, 1, 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    std::mt19937 rng(seed * 77);
    const RandomMoe m = make_moe(c.dim, c.inter, c.experts, c.k, c.shared, rng);
    for (int ranks : {1, 2, 3, 4, 8}) {
      // Uneven: decode-sized, empty, side-by-side-sized and prefill-sized (> 64) ranks.
      std::vector<int64_t> tokens;
      const int64_t pattern[] = {1, 0, 7, 70, 3, 0, 12, 2};
      for (int r = 0; r < ranks; ++r) tokens.push_back(pattern[r]);
      SCOPED_TRACE("shape " + std::to_string(c.dim) + "x" + std::to_string(c.experts) + " k" + std::to_string(c.k) +
                   ", " + std::to_string(ranks) + " ranks");
      expect_ep_matches_one_rank(m, ranks, tokens, ++seed, false);
      expect_ep_matches_one_rank(m, ranks, tokens, ++seed, true);
    }
  }
}

TEST(ExpertParallel, NoRankHasTokens) {
  std::mt19937 rng(5);
  const RandomMoe m = make_moe(8, 4, 6, 2, 1, rng);
  expect_ep_matches_one_rank(m, 3, {0, 0, 0}, 9, false);
}

// A selection bias that sends every token to expert 5 (k = 1: nothing else): one rank computes
// everything, the others only route and combine.
TEST(ExpertParallel, EveryTokenToOneExpert) {
  std::mt19937 rng(6);
  RandomMoe m = make_moe(16, 8, 8, 1, 1, rng);
  m.bias.assign(8, 0.0f);
  m.bias[5] = 100.0f;
  expect_ep_matches_one_rank(m, 4, {5, 9, 0, 1}, 10, false);
  m.shape.top_k = 2;  // and to 5 plus one other
  expect_ep_matches_one_rank(m, 4, {5, 9, 0, 1}, 11, false);
}

TEST(ExpertParallel, WrongExpertCountIsAnError) {
  std::mt19937 rng(7);
  RandomMoe m = make_moe(8, 4, 4, 2, 1, rng);
  m.weights.experts.pop_back();
  auto g = LoopbackGroup::create(1);
  ASSERT_TRUE(g.ok());
  std::vector<float> x(8), y(8);
  Status st = moe_forward_ep(CpuExec::serial(), m.shape, m.weights, (*g)->communicator(0), x.data(), 1, nullptr, y.data());
  EXPECT_NE(st.message().find("3 expert views for 4 experts"), std::string::npos) << st.to_string();
}

// A rank whose own routing is bad (an expert chosen twice) or whose experts could not run (a
// device error) still takes part in both exchanges: it gets its error, every peer learns from the
// returned blocks' status word that that rank's rows are not to be used, and nobody waits for a
// timeout. The next call on the same communicator works again.
TEST(ExpertParallel, AFailingRankFailsEveryRankWithoutAWait) {
  constexpr int kRanks = 3, kExperts = 6, kK = 2, kDim = 4;
  auto group = LoopbackGroup::create(kRanks, std::chrono::seconds(30));
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  const std::vector<float> x(2 * kDim, 0.5f);
  const std::vector<float> weights = {0.25f, 0.75f, 0.5f, 0.5f};
  for (int failing : {0, 2}) {
    for (bool device_error : {false, true}) {
      std::vector<Status> dispatched(kRanks), returned(kRanks);
      const auto start = std::chrono::steady_clock::now();
      run_ranks(kRanks, [&](int r) {
        // Two tokens on every rank; the failing rank's first token chose expert 1 twice unless the
        // failure is its device's (then its routing is fine and its experts "fail").
        std::vector<int32_t> chosen = {1, 4, 0, 5};
        if (r == failing && !device_error) chosen = {1, 1, 0, 5};
        ExpertParallelScratch ws;
        int64_t pairs = 0;
        Communicator& comm = (*group)->communicator(r);
        dispatched[r] = ep_dispatch(comm, kExperts, kK, kDim, chosen.data(), weights.data(), x.data(), 2, ws, &pairs);
        ws.ret_send.assign(static_cast<size_t>(pairs * kDim), 1.0f);
        returned[r] = ep_return(comm, kK, kDim, ws, !dispatched[r].ok() || (device_error && r == failing));
      });
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(waited, 10.0) << "a rank waited for the timeout";
      for (int r = 0; r < kRanks; ++r) {
        const std::string what = "failing " + std::to_string(failing) + (device_error ? " (device)" : " (routing)") +
                                 ", rank " + std::to_string(r);
        if (r == failing && !device_error) {
          EXPECT_NE(dispatched[r].message().find("twice"), std::string::npos) << what << ": " << dispatched[r].to_string();
        } else {
          EXPECT_TRUE(dispatched[r].ok()) << what << ": " << dispatched[r].to_string();
        }
        EXPECT_NE(returned[r].message().find("rank " + std::to_string(failing) + " failed to compute its experts"),
                  std::string::npos)
            << what << ": " << returned[r].to_string();
      }
    }
  }
  // The group did not fail for good: a clean round succeeds on every rank.
  std::vector<Status> ok(kRanks);
  run_ranks(kRanks, [&](int r) {
    const std::vector<int32_t> chosen = {1, 4, 0, 5};
    ExpertParallelScratch ws;
    int64_t pairs = 0;
    Communicator& comm = (*group)->communicator(r);
    ok[r] = ep_dispatch(comm, kExperts, kK, kDim, chosen.data(), weights.data(), x.data(), 2, ws, &pairs);
    ws.ret_send.assign(static_cast<size_t>(pairs * kDim), 1.0f);
    if (ok[r].ok()) ok[r] = ep_return(comm, kK, kDim, ws);
    if (ok[r].ok()) EXPECT_EQ(ws.ret_recv.size(), size_t(2 * kK * kDim)) << "rank " << r;
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(ok[r].ok()) << "rank " << r << ": " << ok[r].to_string();
}

}  // namespace
}  // namespace dsv41
