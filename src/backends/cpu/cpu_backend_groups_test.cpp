// The CPU backend's row groups (cpu_backend.h, CpuBackendOptions::group_rows) and side-by-side
// compressor steps against everything on one thread: decode steps of many sequences, a prefill
// chunk beside them, and a batch whose rows do not split evenly give the same bits whether the
// token-wise steps run as one call or as groups side by side on the pool, and whether the
// segments' compressor steps run one after another or concurrently, and whether a decode step's
// layer runs as one pool job (layer groups) or one per step.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "base/thread_pool.h"
#include "engine/engine.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

struct EngineRun {
  std::unique_ptr<Engine> engine;
  CpuBackend* backend = nullptr;
};

// The test model's exec on a pool big enough for row groups, and the same exec on one thread (the
// bits every grouping must give).
struct PooledAndSerial {
  ThreadPool pool{CpuBackendOptions::kMinGroupedThreads};
  CpuExec pooled = with_pool(&pool), serial = with_pool(nullptr);
  static CpuExec with_pool(ThreadPool* p) {
    CpuExec ex = testing::engine_test_model().exec();
    ex.pool = p;
    return ex;
  }
};

EngineRun make_run(const CpuExec& ex, int64_t group_rows, bool layer_groups = true) {
  const Model& model = testing::engine_test_model();
  CpuBackendOptions o;
  o.group_rows = group_rows;
  o.layer_groups = layer_groups;
  auto backend = std::make_unique<CpuBackend>(model, &ex, o);
  EngineRun r;
  r.backend = backend.get();
  EngineOptions eo;
  eo.rows_per_page = 2;
  auto e = Engine::create(std::move(backend), model.engram_tables(), eo);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  if (e.ok()) r.engine = std::move(*e);
  return r;
}

// Every step's logits (last row of each segment) of: `n` sequences prefilled with prompts of
// different lengths in one batch, then `steps` decode steps of all of them together, with one
// more sequence's 9-token prompt beside the decoders in step 2.
std::vector<std::vector<float>> run_steps(EngineRun& r, int n, int steps) {
  Engine& e = *r.engine;
  const int64_t V = e.config().vocab_size;
  std::vector<SequenceId> ids;
  std::vector<std::vector<int32_t>> prompts, decodes;
  for (int i = 0; i < n; ++i) {
    ids.push_back(*e.add_sequence(128));
    prompts.push_back(testing::test_tokens(3 + 2 * i, 300 + i));
    decodes.push_back(testing::test_tokens(steps, 400 + i));
  }
  const SequenceId extra = *e.add_sequence(128);
  const std::vector<int32_t> extra_prompt = testing::test_tokens(9, 500);
  std::vector<std::vector<float>> out;
  auto collect = [&](const std::vector<SegmentResult>& results) {
    for (const SegmentResult& s : results) {
      EXPECT_TRUE(s.status.ok()) << s.status.to_string();
      if (s.status.ok()) out.emplace_back(s.logits, s.logits + s.logit_rows * V);
    }
  };
  std::vector<Segment> segs;
  for (int i = 0; i < n; ++i) segs.push_back({ids[i], 0, prompts[i], LogitRows::kLast});
  collect(e.forward(segs));
  for (int step = 0; step < steps; ++step) {
    segs.clear();
    for (int i = 0; i < n; ++i)
      segs.push_back({ids[i], *e.length(ids[i]), std::span<const int32_t>(&decodes[i][step], 1), LogitRows::kLast});
    if (step == 2) segs.push_back({extra, 0, extra_prompt, LogitRows::kLast});
    collect(e.forward(segs));
  }
  return out;
}

TEST(CpuBackendRowGroups, GroupsAndConcurrentCompressorsGiveTheBitsOfOneThread) {
  PooledAndSerial x;
  const CpuExec& ex = x.pooled;
  for (int n : {8, 11}) {
    EngineRun one_thread = make_run(x.serial, 0);
    const auto want = run_steps(one_thread, n, 6);
    ASSERT_FALSE(want.empty());
    EngineRun whole = make_run(ex, 0);
    EXPECT_EQ(run_steps(whole, n, 6), want) << n << " sequences, no row groups, compressor steps side by side";
    for (int64_t g : {1, 2, 4}) {
      EngineRun grouped = make_run(ex, g);
      // The decode batches do run as groups (n rows: at least 2 of them).
      ASSERT_GT(grouped.backend->row_groups(n), 1) << "group_rows " << g;
      EXPECT_EQ(whole.backend->row_groups(n), 1);
      const auto got = run_steps(grouped, n, 6);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << n << " sequences, group_rows " << g << ", segment " << i;
    }
  }
}

// Layer groups (CpuBackendOptions::layer_groups): a decode step's layers each as one pool job,
// the groups' compressor steps publishing in segment order, against one thread and against the
// row groups with a pool job per step. 11 sequences on 4 threads: groups of 2–3 segments, so a
// group publishes several segments' entries and waits for the groups before it.
TEST(CpuBackendRowGroups, LayerGroupsGiveTheBitsOfOneThread) {
  PooledAndSerial x;
  const CpuExec& ex = x.pooled;
  for (int n : {8, 11}) {
    EngineRun one_thread = make_run(x.serial, 0);
    const auto want = run_steps(one_thread, n, 8);
    ASSERT_FALSE(want.empty());
    for (int64_t g : {1, 2}) {
      EngineRun per_step = make_run(ex, g, false);
      EXPECT_EQ(run_steps(per_step, n, 8), want) << n << " sequences, group_rows " << g << ", a job per step";
      EXPECT_EQ(per_step.backend->layer_group_runs(), 0);
      EngineRun fused = make_run(ex, g, true);
      const auto got = run_steps(fused, n, 8);
      // Every decode step but the one with a prefill chunk beside the decoders, every layer.
      const int64_t layers = testing::engine_test_model().config().num_hidden_layers;
      EXPECT_EQ(fused.backend->layer_group_runs(), 7 * layers) << n << " sequences, group_rows " << g;
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(got[i], want[i]) << n << " sequences, group_rows " << g << ", layer groups, result " << i;
    }
  }
}

TEST(CpuBackendRowGroups, NoGroupsWithoutAPoolOrForTooFewRows) {
  CpuExec serial = testing::engine_test_model().exec();
  serial.pool = nullptr;
  CpuBackendOptions o;
  o.group_rows = 1;
  CpuBackend one_thread(testing::engine_test_model(), &serial, o);
  EXPECT_EQ(one_thread.row_groups(8), 1);
  ThreadPool two(2);  // too few threads to pay for the groups
  CpuExec ex = serial;
  ex.pool = &two;
  EXPECT_EQ(CpuBackend(testing::engine_test_model(), &ex, o).row_groups(8), 1);
  ThreadPool pool(4);
  ex.pool = &pool;
  o.group_rows = 4;
  CpuBackend backend(testing::engine_test_model(), &ex, o);
  EXPECT_EQ(backend.row_groups(7), 1);
  EXPECT_EQ(backend.row_groups(8), 2);
  EXPECT_EQ(backend.row_groups(64), 4);                                     // at most the pool's threads
  EXPECT_EQ(backend.row_groups(CpuBackendOptions::kMaxGroupedRows + 1), 1);  // prefill-sized batches: never
  CpuBackend by_default(testing::engine_test_model(), &ex);  // one row per group, batches of ≥ 8
  EXPECT_EQ(by_default.row_groups(4), 1);
  EXPECT_EQ(by_default.row_groups(7), 1);
  EXPECT_EQ(by_default.row_groups(8), 4);
  EXPECT_EQ(by_default.row_groups(3 * CpuBackendOptions::kMinGroupedRows), 4);
  o.group_rows = 0;
  CpuBackend off(testing::engine_test_model(), &ex, o);
  EXPECT_EQ(off.row_groups(16), 1);
}

}  // namespace
}  // namespace dsv41
