// libFuzzer target: arbitrary bytes into parse_model_config (format/config.cpp), and when they
// parse, into build_layer_plan and format_layer_plan. The parser must return an error or a config
// whose layer plan builds; it must never crash, throw, leak or read out of bounds (ASan/UBSan).
// Seeds: shared/golden/*/config.json, */official/config.json, data/configs/*.json.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "format/config.h"
#include "plan/layer_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  dsv41::Result<dsv41::ModelConfig> config = dsv41::parse_model_config(text, "fuzz.json");
  if (!config.ok()) {
    if (config.status().message().rfind("fuzz.json: ", 0) != 0) std::abort();  // errors name the file
    return 0;
  }
  // A config that parses either plans or is refused by the plan with a reason.
  dsv41::Result<dsv41::LayerPlan> plan = dsv41::build_layer_plan(*config);
  if (!plan.ok()) {
    if (plan.status().message().empty()) std::abort();
    return 0;
  }
  if (plan->layers.size() != size_t(config->num_hidden_layers)) std::abort();
  (void)dsv41::format_layer_plan(*plan);
  return 0;
}
