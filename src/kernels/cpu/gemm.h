// Dense float32 matrix products for the CPU forward pass.
// Weights are row-major [out, in] (the checkpoint's layout: y = x · Wᵀ), activations row-major
// [rows, in]. The scalar reference (`gemm_f32_reference`) defines the result; `gemm_f32` is the
// fast path (AVX2/FMA, threaded when it pays) and is tested against the reference on random
// inputs at boundary sizes. Summation order differs between the two, so results agree to
// float rounding, not bit for bit.
#pragma once

#include <cstdint>

namespace dsv41 {

// y[r, o] = Σ_i x[r, i] · w[o, i]   for r < rows, o < out.   x: [rows, in], w: [out, in], y: [rows, out]
void gemm_f32_reference(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);
void gemm_f32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);

}  // namespace dsv41
