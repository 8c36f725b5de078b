// Expert parallelism on the GPU (issue 17): two ranks of the CUDA backend, each holding only its
// own routed experts and exchanging its MoE rows over the loopback group, against one CUDA engine
// holding every sequence — every logit bit for bit (tests/rank_schedule.h's schedule: sequences
// joining at different steps, prefill chunks and decode tokens in one batch, idle ranks; steps of
// under 64 rows, so the one-rank engine runs the warp expert kernels, not the tensor-core tiles).
// Both ranks share the one device (NCCL refuses two ranks on one device, and these machines have
// one): graphs stay off on the ranks, since a stream capture on one rank's stream and another
// thread's blocking copy on the same device do not mix. Several devices with NCCL:
// docs/PARALLEL.md.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_test_util.cuh"
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

}  // namespace
}  // namespace dsv41
