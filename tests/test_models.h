// A small random-weight model for engine, scheduler and CLI tests: a ratio-2 and a ratio-1 kv
// source, a Reindex layer restricted to the candidate pool, Engram, window 5 (tests use pages of
// 2 records so that prompts cross compressor groups, windows and pages often).
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/model.h"

namespace dsv41::testing {

inline ModelConfig engine_test_config() {

  ModelConfig c;
  c.source = "engine-test-config";
  c.vocab_size = 89;
  c.hidden_size = 32;
  c.num_hidden_layers = 6;
  c.num_attention_heads = 2;
  c.head_dim = 32;
  c.qk_rope_head_dim = 8;
  c.q_lora_rank = 16;
  c.o_groups = 2;
  c.o_lora_rank = 8;
  c.sliding_window = 5;
  c.compress_ratios = {0, 2, 2, 1, 1, 1};
  c.kv_source_layer_ids = {1, 3};
  c.index_source_layer_ids = {1, 3, 5};
  c.candidate_source_layer_id = 3;
  c.candidate_block_size = 2;
  c.candidate_topk_blocks = 2;
  c.index_n_heads = 2;
  c.index_head_dim = 32;
  c.index_topk = 3;
  c.n_routed_experts = 4;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.moe_intermediate_size = 8;
  c.hc_mult = 2;
  c.hc_sinkhorn_iters = 5;
  c.engram_layer_ids = {2};
  c.engram_max_ngram_size = 3;
  c.engram_n_heads = 2;
  c.engram_head_dim = 32;
  c.engram_vocab_size = 90;
  c.engram_compressed_vocab_size = 40;
  c.engram_pad_id = 2;
  c.num_nextn_predict_layers = 0;
  c.dspark_target_layer_ids = {};
  return c;
}

// engine_test_config with a wider indexer, 16 heads × 64: the CUDA backend's integer index kernel
// takes multiples of 16 heads and of 32 channels, engine_test_config's 2 × 32 is under it.
inline ModelConfig wide_index_test_config() {
  ModelConfig c = engine_test_config();
  c.source = "wide-index-test-config";
  c.index_n_heads = 16;
  c.index_head_dim = 64;
  return c;
}

// One model per process (read-only, shared by the tests).
inline const Model& engine_test_model() {
  static std::unique_ptr<Model> model = [] {
    auto m = Model::create_random(engine_test_config(), 21);
    return m.ok() ? std::move(*m) : nullptr;
  }();
  return *model;
}

// An engine over engine_test_model() with pages of `rows_per_page` records (null on failure).
inline std::unique_ptr<Engine> make_test_engine(int64_t rows_per_page = 2) {
  const Model& m = engine_test_model();
  EngineOptions o;
  o.rows_per_page = rows_per_page;
  auto e = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), o);
  return e.ok() ? std::move(*e) : nullptr;
}

// n pseudo-random token ids of the test model's vocabulary (89), from `seed`.
inline std::vector<int32_t> test_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 89);
  return t;
}

}  // namespace dsv41::testing
