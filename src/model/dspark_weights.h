// The DSpark drafter's weights (`mtp.0..S−1`): S stages, each a full block of the backbone's
// geometry with a sliding-window-only attention and its own MoE (dspark_n_routed_experts,
// top dspark_num_experts_per_tok), plus main_proj / main_norm (stage 0) and the final norm,
// Markov head and confidence head (last stage). The drafter has no embedding or head of its
// own: it uses the backbone's. Spec: model.md §6.1 (as corrected from the release code), §2.
//
// Presence: a config without stages (num_nextn_predict_layers 0, dspark_block_size 0 or no
// target layers) has no drafter; a checkpoint without `mtp.0.main_proj.weight` has none either
// (DSpark is then off, and the caller says so once). A checkpoint that has the drafter must have
// every tensor with the shape the config implies: otherwise the load fails naming the tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "model/moe.h"
#include "model/weight_matrix.h"
#include "plan/layer_plan.h"

namespace dsv41 {

struct LayerWeights;  // model/model.h
class WeightRegistry;

// The drafter's shape, from the config alone.
struct DrafterShape {
  int stages = 0;            // num_nextn_predict_layers
  int block = 0;             // dspark_block_size (draft slots)
  int64_t noise_id = 0;      // dspark_noise_token_id (slots 1…block−1)
  std::vector<int> targets;  // dspark_target_layer_ids
  int64_t markov_rank = 0;
  MoeShape moe;              // the stages' MoE (their own expert count and top-k)

  // Whether the config describes a drafter at all.
  static bool configured(const ModelConfig& config);
  // Checks the DSpark keys against the backbone (target layers in range, noise id in the
  // vocabulary, expert counts, a positive rank); errors name the config key.
  static Result<DrafterShape> from_config(const ModelConfig& config);
  // The LayerInfo of stage s: sliding-window only, RoPE kind main, index num_hidden_layers + s.
  LayerInfo stage_info(const ModelConfig& config, int s) const;
};

struct DrafterWeights {
  DrafterShape shape;
  std::vector<LayerWeights> stages;   // mtp.s.*: attention (prefix mtp.s.attn.), norms, mHC, MoE
  WeightMatrix main_proj;             // mtp.0.main_proj.weight [d, targets·d]
  std::vector<float> main_norm;       // mtp.0.main_norm.weight [d]
  std::vector<float> norm;            // mtp.{S−1}.norm.weight [d]
  std::vector<float> markov_embed;    // mtp.{S−1}.markov_head.embed.weight [V, r]
  std::vector<float> markov_head;     // mtp.{S−1}.markov_head.head.weight [V, r]
  std::vector<float> confidence;      // mtp.{S−1}.confidence_head.proj.weight [d + r]

  DrafterWeights();
  ~DrafterWeights();
  DrafterWeights(DrafterWeights&&) noexcept;
  DrafterWeights& operator=(DrafterWeights&&) noexcept;
};

// Loads the drafter from the registry: null (no error) when the config has no stages or the
// checkpoint no `mtp.*` tensors; an error naming the tensor when one is missing or misshapen.
// stored / allow_bf16: as for the backbone's matrices (model.h ModelLoadOptions).
Result<std::unique_ptr<DrafterWeights>> load_drafter_weights(const WeightRegistry& reg, const ModelConfig& config,
                                                             bool stored, bool allow_bf16);

}  // namespace dsv41
