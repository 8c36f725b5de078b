// Small reader of config.json keys for the cost calculator's non-V4.1 generations (V4.1 goes
// through format/config.h). Records the first problem as a Status naming the file and the key,
// so a builder reads all it needs and checks `status` once.
// Internal to src/cost/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace dsv41::cost_internal {

// Sanity bounds on what a config may ask for, so that a hostile or corrupt file cannot make the
// calculator allocate per-layer tables of absurd length or overflow a channel count. Far above
// any real model (the largest DeepSeek has 95 layers; its largest count read here is the vocab).
inline constexpr int64_t kMaxLayers = 1 << 16;
inline constexpr int64_t kMaxCount = 1 << 24;

class ConfigKeys {
 public:
  ConfigKeys(const nlohmann::json& json, std::string source) : json_(json), source_(std::move(source)) {}

  bool has(const char* key) const { return json_.contains(key) && !json_.at(key).is_null(); }
  // Required positive integer ≤ kMaxCount; `why` says what it is needed for (goes into the message).
  int64_t positive(const char* key, const char* why);
  // Optional non-negative integer ≤ kMaxCount: absent or null → `fallback`.
  int64_t non_negative_or(const char* key, int64_t fallback);
  std::string string_or(const char* key, const std::string& fallback);
  // num_hidden_layers: required, positive, at most kMaxLayers.
  int64_t layer_count();
  // Required list of non-negative integers ≤ kMaxCount, at most kMaxLayers of them.
  std::vector<int64_t> int_list(const char* key, const char* why);

  const Status& status() const { return status_; }
  void fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& json_;
  std::string source_;
  Status status_;
};

// The quantization facts the weight-FLOP count needs: dense linear weights FP8 or BF16, routed
// experts FP4 / FP8 / BF16. Read from `quantization_config` (quant_method "fp8") and
// `expert_dtype` (top level or inside quantization_config).
struct WeightPrecision {
  bool fp8_linear = false;
  bool fp4_experts = false;
};
WeightPrecision read_weight_precision(const nlohmann::json& json);

}  // namespace dsv41::cost_internal
