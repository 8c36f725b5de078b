// AVX2 inner loops of the mHC, Engram and compressor fast paths (see block_kernels.h).
// Floating-point contraction is turned off for this file: the compiler would otherwise fuse the
// multiply-then-add pairs below (and in the scalar tails) into FMAs, and the results would no
// longer match the scalar references bit for bit. Only intrinsics and file-local helpers here (an
// inline function from a shared header compiled with -mavx2 could be picked by the linker for
// callers on CPUs without AVX2).
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/block_kernels.h"

namespace dsv41 {
namespace {

inline double hsum_pd(__m256d v) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  s = _mm_add_sd(s, _mm_unpackhi_pd(s, s));
  return _mm_cvtsd_f64(s);
}

inline __m256d widen_lo(__m256 v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
inline __m256d widen_hi(__m256 v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }

}  // namespace

double sum_squares_avx2(const float* x, int64_t n) {
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = widen_lo(v), hi = widen_hi(v);
    s0 = _mm256_add_pd(s0, _mm256_mul_pd(lo, lo));
    s1 = _mm256_add_pd(s1, _mm256_mul_pd(hi, hi));
  }
  double s = hsum_pd(_mm256_add_pd(s0, s1));
  for (; i < n; ++i) s += double(x[i]) * x[i];
  return s;
}

void scale_avx2(const float* x, float s, int64_t n, float* y) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), sv));
  for (; i < n; ++i) y[i] = x[i] * s;
}

void mhc_collapse_avx2(const float* x, const float* p, int hc, int64_t d, float* y) {
  int64_t c = 0;
  for (; c + 16 <= d; c += 16) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int j = 0; j < hc; ++j) {
      const __m256 pj = _mm256_set1_ps(p[j]);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(pj, _mm256_loadu_ps(x + j * d + c)));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(pj, _mm256_loadu_ps(x + j * d + c + 8)));
    }
    _mm256_storeu_ps(y + c, a0);
    _mm256_storeu_ps(y + c + 8, a1);
  }
  for (; c + 8 <= d; c += 8) {
    __m256 a0 = _mm256_setzero_ps();
    for (int j = 0; j < hc; ++j)
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(x + j * d + c)));
    _mm256_storeu_ps(y + c, a0);
  }
  for (; c < d; ++c) {
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc += p[j] * x[j * d + c];
    y[c] = acc;
  }
}

void mhc_expand_avx2(const float* a, const float* x, const float* post, const float* comb, int hc, int64_t d,
                     float* out) {
  for (int i = 0; i < hc; ++i) {
    float* oi = out + i * d;
    const __m256 pi = _mm256_set1_ps(post[i]);
    int64_t c = 0;
    for (; c + 16 <= d; c += 16) {
      __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
      for (int j = 0; j < hc; ++j) {
        const __m256 w = _mm256_set1_ps(comb[j * hc + i]);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(w, _mm256_loadu_ps(x + j * d + c)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(w, _mm256_loadu_ps(x + j * d + c + 8)));
      }
      _mm256_storeu_ps(oi + c, _mm256_add_ps(_mm256_mul_ps(pi, _mm256_loadu_ps(a + c)), a0));
      _mm256_storeu_ps(oi + c + 8, _mm256_add_ps(_mm256_mul_ps(pi, _mm256_loadu_ps(a + c + 8)), a1));
    }
    for (; c + 8 <= d; c += 8) {
      __m256 a0 = _mm256_setzero_ps();
      for (int j = 0; j < hc; ++j)
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_set1_ps(comb[j * hc + i]), _mm256_loadu_ps(x + j * d + c)));
      _mm256_storeu_ps(oi + c, _mm256_add_ps(_mm256_mul_ps(pi, _mm256_loadu_ps(a + c)), a0));
    }
    for (; c < d; ++c) {
      float acc = 0;
      for (int j = 0; j < hc; ++j) acc += comb[j * hc + i] * x[j * d + c];
      oi[c] = post[i] * a[c] + acc;
    }
  }
}

void engram_sums_avx2(const float* x, const float* k, const float* qw, const float* kw, int64_t d, double* xx,
                      double* kk, double* dot) {
  __m256d sx = _mm256_setzero_pd(), sk = _mm256_setzero_pd(), sd = _mm256_setzero_pd();
  int64_t c = 0;
  for (; c + 4 <= d; c += 4) {
    const __m256d xv = _mm256_cvtps_pd(_mm_loadu_ps(x + c));
    const __m256d kv = _mm256_cvtps_pd(_mm_loadu_ps(k + c));
    const __m256d w = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(qw + c)), _mm256_cvtps_pd(_mm_loadu_ps(kw + c)));
    sx = _mm256_add_pd(sx, _mm256_mul_pd(xv, xv));
    sk = _mm256_add_pd(sk, _mm256_mul_pd(kv, kv));
    sd = _mm256_add_pd(sd, _mm256_mul_pd(_mm256_mul_pd(xv, w), kv));
  }
  double a = hsum_pd(sx), b = hsum_pd(sk), e = hsum_pd(sd);
  for (; c < d; ++c) {
    a += double(x[c]) * x[c];
    b += double(k[c]) * k[c];
    e += double(x[c]) * (double(qw[c]) * kw[c]) * k[c];
  }
  *xx = a;
  *kk = b;
  *dot = e;
}

void add_scaled_avx2(float* y, float g, const float* v, int64_t n) {
  const __m256 gv = _mm256_set1_ps(g);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(gv, _mm256_loadu_ps(v + i))));
  for (; i < n; ++i) y[i] += g * v[i];
}

void softmax_pool_avx2(const float* a, const float* b, int r, int64_t D, float* scratch, float* out) {
  int64_t c = 0;
  for (; c + 8 <= D; c += 8) {
    // std::max(m, v) is (m < v) ? v : m, which is _mm256_max_ps(v, m) (NaN and ±0 included).
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < r; ++j) m = _mm256_max_ps(_mm256_loadu_ps(b + j * D + c), m);
    for (int j = 0; j < r; ++j) _mm256_storeu_ps(scratch + j * 8, _mm256_sub_ps(_mm256_loadu_ps(b + j * D + c), m));
    for (int i = 0; i < r * 8; ++i) scratch[i] = std::exp(scratch[i]);
    __m256 den = _mm256_setzero_ps();
    for (int j = 0; j < r; ++j) den = _mm256_add_ps(den, _mm256_loadu_ps(scratch + j * 8));
    __m256 acc = _mm256_setzero_ps();
    for (int j = 0; j < r; ++j)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + j * D + c),
                                             _mm256_div_ps(_mm256_loadu_ps(scratch + j * 8), den)));
    _mm256_storeu_ps(out + c, acc);
  }
  for (; c < D; ++c) {
    float m = -INFINITY;
    for (int j = 0; j < r; ++j) m = std::max(m, b[j * D + c]);
    float den = 0.0f;
    for (int j = 0; j < r; ++j) {
      scratch[j] = std::exp(b[j * D + c] - m);
      den += scratch[j];
    }
    float acc = 0.0f;
    for (int j = 0; j < r; ++j) acc += a[j * D + c] * (scratch[j] / den);
    out[c] = acc;
  }
}

}  // namespace dsv41
