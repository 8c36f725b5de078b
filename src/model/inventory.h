// What a checkpoint holds, by family: parameter counts and stored bytes for `dsv41 inspect`.
// Spec: model.md §2 (tensor names), system.md §1 (cache costs).
// Owns nothing; reads names, shapes and dtypes only (no tensor data is touched).
//
// Families, by release name: routed experts `layers.*.ffn.experts.*`; Engram `layers.*.engram.*`;
// vision `vision.*`, `aligner.*`, `image_*`; drafter `mtp.*`; everything else is backbone.
// Parameters count logical elements (a packed FP4 byte holds two); scale companions (`*.scale`)
// are storage, not parameters: they add to bytes only.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/config.h"
#include "plan/layer_plan.h"
#include "model/weights.h"

namespace dsv41 {

enum class WeightFamily { kBackbone, kExperts, kEngram, kVision, kDrafter };
inline constexpr int kNumWeightFamilies = 5;
const char* weight_family_name(WeightFamily family);
WeightFamily weight_family_of(std::string_view release_name);

struct FamilyTotals {
  int64_t tensors = 0;     // stored tensors, scales included
  int64_t parameters = 0;  // logical elements, scales excluded
  int64_t bytes = 0;       // stored bytes, scales included
};

struct WeightInventory {
  std::array<FamilyTotals, kNumWeightFamilies> family{};
  FamilyTotals total() const;
};

// From a checkpoint's headers.
WeightInventory inventory_of(const WeightRegistry& weights);
// From the config alone: the parameters expected_tensors() lists (bytes left 0: the storage
// format is a property of a checkpoint, not of the config).
WeightInventory expected_inventory(const ModelConfig& config, const LayerPlan& plan);

// Cache bytes by kind, from the config and record formats (cache/records.h).
struct CacheBytes {
  double global_main_per_token = 0;   // Σ over kv sources main_row_bytes / ratio
  double global_index_per_token = 0;  // Σ over kv sources index_row_bytes / ratio
  int64_t window_per_sequence = 0;    // layers × sliding_window × window_row_bytes (fixed size)
  double global_per_token() const { return global_main_per_token + global_index_per_token; }
};
CacheBytes cache_bytes(const ModelConfig& config, const LayerPlan& plan);

}  // namespace dsv41
