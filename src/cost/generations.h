// Per-generation builders of a CostModel (cost_model.h). Internal to src/cost/; each lives in
// its own gen_*.cpp with the formulas and their sources beside the code.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cost/config_keys.h"
#include "cost/cost_model.h"
#include "format/config.h"
#include "plan/layer_plan.h"

namespace dsv41::cost_internal {

// DeepSeek LLM 7B/67B (llama-style dense GQA/MHA) and DeepSeek-MoE (model_type "deepseek").
Result<CostModel> build_dense_attention_cost(const nlohmann::json& json, const std::string& source);
// DeepSeek-V2/V3 (MLA) and, with `v32`, DeepSeek-V3.2 (MLA + lightning indexer).
Result<CostModel> build_mla_cost(const nlohmann::json& json, const std::string& source, bool v32);
// DeepSeek-V4 (per-layer CSA/HCA caches).
Result<CostModel> build_v4_cost(const nlohmann::json& json, const std::string& source, const CostOptions& options);
// DeepSeek-V4.1 from the project's parsed config and layer plan.
Result<CostModel> build_v41_cost(const ModelConfig& config, const LayerPlan& plan);

// FFN of one layer: dense SwiGLU (3·d·inter) or MoE (router + top-k routed + shared experts).
struct FfnShape {
  bool moe = false;
  int64_t hidden = 0, dense_inter = 0, moe_inter = 0;
  int64_t n_routed = 0, top_k = 0, n_shared = 0;
  bool gate_matmul = true;  // false for V4 hash-routed layers (expert ids looked up per token)
};
// The routed experts of a config in the V2/V3 keys (`n_routed_experts`, `num_experts_per_tok`,
// `moe_intermediate_size`, `n_shared_experts` defaulting to `shared_default`): the MoE FFN's shape.
FfnShape read_routed_experts(ConfigKeys& k, int64_t hidden, int64_t shared_default);
// Which layers carry it, in the DeepSeek-MoE / V2 / V3 keys: the first `first_dense` are dense,
// then every `moe_freq`-th; a config without `n_routed_experts` is dense throughout (moe.moe false).
struct MoeLayers {
  FfnShape moe;
  int64_t first_dense = 0, moe_freq = 1;
};
MoeLayers read_moe_layers(ConfigKeys& k, int64_t hidden);
// `dense`: operands of the dense FFN and shared experts; `experts`: of the routed experts. The
// router is BF16 × BF16 (FP32 in the releases).
void add_ffn_flops(OpLedger& f, const FfnShape& s, Operands dense, Operands experts);

// The operand pairs of a generation's linear layers, from its quantization facts: weights FP8
// (or BF16), routed experts FP4 / dense format, and the activations they multiply. An FP8
// checkpoint quantises each linear layer's input to FP8 (activation_scheme only says how the
// scale is found), so its FP8 and FP4 weights both meet FP8 activations.
struct LinearOperands {
  Operands dense, experts;
};
LinearOperands linear_operands(bool fp8_linear, bool fp4_experts);
inline constexpr Operands kBf16Op{Precision::kBf16, Precision::kBf16};  // FP32/BF16 matmuls

}  // namespace dsv41::cost_internal
