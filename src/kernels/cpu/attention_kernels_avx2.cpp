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

// Several query heads at once (attention_kernels.h, dot_rows_heads / weighted_sum_rows_heads),
// D a multiple of 16. Each key row is read once for NH heads instead of once per head, and the
// heads' chains are independent, so the FMA pipes are not waiting on one chain's latency. The
// bits are those of dot_rows_avx2 / weighted_sum_rows_avx2 head by head: the same two chains
// (channels ≡ 0..7 and 8..15 mod 16) and reduction per (head, row); every output channel of the
// weighted sum its own chain in row order.
namespace {

// Two heads, rows three at a time: 12 accumulators, 12 independent FMA chains where the two-row
// loop below has 8 (two FMAs a cycle at a latency of 4 need 8 in flight, with no slack); the 16
// ymm registers hold them, the two heads' query half and one key half. Returns the rows done (a
// multiple of 3); the bits of dot_heads<2>, row by row.
int64_t dot_two_heads_rows3(const float* q, int64_t q_stride, const float* rows, int64_t n, int64_t D, float* y,
                            int64_t y_stride) {
  int64_t j = 0;
  for (; j + 3 <= n; j += 3) {
    const float* r = rows + j * D;
    __m256 a[2][3][2];
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 3; ++k) a[h][k][0] = a[h][k][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 16)
      for (int c = 0; c < 2; ++c) {
        const __m256 q0 = _mm256_loadu_ps(q + d + 8 * c), q1 = _mm256_loadu_ps(q + q_stride + d + 8 * c);
        for (int k = 0; k < 3; ++k) {
          const __m256 x = _mm256_loadu_ps(r + k * D + d + 8 * c);
          a[0][k][c] = _mm256_fmadd_ps(q0, x, a[0][k][c]);
          a[1][k][c] = _mm256_fmadd_ps(q1, x, a[1][k][c]);
        }
      }
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 3; ++k) y[h * y_stride + j + k] = hsum(_mm256_add_ps(a[h][k][0], a[h][k][1]));
  }
  return j;
}

// NH heads (≤ 2), rows two at a time: 8 accumulators (two heads: after dot_two_heads_rows3's rows).
template <int NH>
void dot_heads(const float* q, int64_t q_stride, const float* rows, int64_t n, int64_t D, float* y, int64_t y_stride) {
  int64_t j = 0;
  if constexpr (NH == 2) j = dot_two_heads_rows3(q, q_stride, rows, n, D, y, y_stride);
  for (; j + 2 <= n; j += 2) {
    const float* r0 = rows + j * D;
    const float* r1 = r0 + D;
    __m256 a[NH][2][2];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 2; ++k) a[h][k][0] = a[h][k][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      const __m256 x00 = _mm256_loadu_ps(r0 + d), x01 = _mm256_loadu_ps(r0 + d + 8);
      const __m256 x10 = _mm256_loadu_ps(r1 + d), x11 = _mm256_loadu_ps(r1 + d + 8);
      for (int h = 0; h < NH; ++h) {
        const __m256 q0 = _mm256_loadu_ps(q + h * q_stride + d), q1 = _mm256_loadu_ps(q + h * q_stride + d + 8);
        a[h][0][0] = _mm256_fmadd_ps(q0, x00, a[h][0][0]);
        a[h][0][1] = _mm256_fmadd_ps(q1, x01, a[h][0][1]);
        a[h][1][0] = _mm256_fmadd_ps(q0, x10, a[h][1][0]);
        a[h][1][1] = _mm256_fmadd_ps(q1, x11, a[h][1][1]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      y[h * y_stride + j] = hsum(_mm256_add_ps(a[h][0][0], a[h][0][1]));
      y[h * y_stride + j + 1] = hsum(_mm256_add_ps(a[h][1][0], a[h][1][1]));
    }
  }
  if (j < n)
    for (int h = 0; h < NH; ++h) dot_rows_avx2(q + h * q_stride, rows + j * D, 1, D, y + h * y_stride + j);
}

// NH heads (≤ 2), channel strips of 32 (then of 8): 8 accumulators.
template <int NH>
void wsum_heads(const float* p, int64_t p_stride, const float* rows, int64_t n, int64_t D, float* out,
                int64_t out_stride) {
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    __m256 a[NH][4];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k) a[h][k] = _mm256_loadu_ps(out + h * out_stride + d + 8 * k);
    for (int64_t j = 0; j < n; ++j) {
      const float* r = rows + j * D + d;
      const __m256 x0 = _mm256_loadu_ps(r), x1 = _mm256_loadu_ps(r + 8);
      const __m256 x2 = _mm256_loadu_ps(r + 16), x3 = _mm256_loadu_ps(r + 24);
      for (int h = 0; h < NH; ++h) {
        const __m256 pj = _mm256_set1_ps(p[h * p_stride + j]);
        a[h][0] = _mm256_fmadd_ps(pj, x0, a[h][0]);
        a[h][1] = _mm256_fmadd_ps(pj, x1, a[h][1]);
        a[h][2] = _mm256_fmadd_ps(pj, x2, a[h][2]);
        a[h][3] = _mm256_fmadd_ps(pj, x3, a[h][3]);
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + h * out_stride + d + 8 * k, a[h][k]);
  }
  for (; d < D; d += 8) {
    __m256 a[NH];
    for (int h = 0; h < NH; ++h) a[h] = _mm256_loadu_ps(out + h * out_stride + d);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 x = _mm256_loadu_ps(rows + j * D + d);
      for (int h = 0; h < NH; ++h) a[h] = _mm256_fmadd_ps(_mm256_set1_ps(p[h * p_stride + j]), x, a[h]);
    }
    for (int h = 0; h < NH; ++h) _mm256_storeu_ps(out + h * out_stride + d, a[h]);
  }
}

}  // namespace

void dot_rows_heads_avx2(const float* q, int64_t q_stride, int64_t heads, const float* rows, int64_t n, int64_t D,
                         float* y, int64_t y_stride) {
  int64_t h = 0;
  for (; h + 2 <= heads; h += 2) dot_heads<2>(q + h * q_stride, q_stride, rows, n, D, y + h * y_stride, y_stride);
  if (h < heads) dot_heads<1>(q + h * q_stride, q_stride, rows, n, D, y + h * y_stride, y_stride);
}

void weighted_sum_rows_heads_avx2(const float* p, int64_t p_stride, int64_t heads, const float* rows, int64_t n,
                                  int64_t D, float* out, int64_t out_stride) {
  int64_t h = 0;
  for (; h + 2 <= heads; h += 2) wsum_heads<2>(p + h * p_stride, p_stride, rows, n, D, out + h * out_stride, out_stride);
  if (h < heads) wsum_heads<1>(p + h * p_stride, p_stride, rows, n, D, out + h * out_stride, out_stride);
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
