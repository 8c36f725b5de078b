#include "kernels/cpu/gemm.h"

namespace dsv41 {

void gemm_f32_reference(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    for (int64_t o = 0; o < out; ++o) {
      const float* wo = w + o * in;
      double acc = 0;  // double accumulation: the reference is the accurate one
      for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(xr[i]) * wo[i];
      y[r * out + o] = static_cast<float>(acc);
    }
  }
}

// Until the AVX2 kernel lands the fast path is the reference (correct, slow).
void gemm_f32(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y) {
  gemm_f32_reference(x, rows, in, w, out, y);
}

}  // namespace dsv41
