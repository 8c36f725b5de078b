// Scalar references and runtime dispatch of the attention inner loops (see attention_kernels.h).
#include "kernels/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>

namespace dsv41 {

// Defined in attention_kernels_avx2.cpp (built with -mavx2 -mfma); only called when the CPU
// reports both.
void dot_rows_avx2(const float* a, const float* rows, int64_t n, int64_t D, float* y);
void weighted_sum_rows_avx2(const float* p, const float* rows, int64_t n, int64_t D, float* out);

// Defined in attention_kernels_avx512.cpp (built with -mavx512*); D a multiple of 16.
void dot_rows_heads_avx512(const float* q, int64_t q_stride, int64_t heads, const float* rows, int64_t n, int64_t D,
                           float* y, int64_t y_stride);
void weighted_sum_rows_heads_avx512(const float* p, int64_t p_stride, int64_t heads, const float* rows, int64_t n,
                                    int64_t D, float* out, int64_t out_stride);
void dot_rows_heads_avx2(const float* q, int64_t q_stride, int64_t heads, const float* rows, int64_t n, int64_t D,
                         float* y, int64_t y_stride);
void weighted_sum_rows_heads_avx2(const float* p, int64_t p_stride, int64_t heads, const float* rows, int64_t n,
                                  int64_t D, float* out, int64_t out_stride);

// The vector parts of sink_softmax (attention_kernels_avx2.cpp / _avx512.cpp): the scaling with
// the max (returned, m ≥ sink), then the division by denom.
float scale_and_max_avx2(float* lg, int64_t n, float scaling, float sink);
void divide_avx2(float* lg, int64_t n, double denom);
float scale_and_max_avx512(float* lg, int64_t n, float scaling, float sink);
void divide_avx512(float* lg, int64_t n, double denom);
void exps_avx512(float* lg, int64_t n, float m);
void divide_by_reciprocal_avx512(float* lg, int64_t n, double denom);

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

namespace {

// exp(sink − m) + Σ_j e_j in double, lg_j ← e_j = exp(lg_j − m): the part of the softmax that
// stays in j order on every ISA.
double exps_and_denominator(float* lg, int64_t n, float m, float sink) {
  double denom = std::exp(static_cast<double>(sink - m));
  for (int64_t j = 0; j < n; ++j) {
    lg[j] = std::exp(lg[j] - m);
    denom += lg[j];
  }
  return denom;
}

}  // namespace

void sink_softmax_reference(float* lg, int64_t n, float scaling, float sink) {
  float m = sink;  // the sink joins the max and the denominator, never the values
  for (int64_t j = 0; j < n; ++j) {
    lg[j] *= scaling;
    m = std::max(m, lg[j]);
  }
  const double denom = exps_and_denominator(lg, n, m, sink);
  for (int64_t j = 0; j < n; ++j) lg[j] = static_cast<float>(lg[j] / denom);
}

void sink_softmax(CpuIsa isa, float* lg, int64_t n, float scaling, float sink) {
  const CpuIsa use = std::min(isa, cpu_best_isa());
  if (use >= CpuIsa::kAvx512) {
    const float m = scale_and_max_avx512(lg, n, scaling, sink);
    divide_avx512(lg, n, exps_and_denominator(lg, n, m, sink));
  } else if (use >= CpuIsa::kAvx2 && attention_kernels_use_avx2()) {
    const float m = scale_and_max_avx2(lg, n, scaling, sink);
    divide_avx2(lg, n, exps_and_denominator(lg, n, m, sink));
  } else {
    sink_softmax_reference(lg, n, scaling, sink);
  }
}

void exps_shifted(CpuIsa isa, float* lg, int64_t n, float m) {
  if (std::min(isa, cpu_best_isa()) >= CpuIsa::kAvx512) {
    exps_avx512(lg, n, m);
  } else {
    for (int64_t j = 0; j < n; ++j) lg[j] = std::exp(lg[j] - m);
  }
}

void divide_by_denominator(CpuIsa isa, float* lg, int64_t n, double denom) {
  if (std::min(isa, cpu_best_isa()) >= CpuIsa::kAvx512) {
    divide_by_reciprocal_avx512(lg, n, denom);
  } else {
    for (int64_t j = 0; j < n; ++j) lg[j] = static_cast<float>(lg[j] / denom);
  }
}

void sink_softmax_heads(CpuIsa isa, float* lg, int64_t lstride, int64_t heads, int64_t n, float scaling,
                        const float* sinks) {
  if (std::min(isa, cpu_best_isa()) < CpuIsa::kAvx512) {
    for (int64_t h = 0; h < heads; ++h) sink_softmax(isa, lg + h * lstride, n, scaling, sinks[h]);
    return;
  }
  constexpr int64_t kChains = 8;  // heads whose sums run side by side (8 double chains keep the adders busy)
  for (int64_t h0 = 0; h0 < heads; h0 += kChains) {
    const int64_t nh = std::min(kChains, heads - h0);
    double denom[kChains];
    for (int64_t i = 0; i < nh; ++i) {
      float* row = lg + (h0 + i) * lstride;
      const float sink = sinks[h0 + i];
      const float m = scale_and_max_avx512(row, n, scaling, sink);
      exps_avx512(row, n, m);
      denom[i] = std::exp(static_cast<double>(sink - m));  // as exps_and_denominator starts
    }
    const float* row0 = lg + h0 * lstride;
    if (nh == kChains) {
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < kChains; ++i) denom[i] += row0[i * lstride + j];
    } else {
      for (int64_t i = 0; i < nh; ++i)
        for (int64_t j = 0; j < n; ++j) denom[i] += row0[i * lstride + j];
    }
    for (int64_t i = 0; i < nh; ++i) divide_by_reciprocal_avx512(lg + (h0 + i) * lstride, n, denom[i]);
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

namespace {

// The multi-head AVX-512 loops give the AVX2 kernels' bits, so they run only where dot_rows
// itself would run AVX2 code.
bool use_heads_avx512(CpuIsa isa, int64_t D) {
  return isa >= CpuIsa::kAvx512 && cpu_best_isa() >= CpuIsa::kAvx512 && attention_kernels_use_avx2() && D % 16 == 0;
}
// The multi-head AVX2 loops (the same bits again) where the path is capped at AVX2.
bool use_heads_avx2(CpuIsa isa, int64_t D) { return isa >= CpuIsa::kAvx2 && attention_kernels_use_avx2() && D % 16 == 0; }

}  // namespace

void dot_rows_heads(CpuIsa isa, const float* q, int64_t q_stride, int64_t heads, const float* rows, int64_t n,
                    int64_t D, float* y, int64_t y_stride) {
  if (heads <= 0 || n <= 0) return;
  if (use_heads_avx512(isa, D)) return dot_rows_heads_avx512(q, q_stride, heads, rows, n, D, y, y_stride);
  if (use_heads_avx2(isa, D)) return dot_rows_heads_avx2(q, q_stride, heads, rows, n, D, y, y_stride);
  for (int64_t h = 0; h < heads; ++h) dot_rows(q + h * q_stride, rows, n, D, y + h * y_stride);
}

void weighted_sum_rows_heads(CpuIsa isa, const float* p, int64_t p_stride, int64_t heads, const float* rows,
                             int64_t n, int64_t D, float* out, int64_t out_stride) {
  if (heads <= 0 || n <= 0) return;
  if (use_heads_avx512(isa, D)) return weighted_sum_rows_heads_avx512(p, p_stride, heads, rows, n, D, out, out_stride);
  if (use_heads_avx2(isa, D)) return weighted_sum_rows_heads_avx2(p, p_stride, heads, rows, n, D, out, out_stride);
  for (int64_t h = 0; h < heads; ++h) weighted_sum_rows(p + h * p_stride, rows, n, D, out + h * out_stride);
}

}  // namespace dsv41
