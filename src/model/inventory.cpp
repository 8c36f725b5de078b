#include "model/inventory.h"

#include "cache/records.h"

namespace dsv41 {

const char* weight_family_name(WeightFamily family) {
  switch (family) {
    case WeightFamily::kBackbone: return "backbone";
    case WeightFamily::kExperts: return "routed experts";
    case WeightFamily::kEngram: return "engram";
    case WeightFamily::kVision: return "vision";
    case WeightFamily::kDrafter: return "drafter (mtp)";
  }
  return "?";
}

WeightFamily weight_family_of(std::string_view name) {
  auto starts = [&](std::string_view p) { return name.substr(0, p.size()) == p; };
  if (starts("mtp.")) return WeightFamily::kDrafter;
  if (starts("vision.") || starts("aligner.") || starts("image_")) return WeightFamily::kVision;
  if (starts("layers.")) {
    if (name.find(".ffn.experts.") != std::string_view::npos) return WeightFamily::kExperts;
    if (name.find(".engram.") != std::string_view::npos) return WeightFamily::kEngram;
  }
  return WeightFamily::kBackbone;
}

FamilyTotals WeightInventory::total() const {
  FamilyTotals t;
  for (const auto& f : family) {
    t.tensors += f.tensors;
    t.parameters += f.parameters;
    t.bytes += f.bytes;
  }
  return t;
}

static bool is_scale_name(std::string_view name) {
  constexpr std::string_view kSuffix = ".scale";
  return name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix;
}

WeightInventory inventory_of(const WeightRegistry& weights) {
  WeightInventory inv;
  for (const std::string& name : weights.names()) {
    Result<TensorView> view = weights.raw(name);
    if (!view.ok()) continue;  // names() only lists present tensors
    FamilyTotals& f = inv.family[static_cast<int>(weight_family_of(name))];
    f.tensors += 1;
    f.bytes += static_cast<int64_t>(view->bytes.size());
    if (is_scale_name(name)) continue;
    int64_t n = view->numel();
    // Packed FP4: an integer byte tensor with a scale companion holds two E2M1 codes per byte.
    bool packed_fp4 = (view->dtype == DType::kI8 || view->dtype == DType::kU8) && weights.scale_of(name) != nullptr;
    f.parameters += packed_fp4 ? 2 * n : n;
  }
  return inv;
}

WeightInventory expected_inventory(const ModelConfig& config, const LayerPlan& plan) {
  WeightInventory inv;
  for (const ExpectedTensor& t : expected_tensors(config, plan)) {
    FamilyTotals& f = inv.family[static_cast<int>(weight_family_of(t.name))];
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    f.tensors += 1;
    f.parameters += n;
  }
  return inv;
}

CacheBytes cache_bytes(const ModelConfig& config, const LayerPlan& plan) {
  CacheBytes c;
  const size_t main_row = main_row_bytes(static_cast<size_t>(config.head_dim));
  const size_t index_row = index_row_bytes(static_cast<size_t>(config.index_head_dim));
  for (const LayerInfo& layer : plan.layers) {
    if (layer.role != LayerRole::kFull) continue;
    c.global_main_per_token += static_cast<double>(main_row) / layer.ratio;
    c.global_index_per_token += static_cast<double>(index_row) / layer.ratio;
  }
  c.window_per_sequence = static_cast<int64_t>(plan.layers.size()) * config.sliding_window *
                          static_cast<int64_t>(window_row_bytes(static_cast<size_t>(config.head_dim)));
  return c;
}

}  // namespace dsv41
