// Cost model of DeepSeek LLM 7B/67B: llama-style decoder with dense GQA (67B: 8 KV heads) or MHA
// (7B), and of DeepSeek-MoE (model_type "deepseek": same attention, MoE FFN).
// Spec: system.md §1. Cache: every layer keeps K and V of every KV head for every token.
#include <fmt/format.h>

#include "cost/config_keys.h"
#include "cost/generations.h"
#include "cost/record_formats.h"

namespace dsv41::cost_internal {

Result<CostModel> build_dense_attention_cost(const nlohmann::json& json, const std::string& source) {
  ConfigKeys k(json, source);
  const int64_t d = k.positive("hidden_size", "the projection sizes");
  const int64_t layers = k.layer_count();
  const int64_t heads = k.positive("num_attention_heads", "the attention heads");
  const int64_t kv_heads = k.has("num_key_value_heads") ? k.positive("num_key_value_heads", "the KV cache") : heads;
  const int64_t head_dim = k.has("head_dim") ? k.positive("head_dim", "the KV cache") : d / heads;
  const int64_t inter = k.positive("intermediate_size", "the FFN size");
  const int64_t vocab = k.positive("vocab_size", "the output head");
  const auto [moe, first_dense, moe_freq] = read_moe_layers(k, d);
  const bool has_moe = moe.moe;
  if (!k.status().ok()) return k.status();
  if (kv_heads > heads || heads % kv_heads != 0)
    return invalid_argument(fmt::format("{}: num_key_value_heads {} does not divide num_attention_heads {}",
                                        source, kv_heads, heads));

  const WeightPrecision wp = read_weight_precision(json);
  const auto [dense, experts] = linear_operands(wp.fp8_linear, wp.fp4_experts);

  CostModel m;
  m.generation = Generation::kDeepSeekLlm;
  m.source = source;
  // One K row and one V row per KV head per token per layer.
  const RecordFormat& row = record_format(RecordKind::kGqaKvBf16);
  const double row_bytes = record_bytes(row, int(head_dim), 0);  // [head_dim] BF16
  m.records.push_back({fmt::format("K/V head row (2 × {} per layer)", kv_heads),
                       describe_record(row, int(head_dim), 0), row_bytes, row.source});
  for (int64_t i = 0; i < layers; ++i) {
    LayerCost l;
    l.index = int(i);
    l.kind = kv_heads == heads ? "MHA" : "GQA";
    l.ratio = 1;
    l.main_record_bytes = 2.0 * kv_heads * row_bytes;  // K and V of every KV head
    l.global_bytes_per_token = l.main_record_bytes;
    // Projections: q [d → H·hd], k and v [d → kv·hd], o [H·hd → d].
    l.weight_flops.add_matvec("attention projections", dense,
                              double(d) * heads * head_dim * 2 + 2.0 * d * kv_heads * head_dim);
    FfnShape f = moe;
    if (!has_moe || i < first_dense || i % moe_freq != 0) f = FfnShape{false, d, inter};
    add_ffn_flops(l.weight_flops, f, dense, experts);
    // Decode attention: every head scores (2·hd) and sums (2·hd) every cached token, BF16.
    l.work.heads = int(heads);
    l.work.flops_per_head_entry = 4.0 * head_dim;
    l.work.ratio = 1;
    m.layers.push_back(l);
  }
  m.head_flops.add_matvec("output head", kBf16Op, double(d) * vocab);  // head [d → vocab]
  m.weight_note = fmt::format("q/k/v/o projections and {} FFN per layer + output head", has_moe ? "MoE" : "SwiGLU");
  m.max_context = k.non_negative_or("max_position_embeddings", 0);
  m.geometry = fmt::format("{} layers · hidden {} · {} query heads × {} · {} KV heads · vocab {}", layers, d, heads,
                           head_dim, kv_heads, vocab);
  if (has_moe) m.geometry += fmt::format(" · experts {}/{} + {} shared", moe.top_k, moe.n_routed, moe.n_shared);
  m.persistent_definition = "global KV only (every cached byte is per-token; no window state)";
  m.assumptions.push_back("KV cache in BF16 (the checkpoint dtype); no quantised KV cache in the release");
  return m;
}

FfnShape read_routed_experts(ConfigKeys& k, int64_t hidden, int64_t shared_default) {
  FfnShape moe;
  moe.moe = true;
  moe.hidden = hidden;
  moe.n_routed = k.positive("n_routed_experts", "the MoE router");
  moe.top_k = k.positive("num_experts_per_tok", "the activated experts");
  moe.moe_inter = k.positive("moe_intermediate_size", "the expert size");
  moe.n_shared = k.non_negative_or("n_shared_experts", shared_default);
  return moe;
}

MoeLayers read_moe_layers(ConfigKeys& k, int64_t hidden) {
  MoeLayers m;
  if (!k.has("n_routed_experts")) return m;
  m.moe = read_routed_experts(k, hidden, 0);
  m.first_dense = k.non_negative_or("first_k_dense_replace", 0);
  m.moe_freq = std::max<int64_t>(1, k.non_negative_or("moe_layer_freq", 1));
  return m;
}

void add_ffn_flops(OpLedger& f, const FfnShape& s, Operands dense, Operands experts) {
  if (!s.moe) {
    f.add_matvec("dense FFN", dense, 3.0 * s.hidden * s.dense_inter);  // w1, w3 [d → inter], w2 [inter → d]
    return;
  }
  if (s.gate_matmul) f.add_matvec("router", kBf16Op, double(s.hidden) * s.n_routed);  // [d → E]
  f.add_matvec("routed experts", experts, 3.0 * s.hidden * s.moe_inter * s.top_k);  // top-k SwiGLU
  if (s.n_shared > 0) f.add_matvec("shared experts", dense, 3.0 * s.hidden * s.moe_inter * s.n_shared);
}

LinearOperands linear_operands(bool fp8_linear, bool fp4_experts) {
  const Precision act = fp8_linear ? Precision::kFp8 : Precision::kBf16;
  const Precision weights = fp8_linear ? Precision::kFp8 : Precision::kBf16;
  return {Operands{weights, act}, Operands{fp4_experts ? Precision::kFp4 : weights, act}};
}

}  // namespace dsv41::cost_internal
