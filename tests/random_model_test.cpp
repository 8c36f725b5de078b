// A random-weight model whose shapes are unlike the fixtures' (hc_mult 3, 3-grams, 2 shared
// experts, odd widths, a ratio-2 and a ratio-1 kv source, Engram on two layers): one prefill,
// odd-sized chunked prefill and prefill + token-by-token decode must agree; nothing may depend
// on the fixtures' shapes (issue 3 acceptance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <unistd.h>

#include <filesystem>

#include "base/thread_pool.h"
#include "kernels/cpu/dispatch.h"
#include "model/model.h"
#include "model/random_init.h"
#include "runtime/sampling.h"
#include "runtime/session.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

ModelConfig odd_config() {
  ModelConfig c;
  c.source = "random-test-config";
  c.vocab_size = 97;
  c.hidden_size = 40;
  c.num_hidden_layers = 7;
  c.num_attention_heads = 2;
  c.head_dim = 32;
  c.qk_rope_head_dim = 8;
  c.q_lora_rank = 24;
  c.o_groups = 2;
  c.o_lora_rank = 16;
  c.sliding_window = 5;
  c.compress_ratios = {0, 2, 2, 1, 1, 1, 1};
  c.kv_source_layer_ids = {1, 3};
  c.index_source_layer_ids = {1, 3, 5};
  c.candidate_source_layer_id = 3;
  c.candidate_block_size = 2;
  c.candidate_topk_blocks = 2;
  c.index_n_heads = 3;
  c.index_head_dim = 32;
  c.index_topk = 3;
  c.n_routed_experts = 5;
  c.num_experts_per_tok = 3;
  c.n_shared_experts = 2;
  c.moe_intermediate_size = 12;
  c.hc_mult = 3;
  c.hc_sinkhorn_iters = 7;
  c.engram_layer_ids = {2, 4};
  c.engram_max_ngram_size = 3;
  c.engram_n_heads = 2;
  c.engram_head_dim = 32;
  c.engram_vocab_size = 100;
  c.engram_compressed_vocab_size = 50;
  c.engram_pad_id = 2;
  c.num_nextn_predict_layers = 0;
  c.dspark_target_layer_ids = {};
  return c;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST(RandomModel, ChunkedAndIncrementalMatchOnePrefill) {
  auto model = Model::create_random(odd_config(), 11);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = (*model)->vocab_size();
  std::mt19937 rng(5);
  std::vector<int32_t> ids(37);
  for (auto& t : ids) t = rng() % V;
  const int64_t T = ids.size();
  std::vector<float> full;
  auto one = Session::create(**model, T);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_TRUE((*one)->prefill(ids, 0, &full).ok());
  for (float v : full) ASSERT_TRUE(std::isfinite(v));
  for (int64_t chunk : {int64_t{3}, int64_t{5}, int64_t{1}}) {
    std::vector<float> part;
    auto s = Session::create(**model, T);
    ASSERT_TRUE((*s)->prefill(ids, chunk, &part).ok());
    EXPECT_LE(max_abs_diff(part, full), 1e-4) << "chunk " << chunk;
  }
  auto inc = Session::create(**model, T);
  const int64_t K = 11;
  std::vector<float> got;
  ASSERT_TRUE((*inc)->prefill(std::span<const int32_t>(ids.data(), K), 0, &got).ok());
  for (int64_t t = K; t < T; ++t) {
    auto l = (*inc)->decode(ids[t]);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    got.insert(got.end(), l->begin(), l->end());
  }
  EXPECT_LE(max_abs_diff(got, full), 1e-4);
  EXPECT_GT((*inc)->cache_bytes().global(), 0);
}

TEST(RandomModel, FixtureShapesAreNotAssumed) {
  ModelConfig c = odd_config();
  c.engram_compressed_vocab_size = 200;  // more than vocab_size: the random map cannot exist
  EXPECT_FALSE(Model::create_random(c, 1).ok());
}

// The mHC, Engram and compressor fast paths against their scalar references through a whole
// model of odd shapes (hc 3, hidden 43, ratio-2 pending groups, two Engram layers), prefill and decode: the logits agree to float rounding. Each block is checked much
// more tightly on its own (mhc_test, engram_test, compressor_test); through 7 layers of random
// weights the block differences (≈1e-6 relative) reach ≈3e-6 on unit-scale logits, and the
// bound 1e-4 is the one the chunked-prefill checks above use.
TEST(RandomModel, FastBlocksMatchTheirScalarReferences) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  ModelConfig c = odd_config();
  c.hidden_size = 43;  // not a multiple of 8: the vector loops' tails run
  auto model = Model::create_random(c, 11);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::mt19937 rng(8);
  std::vector<int32_t> ids(29);
  for (auto& t : ids) t = rng() % (*model)->vocab_size();
  const int64_t T = ids.size(), K = 20;
  auto run = [&](bool scalar) {
    set_force_scalar(scalar);
    std::vector<float> logits;
    auto s = Session::create(**model, T);
    EXPECT_TRUE((*s)->prefill(std::span<const int32_t>(ids.data(), K), 5, &logits).ok());
    for (int64_t t = K; t < T; ++t) {
      auto l = (*s)->decode(ids[t]);
      EXPECT_TRUE(l.ok()) << l.status().to_string();
      if (l.ok()) logits.insert(logits.end(), l->begin(), l->end());
    }
    set_force_scalar(false);
    return logits;
  };
  const std::vector<float> ref = run(true), fast = run(false);
  ASSERT_EQ(ref.size(), fast.size());
  EXPECT_FALSE(ref == fast) << "the scalar switch changed nothing: is the reference really running?";
  EXPECT_LE(max_abs_diff(ref, fast), 1e-4);
}

// The whole forward pass (GEMMs, attention core, and the blocks' fast paths, all on the one
// thread pool) gives the same bits with 1, 3 or the machine's number of threads: every work item's
// arithmetic is fixed, only who runs it changes. Long enough (T = 600: ≥ 64K units of work per
// loop, see dispatch.h parallel_items) that the blocks' token loops split over the pool too.
TEST(RandomModel, ThreadCountDoesNotChangeTheBits) {
  ModelConfig c = odd_config();
  c.hidden_size = 43;
  auto model = Model::create_random(c, 12);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::mt19937 rng(9);
  std::vector<int32_t> ids(600);
  for (auto& t : ids) t = rng() % (*model)->vocab_size();
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> logits;
    auto s = Session::create(**model, ids.size() + 1);
    EXPECT_TRUE((*s)->prefill(ids, 0, &logits).ok());
    auto l = (*s)->decode(ids[0]);
    EXPECT_TRUE(l.ok());
    if (l.ok()) logits.insert(logits.end(), l->begin(), l->end());
    return logits;
  };
  const std::vector<float> one = run(1), three = run(3), all = run(0);
  set_num_threads(0);
  ASSERT_EQ(one.size(), three.size());
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(one.data(), all.data(), one.size() * sizeof(float)), 0);
}

// Engram rows gathered from the mapped checkpoint (the default) against the whole table widened
// at load: the same logits, bit for bit, on both block paths.
void expect_gathered_equals_widened(const std::string& dir) {
  auto gathered = Model::load(dir);
  ModelLoadOptions widen;
  widen.widen_engram_tables = true;
  auto widened = Model::load(dir, widen);
  ASSERT_TRUE(gathered.ok()) << gathered.status().to_string();
  ASSERT_TRUE(widened.ok()) << widened.status().to_string();
  ASSERT_FALSE((*gathered)->config().engram_layer_ids.empty()) << dir;
  std::mt19937 rng(3);
  std::vector<int32_t> ids(19);
  for (auto& t : ids) t = rng() % (*gathered)->vocab_size();
  for (bool scalar : {false, true}) {
    if (scalar && !cpu_has_avx2_fma()) continue;
    set_force_scalar(scalar);
    std::vector<float> a, b;
    auto sa = Session::create(**gathered, ids.size());
    auto sb = Session::create(**widened, ids.size());
    ASSERT_TRUE(sa.ok() && sb.ok());
    const bool ok = (*sa)->prefill(ids, 0, &a).ok() && (*sb)->prefill(ids, 0, &b).ok();
    set_force_scalar(false);
    ASSERT_TRUE(ok) << dir;
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << dir << (scalar ? " scalar" : " fast");
  }
}

// The shipped tiny config written by init-random: FP8 E4M3 tables with row-wise UE8M0 scales, as
// in the release.
TEST(RandomModel, EngramRowsFromTheCheckpointEqualTheWidenedTable) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "dsv41_gather_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  struct Cleanup {
    std::string d;
    ~Cleanup() { fs::remove_all(d); }
  } cleanup{dir};
  auto written = write_random_model(std::string(DSV41_SOURCE_DIR) + "/models/tiny-random/config.json", dir + "/m", {});
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  expect_gathered_equals_widened(dir + "/m");
}

// The golden fixtures under both naming schemes (F32 / BF16 tables with a float scale of ones).
TEST(RandomModel, EngramRowsFromTheGoldenCheckpointsEqualTheWidenedTable) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string golden = DSV41_GOLDEN_DIR;
  for (const std::string& d : {golden + "/v41-tiny-f32", golden + "/v41-tiny-f32/official", golden + "/v41-tiny-bf16"})
    expect_gathered_equals_widened(d);
}

}  // namespace
}  // namespace dsv41
