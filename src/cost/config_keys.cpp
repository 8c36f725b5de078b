// ConfigKeys: typed reads of config.json keys with messages that name the file and key.
#include "cost/config_keys.h"

#include <fmt/format.h>

namespace dsv41::cost_internal {

int64_t ConfigKeys::positive(const char* key, const char* why) {
  if (!has(key)) {
    fail(not_found(fmt::format("{}: missing key '{}' (needed for {})", source_, key, why)));
    return 1;
  }
  const auto& v = json_.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxCount) {
    fail(invalid_argument(
        fmt::format("{}: key '{}' must be a positive integer (at most {}), got {}", source_, key, kMaxCount, v.dump())));
    return 1;
  }
  return v.get<int64_t>();
}

int64_t ConfigKeys::layer_count() {
  const int64_t layers = positive("num_hidden_layers", "the layer count");
  if (layers > kMaxLayers)
    fail(invalid_argument(fmt::format("{}: num_hidden_layers {} is more than {}", source_, layers, kMaxLayers)));
  return layers;
}

int64_t ConfigKeys::non_negative_or(const char* key, int64_t fallback) {
  if (!has(key)) return fallback;
  const auto& v = json_.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxCount) {
    fail(invalid_argument(fmt::format("{}: key '{}' must be a non-negative integer (at most {}), got {}", source_,
                                      key, kMaxCount, v.dump())));
    return fallback;
  }
  return v.get<int64_t>();
}

std::string ConfigKeys::string_or(const char* key, const std::string& fallback) {
  if (!has(key)) return fallback;
  const auto& v = json_.at(key);
  if (!v.is_string()) {
    fail(invalid_argument(fmt::format("{}: key '{}' must be a string, got {}", source_, key, v.dump())));
    return fallback;
  }
  return v.get<std::string>();
}

std::vector<int64_t> ConfigKeys::int_list(const char* key, const char* why) {
  std::vector<int64_t> out;
  if (!has(key)) {
    fail(not_found(fmt::format("{}: missing key '{}' (needed for {})", source_, key, why)));
    return out;
  }
  const auto& v = json_.at(key);
  if (!v.is_array() || int64_t(v.size()) > kMaxLayers) {
    fail(invalid_argument(fmt::format("{}: key '{}' must be a list of at most {} integers", source_, key, kMaxLayers)));
    return out;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 0 || v[i].get<int64_t>() > kMaxCount) {
      fail(invalid_argument(
          fmt::format("{}: key '{}' entry {} must be a non-negative integer, got {}", source_, key, i, v[i].dump())));
      return {};
    }
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

WeightPrecision read_weight_precision(const nlohmann::json& json) {
  WeightPrecision p;
  auto expert_fp4 = [](const nlohmann::json& j) {
    return j.contains("expert_dtype") && j["expert_dtype"].is_string() && j["expert_dtype"] == "fp4";
  };
  p.fp4_experts = expert_fp4(json);
  if (json.contains("quantization_config") && json["quantization_config"].is_object()) {
    const auto& q = json["quantization_config"];
    p.fp8_linear = q.contains("quant_method") && q["quant_method"].is_string() && q["quant_method"] == "fp8";
    p.fp4_experts = p.fp4_experts || expert_fp4(q);
  }
  return p;
}

}  // namespace dsv41::cost_internal
