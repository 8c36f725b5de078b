// The DSpark drafter's shape and weights (see dspark_weights.h). Spec: model.md §6.1, §2.
#include "model/dspark_weights.h"

#include <string>

#include "model/model.h"
#include "model/weight_loading.h"
#include "model/weights.h"

namespace dsv41 {

DrafterWeights::DrafterWeights() = default;
DrafterWeights::~DrafterWeights() = default;
DrafterWeights::DrafterWeights(DrafterWeights&&) noexcept = default;
DrafterWeights& DrafterWeights::operator=(DrafterWeights&&) noexcept = default;

bool DrafterShape::configured(const ModelConfig& c) {
  return c.num_nextn_predict_layers > 0 && c.dspark_block_size > 0 && !c.dspark_target_layer_ids.empty();
}

Result<DrafterShape> DrafterShape::from_config(const ModelConfig& c) {
  const std::string where = c.source + ": ";
  if (!configured(c))
    return invalid_argument(where + "no DSpark drafter (num_nextn_predict_layers, dspark_block_size and "
                                    "dspark_target_layer_ids must all be set)");
  DrafterShape s;
  s.stages = c.num_nextn_predict_layers;
  s.block = c.dspark_block_size;
  s.noise_id = c.dspark_noise_token_id;
  s.targets = c.dspark_target_layer_ids;
  s.markov_rank = c.dspark_markov_rank;
  if (s.block > 16) return invalid_argument(where + "dspark_block_size " + std::to_string(s.block) + " above 16");
  if (s.noise_id < 0 || s.noise_id >= c.vocab_size)
    return invalid_argument(where + "dspark_noise_token_id " + std::to_string(s.noise_id) +
                            " outside the vocabulary (0.." + std::to_string(c.vocab_size - 1) + ")");
  for (int t : s.targets)
    if (t < 0 || t >= c.num_hidden_layers)
      return invalid_argument(where + "dspark_target_layer_ids holds " + std::to_string(t) + ", the backbone has " +
                              std::to_string(c.num_hidden_layers) + " layers");
  if (s.markov_rank < 1) return invalid_argument(where + "dspark_markov_rank must be ≥ 1");
  for (int i = c.num_hidden_layers; i < static_cast<int>(c.compress_ratios.size()); ++i)
    if (c.compress_ratios[i] != 0)
      return invalid_argument(where + "compress_ratios[" + std::to_string(i) +
                              "] of a DSpark stage must be 0 (the stages are sliding-window only)");
  DSV41_ASSIGN_OR_RETURN(s.moe, MoeShape::from_config(c));
  // 0 means "as the backbone" in the release's arguments.
  if (c.dspark_n_routed_experts > 0) s.moe.n_experts = c.dspark_n_routed_experts;
  if (c.dspark_num_experts_per_tok > 0) s.moe.top_k = c.dspark_num_experts_per_tok;
  if (s.moe.top_k > s.moe.n_experts)
    return invalid_argument(where + "dspark_num_experts_per_tok " + std::to_string(s.moe.top_k) +
                            " above dspark_n_routed_experts " + std::to_string(s.moe.n_experts));
  return s;
}

LayerInfo DrafterShape::stage_info(const ModelConfig& config, int s) const {
  LayerInfo info;
  info.index = config.num_hidden_layers + s;
  info.role = LayerRole::kSwaOnly;
  info.ratio = 0;
  info.rope = RopeKind::kMain;
  return info;
}

Result<std::unique_ptr<DrafterWeights>> load_drafter_weights(const WeightRegistry& reg, const ModelConfig& c,
                                                             bool stored, bool allow_bf16) {
  if (!DrafterShape::configured(c) || !reg.has("mtp.0.main_proj.weight")) return std::unique_ptr<DrafterWeights>();
  auto w = std::make_unique<DrafterWeights>();
  DSV41_ASSIGN_OR_RETURN(w->shape, DrafterShape::from_config(c));
  const DrafterShape& sh = w->shape;
  const int64_t d = c.hidden_size, V = c.vocab_size, r = sh.markov_rank;
  w->stages.resize(sh.stages);
  for (int s = 0; s < sh.stages; ++s) {
    const std::string prefix = "mtp." + std::to_string(s) + ".";
    LayerWeights& L = w->stages[s];
    DSV41_ASSIGN_OR_RETURN(L.attn, load_attention_weights(reg, c, sh.stage_info(c, s), stored, prefix + "attn."));
    if (allow_bf16) DSV41_RETURN_IF_ERROR(narrow_attention(reg, L.attn));
    DSV41_RETURN_IF_ERROR(load_block_weights(reg, c, prefix, sh.moe, allow_bf16, stored, L));
  }
  DSV41_RETURN_IF_ERROR(load_matrix(reg, "mtp.0.main_proj.weight", d * d * int64_t(sh.targets.size()), allow_bf16,
                                    stored, w->main_proj));
  DSV41_RETURN_IF_ERROR(load_exact(reg, "mtp.0.main_norm.weight", d, w->main_norm));
  const std::string last = "mtp." + std::to_string(sh.stages - 1) + ".";
  DSV41_RETURN_IF_ERROR(load_exact(reg, last + "norm.weight", d, w->norm));
  DSV41_RETURN_IF_ERROR(load_exact(reg, last + "markov_head.embed.weight", V * r, w->markov_embed));
  DSV41_RETURN_IF_ERROR(load_exact(reg, last + "markov_head.head.weight", V * r, w->markov_head));
  DSV41_RETURN_IF_ERROR(load_exact(reg, last + "confidence_head.proj.weight", d + r, w->confidence));
  return w;
}

}  // namespace dsv41
