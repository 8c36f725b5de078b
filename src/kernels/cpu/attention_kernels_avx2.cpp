// AVX2/FMA versions of the attention inner loops (see attention_kernels.h). Built with -mavx2 -mfma;
// called only after a runtime CPU check.
#include <immintrin.h>

#include <cstdint>

namespace dsv41 {

namespace {
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}
}  // namespace

void dot_rows_avx2(const float* a, const float* rows, int64_t n, int64_t D, float* y) {
  const int64_t D8 = D & ~int64_t{7};
  for (int64_t j = 0; j < n; ++j) {
    const float* r = rows + j * D;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= D8; d += 16) {
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(r + d), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(r + d + 8), acc1);
    }
    for (; d < D8; d += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(r + d), acc0);
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; d < D; ++d) s += a[d] * r[d];
    y[j] = s;
  }
}

void weighted_sum_rows_avx2(const float* p, const float* rows, int64_t n, int64_t D, float* out) {
  const int64_t D8 = D & ~int64_t{7};
  // Column strips of 32 floats kept in registers across all rows.
  int64_t d = 0;
  for (; d + 32 <= D8; d += 32) {
    __m256 a0 = _mm256_loadu_ps(out + d), a1 = _mm256_loadu_ps(out + d + 8);
    __m256 a2 = _mm256_loadu_ps(out + d + 16), a3 = _mm256_loadu_ps(out + d + 24);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      const float* r = rows + j * D + d;
      a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r), a0);
      a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 8), a1);
      a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 16), a2);
      a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 24), a3);
    }
    _mm256_storeu_ps(out + d, a0);
    _mm256_storeu_ps(out + d + 8, a1);
    _mm256_storeu_ps(out + d + 16, a2);
    _mm256_storeu_ps(out + d + 24, a3);
  }
  for (; d < D8; d += 8) {
    __m256 a0 = _mm256_loadu_ps(out + d);
    for (int64_t j = 0; j < n; ++j) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(rows + j * D + d), a0);
    _mm256_storeu_ps(out + d, a0);
  }
  for (; d < D; ++d) {
    float s = out[d];
    for (int64_t j = 0; j < n; ++j) s += p[j] * rows[j * D + d];
    out[d] = s;
  }
}

// sink_softmax's vector parts (attention_kernels.h): _mm256_max_ps(v, m) is v > m ? v : m, the
// reference's std::max(m, v) lane by lane (a NaN logit never becomes the max).
float scale_and_max_avx2(float* lg, int64_t n, float scaling, float sink) {
  const __m256 s = _mm256_set1_ps(scaling);
  __m256 m = _mm256_set1_ps(sink);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(lg + j), s);
    _mm256_storeu_ps(lg + j, v);
    m = _mm256_max_ps(v, m);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float best = sink;
  for (float v : lanes) best = v > best ? v : best;
  for (; j < n; ++j) {
    lg[j] *= scaling;
    best = lg[j] > best ? lg[j] : best;
  }
  return best;
}

void divide_avx2(float* lg, int64_t n, double denom) {
  const __m256d d = _mm256_set1_pd(denom);
  int64_t j = 0;
  for (; j + 4 <= n; j += 4)
    _mm_storeu_ps(lg + j, _mm256_cvtpd_ps(_mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(lg + j)), d)));
  for (; j < n; ++j) lg[j] = static_cast<float>(lg[j] / denom);
}

}  // namespace dsv41
