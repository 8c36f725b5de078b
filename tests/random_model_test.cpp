// A random-weight model whose shapes are unlike the fixtures' (hc_mult 3, 3-grams, 2 shared
// experts, odd widths, a ratio-2 and a ratio-1 kv source, Engram on two layers): one prefill,
// odd-sized chunked prefill and prefill + token-by-token decode must agree; nothing may depend
// on the fixtures' shapes (issue 3 acceptance).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"
#include "runtime/sampling.h"
#include "runtime/session.h"

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

}  // namespace
}  // namespace dsv41
