// Random vision towers for tests and benchmarks that need one in memory (the CUDA tower against
// the CPU tower, bench/cuda/vision_bench.cu): weights of a given geometry drawn from a seed, the
// projections rounded to bf16 values — what a BF16 checkpoint holds, so a tower that keeps its
// weights in bf16 and one that widens them to float32 compute from the same numbers.
#pragma once

#include <cstdint>
#include <vector>

#include "format/config.h"
#include "model/vision/vision_weights.h"

namespace dsv41 {

// Projections uniform with variance 1/fan_in (bf16 values), biases ±0.02-ish, norm weights
// 1 ± 0.1; `blocks` blocks (config.num_hidden_layers is set to it).
VisionWeights random_vision_weights(VisionConfig config, int blocks, int out_dim, uint64_t seed);

// n patches of 3·p² values, uniform in [−1, 1) (the range of normalised pixels).
std::vector<float> random_patches(int64_t n, int patch_size, uint64_t seed);

}  // namespace dsv41
