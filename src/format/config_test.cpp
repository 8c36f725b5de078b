// Tests for config.json parsing: the golden flat and composite configs, the shipped Flash config,
// defaults, both spellings, and one error per validation rule (each must name its key).
#include "format/config.h"
#include "plan/layer_plan.h"

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/golden_file.h"

namespace dsv41 {
namespace {

using json = nlohmann::json;

const std::string kGolden = DSV41_GOLDEN_DIR;
const std::string kFlashConfig = std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4.1-flash.json";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json read_json(const std::string& path) { return json::parse(read_text(path)); }

Result<ModelConfig> parse(const json& j) { return parse_model_config(j.dump(), "test.json"); }

// The same values read from different files: compare without the provenance fields.
ModelConfig values_only(ModelConfig c) {
  c.model_type.clear();
  c.source.clear();
  return c;
}

TEST(ConfigTest, TinyFlatAndCompositeParseToTheSameValues) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* fixture : {"v41-tiny-f32", "v41-tiny-bf16"}) {
    SCOPED_TRACE(fixture);
    auto flat = load_model_config(kGolden + "/" + fixture);
    auto official = load_model_config(kGolden + "/" + fixture + "/official/config.json");
    ASSERT_TRUE(flat.ok()) << flat.status().to_string();
    ASSERT_TRUE(official.ok()) << official.status().to_string();
    EXPECT_EQ(flat->model_type, "deepseek_v41_text");
    EXPECT_EQ(official->model_type, "deepseek_v41");
    EXPECT_EQ(flat->source, kGolden + "/" + fixture + "/config.json");
    EXPECT_TRUE(values_only(*flat) == values_only(*official));
  }
}

TEST(ConfigTest, TinyValuesMatchTheGoldenReadme) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto c = load_model_config(kGolden + "/v41-tiny-f32");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->vocab_size, 643);
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->num_hidden_layers, 12);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->qk_rope_head_dim, 16);
  EXPECT_EQ(c->q_lora_rank, 32);
  EXPECT_EQ(c->o_groups, 2);
  EXPECT_EQ(c->o_lora_rank, 32);
  EXPECT_EQ(c->sliding_window, 8);
  EXPECT_EQ(c->compress_ratios, (std::vector<int>{0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(c->kv_source_layer_ids, (std::vector<int>{2, 4, 6}));
  EXPECT_EQ(c->index_source_layer_ids, (std::vector<int>{2, 4, 6, 8, 10}));
  EXPECT_EQ(c->candidate_source_layer_id, 6);
  EXPECT_EQ(c->candidate_block_size, 2);
  EXPECT_EQ(c->candidate_topk_blocks, 3);
  EXPECT_EQ(c->index_n_heads, 8);
  EXPECT_EQ(c->index_head_dim, 32);
  EXPECT_EQ(c->index_topk, 4);
  EXPECT_EQ(c->n_routed_experts, 8);
  EXPECT_EQ(c->num_experts_per_tok, 2);
  EXPECT_EQ(c->n_shared_experts, 1);
  EXPECT_EQ(c->moe_intermediate_size, 32);
  EXPECT_EQ(c->swiglu_limit, 10.0);
  EXPECT_EQ(c->hc_mult, 4);
  EXPECT_EQ(c->hc_sinkhorn_iters, 20);
  EXPECT_EQ(c->rms_norm_eps, 1e-20);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->compress_rope_theta, 160000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_EQ(c->rope_scaling->factor, 16.0);
  EXPECT_EQ(c->rope_scaling->beta_fast, 32.0);
  EXPECT_EQ(c->rope_scaling->beta_slow, 1.0);
  EXPECT_EQ(c->rope_scaling->original_max_position_embeddings, 65536);
  EXPECT_EQ(c->engram_layer_ids, (std::vector<int>{1, 4}));
  EXPECT_EQ(c->engram_num_embeddings, (std::vector<int64_t>{3376, 4284}));
  EXPECT_EQ(c->engram_vocab_size, 250);
  EXPECT_EQ(c->engram_n_heads, 4);
  EXPECT_EQ(c->engram_head_dim, 32);
  EXPECT_EQ(c->engram_compressed_vocab_size, 551);
  EXPECT_EQ(c->engram_pad_id, 2);
  EXPECT_EQ(c->num_nextn_predict_layers, 0);
  EXPECT_EQ(c->gate_temp, 1.0);
  EXPECT_EQ(c->dtype, "float32");
  EXPECT_EQ(c->image_token_id, 129264);  // flat config: the default; composite: its top-level key
  EXPECT_FALSE(c->quantization.has_value());
  EXPECT_FALSE(c->vision.has_value());

  auto bf16 = load_model_config(kGolden + "/v41-tiny-bf16/official");
  ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
  EXPECT_EQ(bf16->dtype, "bfloat16");  // from the top level; text_config says null
}

TEST(ConfigTest, FlashConfigHasTheSpecValues) {
  auto c = load_model_config(kFlashConfig);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model_type, "deepseek_v41");
  EXPECT_EQ(c->dtype, "bfloat16");
  EXPECT_EQ(c->bos_token_id, 0);
  EXPECT_EQ(c->eos_token_id, 1);
  EXPECT_EQ(c->pad_token_id, 2);
  EXPECT_EQ(c->image_token_id, 129264);
  EXPECT_EQ(c->vocab_size, 129280);
  EXPECT_EQ(c->hidden_size, 5120);
  EXPECT_EQ(c->num_hidden_layers, 40);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->num_key_value_heads, 1);
  EXPECT_EQ(c->head_dim, 512);
  EXPECT_EQ(c->qk_rope_head_dim, 64);
  EXPECT_EQ(c->q_lora_rank, 1280);
  EXPECT_EQ(c->o_lora_rank, 1024);
  EXPECT_EQ(c->o_groups, 8);
  EXPECT_EQ(c->hidden_act, "silu");
  EXPECT_EQ(c->swiglu_limit, 10.0);
  EXPECT_EQ(c->rms_norm_eps, 1e-20);
  EXPECT_EQ(c->max_position_embeddings, 1048576);
  EXPECT_EQ(c->rope_theta, 10000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_EQ(*c->rope_scaling, (YarnScaling{16.0, 32.0, 1.0, 65536}));
  EXPECT_EQ(c->compress_rope_theta, 160000.0);
  EXPECT_EQ(c->n_routed_experts, 384);
  EXPECT_EQ(c->n_shared_experts, 1);
  EXPECT_EQ(c->num_experts_per_tok, 6);
  EXPECT_EQ(c->moe_intermediate_size, 2304);
  EXPECT_EQ(c->scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c->topk_method, "noaux_tc");
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->routed_scaling_factor, 1.5);
  EXPECT_EQ(c->sliding_window, 128);
  std::vector<int> ratios = {0, 0};
  ratios.insert(ratios.end(), 18, 2);
  ratios.insert(ratios.end(), 20, 1);
  ratios.insert(ratios.end(), 3, 0);
  EXPECT_EQ(c->compress_ratios, ratios);
  EXPECT_EQ(c->kv_source_layer_ids, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c->index_source_layer_ids, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c->index_n_heads, 32);
  EXPECT_EQ(c->index_head_dim, 128);
  EXPECT_EQ(c->index_topk, 512);
  EXPECT_EQ(c->candidate_source_layer_id, 20);
  EXPECT_EQ(c->candidate_topk_blocks, 2048);
  EXPECT_EQ(c->candidate_block_size, 8);
  EXPECT_EQ(c->hc_mult, 4);
  EXPECT_EQ(c->hc_sinkhorn_iters, 20);
  EXPECT_EQ(c->hc_eps, 1e-6);
  EXPECT_EQ(c->engram_layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(c->engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c->engram_max_ngram_size, 4);
  EXPECT_EQ(c->engram_vocab_size, 16000000);
  EXPECT_EQ(c->engram_n_heads, 8);
  EXPECT_EQ(c->engram_head_dim, 256);
  EXPECT_EQ(c->engram_pad_id, 2);
  EXPECT_EQ(c->engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c->num_nextn_predict_layers, 3);
  EXPECT_EQ(c->dspark_block_size, 5);
  EXPECT_EQ(c->dspark_noise_token_id, 128799);
  EXPECT_EQ(c->dspark_target_layer_ids, (std::vector<int>{37, 38, 39}));
  EXPECT_EQ(c->dspark_markov_rank, 256);
  EXPECT_EQ(c->dspark_n_routed_experts, 128);
  EXPECT_EQ(c->dspark_num_experts_per_tok, 3);

  ASSERT_TRUE(c->quantization.has_value());
  EXPECT_EQ(c->quantization->quant_method, "fp8");
  EXPECT_EQ(c->quantization->activation_scheme, "dynamic");
  EXPECT_EQ(c->quantization->scale_fmt, "ue8m0");
  EXPECT_EQ(c->quantization->expert_dtype, "fp4");
  EXPECT_EQ(c->quantization->weight_block_rows, 32);
  EXPECT_EQ(c->quantization->weight_block_cols, 32);

  ASSERT_TRUE(c->vision.has_value());
  EXPECT_EQ(c->vision->num_hidden_layers, 32);
  EXPECT_EQ(c->vision->hidden_size, 1024);
  EXPECT_EQ(c->vision->num_attention_heads, 16);
  EXPECT_EQ(c->vision->intermediate_size, 2816);
  EXPECT_EQ(c->vision->patch_size, 14);
  EXPECT_EQ(c->vision->rope_theta, 10000.0);
  EXPECT_EQ(c->vision->downsample_ratio, 3);
  EXPECT_EQ(c->vision->max_image_tokens, 1024);
  EXPECT_EQ(c->vision->min_pixels, 295936);
  EXPECT_FALSE(c->vision->max_wh_ratio.has_value());
}

// Missing keys take the Flash defaults: the default ModelConfig is the Flash text config, except
// rope_scaling, whose absence means "no YaRN" (model.md §9.1).
TEST(ConfigTest, DefaultsAreTheFlashTextConfig) {
  auto flash = load_model_config(kFlashConfig);
  ASSERT_TRUE(flash.ok()) << flash.status().to_string();
  ModelConfig text = values_only(*flash);
  text.quantization.reset();
  text.vision.reset();
  ASSERT_TRUE(text.rope_scaling.has_value());
  EXPECT_TRUE(*text.rope_scaling == YarnScaling{});
  text.rope_scaling.reset();
  EXPECT_TRUE(text == values_only(ModelConfig{}));

  auto flat = parse(json{{"model_type", "deepseek_v41_text"}});
  ASSERT_TRUE(flat.ok()) << flat.status().to_string();
  EXPECT_TRUE(values_only(*flat) == values_only(ModelConfig{}));
  EXPECT_FALSE(flat->quantization.has_value());

  auto composite = parse(json{{"model_type", "deepseek_v41"}, {"text_config", nullptr}});
  ASSERT_TRUE(composite.ok()) << composite.status().to_string();
  EXPECT_TRUE(values_only(*composite) == values_only(ModelConfig{}));
  EXPECT_FALSE(composite->vision.has_value());

  // An empty vision_config object is the release's tower.
  auto vision = parse(json{{"model_type", "deepseek_v41"}, {"vision_config", json::object()}});
  ASSERT_TRUE(vision.ok()) << vision.status().to_string();
  ASSERT_TRUE(vision->vision.has_value());
  EXPECT_TRUE(*vision->vision == VisionConfig{});
}

TEST(ConfigTest, AcceptsBothEngramPadSpellings) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  json j = read_json(kGolden + "/v41-tiny-f32/config.json");
  j.erase("engram_pad_id");
  j["engram_pad_token_id"] = 7;
  auto c = parse(j);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->engram_pad_id, 7);

  j["engram_pad_id"] = 7;  // both, agreeing
  ASSERT_TRUE(parse(j).ok());
  j["engram_pad_id"] = 3;  // both, disagreeing
  auto bad = parse(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("engram_pad_id"), std::string::npos);
  EXPECT_NE(bad.status().message().find("engram_pad_token_id"), std::string::npos);

  j.erase("engram_pad_id");
  j.erase("engram_pad_token_id");
  j["torch_dtype"] = "bfloat16";  // the older spelling of dtype, disagreeing
  EXPECT_FALSE(parse(j).ok());
  j.erase("dtype");
  auto older = parse(j);
  ASSERT_TRUE(older.ok()) << older.status().to_string();
  EXPECT_EQ(older->dtype, "bfloat16");
}

TEST(ConfigTest, RopeScalingAndRopeParameters) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  json j = read_json(kGolden + "/v41-tiny-f32/config.json");
  // rope_parameters alone carries the same information.
  json k = j;
  k.erase("rope_scaling");
  k.erase("rope_theta");
  k.erase("compress_rope_theta");
  auto from_params = parse(k);
  ASSERT_TRUE(from_params.ok()) << from_params.status().to_string();
  EXPECT_TRUE(values_only(*from_params) == values_only(*parse(j)));

  // Neither: no YaRN.
  k.erase("rope_parameters");
  auto plain = parse(k);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_FALSE(plain->rope_scaling.has_value());
  k["rope_scaling"] = nullptr;
  ASSERT_TRUE(parse(k).ok());
  EXPECT_FALSE(parse(k)->rope_scaling.has_value());

  // V4's spelling "type".
  k["rope_scaling"] = {{"type", "yarn"}, {"factor", 4}, {"beta_fast", 32}, {"beta_slow", 1},
                       {"original_max_position_embeddings", 4096}};
  auto v4 = parse(k);
  ASSERT_TRUE(v4.ok()) << v4.status().to_string();
  EXPECT_EQ(*v4->rope_scaling, (YarnScaling{4.0, 32.0, 1.0, 4096}));

  struct Case {
    const char* pointer;
    json value;
    const char* key;
  } cases[] = {
      {"/rope_parameters/main/rope_theta", 5000.0, "rope_parameters.main.rope_theta"},
      {"/rope_parameters/compress/rope_theta", 5000.0, "rope_parameters.compress.rope_theta"},
      {"/rope_parameters/compress/factor", 8.0, "rope_parameters.compress"},
      {"/rope_parameters/main/partial_rotary_factor", 0.5, "rope_parameters.main.partial_rotary_factor"},
      {"/rope_parameters/main/rope_type", "yarn", "rope_parameters.main.rope_type"},
      {"/rope_parameters/compress/attention_factor", 0.7, "rope_parameters.compress.attention_factor"},
      {"/rope_scaling/rope_type", "linear", "rope_scaling.rope_type"},
      {"/rope_scaling/factor", -2.0, "rope_scaling.factor"},
      {"/rope_scaling/beta_fast", "32", "rope_scaling.beta_fast"},
      {"/rope_scaling/attention_factor", 0.5, "rope_scaling.attention_factor"},
      {"/rope_scaling", 16, "rope_scaling"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    json m = j;
    m[json::json_pointer(c.pointer)] = c.value;
    auto r = parse(m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.key), std::string::npos) << r.status().message();
  }
}

// Every rule: a mutation of the tiny flat config and the key its error must name.
TEST(ConfigTest, InvalidValuesNameTheirKey) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  json base = read_json(kGolden + "/v41-tiny-f32/config.json");
  base.erase("rope_parameters");  // keep its cross-checks out of the way of the size rules
  ASSERT_TRUE(parse(base).ok());
  struct Case {
    const char* key;
    json value;
    const char* expect;  // key (and problem) the message must contain
  } cases[] = {
      // wrong JSON types
      {"hidden_size", "64", "hidden_size: expected an integer, got a string"},
      {"hidden_size", 64.5, "hidden_size: expected an integer, got a number"},
      {"hidden_size", nullptr, "hidden_size: expected an integer, got null"},
      {"hidden_size", 99999999999LL, "hidden_size: integer 99999999999 out of range"},
      {"vocab_size", 18446744073709551615ULL, "vocab_size: integer 18446744073709551615 out of range"},
      {"norm_topk_prob", 1, "norm_topk_prob: expected a boolean"},
      {"rms_norm_eps", "tiny", "rms_norm_eps: expected a number"},
      {"scoring_func", 3, "scoring_func: expected a string"},
      {"compress_ratios", "0,0,2", "compress_ratios: expected an array"},
      {"compress_ratios", json::array({0, "x"}), "compress_ratios[1]: expected an integer"},
      {"kv_source_layer_ids", json::object(), "kv_source_layer_ids: expected an array"},
      {"engram_num_embeddings", json::array({3376, 4284.5}), "engram_num_embeddings[1]"},
      {"engram_pad_id", nullptr, "engram_pad_id: expected an integer, got null"},
      // non-positive sizes
      {"hidden_size", 0, "hidden_size: must be positive"},
      {"vocab_size", -5, "vocab_size: must be positive"},
      {"num_hidden_layers", 0, "num_hidden_layers: must be positive"},
      {"num_attention_heads", -4, "num_attention_heads: must be positive"},
      {"q_lora_rank", 0, "q_lora_rank: must be positive"},
      {"o_lora_rank", 0, "o_lora_rank: must be positive"},
      {"o_groups", 0, "o_groups: must be positive"},
      {"moe_intermediate_size", 0, "moe_intermediate_size: must be positive"},
      {"n_routed_experts", 0, "n_routed_experts: must be positive"},
      {"num_experts_per_tok", 0, "num_experts_per_tok: must be positive"},
      {"sliding_window", 0, "sliding_window: must be positive"},
      {"index_n_heads", 0, "index_n_heads: must be positive"},
      {"index_topk", 0, "index_topk: must be positive"},
      {"candidate_block_size", 0, "candidate_block_size: must be positive"},
      {"candidate_topk_blocks", -1, "candidate_topk_blocks: must be positive"},
      {"hc_mult", 0, "hc_mult: must be positive"},
      {"hc_sinkhorn_iters", 0, "hc_sinkhorn_iters: must be positive"},
      {"hc_eps", 0.0, "hc_eps: must be positive"},
      {"rms_norm_eps", -1e-6, "rms_norm_eps: must be positive"},
      {"rope_theta", 0.0, "rope_theta: must be positive"},
      {"compress_rope_theta", -1.0, "compress_rope_theta: must be positive"},
      {"routed_scaling_factor", 0.0, "routed_scaling_factor: must be positive"},
      {"gate_temp", 0.0, "gate_temp: must be positive"},
      {"swiglu_limit", 0.0, "swiglu_limit: must be positive"},
      {"max_position_embeddings", 0, "max_position_embeddings: must be positive"},
      {"engram_n_heads", 0, "engram_n_heads: must be positive"},
      {"engram_head_dim", 0, "engram_head_dim: must be positive"},
      {"engram_vocab_size", 0, "engram_vocab_size: must be positive"},
      {"engram_compressed_vocab_size", 0, "engram_compressed_vocab_size: must be positive"},
      {"engram_max_ngram_size", 1, "engram_max_ngram_size: must be at least 2"},
      {"num_nextn_predict_layers", -1, "num_nextn_predict_layers: must not be negative"},
      // divisibility and geometry
      {"head_dim", 48, "head_dim: 48 is not a multiple of 32"},
      {"index_head_dim", 48, "index_head_dim: 48 is not a multiple of 32"},
      {"qk_rope_head_dim", 15, "qk_rope_head_dim: 15 is odd"},
      {"qk_rope_head_dim", 0, "qk_rope_head_dim: must be positive"},
      {"qk_rope_head_dim", 96, "qk_rope_head_dim: 96 exceeds head_dim 64"},
      {"qk_rope_head_dim", 48, "qk_rope_head_dim: 48 exceeds index_head_dim 32"},
      {"num_attention_heads", 3, "o_groups: num_attention_heads 3 is not divisible by o_groups 2"},
      {"num_experts_per_tok", 9, "num_experts_per_tok: 9 exceeds n_routed_experts 8"},
      // schedule lists
      {"compress_ratios", json::array({0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1}), "compress_ratios: has 11 entries, fewer"},
      {"compress_ratios", json::array({0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0}), "compress_ratios: has 13 entries, more"},
      {"compress_ratios", json::array({0, -1, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1}), "compress_ratios: entry 1 is negative"},
      {"kv_source_layer_ids", json::array({2, 4, 12}), "kv_source_layer_ids: layer 12 (entry 2) out of range"},
      {"index_source_layer_ids", json::array({-1, 2, 4, 6}), "index_source_layer_ids: layer -1 (entry 0) out of range"},
      {"engram_layer_ids", json::array({1, 40}), "engram_layer_ids: layer 40"},
      {"candidate_source_layer_id", 12, "candidate_source_layer_id: layer 12 out of range"},
      {"candidate_source_layer_id", -2, "candidate_source_layer_id: layer -2 out of range"},
      {"engram_num_embeddings", json::array({3376}), "engram_num_embeddings: has 1 entries but engram_layer_ids has 2"},
      {"engram_num_embeddings", json::array({3000, 4284}), "engram_num_embeddings: entry 0 (3000 rows) is too small"},
      // token ids
      {"engram_pad_id", 643, "engram_pad_id: token id 643 outside the vocabulary [0, 643)"},
      {"bos_token_id", 643, "bos_token_id: token id 643 outside"},
      {"eos_token_id", -1, "eos_token_id: token id -1 outside"},
      {"pad_token_id", 1000, "pad_token_id: token id 1000 outside"},
      {"image_token_id", -3, "image_token_id: must not be negative"},
      // values dsv41 does not implement
      {"num_key_value_heads", 2, "num_key_value_heads: must be 1"},
      {"n_shared_experts", 2, "n_shared_experts: must be 1"},
      {"scoring_func", "tanh", "scoring_func: \"tanh\" is not supported"},
      {"topk_method", "greedy", "topk_method: \"greedy\" is not supported"},
      {"hidden_act", "gelu", "hidden_act: \"gelu\" is not supported"},
      {"attention_bias", true, "attention_bias: true is not supported"},
      {"dtype", "int8", "dtype: \"int8\" is not supported"},
  };
  json no_pool = base;  // without a candidate source the pool sizes are not used
  no_pool["candidate_source_layer_id"] = -1;
  no_pool["candidate_topk_blocks"] = 0;
  EXPECT_TRUE(parse(no_pool).ok());
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.key) + " = " + c.value.dump());
    json j = base;
    j[c.key] = c.value;
    auto r = parse(j);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().rfind("test.json: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST(ConfigTest, DsparkKeysAreCheckedWhenTheDrafterExists) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  json base = read_json(kGolden + "/v41-tiny-f32/config.json");
  base["num_nextn_predict_layers"] = 3;
  ASSERT_TRUE(parse(base).ok());  // compress_ratios may omit the DSpark entries
  struct Case {
    const char* key;
    json value;
    const char* expect;
  } cases[] = {
      {"dspark_num_experts_per_tok", 200, "dspark_num_experts_per_tok: 200 exceeds dspark_n_routed_experts 128"},
      {"dspark_target_layer_ids", json::array({9, 10, 12}), "dspark_target_layer_ids: layer 12"},
      {"dspark_noise_token_id", 643, "dspark_noise_token_id: token id 643 outside"},
      {"dspark_block_size", 0, "dspark_block_size: must be positive"},
      {"dspark_markov_rank", 0, "dspark_markov_rank: must be positive"},
      {"compress_ratios", json::array({0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 2}),
       "compress_ratios: entry 13 belongs to a DSpark stage"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    json j = base;
    j[c.key] = c.value;
    auto r = parse(j);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST(ConfigTest, CompositeErrorsNameTheNestedKey) {
  json base = read_json(kFlashConfig);
  ASSERT_TRUE(parse(base).ok());
  struct Case {
    const char* pointer;
    json value;
    const char* expect;
    ErrorKind kind;
  } cases[] = {
      {"/text_config", "none", "text_config: expected an object, got a string", ErrorKind::kCorrupt},
      {"/text_config/hidden_size", "5120", "text_config.hidden_size: expected an integer", ErrorKind::kCorrupt},
      {"/text_config/head_dim", 500, "text_config.head_dim: 500 is not a multiple of 32", ErrorKind::kCorrupt},
      {"/text_config/model_type", "llama", "text_config.model_type: unknown model type \"llama\"",
       ErrorKind::kUnsupported},
      {"/text_config/bos_token_id", 5, "bos_token_id and text_config.bos_token_id disagree", ErrorKind::kCorrupt},
      {"/vision_config/hidden_size", 0, "vision_config.hidden_size: must be positive", ErrorKind::kCorrupt},
      {"/vision_config/num_attention_heads", 3, "vision_config.num_attention_heads", ErrorKind::kCorrupt},
      {"/vision_config/max_wh_ratio", "wide", "vision_config.max_wh_ratio: expected a number", ErrorKind::kCorrupt},
      {"/vision_config", json::array(), "vision_config: expected an object", ErrorKind::kCorrupt},
      {"/image_token_id", 129280, "image_token_id: token id 129280 outside", ErrorKind::kCorrupt},
      {"/quantization_config/quant_method", "awq", "quantization_config.quant_method: \"awq\" is not supported",
       ErrorKind::kUnsupported},
      {"/quantization_config/weight_block_size", json::array({32}), "quantization_config.weight_block_size",
       ErrorKind::kCorrupt},
      {"/quantization_config/expert_dtype", "int4", "quantization_config.expert_dtype", ErrorKind::kUnsupported},
      {"/text_config/kv_source_layer_ids", json::array({2, 8, 14, 20, 40}), "text_config.kv_source_layer_ids",
       ErrorKind::kCorrupt},
      {"/model_type", "deepseek_v4", "model_type: unknown model type \"deepseek_v4\"", ErrorKind::kUnsupported},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer);
    json j = base;
    j[json::json_pointer(c.pointer)] = c.value;
    auto r = parse(j);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().kind(), c.kind) << r.status().to_string();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  // Schedule errors are the layer plan's (plan/layer_plan.h, above the config): the config parses.
  json sched = base;
  sched[json::json_pointer("/text_config/kv_source_layer_ids")] = json::array({2, 14, 8, 20});
  auto parsed = parse(sched);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  auto plan = build_layer_plan(*parsed);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("kv_source_layer_ids: not in increasing order"), std::string::npos)
      << plan.status().message();
  json q = base;
  q["quantization_config"].erase("quant_method");
  auto r = parse(q);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("quantization_config.quant_method: missing"), std::string::npos);
}

TEST(ConfigTest, MalformedFilesNameTheFile) {
  struct Case {
    std::string text;
    const char* expect;
  } cases[] = {
      {"", "invalid JSON"},
      {"{", "invalid JSON"},
      {"{\"model_type\": \"deepseek_v41_text\"} trailing", "invalid JSON"},
      {"{\"model_type\": \"deepseek_v41_text\", \"x\": \"\xff\xfe\"}", "invalid JSON"},
      {"{\"model_type\": \"deepseek_v41_text\", \"x\": \"\xc3\"}", "invalid JSON"},
      {"{\"model_type\": \"deepseek_v41_text\", \"hidden_size\": NaN}", "invalid JSON"},
      {"[1, 2]", "expected a JSON object, got an array"},
      {"\"deepseek_v41\"", "expected a JSON object, got a string"},
      {"null", "expected a JSON object, got null"},
      {"{}", "model_type: missing"},
      {"{\"model_type\": 41}", "model_type: expected a string"},
      {"{\"model_type\": \"llama\"}", "model_type: unknown model type \"llama\""},
      {std::string(100000, '[') + std::string(100000, ']'), "nested deeper than"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text.substr(0, 60));
    auto r = parse_model_config(c.text, "dir/config.json");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().rfind("dir/config.json: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    for (char ch : r.status().message())  // echoed input bytes are escaped: the message is ASCII
      EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << r.status().message();
  }
  EXPECT_EQ(parse_model_config("{\"model_type\": \"llama\"}", "x").status().kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(parse_model_config("{", "x").status().kind(), ErrorKind::kCorrupt);
  EXPECT_EQ(parse_model_config(std::string(17 << 20, ' '), "x").status().kind(), ErrorKind::kOutOfRange);
}

TEST(ConfigTest, LoadReportsMissingFiles) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto missing = load_model_config(kGolden + "/no-such-model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-model"), std::string::npos);

  // A directory without config.json.
  auto no_config = load_model_config(kGolden + "/encoding");
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("encoding/config.json"), std::string::npos);

  // A file that is not a config.
  auto not_config = load_model_config(kGolden + "/v41-tiny-f32/golden.json");
  ASSERT_FALSE(not_config.ok());
  EXPECT_NE(not_config.status().message().find("golden.json"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
