// Scalar references and runtime dispatch of the attention inner loops (see attention_kernels.h).
#include "kernels/cpu/attention_kernels.h"

namespace dsv41 {

// Defined in attention_kernels_avx2.cpp (built with -mavx2 -mfma); only called when the CPU
// reports both.
void dot_rows_avx2(const float* a, const float* rows, int64_t n, int64_t D, float* y);
void weighted_sum_rows_avx2(const float* p, const float* rows, int64_t n, int64_t D, float* out);

void dot_rows_reference(const float* a, const float* rows, int64_t n, int64_t D, float* y) {
  for (int64_t j = 0; j < n; ++j) {
    const float* r = rows + j * D;
    double acc = 0;
    for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(a[d]) * r[d];
    y[j] = static_cast<float>(acc);
  }
}

void weighted_sum_rows_reference(const float* p, const float* rows, int64_t n, int64_t D, float* out) {
  for (int64_t d = 0; d < D; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += static_cast<double>(p[j]) * rows[j * D + d];
    out[d] += static_cast<float>(acc);
  }
}

bool attention_kernels_use_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void dot_rows(const float* a, const float* rows, int64_t n, int64_t D, float* y) {
  if (attention_kernels_use_avx2()) return dot_rows_avx2(a, rows, n, D, y);
  dot_rows_reference(a, rows, n, D, y);
}

void weighted_sum_rows(const float* p, const float* rows, int64_t n, int64_t D, float* out) {
  if (attention_kernels_use_avx2()) return weighted_sum_rows_avx2(p, rows, n, D, out);
  weighted_sum_rows_reference(p, rows, n, D, out);
}

}  // namespace dsv41
