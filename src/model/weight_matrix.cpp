// WeightMatrix: the bf16-or-f32 holding decision and the product dispatch (weight_matrix.h).
#include "model/weight_matrix.h"

#include <cmath>
#include <cstring>

#include "base/numerics.h"
#include "kernels/cpu/gemm.h"

namespace dsv41 {

float WeightRef::at(int64_t i) const { return bf16 ? bf16_to_f32(bf16[i]) : f32[i]; }

void matmul(const CpuExec& ex, const float* x, int64_t rows, int64_t in, WeightRef w, int64_t out, float* y) {
  if (w.bf16) {
    gemm_bf16w(ex, x, rows, in, w.bf16, out, y);
  } else {
    gemm_f32(ex, x, rows, in, w.f32, out, y);
  }
}

double dot_reference(WeightRef w, int64_t off, const float* a, int64_t n) {
  double acc = 0;
  if (w.bf16) {
    for (int64_t i = 0; i < n; ++i) acc += double(bf16_to_f32(w.bf16[off + i])) * a[i];
  } else {
    for (int64_t i = 0; i < n; ++i) acc += double(w.f32[off + i]) * a[i];
  }
  return acc;
}

bool bf16_exact(const std::vector<float>& values) {
  for (float v : values) {
    if (std::isnan(v)) return false;
    const float back = bf16_to_f32(f32_to_bf16(v));
    uint32_t a, b;
    std::memcpy(&a, &v, sizeof a);
    std::memcpy(&b, &back, sizeof b);
    if (a != b) return false;
  }
  return true;
}

WeightMatrix make_weight_matrix(std::vector<float> values, bool allow_bf16) {
  WeightMatrix m;
  if (allow_bf16 && !values.empty() && bf16_exact(values)) {
    m.bf16.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) m.bf16[i] = f32_to_bf16(values[i]);
  } else {
    m.f32 = std::move(values);
  }
  return m;
}

}  // namespace dsv41
