// The vision tower's and aligner's weights (model.md §2 names, §3.10 shapes), read from a
// model directory's tensors into float32. Stored dtypes BF16 / F16 / F32 are accepted (the
// release: BF16 tower, FP32 RMSNorm weights); every tensor's presence and shape is checked and a
// missing or misshapen one is an error naming it — a text-only checkpoint (no vision tensors)
// gives "model has no vision tower" rather than a list of absent names.
//
// Float32 copies: the 32-layer release tower is ~0.3 B parameters, 1.2 GB as float32 — fine
// for this first CPU slice; keeping BF16 and converting inside the GEMM is the planned fast path.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "format/safetensors.h"

namespace dsv41 {

struct VisionBlockWeights {
  std::vector<float> norm1, wqkv, wqkv_bias, wo, wo_bias, norm2, w1, w2;
};

struct VisionWeights {
  VisionConfig config;
  int out_dim = 0;  // the text model's hidden size (aligner output)
  std::vector<float> patch_w, patch_b;  // [dim, 3·p²], [dim]
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> norm;              // [dim]
  std::vector<float> aligner_w1, aligner_b1, aligner_w2, aligner_b2;  // [H, 9·dim], [H], [H, H], [H]
  std::vector<float> image_start, image_newline, image_end;          // [H] each
};

// {name, shape} of every vision tensor for this config, in a fixed order.
std::vector<std::pair<std::string, std::vector<int64_t>>> vision_tensor_shapes(const VisionConfig& config,
                                                                               int out_dim);

Result<VisionWeights> load_vision_weights(const TensorSet& tensors, const VisionConfig& config, int out_dim);

}  // namespace dsv41
