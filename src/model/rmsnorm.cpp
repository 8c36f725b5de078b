// RMSNorm in float32 (see rmsnorm.h). Spec: model.md §3.
#include "model/rmsnorm.h"

#include <cmath>

namespace dsv41 {

namespace {

// y = weight · (x · r) with r from the row's sum of squares (accumulated in double).
void scale_row(const float* x, int64_t n, double sum_sq, const float* weight, double eps, float* y) {
  // mean and eps in float, as the fp32 reference adds them; rsqrt rounded once to float.
  const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(n));
  const float r = static_cast<float>(1.0 / std::sqrt(static_cast<double>(mean_sq + static_cast<float>(eps))));
  for (int64_t i = 0; i < n; ++i) {
    const float normed = x[i] * r;
    y[i] = weight ? weight[i] * normed : normed;
  }
}

}  // namespace

void rmsnorm_row(const float* x, int64_t n, const float* weight, double eps, float* y) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  scale_row(x, n, sum_sq, weight, eps, y);
}

void rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* weight, double eps, float* y) {
  // Four rows at a time (a decode batch's rows): each row's sum of squares is still one chain of
  // adds in increasing i, as in rmsnorm_row (the same bits), but the four chains overlap instead
  // of each row waiting on its own add latency one row after another. All four sums are taken
  // before any row is written (y may alias x).
  constexpr int kRows = 4;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    const float* xr = x + r * n;
    double sum_sq[kRows] = {};
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < kRows; ++k) sum_sq[k] += static_cast<double>(xr[k * n + i]) * xr[k * n + i];
    for (int k = 0; k < kRows; ++k) scale_row(xr + k * n, n, sum_sq[k], weight, eps, y + (r + k) * n);
  }
  for (; r < rows; ++r) rmsnorm_row(x + r * n, n, weight, eps, y + r * n);
}

}  // namespace dsv41
