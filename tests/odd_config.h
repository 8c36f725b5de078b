// Test-only: a model config whose shapes are unlike the fixtures' (hc_mult 3, 3-grams, 2 shared
// experts, odd widths, a ratio-2 and a ratio-1 kv source, Engram on two layers), for random-weight
// models (Model::create_random) in random_model_test and two_engines_test.
#pragma once

#include "format/config.h"

namespace dsv41 {

inline ModelConfig odd_config() {
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

}  // namespace dsv41
