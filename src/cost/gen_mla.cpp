// Cost model of DeepSeek-V2/V3 (MLA) and DeepSeek-V3.2 (MLA + DeepSeek Sparse Attention).
// Spec: system.md §1. Every layer caches, per token, the MLA latent (kv_lora_rank) and the
// decoupled RoPE key (qk_rope_head_dim); V3.2 stores that record in FlashMLA's FP8 layout and
// adds its lightning-indexer key (index_head_dim, FP8) in every layer.
#include <fmt/format.h>

#include "cost/config_keys.h"
#include "cost/generations.h"
#include "cost/record_formats.h"

namespace dsv41::cost_internal {

Result<CostModel> build_mla_cost(const nlohmann::json& json, const std::string& source, bool v32) {
  ConfigKeys k(json, source);
  const int64_t d = k.positive("hidden_size", "the projection sizes");
  const int64_t layers = k.layer_count();
  const int64_t heads = k.positive("num_attention_heads", "the attention heads");
  const int64_t kv_lora = k.positive("kv_lora_rank", "the MLA cache record");
  const int64_t rope = k.positive("qk_rope_head_dim", "the MLA cache record");
  const int64_t nope = k.positive("qk_nope_head_dim", "the query/key projection");
  const int64_t v_dim = k.positive("v_head_dim", "the value/output projection");
  const int64_t q_lora = k.non_negative_or("q_lora_rank", 0);  // null in V2-Lite: direct wq
  const int64_t vocab = k.positive("vocab_size", "the output head");
  int64_t idx_heads = 0, idx_dim = 0, idx_topk = 0;
  if (v32) {
    idx_heads = k.positive("index_n_heads", "the lightning indexer");
    idx_dim = k.positive("index_head_dim", "the indexer key record");
    idx_topk = k.positive("index_topk", "the sparse attention width");
  }
  const bool has_moe = k.has("n_routed_experts");
  int64_t inter = 0;
  if (!has_moe || k.has("first_k_dense_replace")) inter = k.non_negative_or("intermediate_size", 0);
  const auto [moe, first_dense, moe_freq] = read_moe_layers(k, d);
  if ((!has_moe || first_dense > 0) && inter == 0) k.positive("intermediate_size", "the dense FFN layers");
  if (!k.status().ok()) return k.status();

  const WeightPrecision wp = read_weight_precision(json);
  const auto [dense, experts] = linear_operands(wp.fp8_linear, wp.fp4_experts);

  CostModel m;
  m.generation = v32 ? Generation::kDeepSeekV32 : Generation::kDeepSeekMla;
  m.source = source;
  const int channels = int(kv_lora + rope);
  const RecordFormat& main_fmt = record_format(v32 ? RecordKind::kMlaFp8 : RecordKind::kMlaBf16);
  const double main_bytes = record_bytes(main_fmt, channels, int(rope));  // V3: 1152, V3.2: 656
  m.records.push_back({"MLA entry (latent + RoPE key)", describe_record(main_fmt, channels, int(rope)), main_bytes,
                       main_fmt.source});
  double idx_bytes = 0;
  if (v32) {
    const RecordFormat& idx_fmt = record_format(RecordKind::kV32IndexKeyFp8);
    idx_bytes = record_bytes(idx_fmt, int(idx_dim), 0);  // 132
    m.records.push_back({"indexer key", describe_record(idx_fmt, int(idx_dim), 0), idx_bytes, idx_fmt.source});
  }

  for (int64_t i = 0; i < layers; ++i) {
    LayerCost l;
    l.index = int(i);
    l.kind = v32 ? "MLA+DSA" : "MLA";
    l.ratio = 1;
    l.main_record_bytes = main_bytes;
    l.index_record_bytes = idx_bytes;
    l.global_bytes_per_token = main_bytes + idx_bytes;
    // Attention weights (their count is the same absorbed or not: absorbing wkv_b into q/o reuses
    // its kv_lora·H·(nope + v) weights once per token).
    const double q_params = q_lora > 0 ? double(d) * q_lora + double(q_lora) * heads * (nope + rope)  // wq_a, wq_b
                                       : double(d) * heads * (nope + rope);                            // wq
    l.weight_flops.add_matvec("attention projections", dense,
                              q_params + double(d) * (kv_lora + rope)              // wkv_a [d → c_KV ‖ k_rope]
                                  + double(kv_lora) * heads * (nope + v_dim)  // wkv_b (absorbed)
                                  + double(heads) * v_dim * d);                // wo [H·v → d]
    if (v32) {
      // Indexer: wq_b [q_lora → idx_heads·idx_dim], wk [d → idx_dim] (FP8), weights_proj [d → idx_heads].
      l.weight_flops.add_matvec("indexer query + key", dense,
                                double(q_lora > 0 ? q_lora : d) * idx_heads * idx_dim + double(d) * idx_dim);
      l.weight_flops.add_matvec("indexer weights", kBf16Op, double(d) * idx_heads);
    }
    FfnShape f = moe;
    if (!has_moe || i < first_dense || i % moe_freq != 0) f = FfnShape{false, d, inter};
    add_ffn_flops(l.weight_flops, f, dense, experts);
    // Absorbed MLA decode: per head and cached entry, the score over latent + RoPE key
    // (2·(kv_lora + rope)) and the value sum over the latent (2·kv_lora); BF16.
    l.work.heads = int(heads);
    l.work.flops_per_head_entry = 2.0 * (kv_lora + rope) + 2.0 * kv_lora;
    l.work.ratio = 1;
    if (v32) {
      l.work.topk = idx_topk;  // DSA: attention reads the index_topk selected tokens
      // Lightning indexer: every visible key, per index head a 128-dim dot (2·idx_dim) plus the
      // ReLU-weighted head sum (2); FP8 query × FP8 keys (V3.2-Exp inference fp8_index kernel).
      l.work.index_heads = int(idx_heads);
      l.work.flops_per_index_head_entry = 2.0 * idx_dim + 2.0;
      l.work.index_scan_cap = -1;
      l.work.index_operands = Operands{Precision::kFp8, Precision::kFp8};
    }
    m.layers.push_back(l);
  }
  m.head_flops.add_matvec("output head", kBf16Op, double(d) * vocab);
  m.max_context = k.non_negative_or("max_position_embeddings", 0);
  m.geometry = fmt::format("{} layers · hidden {} · {} heads · latent {} + RoPE {} · vocab {}", layers, d, heads, kv_lora,
                           rope, vocab);
  if (has_moe) m.geometry += fmt::format(" · experts {}/{} + {} shared", moe.top_k, moe.n_routed, moe.n_shared);
  if (v32) m.geometry += fmt::format(" · indexer {}×{}, top-{}", idx_heads, idx_dim, idx_topk);
  m.weight_note = "MLA projections (absorbed wkv_b), MoE router + top-k + shared experts (dense FFN in the "
                  "first_k_dense_replace layers), output head; MTP module not counted";
  m.persistent_definition = "global KV only (every cached byte is per-token; no window state)";
  if (!v32) m.assumptions.push_back("MLA cache in BF16, as the release's inference code keeps it");
  if (v32) m.assumptions.push_back("MLA cache in FlashMLA's FP8 layout (the deployed V3.2 sparse decode kernel)");
  return m;
}

}  // namespace dsv41::cost_internal
