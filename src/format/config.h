// The model's configuration as dsv41 uses it, parsed from a model directory's config.json.
// Spec: ../shared/spec/model.md §1 (keys, defaults), golden/README.md (HF flat config).
//
// Accepts the release's composite config (model_type "deepseek_v41" with text_config /
// vision_config / quantization_config) and the flat text config that save_pretrained writes
// (model_type "deepseek_v41_text"). Where sources spell a key differently both spellings are
// accepted (engram_pad_id / engram_pad_token_id). Missing keys take the V4.1-Flash defaults of
// model.md §1.2 (a default-constructed ModelConfig *is* the V4.1-Flash text config, without
// quantization or vision); present keys with the wrong JSON type or an invalid value are errors
// that name the key ("text_config.head_dim: ..."). Whether the layer schedule is executable is
// checked by build_layer_plan (plan/layer_plan.h), which every consumer runs. No layer index or size is
// hard-coded anywhere else in dsv41: everything comes from here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// YaRN of compressed layers (rope_scaling, rope_type "yarn"); frequency-only, no attention
// temperature (model.md §3.6).
struct YarnScaling {
  double factor = 16.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 65536;
  bool operator==(const YarnScaling&) const = default;
};

struct QuantizationConfig {
  std::string quant_method;     // "fp8"
  std::string activation_scheme;
  std::string scale_fmt;        // "ue8m0"
  std::string expert_dtype;     // "fp4", "fp8" or "" (experts then use the dense format)
  std::string fmt;              // "e4m3" in V4 configs, "" when absent (V4.1)
  // weight_block_size: [32, 32] for V4.1, [128, 128] for V4; 0 × 0 when the key is absent
  // (the weight loader then infers the block from the scale tensors' shapes, model.md §2).
  int weight_block_rows = 0, weight_block_cols = 0;
  bool operator==(const QuantizationConfig&) const = default;
};

struct VisionConfig {
  int num_hidden_layers = 32, hidden_size = 1024, num_attention_heads = 16;
  int intermediate_size = 2816, patch_size = 14, downsample_ratio = 3;
  int max_image_tokens = 1024;
  int64_t min_pixels = 295936;
  double rope_theta = 10000;
  std::optional<double> max_wh_ratio;  // null in the release
  bool operator==(const VisionConfig&) const = default;
};

struct ModelConfig {
  std::string model_type;  // as found at the top level: deepseek_v41 or deepseek_v41_text
  std::string source;      // file it was read from, for messages

  // Tokens.
  int64_t vocab_size = 129280;
  int64_t bos_token_id = 0, eos_token_id = 1, pad_token_id = 2;
  int64_t image_token_id = 129264;

  // Backbone geometry.
  int hidden_size = 5120;
  int num_hidden_layers = 40;
  int num_attention_heads = 64;
  int num_key_value_heads = 1;
  int head_dim = 512;
  int qk_rope_head_dim = 64;
  int q_lora_rank = 1280;
  int o_lora_rank = 1024;
  int o_groups = 8;
  double rms_norm_eps = 1e-20;
  int64_t max_position_embeddings = 1048576;
  bool tie_word_embeddings = false;
  std::string dtype = "bfloat16";

  // RoPE: SWA-only layers use rope_theta without YaRN; compressed layers compress_rope_theta
  // with YaRN when rope_scaling is present. The one key whose absence does not mean the Flash
  // value: no rope_scaling means no YaRN, as in the reference (model.md §9.1); the Flash config
  // has it. YarnScaling's member defaults are the Flash values.
  double rope_theta = 10000;
  double compress_rope_theta = 160000;
  std::optional<YarnScaling> rope_scaling;

  // MoE.
  int n_routed_experts = 384;
  int n_shared_experts = 1;
  int num_experts_per_tok = 6;
  int moe_intermediate_size = 2304;
  std::string scoring_func = "sqrtsoftplus";  // or "softmax", "sigmoid"
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.5;
  double gate_temp = 1.0;
  double swiglu_limit = 10.0;
  std::string hidden_act = "silu";

  // Attention / CSA2.
  int sliding_window = 128;              // window including the current token
  // Per layer, backbone then DSpark (entries past num_hidden_layers belong to the drafter and
  // must be 0); 0 = SWA only. Flash: [0,0] + [2]*18 + [1]*20 + [0,0,0].
  std::vector<int> compress_ratios = {0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,
                                      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0};
  std::vector<int> kv_source_layer_ids = {2, 8, 14, 20};  // Full layers (own a compressor and index keys)
  std::vector<int> index_source_layer_ids = {2, 8, 14, 20, 24, 28, 32, 36};  // Full ∪ Reindex
  int index_n_heads = 32;
  int index_head_dim = 128;
  int index_topk = 512;
  int candidate_source_layer_id = 20;    // -1: no hierarchical candidate pool
  int candidate_topk_blocks = 2048;
  int candidate_block_size = 8;

  // mHC.
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  // Engram.
  std::vector<int> engram_layer_ids = {1, 14};
  std::vector<int64_t> engram_num_embeddings = {384006168, 384016682};  // rows per Engram layer
  int engram_max_ngram_size = 4;
  int64_t engram_vocab_size = 16000000;
  int engram_n_heads = 8;
  int engram_head_dim = 256;
  int64_t engram_pad_id = 2;  // raw token id; also read from engram_pad_token_id
  int64_t engram_compressed_vocab_size = 99092;

  // DSpark drafter.
  int num_nextn_predict_layers = 3;
  int dspark_block_size = 5;
  int64_t dspark_noise_token_id = 128799;
  std::vector<int> dspark_target_layer_ids = {37, 38, 39};
  int dspark_markov_rank = 256;
  int dspark_n_routed_experts = 128;
  int dspark_num_experts_per_tok = 3;

  std::optional<QuantizationConfig> quantization;  // absent: weights stored as-is
  std::optional<VisionConfig> vision;              // absent or null: text only

  // Field-by-field equality (model_type and source included).
  bool operator==(const ModelConfig&) const = default;
};

// Parses and validates a config.json text. `source` names the file in error messages. Errors:
// corrupt (invalid JSON/UTF-8, not an object, wrong JSON type, invalid value), unsupported
// (unknown model_type, features dsv41 does not implement), out_of_range (text too large).
// Never throws.
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
// Reads DIR/config.json (or the file itself if `path` is a file). io/not_found errors name the path.
Result<ModelConfig> load_model_config(const std::string& path);

}  // namespace dsv41
