// Steady-state decode allocates nothing (issue 9 item 2): after a prefill and a few warm-up
// steps, decode steps of the same sequences (one token per segment) make no operator new call
// anywhere in the process (every thread: the pool's workers too), on the fast paths with a pool
// of 2 threads and on the scalar references, for batch 1 and batch 4 (and batch 8 on 4 threads,
// which runs as row groups). Pages of 4096 records keep
// the counted steps from needing a new cache page (engine.h, "Steady-state decode").
// Counted with the replaced global allocator of the test binary (tests/alloc_counter.h).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "base/thread_pool.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tests/alloc_counter.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

using testing::CountAllocations;

TEST(AllocCounter, CountsAllocationsInsideTheScopeOnly) {
  int* volatile before = new int(1);
  delete before;
  CountAllocations counter;
  EXPECT_EQ(counter.count(), 0);
  int* volatile one = new int(2);
  EXPECT_EQ(counter.count(), 1);
  delete one;
  int* volatile many = new int[7];
  delete[] many;
  struct alignas(64) Wide {
    float v[16];
  };
  Wide* volatile wide = new Wide;
  delete wide;
  std::vector<double> v(100);
  EXPECT_EQ(counter.count(), 4);
  v.resize(50);  // shrinking keeps the storage
  EXPECT_EQ(counter.count(), 4);
}

struct DecodeCase {
  int batch = 1;
  bool fast = true;
  int threads = 2;  // 4 with batch 8: the CPU backend's row groups (cpu_backend.h)
};

std::string case_name(const ::testing::TestParamInfo<DecodeCase>& info) {
  return "Batch" + std::to_string(info.param.batch) + (info.param.fast ? "Fast" : "Scalar") +
         (info.param.threads != 2 ? "Threads" + std::to_string(info.param.threads) : "");
}

// Prefills `batch` sequences (different prompt lengths, so they sit at different positions and
// compressor phases), runs `warmup` decode steps, then counts the allocations of `steps` more.
// Decode tokens are fixed in advance so the test itself allocates nothing inside the scope.
int64_t decode_allocations(const Model& model, const DecodeCase& c, int warmup, int steps) {
  ThreadPool pool(c.threads);
  const CpuExec exec{&pool, c.fast};
  EngineOptions options;
  options.rows_per_page = 4096;
  auto engine = Engine::create(std::make_unique<CpuBackend>(model, &exec), model.engram_tables(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return -1;
  Engine& e = **engine;
  const int64_t V = model.config().vocab_size;
  std::mt19937 rng(7);
  std::vector<SequenceId> ids;
  for (int b = 0; b < c.batch; ++b) {
    ids.push_back(*e.add_sequence(512));
    std::vector<int32_t> prompt(static_cast<size_t>(6 + 3 * b));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % V);
    Segment s{ids.back(), 0, prompt, LogitRows::kLast};
    EXPECT_TRUE(e.forward(std::span<const Segment>(&s, 1)).front().status.ok());
  }
  const int total = warmup + steps;
  std::vector<int32_t> tokens(static_cast<size_t>(total * c.batch));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % V);
  std::vector<Segment> segments(static_cast<size_t>(c.batch));
  auto step = [&](int i) {
    for (int b = 0; b < c.batch; ++b) {
      Segment& s = segments[b];
      s.sequence = ids[b];
      s.start = *e.length(ids[b]);
      s.tokens = std::span<const int32_t>(tokens.data() + i * c.batch + b, 1);
      s.logits = LogitRows::kLast;
    }
    bool ok = true;
    for (const SegmentResult& r : e.forward(segments)) ok = ok && r.status.ok() && r.logit_rows == 1;
    return ok;
  };
  for (int i = 0; i < warmup; ++i) EXPECT_TRUE(step(i));
  CountAllocations counter(/*record_stacks=*/true);  // stacks cost nothing unless something allocates
  bool ok = true;
  for (int i = warmup; i < total; ++i) ok = step(i) && ok;
  const int64_t n = counter.count();
  EXPECT_TRUE(ok);
  if (n != 0) counter.print_stacks();
  return n;
}

class DecodeAllocations : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeAllocations, SteadyStateDecodeAllocatesNothing) {
  EXPECT_EQ(decode_allocations(testing::engine_test_model(), GetParam(), 3, 10), 0);
}

INSTANTIATE_TEST_SUITE_P(RandomModel, DecodeAllocations,
                         ::testing::Values(DecodeCase{1, true}, DecodeCase{4, true}, DecodeCase{1, false},
                                           DecodeCase{4, false}, DecodeCase{8, true, 4}, DecodeCase{8, false, 4}),
                         case_name);

// Long enough for the ratio-1 kv source's entries to grow from 9 to ~70: the buffers sized by the
// entry count (indexer scores, selection order) have room for a whole page of entries.
TEST(DecodeAllocations, ContextGrowthWithinAPageAllocatesNothing) {
  EXPECT_EQ(decode_allocations(testing::engine_test_model(), DecodeCase{4, true}, 3, 60), 0);
  EXPECT_EQ(decode_allocations(testing::engine_test_model(), DecodeCase{1, false}, 3, 60), 0);
}

// With small pages, a step allocates only if it takes a new page from the pools (the contract of
// engine.h): every step that leaves the pools' bytes unchanged allocates nothing.
TEST(DecodeAllocations, OnlyStepsThatTakeAPageAllocate) {
  const Model& model = testing::engine_test_model();
  ThreadPool pool(2);
  const CpuExec exec{&pool, true};
  EngineOptions options;
  options.rows_per_page = 8;
  auto engine = Engine::create(std::make_unique<CpuBackend>(model, &exec), model.engram_tables(), options);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Engine& e = **engine;
  const SequenceId id = *e.add_sequence(512);
  std::vector<int32_t> tokens(80);
  std::mt19937 rng(11);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % model.config().vocab_size);
  int quiet_steps = 0, page_steps = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const PoolStats before = e.pool_stats();
    Segment s{id, static_cast<int64_t>(i), std::span<const int32_t>(&tokens[i], 1), LogitRows::kLast};
    int64_t n = 0;
    {
      CountAllocations counter;
      const bool ok = e.forward(std::span<const Segment>(&s, 1)).front().status.ok();
      n = counter.count();
      ASSERT_TRUE(ok);
    }
    const PoolStats after = e.pool_stats();
    const bool took_page = after.main_bytes + after.index_bytes > before.main_bytes + before.index_bytes;
    if (i < 4) continue;  // warm-up: the workspace takes its shape
    if (took_page) {
      ++page_steps;
    } else {
      ++quiet_steps;
      EXPECT_EQ(n, 0) << "step " << i << " took no page but allocated";
    }
  }
  EXPECT_GT(page_steps, 0);
  EXPECT_GT(quiet_steps, page_steps);
}

// The trained default model (real checkpoint: Engram rows read from the mapped FP8 table, bf16
// weights, window 64, ratio-2 and ratio-1 kv sources).
class DecodeAllocationsMini : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeAllocationsMini, SteadyStateDecodeAllocatesNothing) {
  static const std::unique_ptr<Model> model = [] {
    auto m = Model::load(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : nullptr;
  }();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(decode_allocations(*model, GetParam(), 3, 8), 0);
}

INSTANTIATE_TEST_SUITE_P(Mini, DecodeAllocationsMini,
                         ::testing::Values(DecodeCase{1, true}, DecodeCase{4, true}, DecodeCase{1, false},
                                           DecodeCase{4, false}, DecodeCase{8, true, 4}, DecodeCase{8, false, 4}),
                         case_name);

}  // namespace
}  // namespace dsv41
