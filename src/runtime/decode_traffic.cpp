// Decode memory traffic per token (see decode_traffic.h).
#include "runtime/decode_traffic.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "model/inventory.h"

namespace dsv41 {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Result<DecodeWeightTraffic> decode_weight_traffic(const WeightRegistry& weights, const ModelConfig& config) {
  if (config.n_routed_experts <= 0 || config.num_experts_per_tok > config.n_routed_experts)
    return invalid_argument("config: num_experts_per_tok " + std::to_string(config.num_experts_per_tok) +
                            " of n_routed_experts " + std::to_string(config.n_routed_experts) + " is not a fraction");
  const double expert_fraction = static_cast<double>(config.num_experts_per_tok) / config.n_routed_experts;
  const double engram_columns = static_cast<double>(config.engram_max_ngram_size - 1) * config.engram_n_heads;
  DecodeWeightTraffic t;
  for (const std::string& name : weights.names()) {
    const WeightFamily family = weight_family_of(name);
    if (family == WeightFamily::kVision || family == WeightFamily::kDrafter) continue;
    DSV41_ASSIGN_OR_RETURN(TensorView view, weights.raw(name));
    const bool is_scale = ends_with(name, ".scale");
    // Packed FP4: an integer byte tensor with a scale companion holds two E2M1 codes per byte
    // (the same rule as model/inventory.cpp).
    const bool packed_fp4 =
        !is_scale && (view.dtype == DType::kI8 || view.dtype == DType::kU8) && weights.scale_of(name) != nullptr;
    const double logical = is_scale ? 0.0 : static_cast<double>(view.numel()) * (packed_fp4 ? 2 : 1);
    t.checkpoint_params += static_cast<int64_t>(logical);
    // Fraction of the tensor one decoded token reads.
    double fraction = 1.0;
    const int64_t rows = view.shape.empty() ? 1 : view.shape[0];
    if (family == WeightFamily::kExperts) {
      fraction = expert_fraction;
    } else if (name == "embed.weight") {
      fraction = 1.0 / static_cast<double>(rows);
    } else if (family == WeightFamily::kEngram && name.find(".engram.embed.") != std::string::npos) {
      fraction = std::min(1.0, engram_columns / static_cast<double>(rows));
    }
    t.params += logical * fraction;
    t.stored_bytes += static_cast<double>(view.bytes.size()) * fraction;
  }
  t.engine_bytes = t.params * sizeof(float);
  return t;
}

}  // namespace dsv41
