// A device error in the middle of serving (an Xid, an illegal address, a lost GPU): CUDA errors
// are sticky, so the device backend's executor does nothing after the first and the step's logits
// would be NaN. The engine must fail every segment of that forward and of every later one with
// the device's message (the scheduler then ends those requests with an error, the server answers
// 500), never hand out the NaN logits as results. Run on HostExec with an error injected near the
// end of a decode step (after the last Engram layer, whose status would report an earlier one).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backends/cuda/device_backend.h"
#include "backends/cuda/host_device_backend.h"
#include "backends/cuda/host_exec.h"
#include "engine/engine.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

struct TwoSequences {
  std::unique_ptr<Engine> engine;
  SequenceId a = -1, b = -1;
};

TwoSequences prefilled_engine() {
  const Model& model = testing::engine_test_model();
  auto e = Engine::create(make_host_device_backend(model), model.engram_tables(), EngineOptions{});
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  TwoSequences t{std::move(*e)};
  t.a = *t.engine->add_sequence(64);
  t.b = *t.engine->add_sequence(64);
  const std::vector<int32_t> pa = testing::test_tokens(5, 1), pb = testing::test_tokens(3, 2);
  const Segment prefill[] = {{t.a, 0, pa, LogitRows::kLast}, {t.b, 0, pb, LogitRows::kLast}};
  for (const SegmentResult& r : t.engine->forward(prefill)) EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  return t;
}

HostExec& exec_of(Engine& e) { return dynamic_cast<DeviceBackend<HostExec>&>(e.backend()).exec(); }

TEST(DeviceFailure, EveryForwardAfterADeviceErrorFailsItsSegments) {
  TwoSequences t = prefilled_engine();
  Engine& e = *t.engine;
  // Two decode steps before the error: both segments run, logits finite; the second step's
  // launches tell where the next one ends.
  const std::vector<int32_t> next = {7};
  int64_t before = 0, launches = 0;
  for (int64_t k = 0; k < 2; ++k) {
    before = exec_of(e).counts().launches;
    const Segment step[] = {{t.a, 5 + k, next, LogitRows::kLast}, {t.b, 3 + k, next, LogitRows::kLast}};
    for (const SegmentResult& r : e.forward(step)) {
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      ASSERT_TRUE(std::isfinite(r.logits[0]));
    }
    launches = exec_of(e).counts().launches - before;
  }
  const int64_t now = exec_of(e).counts().launches;
  exec_of(e).fail_at_launch(now + launches - 2,
                            internal_error("cuda backend: cudaLaunchKernel: cudaErrorIllegalAddress (injected)"));
  const Segment step[] = {{t.a, 7, next, LogitRows::kLast}, {t.b, 5, next, LogitRows::kLast}};
  const std::vector<SegmentResult>& failed = e.forward(step);
  ASSERT_FALSE(exec_of(e).status().ok()) << "the error was not injected in this step";
  for (const SegmentResult& r : failed) {
    EXPECT_FALSE(r.status.ok());
    EXPECT_NE(r.status.message().find("cudaErrorIllegalAddress"), std::string::npos) << r.status.to_string();
  }
  // The sequences were reset (what they took into their caches cannot be trusted) ...
  EXPECT_EQ(*e.length(t.a), 0);
  EXPECT_EQ(*e.length(t.b), 0);
  // ... and a new sequence fails too: the device stays unusable.
  const SequenceId c = *e.add_sequence(64);
  const std::vector<int32_t> pc = testing::test_tokens(4, 3);
  const Segment fresh[] = {{c, 0, pc, LogitRows::kLast}};
  EXPECT_FALSE(e.forward(fresh).front().status.ok());
}

// The device out of memory when a mirror needs a page (its page table grows: pages of one row, so
// every new entry takes one): that step and every later one fail naming the error; nothing
// crashes, no NaN logits come back.
TEST(DeviceFailure, AFailedPageAllocationFailsTheStepNotTheProcess) {
  const Model& model = testing::engine_test_model();
  auto backend = std::make_unique<DeviceBackend<HostExec>>(model);
  backend->set_page_rows(1);
  HostExec& ex = backend->exec();
  auto made = Engine::create(std::move(backend), model.engram_tables(), EngineOptions{});
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  Engine& e = **made;
  const SequenceId a = *e.add_sequence(128);
  const std::vector<int32_t> prompt = testing::test_tokens(9, 4), next = {7};
  const Segment prefill[] = {{a, 0, prompt, LogitRows::kLast}};
  ASSERT_TRUE(e.forward(prefill).front().status.ok());
  // A fork not yet stepped: its mirrors are made (from the cache's records) after the failure.
  const SequenceId f = *e.fork(a);
  ex.fail_allocs(internal_error("cuda backend: cudaMalloc: cudaErrorMemoryAllocation (injected)"));
  int64_t failed_at = -1;
  for (int64_t p = 9; p < 60 && failed_at < 0; ++p) {
    const Segment step[] = {{a, p, next, LogitRows::kLast}};
    const SegmentResult& r = e.forward(step).front();
    if (r.status.ok()) {
      ASSERT_TRUE(std::isfinite(r.logits[0]));
      continue;
    }
    EXPECT_NE(r.status.message().find("cudaErrorMemoryAllocation"), std::string::npos) << r.status.to_string();
    failed_at = p;
  }
  ASSERT_GE(failed_at, 0) << "no step needed a new allocation";
  const Segment forked[] = {{f, 9, next, LogitRows::kLast}};
  EXPECT_FALSE(e.forward(forked).front().status.ok());
  const SequenceId b = *e.add_sequence(64);
  const Segment fresh[] = {{b, 0, prompt, LogitRows::kLast}};
  EXPECT_FALSE(e.forward(fresh).front().status.ok());
}

}  // namespace
}  // namespace dsv41
