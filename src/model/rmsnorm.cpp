// RMSNorm in float32 (see rmsnorm.h). Spec: model.md §3.
#include "model/rmsnorm.h"

#include <cmath>

namespace dsv41 {

void rmsnorm_row(const float* x, int64_t n, const float* weight, double eps, float* y) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  // mean and eps in float, as the fp32 reference adds them; rsqrt rounded once to float.
  const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(n));
  const float r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(mean_sq + static_cast<float>(eps))));
  for (int64_t i = 0; i < n; ++i) {
    const float normed = x[i] * r;
    y[i] = weight ? weight[i] * normed : normed;
  }
}

void rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* weight, double eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) rmsnorm_row(x + r * n, n, weight, eps, y + r * n);
}

}  // namespace dsv41
