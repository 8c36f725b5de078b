// The device backend's data flow and kernel bodies, run by HostExec on the CPU, against the CPU
// backend (the same function): dsv41-mini (bf16 weights, Engram, every layer role) and the golden
// fixture models, on batches that mix prefill chunks and decode rows of three sequences, and on
// forks, a removed sequence and a fresh one (the cache tiers under the device mirrors).
// Bounds and why: backend_compare_check.h. The GPU run of the same checks: cuda_backend_test.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "backends/cuda/backend_compare_check.h"
#include "backends/cuda/backend_dspark_check.h"
#include "backends/cuda/backend_device_drafter_check.h"
#include "backends/cuda/backend_image_check.h"
#include "backends/cuda/backend_fused_check.h"
#include "backends/cuda/backend_graph_check.h"
#include "backends/cuda/backend_records_check.h"
#include "backends/cuda/backend_stored_check.h"
#include "backends/cuda/backend_verify_check.h"
#include "backends/cuda/device_backend.h"
#include "backends/cuda/host_device_backend.h"
#include "backends/cuda/host_exec.h"
#include "engine/engine.h"
#include "plan/cache_plan.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

namespace ts = testing_scenario;

void compare_backends(const std::string& dir, const std::vector<ts::Step>& steps, int sequences) {
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_against_cpu(**model, make_host_device_backend(**model), steps, sequences, dir);
}

TEST(DeviceBackendHost, MiniMixedBatchMatchesCpuBackend) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  compare_backends(dir, ts::mixed_batch((*model)->vocab_size()), 3);
}

// The 16 × 64 indexer of cuda_backend_test's IntegerIndexEqualsDoubleTiles (which runs the
// integer kernel on the GPU) through the simple bodies: the model and its scenario are valid here.
TEST(DeviceBackendHost, WideIndexerMatchesCpuBackend) {
  auto model = Model::create_random(dsv41::testing::wide_index_test_config(), 29);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_against_cpu(**model, make_host_device_backend(**model), ts::mixed_batch((*model)->vocab_size()), 3,
                        "16 × 64 indexer (emulation)");
}

// Forks (whole and at a prefix), a removed sequence and a fresh one: the device mirrors of the
// compressed cache follow the host caches (device_backend.h, "Caches").
// FP8 / FP4 matrices uploaded as stored (backend_stored_check.h): the CPU engine's logits within
// the bounds, fewer device bytes than the widening, and the widening's logits bit for bit.
TEST(DeviceBackendHost, StoredFp8Fp4ModelMatchesCpuBackend) {
  ts::check_stored_model(
      std::string(DSV41_SOURCE_DIR) + "/models/tiny-random/config.json",
      [](const Model& m) { return make_host_device_backend(m); },
      [](const Backend& b) { return dynamic_cast<const DeviceBackend<HostExec>&>(b).weight_bytes(); }, true,
      "tiny-random (emulation)");
}

TEST(DeviceBackendHost, MiniForksAndRemovalMatchCpuBackend) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  compare_backends(dir, ts::forks_and_removal((*model)->vocab_size()), 1);
}

// The packed cache records the device backend leaves in the SequenceCache equal the CPU engine's
// bit for bit, except where a last-bit difference of the float before them crosses a rounding
// boundary of the record's format (one FP8 window row in a few layers on this prompt, then rows
// downstream of it): at least 90 % of the window rows and of the main / index rows are identical.
// DSpark on the device backend: the device drafter drafts what the CPU backend's host drafter
// does (within float rounding), and speculative greedy decoding equals plain
// (backend_dspark_check.h).
TEST(DeviceBackendHost, DsparkDraftsAndDecodesLikeTheCpuBackend) {
  auto model = Model::load(std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/dspark-micro");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_dspark_against_cpu(**model, [&] { return make_host_device_backend(**model); }, 1e-5f,
                               "dspark-micro (emulation)");
}

// Runs check(model, name) on each drafter model present: a random drafter in the release formats
// (dspark-micro) and the trained one (dsv41-mini).
template <class Check>
void for_each_drafter_model(Check&& check) {
  for (const std::string name : {"tests/fixtures/dspark-micro", "models/dsv41-mini"}) {
    const std::string dir = std::string(DSV41_SOURCE_DIR) + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    auto model = Model::load(dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    check(**model, name);
  }
}

// The device drafter's kernel bodies and data flow (feeding its ring copies, drafting several
// sequences at once, rebuilding copies after a rollback) against the host drafter, on a random
// drafter in the release formats (dspark-micro) and the trained one (dsv41-mini). The two sum in
// different orders, so a ring value on an FP8 rounding boundary can take the neighbouring code
// (the check counts those and allows a few); 2e-3 bounds what one such code does to the logits
// (session 31's drafter: 7.9e-4 from one flipped code; every value unflipped agrees to ≈ 7e-6).
TEST(DeviceBackendHost, DeviceDrafterMatchesHostDrafter) {
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_device_drafter(
        model,
        [&](bool device) {
          auto b = std::make_unique<DeviceBackend<HostExec>>(model);
          b->set_device_drafter(device);
          return std::unique_ptr<Backend>(std::move(b));
        },
        2e-3, name + " (emulation)");
  });
}

// The device drafter's drafts as the executor's (emulated) graphs against its launches: the same
// bits, and the drafts really went through graphs.
TEST(DeviceBackendHost, DraftGraphMatchesLaunches) {
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_graph(
        model,
        [&](bool graphs, bool draft_graphs) {
          auto b = std::make_unique<DeviceBackend<HostExec>>(model);
          b->set_graphs(graphs, 0);
          b->set_draft_graphs(draft_graphs);
          b->set_draft_replay(false);  // the recorded path (kept graphs: DraftReplayMatchesLaunches)
          return std::unique_ptr<Backend>(std::move(b));
        },
        [](const Backend& b) { return dynamic_cast<const DeviceBackend<HostExec>&>(b).exec_counts().graph_launches; },
        name + " (emulation)");
  });
}

// Drafts replayed from kept graphs (captured once per shape, replayed as they are) against launches
// and recorded graphs: the same bits, and a draft was replayed.
TEST(DeviceBackendHost, DraftReplayMatchesLaunches) {
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_replay(
        model,
        [&](bool graphs, bool replay) {
          auto b = std::make_unique<DeviceBackend<HostExec>>(model);
          b->set_graphs(graphs, 0);
          b->set_draft_replay(replay);
          return std::unique_ptr<Backend>(std::move(b));
        },
        [](const Backend& b) {
          const ExecCounts& c = dynamic_cast<const DeviceBackend<HostExec>&>(b).exec_counts();
          return std::pair<int64_t, int64_t>{c.kept_captures, c.kept_replays};
        },
        name + " (emulation)");
  });
}

// A forward's cache rows published with the drafter's ring rows (one download) leave the same
// caches after every forward, the same logits and drafts; graphs on (deferral, chunks of 5), so a
// row read before the work that writes it has run shows.
TEST(DeviceBackendHost, PublishWithFeedingLeavesTheSameCaches) {
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_publish_with_feeding(
        model,
        [&](bool publish, bool device_drafter) {
          auto b = std::make_unique<DeviceBackend<HostExec>>(model);
          b->set_graphs(true, 5);
          b->set_publish_with_feeding(publish);
          b->set_device_drafter(device_drafter);
          return std::unique_ptr<Backend>(std::move(b));
        },
        name + " (emulation)");
  });
}

// The greedy draft's tail (Markov bias, picks, confidences) on the (emulated) device against the
// host's: the same bits.
TEST(DeviceBackendHost, DraftTailOnDeviceMatchesHost) {
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_tail(
        model,
        [&](bool tail) {
          auto b = std::make_unique<DeviceBackend<HostExec>>(model);
          b->set_draft_tail_on_device(tail);
          return std::unique_ptr<Backend>(std::move(b));
        },
        name + " (emulation)");
  });
}

// The device drafter's stages and ring feeding with the backbone's fused and batched launches
// against a launch per body: the same bits, fewer launches.
TEST(DeviceBackendHost, DraftFusedMatchesUnfused) {
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_fused(
        model,
        [&](bool fused) {
          auto b = std::make_unique<DeviceBackend<HostExec>>(model);
          b->set_fused(fused);
          return std::unique_ptr<Backend>(std::move(b));
        },
        [](const Backend& b) { return dynamic_cast<const DeviceBackend<HostExec>&>(b).exec_counts().launches; },
        name + " (emulation)");
  });
}

TEST(DeviceBackendHost, ImagePromptMatchesCpuBackend) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vl-micro";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_image_prompt_against_cpu(**model, make_host_device_backend(**model), "vl-micro (emulation)");
}

TEST(DeviceBackendHost, MiniPackedRecordsMatchCpuEngine) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> tokens = ts::tokens(41, 75, (*model)->vocab_size());
  auto prefill = [&](std::unique_ptr<Backend> b) {
    auto e = Engine::create(std::move(b), (*model)->engram_tables());
    EXPECT_TRUE(e.ok());
    const SequenceId id = *(*e)->add_sequence(256);
    Segment s;
    s.sequence = id;
    s.tokens = tokens;
    EXPECT_TRUE((*e)->forward(std::span<const Segment>(&s, 1)).front().status.ok());
    return std::make_pair(std::move(*e), id);
  };
  auto [cpu, cpu_id] = prefill(std::make_unique<CpuBackend>(**model));
  auto [dev, dev_id] = prefill(make_host_device_backend(**model));
  const SequenceCache& a = *cpu->cache(cpu_id);
  const SequenceCache& b = *dev->cache(dev_id);
  int64_t window = 0, window_same = 0, rows = 0, rows_same = 0;
  for (int l = 0; l < a.num_layers(); ++l) {
    ASSERT_EQ(a.window(l).length(), b.window(l).length());
    for (int64_t p = a.window(l).first_held(); p < a.window(l).length(); ++p, ++window)
      window_same += std::memcmp(a.window(l).record(p), b.window(l).record(p), size_t(a.window(l).record_bytes())) == 0;
    if (const KvSourceCache* ka = a.kv_source(l)) {
      const KvSourceCache* kb = b.kv_source(l);
      ASSERT_EQ(ka->entries(), kb->entries());
      ASSERT_EQ(ka->pending, kb->pending);
      for (int64_t g = 0; g < ka->entries(); ++g, rows += 2) {
        rows_same += std::memcmp(ka->main.row(g), kb->main.row(g), size_t(ka->main.record_bytes())) == 0;
        rows_same += std::memcmp(ka->index.row(g), kb->index.row(g), size_t(ka->index.record_bytes())) == 0;
      }
    }
  }
  std::printf("identical records: window %lld of %lld, main + index %lld of %lld\n", static_cast<long long>(window_same),
              static_cast<long long>(window), static_cast<long long>(rows_same), static_cast<long long>(rows));
  EXPECT_GT(rows, 0);
  EXPECT_GE(window_same * 10, window * 9);
  EXPECT_GE(rows_same * 10, rows * 9);
}

// The device's packed caches (mirrors of main rows and index keys, window-ring copies) hold the
// cache's records byte for byte after every step: mixed prefill + decode, forks and a removal,
// rollbacks, restored snapshots (backend_records_check.h).
TEST(DeviceBackendHost, DeviceRecordsEqualCacheRecords) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  ts::check_device_records<HostExec>(
      **model, [&] { return std::make_unique<DeviceBackend<HostExec>>(**model); }, "emulation");
}

// Decode steps as graphs (emulated on HostExec by deferring launches to the next point where the
// host needs the device) give the launch path's logits bits and leave the cache's records, over
// forks, a removal, rollbacks and restored snapshots; once with the whole step in one graph and
// once (on the 12-step mixed scenario) cut every 5 launches (backend_graph_check.h).
TEST(DeviceBackendHost, DecodeGraphsEqualLaunches) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  for (int64_t chunk : {0, 5})
    ts::check_graphs<HostExec>(
        **model,
        [&](bool graphs) -> std::unique_ptr<Backend> {
          auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
          b->set_graphs(graphs, chunk);
          return b;
        },
        "emulation, chunk " + std::to_string(chunk), false, chunk != 0);
}

// DSpark-shaped verify steps (5 and 3 rows, rollbacks of 0 … 4 rows between) with the mirrors and
// open groups following the rollbacks and the short steps as (deferred) graphs, against rebuilt
// mirrors and kernel-by-kernel launches: the same bits, the cache's records, and no blocking upload
// after the prefill (backend_verify_check.h); the graphs cut every 5 launches and not at all.
TEST(DeviceBackendHost, VerifyStepsFollowRollbacks) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  for (int64_t chunk : {0, 5})
    ts::check_verify_steps<HostExec>(
        **model,
        [&](bool new_path) -> std::unique_ptr<Backend> {
          auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
          b->set_graphs(true, chunk);
          b->set_follow_rollbacks(new_path);
          b->set_short_step_graphs(new_path);
          return b;
        },
        "emulation, chunk " + std::to_string(chunk));
  // Groups of 4 rows: a rollback leaves an open group that is the first rows of the device's.
  const std::string ratio4 = ts::write_ratio4_model(std::string(DSV41_SOURCE_DIR) + "/models/tiny-random/config.json");
  const ts::RemovedAtExit ratio4_dir{ratio4};
  ASSERT_FALSE(ratio4.empty());
  auto random = Model::load(ratio4);
  ASSERT_TRUE(random.ok()) << random.status().to_string();
  ts::check_verify_steps<HostExec>(
      **random,
      [&](bool new_path) -> std::unique_ptr<Backend> {
        auto b = std::make_unique<DeviceBackend<HostExec>>(**random);
        b->set_graphs(true, 0);
        b->set_follow_rollbacks(new_path);
        b->set_short_step_graphs(new_path);
        return b;
      },
      "emulation, groups of 4 (random model)");
}

// The fused launches (RoPE + FakeQuant, inverse RoPE + window stores, routed + shared expert up;
// DeviceBackend::set_fused) give the separate launches' logits bits and leave the cache's records,
// in fewer launches, over forks, a removal, rollbacks, restored snapshots and a batch of 20
// sequences (backend_fused_check.h).
TEST(DeviceBackendHost, FusedLaunchesEqualSeparate) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  ts::check_fused<HostExec>(
      **model,
      [&](bool fused) -> std::unique_ptr<Backend> {
        auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
        b->set_fused(fused);
        return b;
      },
      "emulation", true);
}

// The device cache byte counts: what the mirrors and window copies hold is the record sizes times
// the rows — for one sequence exactly the plan's cache sizing at one record per page
// (plan_cache_bytes) — and what the sequence holds allocated is the plan's sizing at the device's
// page size (the mirrors' rows in whole pages, nothing more); the pools reserve whole slabs.
TEST(DeviceBackendHost, CacheBytesCountTheRecords) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  for (int64_t page_rows : {int64_t(64), int64_t(4)}) {
    auto backend = std::make_unique<DeviceBackend<HostExec>>(**model);
    DeviceBackend<HostExec>* dev = backend.get();
    dev->set_page_rows(page_rows);
    EXPECT_EQ(dev->cache_bytes_allocated().total(), 0);
    EXPECT_EQ(dev->cache_bytes_reserved().total(), 0);
    auto e = Engine::create(std::move(backend), (*model)->engram_tables());
    ASSERT_TRUE(e.ok());
    const SequenceId id = *(*e)->add_sequence(512);
    const int64_t V = (*model)->vocab_size();
    int64_t tokens = 0;
    for (int n : {75, 1, 1, 30, 1, 1, 1, 200}) {
      Segment s;
      s.sequence = id;
      s.start = tokens;
      const std::vector<int32_t> t = ts::tokens(900 + tokens, n, V);
      s.tokens = t;
      ASSERT_TRUE((*e)->forward(std::span<const Segment>(&s, 1)).front().status.ok());
      tokens += n;
      CacheOptions one_per_page, device_pages;
      one_per_page.rows_per_page = 1;
      device_pages.rows_per_page = page_rows;
      auto exact = plan_cache_bytes((*model)->config(), (*model)->plan(), tokens, one_per_page);
      auto paged = plan_cache_bytes((*model)->config(), (*model)->plan(), tokens, device_pages);
      ASSERT_TRUE(exact.ok() && paged.ok());
      const DeviceCacheBytes held = dev->cache_bytes_held(), alloc = dev->cache_bytes_allocated(),
                             reserved = dev->cache_bytes_reserved();
      EXPECT_EQ(held.main, exact->main) << tokens << " tokens";
      EXPECT_EQ(held.index, exact->index) << tokens << " tokens";
      EXPECT_EQ(held.window, exact->window) << tokens << " tokens";
      EXPECT_EQ(alloc.main, paged->main) << tokens << " tokens, " << page_rows << " rows a page";
      EXPECT_EQ(alloc.index, paged->index) << tokens << " tokens, " << page_rows << " rows a page";
      EXPECT_EQ(alloc.window, held.window);
      EXPECT_GE(reserved.main, alloc.main);
      EXPECT_GE(reserved.index, alloc.index);
      EXPECT_EQ(reserved.window, held.window);
    }
    // The sequence removed: its pages go back to the pools at once (the pools keep their slabs).
    const DeviceCacheBytes reserved = dev->cache_bytes_reserved();
    ASSERT_TRUE((*e)->remove_sequence(id).ok());
    EXPECT_EQ(dev->cache_bytes_allocated().total(), 0);
    EXPECT_EQ(dev->cache_bytes_reserved().main, reserved.main);
    EXPECT_EQ(dev->cache_bytes_reserved().index, reserved.index);
  }
}

// Forks share their parent's device pages: no page taken at a fork, only the pages a fork writes
// into copied, each mirror its cache's records; then the forks scenario over 4-row pages against
// the CPU backend (backend_records_check.h).
TEST(DeviceBackendHost, ForksShareTheirPrefixPages) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  const auto make = [&] {
    auto dev = std::make_unique<DeviceBackend<HostExec>>(**model);
    dev->set_page_rows(4);
    return dev;
  };
  ts::check_forks_share_pages<HostExec>(**model, make(), "emulation");
  ts::check_against_cpu(**model, make(), ts::forks_and_removal((*model)->vocab_size()), 1, dir + " (4 rows a page)");
}

// Pages of 1, 2 and 4 rows (a page boundary at nearly every entry): the forward, rollbacks and the
// device's records are those of the default pages (the CPU backend's function; the cache's bytes).
TEST(DeviceBackendHost, SmallPagesMatchCpuBackend) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  for (int64_t page_rows : {1, 2, 4}) {
    SCOPED_TRACE(page_rows);
    auto dev = std::make_unique<DeviceBackend<HostExec>>(**model);
    dev->set_page_rows(page_rows);
    ts::check_against_cpu(**model, std::move(dev), ts::rollbacks((*model)->vocab_size()), 2, dir);
  }
  ts::check_device_records<HostExec>(
      **model,
      [&] {
        auto dev = std::make_unique<DeviceBackend<HostExec>>(**model);
        dev->set_page_rows(2);
        return dev;
      },
      "emulation, 2 rows a page");
}

// Verify chunks rolled back by 1–3 positions and decoded again: the device window copies and
// the compressed-cache mirrors follow the rolled-back caches.
TEST(DeviceBackendHost, MiniRollbacksMatchCpuBackend) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  compare_backends(dir, ts::rollbacks((*model)->vocab_size()), 2);
}

// The device window copies against rebuilding from the host rings, bit for bit
// (backend_compare_check.h).
TEST(DeviceBackendHost, WindowCopiesEqualHostRingRows) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  ts::check_window_copies(
      **model,
      [&](bool keep) -> std::unique_ptr<Backend> {
        auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
        b->set_window_copies(keep);
        return b;
      },
      "emulation");
}

// Steps 4–5 of all segments of a layer in one launch each (index_and_attend) give the same bits
// as the segments one by one: mixed prefill + decode batches of three sequences, forks and a
// removal, rollbacks.
TEST(DeviceBackendHost, BatchedSegmentsEqualOneByOne) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  ts::check_window_copies(
      **model,
      [&](bool batched) -> std::unique_ptr<Backend> {
        auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
        b->set_batched_segments(batched);
        return b;
      },
      "emulation, batched segments", true);
}

// The compressor of all segments of a layer in batched launches, published at end_batch
// (compress_segments), against compress per segment (download and pack at once), bit for bit:
// the logits over mixed prefill + decode batches, forks, a removal and rollbacks ...
TEST(DeviceBackendHost, BatchedCompressEqualsPerSegment) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  ts::check_window_copies(
      **model,
      [&](bool batched) -> std::unique_ptr<Backend> {
        auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
        b->set_batched_compress(batched);
        return b;
      },
      "emulation, batched compressor");
}

// ... and the caches they leave: every packed main / index record, the open group and the
// rollback history equal, over 18 sequences (more segments than one batched launch takes):
// prefills of 1 … 23 tokens, a long prefill beside decode rows, then decode steps (groups
// completing in some segments and not in others).
TEST(DeviceBackendHost, BatchedCompressLeavesTheSameCaches) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  const int64_t V = (*model)->vocab_size();
  const int n = 18;
  struct Run {
    std::unique_ptr<Engine> engine;
    std::vector<SequenceId> ids;
  };
  auto run = [&](bool batched) {
    auto b = std::make_unique<DeviceBackend<HostExec>>(**model);
    b->set_batched_compress(batched);
    EngineOptions options;
    options.rollback_tokens = 4;
    auto e = Engine::create(std::move(b), (*model)->engram_tables(), options);
    EXPECT_TRUE(e.ok());
    Run r{std::move(*e), {}};
    for (int s = 0; s < n; ++s) r.ids.push_back(*r.engine->add_sequence(256));
    // Step 1: prefills of 1 … 23 tokens; then a long prefill beside decode rows; then decodes.
    std::vector<std::vector<int32_t>> toks(n);
    std::vector<int64_t> len(n, 0);
    auto step = [&](const std::vector<int>& counts, uint64_t seed) {
      std::vector<Segment> segs;
      for (int s = 0; s < n; ++s) {
        if (counts[s] == 0) continue;
        toks[s] = ts::tokens(seed + s, counts[s], V);
        Segment seg;
        seg.sequence = r.ids[s];
        seg.start = len[s];
        seg.tokens = toks[s];
        segs.push_back(seg);
        len[s] += counts[s];
      }
      for (const SegmentResult& res : r.engine->forward(segs)) EXPECT_TRUE(res.status.ok()) << res.status.to_string();
    };
    std::vector<int> counts(n);
    for (int s = 0; s < n; ++s) counts[s] = 1 + (s * 7) % 23;
    step(counts, 500);
    for (int s = 0; s < n; ++s) counts[s] = s == 3 ? 37 : 1;
    step(counts, 600);
    for (int i = 0; i < 5; ++i) step(std::vector<int>(n, 1), 700 + 50 * i);
    return r;
  };
  const Run a = run(false), b = run(true);
  int64_t entries = 0;
  for (int s = 0; s < n; ++s) {
    const SequenceCache& ca = *a.engine->cache(a.ids[s]);
    const SequenceCache& cb = *b.engine->cache(b.ids[s]);
    for (int l = 0; l < ca.num_layers(); ++l) {
      const KvSourceCache* ka = ca.kv_source(l);
      if (!ka) continue;
      const KvSourceCache* kb = cb.kv_source(l);
      ASSERT_EQ(ka->entries(), kb->entries()) << "sequence " << s << " layer " << l;
      ASSERT_EQ(ka->pending, kb->pending) << "sequence " << s << " layer " << l;
      EXPECT_EQ(ka->pending_kv, kb->pending_kv) << "sequence " << s << " layer " << l;
      EXPECT_EQ(ka->pending_gate, kb->pending_gate) << "sequence " << s << " layer " << l;
      EXPECT_EQ(ka->history_kv, kb->history_kv) << "sequence " << s << " layer " << l;
      EXPECT_EQ(ka->history_gate, kb->history_gate) << "sequence " << s << " layer " << l;
      for (int64_t g = 0; g < ka->entries(); ++g, ++entries) {
        EXPECT_EQ(std::memcmp(ka->main.row(g), kb->main.row(g), size_t(ka->main.record_bytes())), 0);
        EXPECT_EQ(std::memcmp(ka->index.row(g), kb->index.row(g), size_t(ka->index.record_bytes())), 0);
      }
    }
  }
  EXPECT_GT(entries, 100);
}

// What a decode step costs in host round trips (exec_counts.h): the window rows, the fake
// quantisers, attend and (compress_segments) the compressor make none per layer any more. What is
// left: the batch's tables and, per Engram layer, its rows (uploads from pinned staging, not waited
// for), the logit rows (the same), and two downloads: the batch's staged rows (window rows, new
// entries) and the logits. (Before compress_segments: per kv-source layer up to 2 uploads + 1
// download for the compressor, 1 of each more when a group completed, 2 uploads for the mirrors.)
TEST(DeviceBackendHost, DecodeStepHostCopies) {
  const std::string dir = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok());
  auto owned = std::make_unique<DeviceBackend<HostExec>>(**model);
  const DeviceBackend<HostExec>& b = *owned;
  auto e = Engine::create(std::move(owned), (*model)->engram_tables());
  ASSERT_TRUE(e.ok());
  const SequenceId id = *(*e)->add_sequence(256);
  const std::vector<int32_t> prompt = ts::tokens(7, 40, (*model)->vocab_size());
  Segment s;
  s.sequence = id;
  s.tokens = prompt;
  ASSERT_TRUE((*e)->forward(std::span<const Segment>(&s, 1)).front().status.ok());
  int kv_layers = 0, engram_layers = 0;
  const LayerPlan& plan = (*model)->plan();
  for (const LayerInfo& l : plan.layers) {
    kv_layers += (*e)->cache(id)->kv_source(l.index) != nullptr;
    engram_layers += l.has_engram;
  }
  const int layers = static_cast<int>(plan.layers.size());
  for (int step = 0; step < 4; ++step) {
    const ExecCounts before = b.exec_counts();
    const int32_t token = 5 + step;
    s.start = 40 + step;
    s.tokens = std::span<const int32_t>(&token, 1);
    ASSERT_TRUE((*e)->forward(std::span<const Segment>(&s, 1)).front().status.ok());
    const ExecCounts k = b.exec_counts() - before;
    std::printf("decode step %d (%d layers, %d kv sources, %d Engram): %lld launches, %lld uploads, %lld downloads, "
                "%lld asynchronous uploads, %lld device copies\n", step, layers, kv_layers, engram_layers,
                static_cast<long long>(k.launches), static_cast<long long>(k.uploads),
                static_cast<long long>(k.downloads), static_cast<long long>(k.async_uploads),
                static_cast<long long>(k.copies));
    EXPECT_EQ(k.uploads, 0);
    EXPECT_EQ(k.downloads, 2);
    EXPECT_EQ(k.async_uploads, 2 + engram_layers);
  }
}

// Runs check(model, dir) on each golden fixture model (the independent implementation's
// checkpoints); skips without ../shared.
template <class Check>
void for_each_golden_model(Check&& check) {
  for (const char* name : {"v41-tiny-f32", "v41-tiny-bf16"}) {
    const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/" + name;
    if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent (no ../shared)";
    auto model = Model::load(dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    check(**model, dir);
  }
}

// The golden fixture models over mirrors in pages of one row (the mixed batch), and forks sharing
// 4-row device pages (the forks scenario), against the CPU backend, as with the default pages.
TEST(DeviceBackendHost, SmallPagesGoldenFixturesMatchCpuBackend) {
  for_each_golden_model([](const Model& model, const std::string& dir) {
    auto dev = std::make_unique<DeviceBackend<HostExec>>(model);
    dev->set_page_rows(1);
    ts::check_against_cpu(model, std::move(dev), ts::mixed_batch(model.vocab_size(), 3), 3, dir + " (1 row a page)");
    auto forks = std::make_unique<DeviceBackend<HostExec>>(model);
    forks->set_page_rows(4);
    ts::check_against_cpu(model, std::move(forks), ts::forks_and_removal(model.vocab_size()), 1,
                          dir + " (forks, 4 rows a page)");
  });
}

TEST(DeviceBackendHost, GoldenFixturesMatchCpuBackend) {
  for_each_golden_model([](const Model& model, const std::string& dir) {
    compare_backends(dir, ts::mixed_batch(model.vocab_size(), 3), 3);
  });
}

}  // namespace
}  // namespace dsv41
