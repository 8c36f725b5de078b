// Shape checks and loading of AttentionWeights (see attention.h). Spec: model.md §2.
#include <cmath>
#include <string>

#include "model/attention.h"
#include "model/weights.h"

namespace dsv41 {

std::vector<AttentionTensor> attention_tensors(const ModelConfig& c, const LayerInfo& layer) {
  const int64_t H = c.num_attention_heads, D = c.head_dim, hidden = c.hidden_size, ql = c.q_lora_rank;
  const int64_t G = c.o_groups, olr = c.o_lora_rank;
  const bool full = layer.role == LayerRole::kFull;
  const bool index = full || layer.role == LayerRole::kReindex;
  const int64_t ih = c.index_n_heads, id = c.index_head_dim;
  return {
      {"wq_a.weight", &AttentionWeights::wq_a, ql * hidden, &AttentionWeights::quant_wq_a},
      {"q_norm.weight", &AttentionWeights::q_norm, ql},
      {"wq_b.weight", &AttentionWeights::wq_b, H * D * ql, &AttentionWeights::quant_wq_b},
      {"wkv.weight", &AttentionWeights::wkv, D * hidden, &AttentionWeights::quant_wkv},
      {"kv_norm.weight", &AttentionWeights::kv_norm, D},
      {"wo_a.weight", &AttentionWeights::wo_a, G * olr * (G > 0 ? H * D / G : 0), &AttentionWeights::quant_wo_a},
      {"wo_b.weight", &AttentionWeights::wo_b, hidden * G * olr, &AttentionWeights::quant_wo_b},
      {"attn_sink", &AttentionWeights::attn_sink, H},
      {"compressor.wkv.weight", &AttentionWeights::compressor_wkv, full ? D * hidden : 0},
      {"compressor.wgate.weight", &AttentionWeights::compressor_wgate, full && layer.ratio > 1 ? D * hidden : 0},
      {"compressor.norm.weight", &AttentionWeights::compressor_norm, full ? D : 0},
      {"indexer.wk.weight", &AttentionWeights::indexer_wk, full ? id * D : 0},
      {"indexer.k_norm.weight", &AttentionWeights::indexer_k_norm, full ? id : 0},
      {"indexer.wq_b.weight", &AttentionWeights::indexer_wq_b, index ? ih * id * ql : 0, &AttentionWeights::quant_indexer_wq_b},
      {"indexer.weights_proj.weight", &AttentionWeights::indexer_weights_proj, index ? ih * hidden : 0},
  };
}

namespace {

// Role names for messages (kept local: layer_plan.cpp is not ours).
const char* role_word(LayerRole role) {
  switch (role) {
    case LayerRole::kSwaOnly: return "SWA-only";
    case LayerRole::kFull: return "Full";
    case LayerRole::kReindex: return "Reindex";
    case LayerRole::kReuse: return "Reuse";
  }
  return "?";
}

std::string tensor_name(const AttentionWeights& w, const char* suffix) {
  if (!w.prefix.empty()) return w.prefix + suffix;
  return "layers." + std::to_string(w.layer) + ".attn." + suffix;
}

}  // namespace

Status check_attention_weights(const AttentionWeights& w, const ModelConfig& config, const LayerInfo& layer) {
  if (w.layer != layer.index)
    return invalid_argument("attention weights of layer " + std::to_string(w.layer) + " given for layer " +
                            std::to_string(layer.index));
  if (config.o_groups < 1 || config.num_attention_heads % config.o_groups != 0)
    return invalid_argument(config.source + ": num_attention_heads " + std::to_string(config.num_attention_heads) +
                            " is not a multiple of o_groups " + std::to_string(config.o_groups));
  if (config.qk_rope_head_dim > config.head_dim || config.qk_rope_head_dim > config.index_head_dim)
    return invalid_argument(config.source + ": qk_rope_head_dim " + std::to_string(config.qk_rope_head_dim) +
                            " exceeds head_dim or index_head_dim");
  if (layer.ratio > 0 && config.index_topk < 1)
    return invalid_argument(config.source + ": index_topk must be ≥ 1");
  if (layer.candidate_source && (config.candidate_block_size < 1 || config.candidate_topk_blocks < 1))
    return invalid_argument(config.source + ": candidate_block_size and candidate_topk_blocks must be ≥ 1");
  for (const AttentionTensor& e : attention_tensors(config, layer)) {
    const QuantWeights* q = e.quant ? &(w.*e.quant) : nullptr;
    const int64_t have = q && q->codes ? q->rows * q->in : static_cast<int64_t>((w.*e.field).size());
    if (have != e.size) {
      if (e.size == 0)
        return invalid_argument("tensor '" + tensor_name(w, e.name) + "' is present but a " +
                                role_word(layer.role) + " layer has none");
      if (have == 0) return not_found("tensor '" + tensor_name(w, e.name) + "' is missing");
      return invalid_argument("tensor '" + tensor_name(w, e.name) + "' has " + std::to_string(have) +
                              " elements, the config implies " + std::to_string(e.size));
    }
  }
  return ok_status();
}

Result<AttentionWeights> load_attention_weights(const WeightRegistry& registry, const ModelConfig& config,
                                                const LayerInfo& layer, bool stored, const std::string& prefix) {
  AttentionWeights w;
  w.layer = layer.index;
  w.prefix = prefix;
  for (const AttentionTensor& e : attention_tensors(config, layer)) {
    if (e.size == 0) continue;  // not part of this role (the registry's check reports strays)
    const std::string name = tensor_name(w, e.name);
    if (stored && e.quant) {
      DSV41_ASSIGN_OR_RETURN(TensorView raw, registry.raw(name));
      DSV41_ASSIGN_OR_RETURN(std::optional<QuantWeights> q, stored_quant_view(raw, registry.scale_of(name), nullptr));
      if (q) {
        w.*e.quant = *q;
        continue;  // check_attention_weights below checks its size
      }
    }
    Result<FloatTensor> t = registry.load_f32(name);
    if (!t.ok()) return t.status().with_context(registry.source());
    if (t->numel() != e.size)
      return invalid_argument(registry.source() + ": tensor '" + name + "' has " + std::to_string(t->numel()) +
                              " elements, the config implies " + std::to_string(e.size));
    w.*e.field = std::move(t->data);
  }
  DSV41_RETURN_IF_ERROR(check_attention_weights(w, config, layer));
  return w;
}


}  // namespace dsv41
