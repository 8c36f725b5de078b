// Expert parallelism + attention data parallelism on the CPU (issue 17 items 3 and 5): N engine
// replicas in one process (runtime/rank_group.h), routed experts spread over them, each owning its
// own sequences, against one engine holding every sequence. Sequences join at different steps
// (prefill chunks and decode tokens mixed in one batch), odd ones ask for every row's logits; with
// 5 sequences some ranks of 8 never hold one and every rank is idle at some step. Every logit is
// compared bit for bit, and the greedy ids must be the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "plan/replay_rule.h"
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
  const Schedule plan = testing::engine_test_schedule();
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

// Each rank with a model that loaded only its own routed experts (what a GPU of a multi-GPU run
// holds): the same bits as one engine over the whole model, and each rank holds 1/N of the
// routed bytes. Mismatched shards and bad shard options are refused.
TEST(ExpertParallelEngine, MiniRanksLoadingOnlyTheirExpertsMatchOneEngine) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  auto full = Model::load(dir);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  const int64_t E = (*full)->config().n_routed_experts, routed = (*full)->held_bytes().routed;
  Schedule plan;
  for (int s = 0; s < 4; ++s) plan.prompts.push_back(random_prompt(std::vector<int>{30, 9, 41, 5}[s], (*full)->config().vocab_size, 60 + s));
  plan.chunk = 16;
  plan.steps = 7;
  const Trace one = run_one_engine(**full, plan, EngineOptions{});
  for (int ranks : {2, 3}) {
    const std::vector<std::unique_ptr<Model>> shards = testing::load_expert_shards(dir, ranks);
    ASSERT_EQ(shards.size(), size_t(ranks));
    const std::vector<const Model*> ptrs = testing::pointers(shards);
    for (int r = 0; r < ranks; ++r) {
      const int64_t local = ExpertShard{r, ranks}.local_experts(static_cast<int>(E));
      EXPECT_EQ(shards[r]->held_bytes().routed, routed / E * local) << ranks << " ranks, rank " << r;
      EXPECT_EQ(shards[r]->held_bytes().per_expert, (*full)->held_bytes().per_expert);
    }
    int64_t collectives = 0;
    testing::expect_same(one, run_ranks_group(**full, plan, EngineOptions{}, ranks, &collectives, {}, ptrs), ranks);
    if (ranks == 2) {
      RankGroupOptions o;
      o.ranks = 2;
      const std::vector<const Model*> swapped = {ptrs[1], ptrs[0]};
      auto bad = RankGroup::create(swapped, o);
      ASSERT_FALSE(bad.ok());
      EXPECT_NE(bad.status().message().find("holds the experts of rank 1 of 2"), std::string::npos)
          << bad.status().to_string();
    }
  }
  ModelLoadOptions bad;
  bad.expert_rank = 2;
  bad.expert_ranks = 2;
  auto m = Model::load(dir, bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("expert rank 2 of 2"), std::string::npos) << m.status().to_string();
}

// A bounded-depth prefill (plan/replay_rule.h) beside a full-depth segment on one rank: at the
// decoder layers the rank's attention + FFN rows are two ranges (the full segment's and the
// prefill's tail), which its MoE packs into one exchange. Rank 0 holds A and B, rank 1 holds C;
// one engine holds all three; then three greedy decode steps of all three.
TEST(ExpertParallelEngine, DepthSegmentsSplitARanksRowsIntoRanges) {
  const Model& m = testing::engine_test_model();
  const int64_t V = m.config().vocab_size;
  const std::vector<int32_t> prompt_b = random_prompt(13, V, 71), a0 = random_prompt(6, V, 72), c0 = random_prompt(4, V, 73);
  auto prefill = plan_prefill(m.plan(), m.config().sliding_window, 13, 0, false, PrefillDepth::kBounded);
  ASSERT_TRUE(prefill.ok()) << prefill.status().to_string();
  bool split = false;
  for (const PrefillStep& st : prefill->steps)
    for (const LayerRange& r : st.layers) split = split || r.attend_from > st.begin;
  ASSERT_TRUE(split) << "the bounded prefill runs every layer on every row: no second range";
  EngineOptions o;
  o.rows_per_page = 2;
  auto one = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), o);
  ASSERT_TRUE(one.ok());
  RankGroupOptions go;
  go.ranks = 2;
  go.engine = o;
  auto group = RankGroup::create(m, go);
  ASSERT_TRUE(group.ok());
  // ids[x] = (sequence in the one engine, sequence in its rank's engine), ranks A, B → 0, C → 1.
  const int rank_of[3] = {0, 0, 1};
  std::vector<std::pair<SequenceId, SequenceId>> ids;
  for (int x = 0; x < 3; ++x)
    ids.push_back({(*one)->add_sequence(64).value(), (*group)->engine(rank_of[x]).add_sequence(64).value()});
  std::vector<int64_t> length(3, 0);
  std::vector<std::vector<int32_t>> feed = {a0, {}, c0};
  size_t b_step = 0;
  for (int step = 0; step < static_cast<int>(prefill->steps.size()) + 3; ++step) {
    std::vector<Segment> all;
    std::vector<std::vector<Segment>> per_rank(2);
    std::vector<int> in_batch;
    std::vector<int32_t> b_tokens;
    for (int x = 0; x < 3; ++x) {
      Segment seg;
      seg.start = length[x];
      if (x == 1 && b_step < prefill->steps.size()) {
        const PrefillStep& st = prefill->steps[b_step++];
        ASSERT_FALSE(st.replay);
        b_tokens.assign(prompt_b.begin() + st.begin, prompt_b.begin() + st.end);
        seg.start = st.begin;
        seg.tokens = b_tokens;
        seg.depth = st.layers;
        seg.logits = b_step == prefill->steps.size() ? LogitRows::kLast : LogitRows::kNone;
      } else {
        seg.tokens = feed[x];
      }
      if (seg.tokens.empty()) continue;
      seg.sequence = ids[x].first;
      all.push_back(seg);
      seg.sequence = ids[x].second;
      per_rank[rank_of[x]].push_back(seg);
      in_batch.push_back(x);
    }
    const std::vector<SegmentResult> want = (*one)->forward(all);
    std::vector<std::span<const Segment>> spans(per_rank.begin(), per_rank.end());
    std::vector<const std::vector<SegmentResult>*> got;
    ASSERT_TRUE((*group)->forward(spans, got).ok());
    std::vector<size_t> next_on_rank(2, 0);
    for (size_t i = 0; i < in_batch.size(); ++i) {
      const int x = in_batch[i];
      const SegmentResult& g = (*got[rank_of[x]])[next_on_rank[rank_of[x]]++];
      ASSERT_TRUE(want[i].status.ok()) << want[i].status.to_string();
      ASSERT_TRUE(g.status.ok()) << "step " << step << " sequence " << x << ": " << g.status.to_string();
      ASSERT_EQ(g.logit_rows, want[i].logit_rows);
      length[x] += static_cast<int64_t>(all[i].tokens.size());
      feed[x].clear();
      if (want[i].logit_rows == 0) continue;
      EXPECT_EQ(std::memcmp(g.logits, want[i].logits, V * sizeof(float)), 0) << "step " << step << " sequence " << x;
      feed[x] = {static_cast<int32_t>(std::max_element(want[i].logits, want[i].logits + V) - want[i].logits)};
    }
  }
  EXPECT_EQ(length[1], 13 + 3);  // B decoded three tokens after its prefill
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

// A thread binding that fails (RankGroupOptions::bind_rank_thread: a GPU rank's cudaSetDevice)
// fails the group's creation, or a later step, with the rank named — and every rank still runs its
// part of that step (no rank waits out the exchange's timeout for it), so the group stays usable.
TEST(ExpertParallelEngine, AFailedThreadBindingFailsCreationOrTheStepNamingTheRank) {
  const Model& m = testing::engine_test_model();
  auto failing = std::make_shared<std::atomic<int>>(1);  // the rank whose binding fails; -1: none
  RankGroupOptions o;
  o.ranks = 3;
  o.timeout = std::chrono::seconds(600);  // a rank left waiting would hang the test, not time out
  o.bind_rank_thread = [failing](int r) {
    return r == failing->load() ? internal_error("device " + std::to_string(r) + " is gone") : ok_status();
  };
  auto refused = RankGroup::create(m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rank 1's thread"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("device 1 is gone"), std::string::npos) << refused.status().to_string();

  failing->store(-1);
  auto group = RankGroup::create(m, o);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  RankGroup& g = **group;
  std::vector<std::vector<Segment>> segs(3);
  const std::vector<int32_t> prompt = {1, 2, 3};
  for (int r = 0; r < 3; ++r) {
    Segment s;
    s.sequence = g.engine(r).add_sequence(64).value();
    s.tokens = prompt;
    segs[static_cast<size_t>(r)].push_back(s);
  }
  const auto step = [&] {
    std::vector<std::span<const Segment>> batches;
    for (const auto& b : segs) batches.emplace_back(b);
    std::vector<const std::vector<SegmentResult>*> out;
    Status st = g.forward(batches, out);
    for (const auto* res : out) EXPECT_NE(res, nullptr) << "every rank ran its part";
    return st;
  };
  failing->store(2);
  const Status st = step();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank 2's thread"), std::string::npos) << st.to_string();
  failing->store(-1);
  for (auto& b : segs) {  // the failed step ran on every rank: each sequence is 3 tokens long
    ASSERT_EQ(g.engine(static_cast<int>(&b - segs.data())).length(b[0].sequence).value(), 3);
    b[0].start = 3;
    b[0].tokens = std::span<const int32_t>(prompt.data() + 2, 1);
  }
  EXPECT_TRUE(step().ok()) << "the group is usable after a failed binding";
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
