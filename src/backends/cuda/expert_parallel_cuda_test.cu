// Expert parallelism on the GPU (issue 17): two ranks of the CUDA backend, each holding only its
// own routed experts and exchanging its MoE rows over the loopback group, against one CUDA engine
// holding every sequence — every logit bit for bit (tests/rank_schedule.h's schedule: sequences
// joining at different steps, prefill chunks and decode tokens in one batch, idle ranks; steps of
// under 64 rows, so the one-rank engine runs the warp expert kernels, not the tensor-core tiles).
// Both ranks share the one device (NCCL refuses two ranks on one device, and these machines have
// one): graphs stay off on the ranks, since a stream capture on one rank's stream and another
// thread's blocking copy on the same device do not mix. With several devices, one rank per device
// over NCCL (what `generate --gpus N` runs; skipped below two devices).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <cstdlib>
#include <numeric>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_test_util.cuh"
#include "parallel/nccl_communicator.h"
#include "tests/rank_schedule.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

std::unique_ptr<Backend> cuda_rank(const Model& m, Communicator* comm, bool graphs) {
  auto b = make_cuda_backend(m, comm);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  if (!b.ok()) return nullptr;
  cuda_backend_set_graphs(**b, graphs);
  return std::move(*b);
}

TEST(CudaExpertParallel, TwoRanksOnOneDeviceMatchOneCudaEngine) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const Model& m = testing::engine_test_model();
  const testing::Schedule plan = testing::engine_test_schedule();
  EngineOptions o;
  o.rows_per_page = 2;
  const testing::Trace one = testing::run_one_engine(
      m, plan, o, [](const Model& model, int, Communicator*) { return cuda_rank(model, nullptr, true); });
  int64_t collectives = 0;
  const testing::Trace two = testing::run_ranks_group(
      m, plan, o, 2, &collectives, {}, {},
      [](const Model& model, int, Communicator* comm) { return cuda_rank(model, comm, false); });
  testing::expect_same(one, two, 2);
  EXPECT_EQ(collectives, int64_t(3) * m.config().num_hidden_layers * plan.steps);
}

// One rank per GPU over NCCL (each rank's thread on its own device: RankGroupOptions::
// bind_rank_thread), 2 … all devices (at most 8), against one CUDA engine on device 0.
TEST(CudaExpertParallel, OneRankPerDeviceOverNcclMatchesOneCudaEngine) {
  DSV41_REQUIRE_CUDA_DEVICE();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << devices << " CUDA device(s): one rank per device needs 2 or more";
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // the lent machines' rule (docs/PARALLEL.md), set by the harness
  const char* path = std::getenv("DSV41_NCCL_LIB");
  auto lib = NcclLibrary::load(path ? path : "");
  ASSERT_TRUE(lib.ok()) << lib.status().to_string();
  const Model& m = testing::engine_test_model();
  const testing::Schedule plan = testing::engine_test_schedule();
  EngineOptions o;
  o.rows_per_page = 2;
  ASSERT_TRUE(cuda_use_device(0).ok());
  const testing::Trace one = testing::run_one_engine(
      m, plan, o, [](const Model& model, int, Communicator*) { return cuda_rank(model, nullptr, true); });
  for (int ranks = 2; ranks <= std::min(devices, 8); ranks *= 2) {
    std::vector<int> ids(static_cast<size_t>(ranks));
    std::iota(ids.begin(), ids.end(), 0);
    auto comms = NcclCommunicator::create_all(*lib, ids);
    ASSERT_TRUE(comms.ok()) << comms.status().to_string();
    std::vector<Communicator*> raw;
    for (const auto& c : *comms) raw.push_back(c.get());
    RankGroupOptions go;
    go.ranks = ranks;
    go.engine = o;
    go.communicators = raw;
    go.bind_rank_thread = [](int r) { return cuda_use_device(r); };
    go.backend = [](const Model& model, int, Communicator* comm) { return cuda_rank(model, comm, true); };
    auto group = RankGroup::create(m, go);
    ASSERT_TRUE(group.ok()) << group.status().to_string();
    std::vector<std::pair<int, SequenceId>> where;
    for (size_t s = 0; s < plan.prompts.size(); ++s) {
      auto placed = (*group)->add_sequence(256);
      ASSERT_TRUE(placed.ok());
      where.push_back({placed->rank, placed->id});
    }
    const testing::Trace got = testing::run_schedule(
        plan, m.config().vocab_size, ranks, where, [&](const std::vector<std::vector<Segment>>& b) {
          std::vector<std::span<const Segment>> spans(b.begin(), b.end());
          std::vector<const std::vector<SegmentResult>*> out;
          EXPECT_TRUE((*group)->forward(spans, out).ok());
          return out;
        });
    testing::expect_same(one, got, ranks);
  }
}

}  // namespace
}  // namespace dsv41
