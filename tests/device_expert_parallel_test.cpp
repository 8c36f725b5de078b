// Expert parallelism on the device backend (issue 17): N ranks, each a DeviceBackend holding only
// its own routed experts and exchanging its MoE rows through a communicator, against one device
// backend engine holding every sequence and expert. Run on HostExec (the device backend's CPU
// emulation) over the loopback group, so it runs everywhere; on several GPUs the same backend
// takes an NcclCommunicator per rank. The schedules are tests/rank_schedule.h's (sequences joining
// at different steps, prefill chunks and decode tokens in one batch, idle ranks); every logit is
// compared bit for bit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cuda/device_backend.h"
#include "backends/cuda/host_device_backend.h"
#include "backends/cuda/host_exec.h"
#include "parallel/expert_parallel.h"
#include "tests/rank_schedule.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

using testing::random_prompt;
using testing::Schedule;
using testing::Trace;

Backend* device_of(const Model& m, int, Communicator* comm, std::vector<DeviceBackend<HostExec>*>* made) {
  auto* b = new DeviceBackend<HostExec>(m, comm);
  if (made) made->push_back(b);
  return b;
}

testing::BackendFactory device_backend(std::vector<DeviceBackend<HostExec>*>* made = nullptr) {
  return [made](const Model& m, int rank, Communicator* comm) {
    return std::unique_ptr<Backend>(device_of(m, rank, comm, made));
  };
}

// The random engine-test model: ratio-2 and ratio-1 kv sources, a restricted Reindex layer,
// Engram, 4 experts (top 2) — 8 ranks leave 4 without an expert, and 5 sequences leave ranks idle.
TEST(DeviceExpertParallel, RandomModelMatchesOneDeviceEngine) {
  const Model& m = testing::engine_test_model();
  const Schedule plan = testing::engine_test_schedule();
  EngineOptions o;
  o.rows_per_page = 2;
  const Trace one = testing::run_one_engine(m, plan, o, device_backend());
  size_t generated = 0;
  for (const auto& g : one.generated) generated += g.size();
  ASSERT_GT(generated, 5u);  // the schedule reaches decode
  for (int ranks : {1, 2, 3, 8}) {
    int64_t collectives = 0;
    std::vector<DeviceBackend<HostExec>*> made;
    const Trace got = testing::run_ranks_group(m, plan, o, ranks, &collectives, {}, {}, device_backend(&made));
    testing::expect_same(one, got, ranks);
    // Three exchanges per layer per step on every rank, idle or not.
    EXPECT_EQ(collectives, int64_t(3) * m.config().num_hidden_layers * plan.steps) << ranks << " ranks";
  }
}

// Only a rank's own experts reach its device: with 3 ranks over 4 equal experts (ranks hold 2, 1
// and 1), each rank's device holds the one-rank backend's bytes less exactly the experts it does
// not hold.
TEST(DeviceExpertParallel, EachRankUploadsOnlyItsOwnExperts) {
  const Model& m = testing::engine_test_model();
  const int E = static_cast<int>(m.config().n_routed_experts);
  ASSERT_EQ(E, 4);
  const DeviceBackend<HostExec> whole(m);
  auto group = LoopbackGroup::create(3, std::chrono::seconds(10));
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  std::vector<int64_t> dropped;
  for (int r = 0; r < 3; ++r) {
    const DeviceBackend<HostExec> rank(m, &(*group)->communicator(r));
    dropped.push_back(whole.weight_bytes() - rank.weight_bytes());
  }
  const int64_t per_expert = dropped[1] / (E - ExpertShard{1, 3}.local_experts(E));
  ASSERT_GT(per_expert, 0);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(dropped[r], per_expert * (E - ExpertShard{r, 3}.local_experts(E))) << "rank " << r;
  EXPECT_GT(whole.weight_bytes(), per_expert * E);  // the backbone stays on every rank
}

// dsv41-mini, each rank with a model that loaded only its own routed experts: the same bits as one
// device engine over the whole model.
TEST(DeviceExpertParallel, MiniRanksLoadingOnlyTheirExpertsMatchOneDeviceEngine) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  auto full = Model::load(dir);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  Schedule plan;
  for (int s = 0; s < 3; ++s) plan.prompts.push_back(random_prompt(std::vector<int>{30, 9, 21}[s], (*full)->config().vocab_size, 60 + s));
  plan.chunk = 16;
  plan.steps = 5;
  const Trace one = testing::run_one_engine(**full, plan, EngineOptions{}, device_backend());
  const int ranks = 2;
  const std::vector<std::unique_ptr<Model>> shards = testing::load_expert_shards(dir, ranks);
  ASSERT_EQ(shards.size(), size_t(ranks));
  const std::vector<const Model*> ptrs = testing::pointers(shards);
  int64_t collectives = 0;
  testing::expect_same(one, testing::run_ranks_group(**full, plan, EngineOptions{}, ranks, &collectives, {}, ptrs, device_backend()),
                       ranks);
}

// A device error on one rank mid-forward: that rank's segments fail with the device's message, the
// other rank's fail with the exchange's (its tokens' experts on the failed rank were not
// computed) — nothing hangs, no wrong logits are handed out.
TEST(DeviceExpertParallel, ADeviceErrorOnOneRankFailsBothRanksForwards) {
  const Model& m = testing::engine_test_model();
  std::vector<DeviceBackend<HostExec>*> made;
  RankGroupOptions o;
  o.ranks = 2;
  o.timeout = std::chrono::seconds(20);
  o.backend = device_backend(&made);
  auto group = RankGroup::create(m, o);
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  ASSERT_EQ(made.size(), 2u);
  std::vector<std::vector<Segment>> batches(2);
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 2; ++r) prompts.push_back(random_prompt(6, m.config().vocab_size, 90 + r));
  for (int r = 0; r < 2; ++r) {
    auto placed = (*group)->add_sequence(64);
    ASSERT_TRUE(placed.ok());
    ASSERT_EQ(placed->rank, r);
    Segment seg;
    seg.sequence = placed->id;
    seg.start = 0;
    seg.tokens = prompts[r];
    seg.logits = LogitRows::kLast;
    batches[r].push_back(seg);
  }
  // Rank 1's device fails a few launches into the forward (before the first layer's experts).
  made[1]->exec().fail_at_launch(made[1]->exec().counts().launches + 3, internal_error("injected device error"));
  std::vector<std::span<const Segment>> spans(batches.begin(), batches.end());
  std::vector<const std::vector<SegmentResult>*> out;
  ASSERT_TRUE((*group)->forward(spans, out).ok());
  ASSERT_EQ(out.size(), 2u);
  ASSERT_EQ(out[1]->size(), 1u);
  EXPECT_FALSE((*out[1])[0].status.ok());
  EXPECT_NE((*out[1])[0].status.message().find("injected device error"), std::string::npos)
      << (*out[1])[0].status.to_string();
  ASSERT_EQ(out[0]->size(), 1u);
  EXPECT_FALSE((*out[0])[0].status.ok()) << "rank 0 used rows its peer never computed";
  EXPECT_NE((*out[0])[0].status.message().find("rank 1 failed to compute its experts"), std::string::npos)
      << (*out[0])[0].status.to_string();
}

}  // namespace
}  // namespace dsv41
