// Random-weight models in memory (tests, benchmarks): Model::create_random (model/model.h) is
// defined in random_model.cpp beside this; random attention weights of any layer role.
#pragma once

#include <cstdint>

#include "format/config.h"
#include "model/attention.h"
#include "plan/layer_plan.h"

namespace dsv41 {

// Deterministic random weights of the right shapes: N(0, 1/fan_in) matrices, norm weights around
// 1, sinks around 0 (testing/random_stream.h's generator).
AttentionWeights random_attention_weights(const ModelConfig& config, const LayerInfo& layer, uint64_t seed);

}  // namespace dsv41
