// The CUDA backend on a GPU (each test skips without a CUDA device, saying why):
// - every device kernel body launched by CudaExec against the CPU references
//   (device_kernels_check.h, the same checks device_kernels_test.cpp runs through HostExec);
// - the whole backend against the CPU engine: dsv41-mini and both golden fixture models, three
//   sequences in batches that mix prefill chunks and decode rows, and forks / a removed sequence
//   (backend_scenario.h); bounds as backend_compare_check.h says.
// Paths: DSV41_SOURCE_DIR's models/ and ../shared/golden, else test-models/<name> under the working
// directory (how scripts/gpu-suite.sh runs them on a GPU machine without the checkout).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "backends/cuda/backend_compare_check.h"
#include "backends/cuda/backend_dspark_check.h"
#include "backends/cuda/backend_fused_check.h"
#include "backends/cuda/backend_graph_check.h"
#include "backends/cuda/backend_device_drafter_check.h"
#include "backends/cuda/backend_image_check.h"
#include "backends/cuda/backend_records_check.h"
#include "backends/cuda/backend_stored_check.h"
#include "backends/cuda/backend_verify_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_backend.h"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_check_stored.h"
#include "runtime/sampling.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;
namespace ts = testing_scenario;

#define DSV41_KERNEL_CHECK(Name, fn)                                  \
  TEST(DeviceKernelsCuda, Name) {                                     \
    DSV41_REQUIRE_CUDA_DEVICE();                                      \
    CudaExec ex;                                                      \
    kc::fn(ex);                                                       \
    ex.sync();                                                        \
    ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();         \
  }

DSV41_KERNEL_CHECK(Gemm, check_gemm)
DSV41_KERNEL_CHECK(RmsNormAndRope, check_rmsnorm_rope)
DSV41_KERNEL_CHECK(MhcWithSinkhorn, check_mhc)
DSV41_KERNEL_CHECK(CompressorPool, check_pool)
DSV41_KERNEL_CHECK(BatchedCompressorBodies, check_compress_bodies)
DSV41_KERNEL_CHECK(TopkAndCandidateBlocks, check_selection)
DSV41_KERNEL_CHECK(RouterAndExperts, check_moe)
DSV41_KERNEL_CHECK(Engram, check_engram)
DSV41_KERNEL_CHECK(SinkAttentionAndIndexerScores, check_attention_and_scores)
DSV41_KERNEL_CHECK(FakeQuantisersMatchRecordCodecs, check_fake_quant)
DSV41_KERNEL_CHECK(RecordCodecsPackAndDecode, check_record_codecs)
DSV41_KERNEL_CHECK(RopeQuantFusedEqualsSeparate, check_rope_quant)
DSV41_KERNEL_CHECK(WindowRing, check_window_ring)
DSV41_KERNEL_CHECK(WindowStore, check_window_store)

// A top-k check on the fast path (long rows too, one launch a unit) and the simple one (short
// rows, three launches).
template <class Check>
void on_both_topk_paths(Check check) {
  for (bool fast : {true, false}) {
    CudaExec ex;
    ex.set_fast_kernels(fast);
    ex.set_topk_hints(true);
    check(ex, fast, fast ? 1 : 3);
    ex.sync();
    ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
  }
}

// The backend's top-k unit: the linear selection (fast_topk.cu, one launch a unit) at every
// boundary shape up to 64K + 1 entries, and the quadratic simple one (three launches) at the short
// ones, each against select_topk.
TEST(DeviceKernelsCuda, TopkBatchEqualsSelectTopk) {
  DSV41_REQUIRE_CUDA_DEVICE();
  on_both_topk_paths([](CudaExec& ex, bool long_rows, int64_t launches) { kc::check_topk_batch(ex, long_rows, launches); });
}

// The top-k jobs' hints (pools, floors): the fast path reads less, the same ids as select_topk.
TEST(DeviceKernelsCuda, TopkHintsEqualSelectTopk) {
  DSV41_REQUIRE_CUDA_DEVICE();
  on_both_topk_paths([](CudaExec& ex, bool long_rows, int64_t launches) { kc::check_topk_hints(ex, long_rows, launches); });
}

// The done hint: rows whose selection stands are left as they are by every fast kernel.
TEST(DeviceKernelsCuda, TopkDoneRowsAreLeft) {
  DSV41_REQUIRE_CUDA_DEVICE();
  on_both_topk_paths([](CudaExec& ex, bool fast, int64_t launches) { kc::check_topk_done(ex, fast, launches); });
}

// FP8 / FP4 weights as stored (device_kernels_check_stored.h): the simple bodies bit for bit as on
// the widened matrix, and with the fast kernels on within the bounds of the CPU references.
TEST(DeviceKernelsCuda, StoredWeightGemmAndExperts) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for (bool fast : {false, true}) {
    CudaExec ex;
    ex.set_fast_kernels(fast);
    kc::check_stored_gemm(ex, !fast);
    kc::check_stored_experts(ex, !fast);
    ex.sync();
    ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
  }
}

// Where a test model lives: its place in the checkout, else test-models/<name>.
std::string model_dir(const std::string& name, const std::string& in_checkout) {
  if (std::filesystem::exists(in_checkout + "/config.json")) return in_checkout;
  return "test-models/" + name;
}

// A fresh CUDA backend of `model`, passed to `configure` first (null, with a test failure, when
// none can be made): the factories the scenario checks call for each run.
std::unique_ptr<Backend> fresh_cuda_backend(const Model& model,
                                            const std::function<void(DeviceBackend<CudaExec>&)>& configure = {}) {
  auto b = make_cuda_backend(model);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  if (!b.ok()) return nullptr;
  if (configure) configure(dynamic_cast<DeviceBackend<CudaExec>&>(**b));
  return std::move(*b);
}

void compare_with_cpu(const std::string& dir, bool forks = false) {
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto cuda = make_cuda_backend(**model);
  ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
  // A device error turns the backend's logits into NaN (device_backend.h), which fails the check.
  const int64_t V = (*model)->vocab_size();
  if (forks) {
    ts::check_against_cpu(**model, std::move(*cuda), ts::forks_and_removal(V), 1, dir + " (forks, removal)");
  } else {
    ts::check_against_cpu(**model, std::move(*cuda), ts::mixed_batch(V), 3, dir);
  }
}

TEST(CudaBackend, MiniForksAndRemovalMatchCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini"), true);
}

TEST(CudaBackend, MiniMixedBatchMatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini"));
}

TEST(CudaBackend, MiniRollbacksMatchCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto cuda = make_cuda_backend(**model);
  ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
  ts::check_against_cpu(**model, std::move(*cuda), ts::rollbacks((*model)->vocab_size()), 2, dir + " (rollbacks)");
}

// The device's packed caches hold the cache's records byte for byte after every step of the
// scenarios (backend_records_check.h), on the GPU.
TEST(CudaBackend, DeviceRecordsEqualCacheRecords) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_device_records<CudaExec>(**model, [&] { return fresh_cuda_backend(**model); }, "cuda");
}

// Mirrors in pages of 1 and 2 rows (a page boundary at nearly every entry; the default is 64):
// the forward over rollbacks is the CPU backend's, the device's records the cache's, on the GPU.
TEST(CudaBackend, SmallPagesMatchCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto cuda = fresh_cuda_backend(**model, [](DeviceBackend<CudaExec>& b) { b.set_page_rows(1); });
  ASSERT_TRUE(cuda);
  ts::check_against_cpu(**model, std::move(cuda), ts::rollbacks((*model)->vocab_size()), 2, dir + " (1 row a page)");
  ts::check_device_records<CudaExec>(
      **model, [&] { return fresh_cuda_backend(**model, [](DeviceBackend<CudaExec>& b) { b.set_page_rows(2); }); },
      "cuda, 2 rows a page");
}

// Forks share their parent's device pages on the GPU as on the emulation (backend_records_check.h).
TEST(CudaBackend, ForksShareTheirPrefixPages) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto make = [&] { return fresh_cuda_backend(**model, [](DeviceBackend<CudaExec>& b) { b.set_page_rows(4); }); };
  auto first = make();
  ASSERT_TRUE(first);
  ts::check_forks_share_pages<CudaExec>(**model, std::move(first), "cuda");
  ts::check_against_cpu(**model, make(), ts::forks_and_removal((*model)->vocab_size()), 1, dir + " (4 rows a page)");
}

// The fused launches (DeviceBackend::set_fused; on the GPU also the experts' down projection +
// mHC expand as one kernel and the routed + shared up projections as one) against each body
// launched on its own: the same logits bits, the cache's records, fewer launches; 20 sequences in
// the last case (backend_fused_check.h).
TEST(CudaBackend, FusedLaunchesEqualSeparate) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_fused<CudaExec>(
      **model,
      [&](bool fused) { return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) { b.set_fused(fused); }); },
      "cuda", true);
}

// Decode steps as CUDA graphs against kernel-by-kernel launches: the same logits bits and the
// cache's records after every step (backend_graph_check.h), the whole step in one graph and cut
// every 16 launches; 20 sequences in the last case.
TEST(CudaBackend, DecodeGraphsEqualLaunches) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  for (int64_t chunk : {0, 16})
    ts::check_graphs<CudaExec>(
        **model,
        [&](bool graphs) {
          return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) { b.set_graphs(graphs, chunk); });
        },
        "cuda, chunk " + std::to_string(chunk), true);
}

// The indexer's scores on integer tensor cores (the default) against the double tiles: the same
// logits bits over prefill chunks, decode rows, forks, a removal, rollbacks and 20 sequences in one
// step (check_window_copies' cases), and argmax-equal to the CPU engine, on a random model whose
// indexer the integer kernel takes (16 heads × 64). dsv41-mini's 4 index heads and the golden
// models' 8 are fewer than its 16-row fragments, so every other end-to-end test scores them on
// the double tiles.
TEST(CudaBackend, IntegerIndexEqualsDoubleTiles) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const ModelConfig c = dsv41::testing::wide_index_test_config();
  auto model = Model::create_random(c, 29);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto make = [&](bool integer) {
    return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) { b.executor().set_integer_index(integer); });
  };
  int64_t integer_launches = 0;
  {
    std::unique_ptr<Backend> b = make(true);
    auto* dev = dynamic_cast<DeviceBackend<CudaExec>*>(b.get());
    ASSERT_NE(dev, nullptr);
    const ts::AfterStep after = [&](const Engine&, const std::vector<SequenceId>&) {
      integer_launches = dev->exec_counts().integer_index;
    };
    auto r = ts::run(std::move(b), (*model)->engram_tables(), 3, ts::mixed_batch(c.vocab_size, 2), 1024, after);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_GT(integer_launches, 0) << "the integer kernel never ran: the check below would compare the double "
                                    "tiles with themselves";
  ts::check_window_copies(**model, make, "integer index against double tiles", true);
  ts::check_against_cpu(**model, make(true), ts::mixed_batch(c.vocab_size), 3, "16 × 64 indexer (integer)");
  std::printf("integer indexer: %lld launches in the mixed batch\n", static_cast<long long>(integer_launches));
}

// The indexer's selections by filter and refine (index_refine.cu; refining every row, however
// short) against every score exact first: the same logits bits over prefill chunks, decode rows,
// forks, a removal, rollbacks and 20 sequences in one step (check_window_copies' cases), on the
// random model with 16 × 64 index heads (dsv41-mini's 4 heads are fewer than the kernel's 8-head
// tiles: it never refines).
TEST(CudaBackend, IndexRefineEqualsExactScores) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const ModelConfig c = dsv41::testing::wide_index_test_config();
  auto model = Model::create_random(c, 31);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto make = [&](bool refine) {  // refining with the top-k's hints (pools, floors), exact without
    return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) {
      b.executor().set_index_refine(refine, 1);
      b.executor().set_topk_hints(refine);
    });
  };
  int64_t refined = 0;
  {
    std::unique_ptr<Backend> b = make(true);
    auto* dev = dynamic_cast<DeviceBackend<CudaExec>*>(b.get());
    ASSERT_NE(dev, nullptr);
    const ts::AfterStep after = [&](const Engine&, const std::vector<SequenceId>&) {
      refined = dev->exec_counts().index_refine;
    };
    auto r = ts::run(std::move(b), (*model)->engram_tables(), 3, ts::mixed_batch(c.vocab_size, 2), 1024, after);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_GT(refined, 0) << "filter and refine never ran: the check below would compare exact scores with themselves";
  ts::check_window_copies(**model, make, "filter and refine against exact scores", true);
  std::printf("filter and refine: %lld chains in the mixed batch\n", static_cast<long long>(refined));
}

// Kernels placed before the kernel they follow has ended (kernel_launch.cuh) against each launched
// once the one before has ended: the same logits bits over prefill chunks, decode rows, forks, a
// removal, rollbacks and 20 sequences in one step (check_window_copies' cases) on dsv41-mini, the
// random model whose indexer runs on integer tensor cores and the golden checkpoints; placed early,
// the golden checkpoints against the CPU engine (whose batched steps are each sequence's own bits,
// tests/engine_test.cpp) and DSpark's drafts and decoding on dsv41-mini against the CPU engine.
TEST(CudaBackend, EarlyStartEqualsLaunchesInTurn) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const auto maker = [](const Model& model) {
    return [&model](bool early) {
      return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) { b.executor().set_early_start(early); });
    };
  };
  const auto check = [&](const Model& model, const std::string& name) {
    ts::check_window_copies(model, maker(model), name + ": early start against launches in turn", true);
  };
  auto wide = Model::create_random(dsv41::testing::wide_index_test_config(), 29);
  ASSERT_TRUE(wide.ok()) << wide.status().to_string();
  check(**wide, "16 x 64 indexer");
  for (const char* golden : {"v41-tiny-bf16", "v41-tiny-f32"}) {
    const std::string dir = model_dir(golden, std::string(DSV41_SOURCE_DIR) + "/../shared/golden/" + golden);
    if (!std::filesystem::exists(dir + "/config.json")) {
      std::printf("%s is absent: not checked here\n", dir.c_str());
      continue;
    }
    auto model = Model::load(dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    check(**model, golden);
    const int64_t V = (*model)->vocab_size();
    ts::check_against_cpu(**model, maker(**model)(true), ts::mixed_batch(V), 3, dir + " (early start)");
  }
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto mini = Model::load(dir);
  ASSERT_TRUE(mini.ok()) << mini.status().to_string();
  check(**mini, "dsv41-mini");
  ts::check_dspark_against_cpu(**mini, [&] { return maker(**mini)(true); }, 1.0f, "dsv41-mini (cuda, early start)");
}

// DSpark-shaped verify steps on the GPU (backend_verify_check.h): mirrors and open groups that
// follow rollbacks and verify steps as CUDA graphs against rebuilt mirrors and launches: the same
// bits, the cache's records, no blocking upload after the prefill.
TEST(CudaBackend, VerifyStepsFollowRollbacks) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto check = [](const Model& m, const std::string& what) {
    ts::check_verify_steps<CudaExec>(
        m,
        [&](bool new_path) {
          return fresh_cuda_backend(m, [&](DeviceBackend<CudaExec>& b) {
            b.set_follow_rollbacks(new_path);
            b.set_short_step_graphs(new_path);
          });
        },
        what);
  };
  check(**model, "cuda");
  // Groups of 4 rows (a random model): a rollback leaves an open group that is the first rows of
  // the device's.
  const std::string config =
      model_dir("tiny-random", std::string(DSV41_SOURCE_DIR) + "/models/tiny-random") + "/config.json";
  if (!std::filesystem::exists(config)) GTEST_SKIP() << config << " is absent";
  const std::string ratio4 = ts::write_ratio4_model(config);
  const ts::RemovedAtExit ratio4_dir{ratio4};
  ASSERT_FALSE(ratio4.empty());
  auto random = Model::load(ratio4);
  ASSERT_TRUE(random.ok()) << random.status().to_string();
  check(**random, "cuda, groups of 4 (random model)");
}

// The device window copies against rebuilding from the host rings, bit for bit, on the GPU.
TEST(CudaBackend, WindowCopiesEqualHostRingRows) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_window_copies(
      **model,
      [&](bool keep) {
        return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) { b.set_window_copies(keep); });
      },
      "cuda");
}

// All segments' steps 4–5 in one launch each (dk::AttnBatch, dk::Batched) equal the segments one
// by one, bit for bit, on the GPU too (fast kernels on).
TEST(CudaBackend, BatchedSegmentsEqualOneByOne) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_window_copies(
      **model,
      [&](bool batched) {
        return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) { b.set_batched_segments(batched); });
      },
      "cuda, batched segments", true);
}

// The compressor of a layer's segments batched and published at end_batch (compress_segments)
// equals compress per segment, bit for bit, on the GPU (pinned staging, asynchronous uploads).
TEST(CudaBackend, BatchedCompressEqualsPerSegment) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_window_copies(
      **model,
      [&](bool batched) {
        return fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) { b.set_batched_compress(batched); });
      },
      "cuda, batched compressor", true);
}

TEST(CudaBackend, ImagePromptMatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("vl-micro", std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vl-micro");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto cuda = make_cuda_backend(**model);
  ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
  ts::check_image_prompt_against_cpu(**model, std::move(*cuda), "vl-micro (cuda)");
}

// DSpark with the CUDA backend (features on the device, drafter on the host): drafts near the
// CPU backend's (the features differ by rounding; 1.0 in logits leaves room for an FP8 code of a
// ring row flipping) and speculative greedy decoding equal to plain on the GPU.
TEST(CudaBackend, DsparkDraftsAndDecodesLikeTheCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_dspark_against_cpu(
      **model,
      [&] { return fresh_cuda_backend(**model); },
      1.0f, "dsv41-mini (cuda)");
}

// Runs check(model, name) on each drafter model the DSpark GPU tests use that is present: a random
// drafter (dspark-micro) and the trained one (dsv41-mini).
template <class Check>
void for_each_drafter_model(Check&& check) {
  for (const std::string name : {"dspark-micro", "dsv41-mini"}) {
    const std::string dir = model_dir(name, std::string(DSV41_SOURCE_DIR) +
                                                (name == "dsv41-mini" ? "/models/" : "/tests/fixtures/") + name);
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    auto model = Model::load(dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    check(**model, name);
  }
}

// A DSpark engine (rollbacks of up to 5 tokens) over a fresh CUDA backend of `model`; *dev is
// that backend.
Result<std::unique_ptr<Engine>> dspark_engine_on_cuda(const Model& model, DeviceBackend<CudaExec>** dev) {
  auto backend = fresh_cuda_backend(model);
  if (!backend) return internal_error("no CUDA backend could be made");
  *dev = dynamic_cast<DeviceBackend<CudaExec>*>(backend.get());
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = 5;
  return Engine::create(std::move(backend), model.engram_tables(), eo);
}

// The device drafter against the host drafter on the GPU (same target features; the rings'
// FP8 codes may flip where the two round differently, hence the bound of the test above), on a
// random drafter (dspark-micro) and the trained one (dsv41-mini).
TEST(CudaBackend, DeviceDrafterMatchesHostDrafter) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_device_drafter(
        model,
        [&](bool device) {
          return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) { b.set_device_drafter(device); });
        },
        1.0, name + " (cuda)", /*ring_flips=*/1000);
  });
}

// The device drafter's draft replayed as a CUDA graph against its launches: the same bits.
TEST(CudaBackend, DraftGraphMatchesLaunches) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_graph(
        model,
        [&](bool graphs, bool draft_graphs) {
          return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) {
            b.set_graphs(graphs, CudaExec::kGraphChunk);
            b.set_draft_graphs(draft_graphs);
            b.set_draft_replay(false);  // the recorded path (kept graphs: DraftReplayMatchesLaunches)
          });
        },
        [](const Backend& b) { return dynamic_cast<const DeviceBackend<CudaExec>&>(b).exec_counts().graph_launches; },
        name + " (cuda)");
  });
}

// Drafts replayed from kept CUDA graphs (captured once per shape, replayed as they are) against
// launches and recorded graphs: the same bits, and a draft was replayed.
TEST(CudaBackend, DraftReplayMatchesLaunches) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_replay(
        model,
        [&](bool graphs, bool replay) {
          return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) {
            b.set_graphs(graphs, CudaExec::kGraphChunk);
            b.set_draft_replay(replay);
          });
        },
        [](const Backend& b) {
          const ExecCounts& c = dynamic_cast<const DeviceBackend<CudaExec>&>(b).exec_counts();
          return std::pair<int64_t, int64_t>{c.kept_captures, c.kept_replays};
        },
        name + " (cuda)");
  });
}

// A forward's cache rows published with the drafter's ring rows (one download a forward): the
// same caches after every forward, logits and drafts as publishing at end_batch.
TEST(CudaBackend, PublishWithFeedingLeavesTheSameCaches) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_publish_with_feeding(
        model,
        [&](bool publish, bool device_drafter) {
          return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) {
            b.set_publish_with_feeding(publish);
            b.set_device_drafter(device_drafter);
          });
        },
        name + " (cuda)");
  });
}

// The greedy draft's tail on the GPU (each slot's Markov bias over n·V threads, then its argmax a
// block per request; the confidences) against the host's over the same logits: the same bits.
TEST(CudaBackend, DraftTailOnDeviceMatchesHost) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_tail(
        model,
        [&](bool tail) {
          return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) { b.set_draft_tail_on_device(tail); });
        },
        name + " (cuda)");
  });
}

// The device drafter's stages and ring feeding with the backbone's fused kernels (collapse + norm,
// router, batched GEMMs and norms, RoPE + FakeQuant, experts' up, down + expand, expand +
// coefficients) against a launch per body: the same bits, fewer launches in the drafts.
TEST(CudaBackend, DraftFusedMatchesUnfused) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_fused(
        model,
        [&](bool fused) { return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) { b.set_fused(fused); }); },
        [](const Backend& b) { return dynamic_cast<const DeviceBackend<CudaExec>&>(b).exec_counts().launches; },
        name + " (cuda)");
  });
}

// Session 18's fewer draft kernels (every greedy slot in one launch, the attention's keys staged in
// shared memory) against session 17's kernels: the same bits, fewer launches in the drafts.
TEST(CudaBackend, DraftSlotsInOneLaunchMatchSlotBySlot) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for_each_drafter_model([](const Model& model, const std::string& name) {
    ts::check_draft_fused(
        model,
        [&](bool on) {
          return fresh_cuda_backend(model, [&](DeviceBackend<CudaExec>& b) {
            b.set_draft_slots_one_launch(on);
            b.set_draft_keys_in_shared(on);
          });
        },
        [](const Backend& b) { return dynamic_cast<const DeviceBackend<CudaExec>&>(b).exec_counts().launches; },
        name + " (cuda)", "the slots in one launch and staged keys");
  });
}

// Decode steps and drafts in turn, as DSpark runs them: drafts update their own executable graphs
// (StreamGraphs' programs), so once they have run, a draft's graph launches are updates, not
// instantiations (sharing the decode steps' graphs, each draft stretch would find the decode
// step's kernels and nodes). Decode steps' launches differ from step to step (a compressor's
// group every other token): with a graph per stretch and shape they update too.
TEST(CudaBackend, DraftsAndDecodeStepsKeepTheirOwnGraphs) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  DeviceBackend<CudaExec>* dev = nullptr;
  auto e = dspark_engine_on_cuda(**model, &dev);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  dev->set_draft_replay(false);  // drafts recorded into the executor's graphs (kept graphs bypass them)
  const int batch = 3, warmup = 3, rounds = 8;
  std::vector<int32_t> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(5 + 11 * i % 280);
  std::vector<SequenceId> ids;
  std::vector<Segment> segs;
  for (int b = 0; b < batch; ++b) {
    auto id = (*e)->add_sequence(int64_t(prompt.size()) + rounds + 8);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    segs.push_back({*id, 0, prompt, LogitRows::kNone, {}});
  }
  for (const SegmentResult& r : (*e)->forward(segs)) ASSERT_TRUE(r.status.ok());
  std::vector<int32_t> next(batch, 17);
  std::vector<DraftBlock> out;
  int64_t step_launches = 0, step_made = 0, draft_launches = 0, draft_updates = 0, draft_made = 0;
  for (int round = 0; round < rounds; ++round) {
    const StreamGraphs::Stats s0 = dev->executor().graph_stats();
    segs.clear();
    for (int b = 0; b < batch; ++b)
      segs.push_back({ids[size_t(b)], *(*e)->length(ids[size_t(b)]), std::span<const int32_t>(&next[size_t(b)], 1),
                      LogitRows::kLast, {}});
    for (const SegmentResult& r : (*e)->forward(segs)) ASSERT_TRUE(r.status.ok());
    const StreamGraphs::Stats s1 = dev->executor().graph_stats();
    std::vector<Engine::DraftSpec> specs;
    for (int b = 0; b < batch; ++b) specs.push_back({ids[size_t(b)], next[size_t(b)], 0});
    ASSERT_TRUE((*e)->draft(specs, out).ok());
    const StreamGraphs::Stats s2 = dev->executor().graph_stats();
    if (round < warmup) continue;
    step_launches += s1.launches - s0.launches;
    step_made += s1.instantiations - s0.instantiations;
    draft_launches += s2.launches - s1.launches;
    draft_updates += s2.updates - s1.updates;
    draft_made += s2.instantiations - s1.instantiations;
  }
  std::printf("decode steps and drafts in turn, %d rounds after %d: drafts %lld graph launches, %lld updates, %lld "
              "instantiations; decode steps %lld graph launches, %lld instantiations\n",
              rounds - warmup, warmup, static_cast<long long>(draft_launches), static_cast<long long>(draft_updates),
              static_cast<long long>(draft_made), static_cast<long long>(step_launches),
              static_cast<long long>(step_made));
  EXPECT_GE(draft_launches, rounds - warmup) << "the drafts ran as graphs";
  EXPECT_LE(4 * draft_made, draft_launches) << "draft graphs instantiated anew in steady alternation";
  // Decode steps' stretches differ between steps (a compressor group completes every other
  // token): each stretch keeps an executable graph per shape (StreamGraphs::kShapes), so once both
  // shapes have run, decode steps update too (one graph per stretch and shape: 25 of 40
  // instantiated on the H200 before, session 15).
  EXPECT_LE(4 * step_made, step_launches) << "decode-step graphs instantiated anew in steady decoding";
}

// DSpark verify steps whose row counts change from step to step, as auto's k* makes them (each
// sequence its own k): three engines on dsv41-mini (DSpark on, rings fed) run the same steps —
// verify steps' graphs per sequence count (the default), per row count (session 15's keying) and
// no graphs for short steps (the reference) — each step followed by a rollback to the anchor row.
// Every logit equal bit for bit across the three (an update that left a stale grid or pointer
// would show); and with graphs per sequence count, steps of a row count not seen before update
// the graphs of earlier row counts instead of making them anew: warm-up steps of 6–8 rows, then
// 9, 10, …, 18 rows, each count once (per row count, every one of those steps makes all its graphs).
TEST(CudaBackend, VerifyStepsOfNewRowCountsUpdateGraphs) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = (*model)->vocab_size();
  const int batch = 3, warmup = 3;
  std::vector<int> totals = {6, 7, 8};  // rows of a step, all sequences: warm-up, then one step of each count
  for (int t = 9; t <= 18; ++t) totals.push_back(t);
  struct Run {
    const char* name;
    bool short_graphs, by_sequences;
    std::unique_ptr<Engine> e;
    DeviceBackend<CudaExec>* dev = nullptr;
    std::vector<SequenceId> ids;
    int64_t launches = 0, made = 0;  // graphs of the steps after the warm-up
  };
  Run runs[] = {{"per sequence count", true, true, nullptr, nullptr, {}, 0, 0},
                {"per row count", true, false, nullptr, nullptr, {}, 0, 0},
                {"no short-step graphs", false, true, nullptr, nullptr, {}, 0, 0}};
  for (Run& r : runs) {
    auto backend = fresh_cuda_backend(**model, [&](DeviceBackend<CudaExec>& b) {
      b.set_short_step_graphs(r.short_graphs);
      b.set_verify_graphs_by_sequences(r.by_sequences);
    });
    ASSERT_TRUE(backend);
    r.dev = dynamic_cast<DeviceBackend<CudaExec>*>(backend.get());
    EngineOptions eo;
    eo.dspark = true;
    eo.rollback_tokens = 8;
    auto e = Engine::create(std::move(backend), (*model)->engram_tables(), eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    r.e = std::move(*e);
    std::vector<Segment> segs;
    std::vector<std::vector<int32_t>> prompts(batch);
    for (int b = 0; b < batch; ++b) {
      for (int i = 0; i < 40 + 7 * b; ++i) prompts[size_t(b)].push_back(int32_t(5 + (11 * i + 29 * b) % 280));
      auto id = r.e->add_sequence(256);
      ASSERT_TRUE(id.ok());
      r.ids.push_back(*id);
      segs.push_back({*id, 0, prompts[size_t(b)], LogitRows::kNone, {}});
    }
    for (const SegmentResult& res : r.e->forward(segs)) ASSERT_TRUE(res.status.ok());
  }
  for (size_t step = 0; step < totals.size(); ++step) {
    std::vector<int> rows(batch, 2);  // ≥ 2 rows a sequence (1 would be a plain decode row)
    for (int extra = totals[step] - 2 * batch, b = 0; extra > 0; --extra, b = (b + 1) % batch) ++rows[size_t(b)];
    std::vector<std::vector<int32_t>> tok(batch);
    for (int b = 0; b < batch; ++b)
      for (int j = 0; j < rows[size_t(b)]; ++j) tok[size_t(b)].push_back(int32_t(9 + (17 * int(step) + 5 * b + 3 * j) % 270));
    std::vector<std::vector<float>> logits[3];
    for (int k = 0; k < 3; ++k) {
      Run& r = runs[k];
      std::vector<Segment> segs;
      for (int b = 0; b < batch; ++b)
        segs.push_back({r.ids[size_t(b)], *r.e->length(r.ids[size_t(b)]), tok[size_t(b)], LogitRows::kAll, {}});
      const StreamGraphs::Stats g0 = r.dev->executor().graph_stats();
      const std::vector<SegmentResult>& res = r.e->forward(segs);
      const StreamGraphs::Stats g1 = r.dev->executor().graph_stats();
      if (int(step) >= warmup) {
        r.launches += g1.launches - g0.launches;
        r.made += g1.instantiations - g0.instantiations;
      }
      for (int b = 0; b < batch; ++b) {
        ASSERT_TRUE(res[size_t(b)].status.ok()) << r.name;
        ASSERT_EQ(res[size_t(b)].logit_rows, rows[size_t(b)]);
        logits[k].emplace_back(res[size_t(b)].logits, res[size_t(b)].logits + rows[size_t(b)] * V);
      }
      for (int b = 0; b < batch; ++b) ASSERT_TRUE(r.e->rollback(r.ids[size_t(b)], rows[size_t(b)] - 1).ok());
      ASSERT_TRUE(cuda_backend_status(r.e->backend()).ok()) << r.name;
    }
    for (int k = 0; k < 2; ++k)
      for (int b = 0; b < batch; ++b) {
        int64_t differ = 0;
        for (size_t i = 0; i < logits[2][size_t(b)].size(); ++i)
          differ += std::memcmp(&logits[k][size_t(b)][i], &logits[2][size_t(b)][i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0) << runs[k].name << ", step " << step << " (" << totals[step] << " rows), sequence " << b;
      }
  }
  for (const Run& r : runs)
    std::printf("verify steps of new row counts, graphs %s: %lld graph launches, %lld made anew\n", r.name,
                static_cast<long long>(r.launches), static_cast<long long>(r.made));
  EXPECT_GT(runs[0].launches, 0) << "the verify steps ran as graphs";
  EXPECT_EQ(runs[1].made, runs[1].launches) << "per row count, a new count makes every graph of its step";
  EXPECT_LE(4 * runs[0].made, runs[0].launches) << "per sequence count, new row counts should update graphs";
}

// Diagnostics, not a check (run with --gtest_also_run_disabled_tests): what a plain decode step
// of 8 sequences costs on dsv41-mini with DSpark off, on with the rings fed (the target features
// captured, the rings fed after each forward) and on with the feeding paused (what `--dspark
// auto` does while it decodes plainly). The three engines step in turn, 5 rounds of 40 steps.
TEST(CudaBackend, DISABLED_PlainStepCostWithDspark) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int batch = 8, rounds = 5, steps = 40;
  struct Run {
    const char* name;
    std::unique_ptr<Engine> e;
    std::vector<SequenceId> ids;
    std::vector<int32_t> next;
    double ms = 0;
  };
  Run runs[3] = {{"off", nullptr, {}, {}, 0}, {"on, fed", nullptr, {}, {}, 0}, {"on, paused", nullptr, {}, {}, 0}};
  std::vector<int32_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(7 + 13 * i % 290);
  for (int k = 0; k < 3; ++k) {
    EngineOptions eo;
    eo.dspark = k > 0;
    eo.rollback_tokens = k > 0 ? 5 : 0;
    auto e = Engine::create(fresh_cuda_backend(**model), (*model)->engram_tables(), eo);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    runs[k].e = std::move(*e);
    std::vector<Segment> segs;
    for (int b = 0; b < batch; ++b) {
      auto id = runs[k].e->add_sequence(int64_t(prompt.size()) + rounds * steps + 8);
      ASSERT_TRUE(id.ok());
      runs[k].ids.push_back(*id);
      segs.push_back({*id, 0, prompt, LogitRows::kNone, {}});
    }
    for (const SegmentResult& r : runs[k].e->forward(segs)) ASSERT_TRUE(r.status.ok());
    runs[k].next.assign(batch, 11);
    if (k == 2) runs[k].e->set_draft_feeding(false);
  }
  for (int round = 0; round < rounds; ++round)
    for (Run& r : runs) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int t = 0; t < steps; ++t) {
        std::vector<Segment> segs;
        for (int b = 0; b < batch; ++b)
          segs.push_back({r.ids[size_t(b)], *r.e->length(r.ids[size_t(b)]),
                          std::span<const int32_t>(&r.next[size_t(b)], 1), LogitRows::kLast, {}});
        const std::vector<SegmentResult>& res = r.e->forward(segs);
        for (int b = 0; b < batch; ++b) {
          ASSERT_TRUE(res[size_t(b)].status.ok());
          r.next[size_t(b)] = argmax_logits(std::span<const float>(res[size_t(b)].logits, size_t((*model)->vocab_size())));
        }
      }
      if (round > 0) r.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
  for (const Run& r : runs)
    std::printf("plain decode step of %d sequences, DSpark %s: %.3f ms (%d steps after a warm-up round)\n", batch, r.name,
                r.ms / ((rounds - 1) * steps), (rounds - 1) * steps);
}

// Diagnostics, not a check (run with --gtest_also_run_disabled_tests): where a draft's time goes
// on dsv41-mini at batch 1 and 8 — wall ms of a draft with the graph and launch by launch, and
// the kernels' own device time (the executor's profile, launch by launch).
TEST(CudaBackend, DISABLED_DraftTimeBreakdown) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  for (int batch : {1, 8}) {
    DeviceBackend<CudaExec>* dev = nullptr;
    auto e = dspark_engine_on_cuda(**model, &dev);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    std::vector<int32_t> prompt(70);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(7 + 13 * i % 290);
    std::vector<Engine::DraftSpec> specs;
    std::vector<Segment> segs;
    for (int b = 0; b < batch; ++b) {
      auto id = (*e)->add_sequence(100);
      ASSERT_TRUE(id.ok());
      specs.push_back({*id, 11, 0});
      segs.push_back({*id, 0, prompt, LogitRows::kNone, {}});
    }
    for (const SegmentResult& r : (*e)->forward(segs)) ASSERT_TRUE(r.status.ok());
    std::vector<DraftBlock> out;
    DraftTiming split;  // the last wall()'s host and wait time a draft
    const auto wall = [&](bool graphs, int n) {
      dev->set_draft_graphs(graphs);
      for (int i = 0; i < 3; ++i) EXPECT_TRUE((*e)->draft(specs, out).ok());
      const DraftTiming t0 = dev->draft_timing();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < n; ++i) EXPECT_TRUE((*e)->draft(specs, out).ok());
      const DraftTiming t1 = dev->draft_timing();
      split = {n, (t1.host_ms - t0.host_ms) / n, (t1.wait_ms - t0.wait_ms) / n};
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / n;
    };
    // Session 17: a draft recorded into the executor's graphs at every draft against its kept graph
    // replayed as it is (set_draft_replay), in turn 3 times (the faster kept), with where the wall
    // time went: the host until the download (tables, launches or the replay) and the wait for it.
    {
      double best[2] = {1e30, 1e30};
      DraftTiming splits[2];
      for (int round = 0; round < 3; ++round)
        for (int replay = 0; replay < 2; ++replay) {
          dev->set_draft_replay(replay == 1);
          const double ms = wall(true, 50);
          if (ms < best[replay]) {
            best[replay] = ms;
            splits[replay] = split;
          }
        }
      dev->set_draft_replay(false);  // the measurements below: the recorded path, as before
      std::printf("batch %d: a draft recorded into graphs %.3f ms (host %.3f until the download, wait %.3f); replayed "
                  "from its kept graph %.3f ms (host %.3f, wait %.3f)\n",
                  batch, best[0], splits[0].host_ms, splits[0].wait_ms, best[1], splits[1].host_ms, splits[1].wait_ms);
    }
    // Session 18: the greedy slots in one launch and the attention's keys staged in shared memory,
    // off (session 17's kernels) against on, replayed from kept graphs, in turn 3 times (the faster kept).
    {
      const auto fewer = [&](bool on) {
        dev->set_draft_slots_one_launch(on);
        dev->set_draft_keys_in_shared(on);
      };
      dev->set_draft_replay(true);
      double best[2] = {1e30, 1e30};
      DraftTiming splits[2];
      for (int round = 0; round < 3; ++round)
        for (int on = 0; on < 2; ++on) {
          fewer(on == 1);
          const double ms = wall(true, 50);
          if (ms < best[on]) {
            best[on] = ms;
            splits[on] = split;
          }
        }
      dev->set_draft_replay(false);
      std::printf("batch %d: a replayed draft with session 17's slots and attention %.3f ms (wait %.3f); with the slots "
                  "in one launch and the keys in shared memory %.3f ms (wait %.3f)\n",
                  batch, best[0], splits[0].wait_ms, best[1], splits[1].wait_ms);
    }
    dev->set_draft_tail_on_device(false);
    const double host_tail = wall(true, 50);
    dev->set_draft_tail_on_device(true);
    // The drafter's stages with a launch per body (set_fused(false)) against the default, in turn
    // twice (the faster of each kept), with the launches a draft.
    double unfused = 1e30, with_graph = 1e30, unfused_launches = 0, fused_launches = 0;
    for (int round = 0; round < 2; ++round)
      for (bool fused : {false, true}) {
        dev->set_fused(fused);
        const int64_t before = dev->exec_counts().launches;
        const double ms = wall(true, 50);
        (fused ? fused_launches : unfused_launches) = double(dev->exec_counts().launches - before) / 53;
        double& best = fused ? with_graph : unfused;
        best = std::min(best, ms);
      }
    const double launches = wall(false, 50);
    const DraftTiming launch_split = split;
    std::printf("batch %d: launch by launch, host %.3f ms until the download, wait %.3f\n", batch, launch_split.host_ms,
                launch_split.wait_ms);
    // Each kernel's device time (the executor's profile, launch by launch), fused and unfused.
    struct Profile {
      std::vector<std::pair<double, std::string>> kernels;
      double device_ms = 0, wall_ms = 0;
      int64_t count = 0;
    };
    const int profiled = 10;
    const double per = 1.0 / (profiled + 3);  // the warm-ups are profiled too
    const auto profile = [&](bool fused) {
      const auto before = dev->executor().profile();
      dev->set_fused(fused);
      dev->executor().set_profiling(true);
      Profile p;
      p.wall_ms = wall(false, profiled);
      dev->executor().set_profiling(false);
      dev->set_fused(true);
      for (const auto& [name, t] : dev->executor().profile()) {
        const auto b = before.find(name);
        const double ms = t.ms - (b == before.end() ? 0.0 : b->second.ms);
        const int64_t n = t.launches - (b == before.end() ? 0 : b->second.launches);
        if (n == 0) continue;
        p.kernels.push_back({ms * per, name});
        p.device_ms += ms * per;
        p.count += n;
      }
      std::sort(p.kernels.rbegin(), p.kernels.rend());
      return p;
    };
    const Profile fused = profile(true), separate = profile(false);
    dev->set_draft_slots_one_launch(false);  // session 17's slots and attention, for their kernels' times
    dev->set_draft_keys_in_shared(false);
    const Profile before18 = profile(true);
    dev->set_draft_slots_one_launch(true);
    dev->set_draft_keys_in_shared(true);
    std::printf("batch %d: a draft %.3f ms with the graph (%.3f ms with the tail on the host; %.3f ms unfused, %.1f "
                "launches a draft against %.1f fused), %.3f ms launch by launch; profiled: %.1f launches, %.3f ms of "
                "kernels (%.3f ms wall while profiling); unfused %.1f launches, %.3f ms of kernels\n",
                batch, with_graph, host_tail, unfused, unfused_launches, fused_launches, launches,
                double(fused.count) * per, fused.device_ms, fused.wall_ms, double(separate.count) * per,
                separate.device_ms);
    std::printf("batch %d: with session 17's slots and attention %.1f launches, %.3f ms of kernels\n", batch,
                double(before18.count) * per, before18.device_ms);
    for (const Profile* p : {&fused, &separate, &before18}) {
      if (p == &separate) std::printf("batch %d unfused, its largest kernels:\n", batch);
      if (p == &before18) std::printf("batch %d with session 17's slots and attention, its largest kernels:\n", batch);
      for (size_t i = 0; i < std::min<size_t>(p->kernels.size(), 12); ++i)
        std::printf("  %.4f ms  %s\n", p->kernels[i].first, p->kernels[i].second.c_str());
    }
  }
}

// Diagnostics, not a check (run with --gtest_also_run_disabled_tests): where a verify step's time
// goes on dsv41-mini, against a plain step. A DSpark engine (features captured, drafter rings fed)
// at batch 1 and 8: plain decode steps (one row a sequence), and verify steps of 5 rows a sequence
// after a draft, each rolled back by 2 rows (3 of 5 kept) as the scheduler does. The verify
// step's forward (feeding and logits included) is timed on the old path (rebuilt mirrors, launched
// kernel by kernel), the new one (mirrors following rollbacks, graphs per row count), and the new
// one with the experts' down + expand chain up to 8 rows, in turn over 4 rounds (the median
// kept); with each step's launches and copies, then every kernel's device time for a plain and a
// verify step's forward (the executor's profile: each launch timed alone, no graphs).
// Session 32: also K = 5 verify steps (6 rows) keeping 3 rows every step, and keeping 1 … 6 rows in
// a fixed irregular cycle as real decoding does — the scheduler's traces timed a K = 5 verify
// forward at 1.83 ms on the H100 where this test's steady 5-row one took 1.53.
TEST(CudaBackend, DISABLED_VerifyStepBreakdown) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = (*model)->vocab_size();
  for (int batch : {1, 8}) {
    DeviceBackend<CudaExec>* dev = nullptr;
    auto e = dspark_engine_on_cuda(**model, &dev);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    std::vector<int32_t> prompt(70);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(7 + 13 * i % 290);
    std::vector<SequenceId> ids;
    std::vector<Segment> segs;
    for (int b = 0; b < batch; ++b) {
      auto id = (*e)->add_sequence(4096);
      ASSERT_TRUE(id.ok());
      ids.push_back(*id);
      segs.push_back({*id, 0, prompt, LogitRows::kNone, {}});
    }
    for (const SegmentResult& r : (*e)->forward(segs)) ASSERT_TRUE(r.status.ok());
    std::vector<int32_t> next(size_t(batch), 11);
    std::vector<DraftBlock> drafts;
    ExecCounts forward_counts;  // the forwards' launches and copies (the drafts' not)
    int64_t forward_updates = 0, forward_made = 0;
    // One step of every sequence: rows = 1 (plain, the argmax goes on) or more (after a draft: the
    // anchor and rows − 1 drafted tokens, all logits; all but `keep` rows rolled back after, 3 by
    // default, or a cycle of 1 … rows with vary_keep). Returns the forward's ms. profile: each
    // kernel of the forward (kForward) or of the draft (kDraft) timed alone.
    enum Profile { kNone, kForward, kDraft };
    int64_t cycle = 0;
    const auto step = [&](int rows, Profile profile = kNone, bool vary_keep = false) -> double {
      std::vector<std::vector<int32_t>> tok(static_cast<size_t>(batch));
      if (rows > 1) {
        std::vector<Engine::DraftSpec> specs;
        for (int b = 0; b < batch; ++b) specs.push_back({ids[size_t(b)], next[size_t(b)], rows - 1, false});
        if (profile == kDraft) dev->executor().set_profiling(true);
        EXPECT_TRUE((*e)->draft(specs, drafts).ok());
        if (profile == kDraft) dev->executor().set_profiling(false);
      }
      segs.clear();
      for (int b = 0; b < batch; ++b) {
        tok[size_t(b)].push_back(next[size_t(b)]);
        for (int i = 1; i < rows; ++i)
          tok[size_t(b)].push_back(i - 1 < int(drafts[size_t(b)].ids.size()) ? drafts[size_t(b)].ids[size_t(i - 1)] : 5);
        segs.push_back({ids[size_t(b)], *(*e)->length(ids[size_t(b)]), tok[size_t(b)],
                        rows > 1 ? LogitRows::kAll : LogitRows::kLast, {}});
      }
      if (profile == kForward) dev->executor().set_profiling(true);  // the forward's kernels only
      const ExecCounts c0 = dev->exec_counts();
      const StreamGraphs::Stats g0 = dev->executor().graph_stats();
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<SegmentResult>& res = (*e)->forward(segs);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (profile == kForward) dev->executor().set_profiling(false);
      const ExecCounts d = dev->exec_counts() - c0;
      forward_counts = {forward_counts.launches + d.launches, forward_counts.uploads + d.uploads,
                        forward_counts.downloads + d.downloads, forward_counts.copies + d.copies,
                        forward_counts.async_uploads + d.async_uploads, forward_counts.graph_launches + d.graph_launches};
      forward_updates += dev->executor().graph_stats().updates - g0.updates;
      forward_made += dev->executor().graph_stats().instantiations - g0.instantiations;
      for (int b = 0; b < batch; ++b) {
        EXPECT_TRUE(res[size_t(b)].status.ok());
        constexpr int kKeeps[] = {2, 1, 6, 3, 1, 4, 2, 5, 1, 3};  // an irregular cycle, as acceptance varies
        const int keep = rows == 1 ? 1 : vary_keep ? std::min(rows, kKeeps[cycle % 10]) : 3;  // the row giving the next token
        next[size_t(b)] = argmax_logits(std::span<const float>(res[size_t(b)].logits + (keep - 1) * V, size_t(V)));
        if (rows > 1 && rows > keep) EXPECT_TRUE((*e)->rollback(ids[size_t(b)], rows - keep).ok());
      }
      ++cycle;
      return ms;
    };
    struct Variant {
      const char* name;
      int rows;
      bool new_path;
      int64_t down_expand;
      bool publish = false;  // set_publish_with_feeding (session 17)
      bool vary_keep = false;  // keep 1 … rows rows in a cycle (session 32)
      std::vector<double> ms;
      ExecCounts counts;
      int64_t updates = 0, instantiations = 0;
    };
    Variant variants[] = {{"plain step (1 row a sequence)", 1, true, 4, false, false, {}, {}, 0, 0},
                          {"plain step, cache rows published with the feeding's", 1, true, 4, true, false, {}, {}, 0, 0},
                          {"verify step, old path", 5, false, 4, false, false, {}, {}, 0, 0},
                          {"verify step, new path", 5, true, 4, false, false, {}, {}, 0, 0},
                          {"verify step, new path, cache rows published with the feeding's", 5, true, 4, true, false, {}, {}, 0, 0},
                          {"verify step, new path, down+expand chain up to 8 rows", 5, true, 8, false, false, {}, {}, 0, 0},
                          {"K = 5 verify step (6 rows), 3 kept", 6, true, 4, false, false, {}, {}, 0, 0},
                          {"K = 5 verify step (6 rows), 1 … 6 kept in a cycle", 6, true, 4, false, true, {}, {}, 0, 0},
                          {"K = 5 verify step (6 rows), 1 … 6 kept, down+expand chain up to 6 rows", 6, true, 6, false,
                           true, {}, {}, 0, 0},
                          {"plain step, batch's down+expand chain up to 8 rows", 1, true, 8, false, false, {}, {}, 0, 0}};
    const int rounds = 4, steps = 24;
    for (int round = 0; round < rounds; ++round)
      for (Variant& v : variants) {
        dev->set_follow_rollbacks(v.new_path);
        dev->set_short_step_graphs(v.new_path);
        dev->set_down_expand_rows(v.down_expand);
        dev->set_publish_with_feeding(v.publish);
        for (int t = 0; t < 4; ++t) step(v.rows, kNone, v.vary_keep);  // settle (graphs made, mirrors in step)
        double total = 0;
        forward_counts = {};
        forward_updates = forward_made = 0;
        for (int t = 0; t < steps; ++t) total += step(v.rows, kNone, v.vary_keep);
        v.counts = forward_counts;
        v.updates = forward_updates;
        v.instantiations = forward_made;
        v.ms.push_back(total / steps);
      }
    dev->set_follow_rollbacks(true);
    dev->set_short_step_graphs(true);
    dev->set_down_expand_rows(4);
    dev->set_publish_with_feeding(false);
    for (Variant& v : variants) {
      std::sort(v.ms.begin(), v.ms.end());
      const ExecCounts& c = v.counts;
      std::printf("batch %d, %s: %.3f ms a forward (median of %d rounds of %d; rounds %.3f … %.3f); a forward: %.1f "
                  "launches, %.2f blocking uploads, %.2f downloads, %.2f async uploads, %.2f graphs (%.2f updated, "
                  "%.2f instantiated)\n",
                  batch, v.name, (v.ms[1] + v.ms[2]) / 2, rounds, steps, v.ms.front(), v.ms.back(),
                  double(c.launches) / steps, double(c.uploads) / steps, double(c.downloads) / steps,
                  double(c.async_uploads) / steps, double(c.graph_launches) / steps, double(v.updates) / steps,
                  double(v.instantiations) / steps);
    }
    // Each kernel's device time for a plain and a verify step (the new path), and for a K = 5
    // draft, 8 steps each.
    for (const auto& [rows, what] : {std::pair{1, kForward}, std::pair{6, kForward}, std::pair{6, kDraft}}) {
      for (int t = 0; t < 4; ++t) step(rows);
      const auto before = dev->executor().profile();
      const int profiled = 8;
      double wall = 0;
      for (int t = 0; t < profiled; ++t) wall += step(rows, what) / profiled;
      std::vector<std::pair<double, std::string>> kernels;
      double device_ms = 0;
      int64_t launches = 0;
      for (const auto& [name, t] : dev->executor().profile()) {
        const auto b = before.find(name);
        const double ms = (t.ms - (b == before.end() ? 0.0 : b->second.ms)) / profiled;
        const int64_t n = t.launches - (b == before.end() ? 0 : b->second.launches);
        if (n == 0) continue;
        kernels.push_back({ms, name + " ×" + std::to_string(n / profiled)});
        device_ms += ms;
        launches += n;
      }
      std::sort(kernels.rbegin(), kernels.rend());
      std::printf("batch %d, %d row(s) a sequence, profiled %s: %.1f launches, %.3f ms of kernels a step (%.3f "
                  "ms wall of the forward while profiling); the largest:\n",
                  batch, rows, what == kDraft ? "draft" : "forward", double(launches) / profiled, device_ms, wall);
      for (size_t i = 0; i < std::min<size_t>(kernels.size(), 40); ++i)
        std::printf("  %.4f ms  %s\n", kernels[i].first, kernels[i].second.c_str());
    }
  }
}

// A random FP8 / FP4 model uploaded as stored (backend_stored_check.h): against the CPU engine
// with the fast kernels; and, with them off, the widening's logits bit for bit.
TEST(CudaBackend, StoredFp8Fp4ModelMatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string config = model_dir("tiny-random", std::string(DSV41_SOURCE_DIR) + "/models/tiny-random") +
                             "/config.json";
  if (!std::filesystem::exists(config)) GTEST_SKIP() << config << " is absent";
  const auto bytes = [](const Backend& b) { return dynamic_cast<const DeviceBackend<CudaExec>&>(b).weight_bytes(); };
  for (bool fast : {true, false}) {
    ts::check_stored_model(
        config,
        [&](const Model& m) {
          return fresh_cuda_backend(m, [&](DeviceBackend<CudaExec>& b) { b.executor().set_fast_kernels(fast); });
        },
        bytes, !fast, fast ? "tiny-random (cuda)" : "tiny-random (cuda, simple kernels)");
  }
}

TEST(CudaBackend, GoldenTinyF32MatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(model_dir("v41-tiny-f32", std::string(DSV41_SOURCE_DIR) + "/../shared/golden/v41-tiny-f32"));
}

TEST(CudaBackend, GoldenTinyBf16MatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(model_dir("v41-tiny-bf16", std::string(DSV41_SOURCE_DIR) + "/../shared/golden/v41-tiny-bf16"));
}

}  // namespace
}  // namespace dsv41
