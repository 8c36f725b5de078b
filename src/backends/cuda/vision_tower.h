// The vision tower and aligner on a CUDA GPU (issue 16 item 6; model.md §3.10): the function of
// model/vision/vision_tower.h (vit_forward + aligner_forward) with bf16 activations into every
// product and fp32 accumulation, fp32 residual stream, norms and softmax statistics.
// A plain C++ header (no CUDA headers), so the app and the runtime can hold one.
//
// Weights are uploaded once at create() as bf16 (the release stores the tower in BF16, so a
// loaded checkpoint's values are kept exactly; float32 norms and biases stay float32) and live
// as long as the object. encode() runs one image on the legacy default stream and returns when
// the results are on the host; its activation workspace is kept and grown for larger grids.
// Kernels: vision_kernels.h (one tiled tensor-core GEMM for every product, flash-style
// attention). Not thread-safe: one encode at a time per object.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "model/vision/vision_weights.h"

namespace dsv41::cuda {

struct VisionEncoding {
  std::vector<float> vit;      // [n_h·n_w, width] after the final norm (vit_forward)
  std::vector<float> aligner;  // [⌈n_h/3⌉·⌈n_w/3⌉, out_dim] (aligner_forward)
};

class VisionTowerGpu {
 public:
  // Uploads `w` to the current CUDA device. Errors: no usable device, a geometry the kernels do
  // not take (head width other than 64; width, SwiGLU width or out_dim not a multiple of 8),
  // a weight of the wrong size, device memory exhausted.
  static Result<std::unique_ptr<VisionTowerGpu>> create(const VisionWeights& w);
  // The geometry check of create() alone (no device needed): an `unsupported` error naming what
  // the kernels do not take, ok otherwise.
  static Status supports(const VisionConfig& c, int out_dim);
  ~VisionTowerGpu();
  VisionTowerGpu(const VisionTowerGpu&) = delete;
  VisionTowerGpu& operator=(const VisionTowerGpu&) = delete;

  // patches [n_h·n_w, 3, p, p] (model/vision/preprocess.h) → tower output and aligner tokens.
  Result<VisionEncoding> encode(const std::vector<float>& patches, int n_h, int n_w);
  // Tower only (for timing the tower alone; aligner skipped).
  Result<std::vector<float>> encode_vit(const std::vector<float>& patches, int n_h, int n_w);

  int64_t weight_bytes() const;

  struct Impl;

 private:
  explicit VisionTowerGpu(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv41::cuda
