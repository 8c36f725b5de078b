// AVX-512 versions of the attention inner loops for several query heads at once (see
// attention_kernels.h, dot_rows_heads / weighted_sum_rows_heads). Built with -mavx512*; called
// only when CPUID reports AVX-512 and D is a multiple of 16.
//
// Same bits as the AVX2 kernels, head by head:
//   dot:  the AVX2 loop keeps two 8-lane accumulators, acc0 over channels d ≡ 0..7 (mod 16) and
//         acc1 over d ≡ 8..15, each a fused chain in channel order, then hsum(acc0 + acc1). One
//         zmm holds [acc0 | acc1]: a 16-channel FMA updates both halves exactly as the two ymm
//         FMAs did, and the reduction below adds the halves, then sums 8 lanes in the AVX2 order.
//   weighted sum: every output channel is its own fused chain out[d] ← fma(p[j], row_j[d], ·)
//         in row order, whatever the vector width.
// The speed comes from reading each key row once for all heads (and four rows at a time, or four
// 16-column strips), which gives the FMA pipes independent chains instead of one latency-bound
// chain per head, and from reducing the dot products' accumulators 16 at a time. One Zen 4 core,
// 64 heads × 512 against 128–640 rows from cache: dot 26–36 → 55–57 GFMA/s, weighted sum 44–54 →
// 55–58 (session 42, docs/BENCHMARKS.md).
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/gemm_avx512_lanes.h"

namespace dsv41 {
namespace {

// hsum(lo256 + hi256) exactly as attention_kernels_avx2.cpp's hsum(_mm256_add_ps(acc0, acc1)).
inline float hsum_pair(__m512 acc) {
  const __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// Two 16-lane accumulators as one pair register [a's 8-lane sum | b's]: hsum_pair's first step
// (lo256 + hi256) for both, laid out for reduce_pairs (gemm_avx512_lanes.h), whose tree over the
// 8 lanes is hsum_pair's.
inline __m512 halves_pair(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
}

// Four heads, rows four at a time: 16 accumulators, 8 loads per 16 FMAs (the two-row loop below
// takes 6 per 8), and the 16 sums reduced together (two reduce_pairs) instead of one hsum_pair
// each. Returns the rows done (a multiple of 4); the bits of dot_heads<4>, row by row.
int64_t dot_four_heads_rows4(const float* q, int64_t q_stride, const float* rows, int64_t n, int64_t D, float* y,
                             int64_t y_stride) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* r = rows + j * D;
    __m512 a[4][4];
    for (int h = 0; h < 4; ++h)
      for (int k = 0; k < 4; ++k) a[h][k] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      __m512 x[4];
      for (int k = 0; k < 4; ++k) x[k] = _mm512_loadu_ps(r + k * D + d);
      for (int h = 0; h < 4; ++h) {
        const __m512 qv = _mm512_loadu_ps(q + h * q_stride + d);
        for (int k = 0; k < 4; ++k) a[h][k] = _mm512_fmadd_ps(qv, x[k], a[h][k]);
      }
    }
    for (int h = 0; h < 4; h += 2) {
      const __m256 s = reduce_pairs(halves_pair(a[h][0], a[h][1]), halves_pair(a[h][2], a[h][3]),
                                    halves_pair(a[h + 1][0], a[h + 1][1]), halves_pair(a[h + 1][2], a[h + 1][3]));
      _mm_storeu_ps(y + h * y_stride + j, _mm256_castps256_ps128(s));
      _mm_storeu_ps(y + (h + 1) * y_stride + j, _mm256_extractf128_ps(s, 1));
    }
  }
  return j;
}

// NH heads (≤ 4), rows two at a time (four heads: after dot_four_heads_rows4's rows).
template <int NH>
void dot_heads(const float* q, int64_t q_stride, const float* rows, int64_t n, int64_t D, float* y, int64_t y_stride) {
  int64_t j = 0;
  if constexpr (NH == 4) j = dot_four_heads_rows4(q, q_stride, rows, n, D, y, y_stride);
  for (; j + 2 <= n; j += 2) {
    const float* r0 = rows + j * D;
    const float* r1 = r0 + D;
    __m512 a0[NH], a1[NH];
    for (int h = 0; h < NH; ++h) a0[h] = a1[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 x0 = _mm512_loadu_ps(r0 + d), x1 = _mm512_loadu_ps(r1 + d);
      for (int h = 0; h < NH; ++h) {
        const __m512 qv = _mm512_loadu_ps(q + h * q_stride + d);
        a0[h] = _mm512_fmadd_ps(qv, x0, a0[h]);
        a1[h] = _mm512_fmadd_ps(qv, x1, a1[h]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      y[h * y_stride + j] = hsum_pair(a0[h]);
      y[h * y_stride + j + 1] = hsum_pair(a1[h]);
    }
  }
  if (j < n) {
    const float* r0 = rows + j * D;
    __m512 a0[NH];
    for (int h = 0; h < NH; ++h) a0[h] = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 x0 = _mm512_loadu_ps(r0 + d);
      for (int h = 0; h < NH; ++h) a0[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * q_stride + d), x0, a0[h]);
    }
    for (int h = 0; h < NH; ++h) y[h * y_stride + j] = hsum_pair(a0[h]);
  }
}

// Four heads over strips of 64 columns: 16 accumulators, 8 loads per 16 FMAs (the 32-column
// strips below take 6 per 8). Every output column keeps its own chain in row order, so the bits
// are wsum_heads<4>'s. Returns the columns done (a multiple of 64).
int64_t wsum_four_heads_strips64(const float* p, int64_t p_stride, const float* rows, int64_t n, int64_t D, float* out,
                                 int64_t out_stride) {
  int64_t d = 0;
  for (; d + 64 <= D; d += 64) {
    __m512 a[4][4];
    for (int h = 0; h < 4; ++h)
      for (int k = 0; k < 4; ++k) a[h][k] = _mm512_loadu_ps(out + h * out_stride + d + 16 * k);
    for (int64_t j = 0; j < n; ++j) {
      const float* r = rows + j * D + d;
      __m512 x[4];
      for (int k = 0; k < 4; ++k) x[k] = _mm512_loadu_ps(r + 16 * k);
      for (int h = 0; h < 4; ++h) {
        const __m512 pj = _mm512_set1_ps(p[h * p_stride + j]);
        for (int k = 0; k < 4; ++k) a[h][k] = _mm512_fmadd_ps(pj, x[k], a[h][k]);
      }
    }
    for (int h = 0; h < 4; ++h)
      for (int k = 0; k < 4; ++k) _mm512_storeu_ps(out + h * out_stride + d + 16 * k, a[h][k]);
  }
  return d;
}

// NH heads (≤ 4), columns in strips of 32 (D a multiple of 16: a last strip of 16; four heads:
// after wsum_four_heads_strips64's columns).
template <int NH>
void wsum_heads(const float* p, int64_t p_stride, const float* rows, int64_t n, int64_t D, float* out,
                int64_t out_stride) {
  int64_t d = 0;
  if constexpr (NH == 4) d = wsum_four_heads_strips64(p, p_stride, rows, n, D, out, out_stride);
  for (; d + 32 <= D; d += 32) {
    __m512 a0[NH], a1[NH];
    for (int h = 0; h < NH; ++h) {
      a0[h] = _mm512_loadu_ps(out + h * out_stride + d);
      a1[h] = _mm512_loadu_ps(out + h * out_stride + d + 16);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* r = rows + j * D + d;
      const __m512 x0 = _mm512_loadu_ps(r), x1 = _mm512_loadu_ps(r + 16);
      for (int h = 0; h < NH; ++h) {
        const __m512 pj = _mm512_set1_ps(p[h * p_stride + j]);
        a0[h] = _mm512_fmadd_ps(pj, x0, a0[h]);
        a1[h] = _mm512_fmadd_ps(pj, x1, a1[h]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      _mm512_storeu_ps(out + h * out_stride + d, a0[h]);
      _mm512_storeu_ps(out + h * out_stride + d + 16, a1[h]);
    }
  }
  if (d < D) {  // 16 columns left
    __m512 a0[NH];
    for (int h = 0; h < NH; ++h) a0[h] = _mm512_loadu_ps(out + h * out_stride + d);
    for (int64_t j = 0; j < n; ++j) {
      const __m512 x0 = _mm512_loadu_ps(rows + j * D + d);
      for (int h = 0; h < NH; ++h) a0[h] = _mm512_fmadd_ps(_mm512_set1_ps(p[h * p_stride + j]), x0, a0[h]);
    }
    for (int h = 0; h < NH; ++h) _mm512_storeu_ps(out + h * out_stride + d, a0[h]);
  }
}

}  // namespace

void dot_rows_heads_avx512(const float* q, int64_t q_stride, int64_t heads, const float* rows, int64_t n, int64_t D,
                           float* y, int64_t y_stride) {
  for (int64_t h = 0; h < heads; h += 4) {
    const float* qh = q + h * q_stride;
    float* yh = y + h * y_stride;
    switch (heads - h) {
      case 1: dot_heads<1>(qh, q_stride, rows, n, D, yh, y_stride); break;
      case 2: dot_heads<2>(qh, q_stride, rows, n, D, yh, y_stride); break;
      case 3: dot_heads<3>(qh, q_stride, rows, n, D, yh, y_stride); break;
      default: dot_heads<4>(qh, q_stride, rows, n, D, yh, y_stride); break;
    }
  }
}

void weighted_sum_rows_heads_avx512(const float* p, int64_t p_stride, int64_t heads, const float* rows, int64_t n,
                                    int64_t D, float* out, int64_t out_stride) {
  for (int64_t h = 0; h < heads; h += 4) {
    const float* ph = p + h * p_stride;
    float* oh = out + h * out_stride;
    switch (heads - h) {
      case 1: wsum_heads<1>(ph, p_stride, rows, n, D, oh, out_stride); break;
      case 2: wsum_heads<2>(ph, p_stride, rows, n, D, oh, out_stride); break;
      case 3: wsum_heads<3>(ph, p_stride, rows, n, D, oh, out_stride); break;
      default: wsum_heads<4>(ph, p_stride, rows, n, D, oh, out_stride); break;
    }
  }
}

// sink_softmax's vector parts (attention_kernels.h): _mm512_max_ps(v, m) is v > m ? v : m, the
// reference's std::max(m, v) lane by lane (a NaN logit never becomes the max); the tail masked.
float scale_and_max_avx512(float* lg, int64_t n, float scaling, float sink) {
  const __m512 s = _mm512_set1_ps(scaling);
  __m512 m = _mm512_set1_ps(sink);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, lg + j), s);
    _mm512_mask_storeu_ps(lg + j, k, v);
    m = _mm512_mask_max_ps(m, k, v, m);
  }
  float lanes[16];
  _mm512_storeu_ps(lanes, m);
  float best = sink;
  for (float v : lanes) best = v > best ? v : best;
  return best;
}

void divide_avx512(float* lg, int64_t n, double denom) {
  const __m512d d = _mm512_set1_pd(denom);
  for (int64_t j = 0; j < n; j += 8) {
    const __mmask8 k = n - j >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << (n - j)) - 1);
    const __m512d q = _mm512_div_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, lg + j)), d);
    _mm256_mask_storeu_ps(lg + j, k, _mm512_cvtpd_ps(q));
  }
}

namespace {

// Lanes of y (finite, ≥ 0) that lie within 2^-7 of a float step from a float rounding midpoint,
// where rounding a double known to ~1e-14 relative could go either way. Normal floats: the 29
// mantissa bits the double → float rounding drops, against their midpoint 2^28. Subnormal floats
// (y < 2^-126): y on the 2^-149 grid, its fraction against 1/2.
inline __mmask8 near_float_midpoint(__m512d y) {
  const __m512i below = _mm512_and_si512(_mm512_castpd_si512(y), _mm512_set1_epi64((int64_t{1} << 29) - 1));
  const __mmask8 normal_near = _mm512_cmp_epi64_mask(
      _mm512_abs_epi64(_mm512_sub_epi64(below, _mm512_set1_epi64(int64_t{1} << 28))), _mm512_set1_epi64(int64_t{1} << 22),
      _MM_CMPINT_LT);
  const __mmask8 sub = _mm512_cmp_pd_mask(y, _mm512_set1_pd(0x1p-126), _CMP_LT_OQ);
  if (!sub) return normal_near;
  const __m512d s = _mm512_mul_pd(y, _mm512_set1_pd(0x1p149));  // exact: a power of two
  const __m512d frac = _mm512_sub_pd(s, _mm512_roundscale_pd(s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
  const __mmask8 sub_near =
      _mm512_cmp_pd_mask(_mm512_abs_pd(_mm512_sub_pd(frac, _mm512_set1_pd(0.5))), _mm512_set1_pd(0x1p-7), _CMP_LT_OQ);
  return static_cast<__mmask8>((normal_near & ~sub) | (sub_near & sub));
}

}  // namespace

// e_j = std::exp(lg_j − m) for j < n (lg_j − m in float, as the scalar loop), with std::exp's bits.
// Eight lanes at a time in double: t = round(x / ln 2), r = x − t·ln 2 (two FMAs with ln 2 as
// hi + lo, |r| ≤ 0.35), exp(r) by its Taylor series to r^11/11! (truncation 7e-15 relative) and
// 2^t from the exponent bits, so y is within ~1e-14 relative of the exact value. Rounding y to
// float then gives the correctly rounded result unless y lies within 2^-7 of a float step from a
// rounding midpoint; glibc's expf is documented at 0.502 ULP (its double result before the
// rounding is within 2^-33 relative, < 0.002 of a step), so wherever the exact value is farther
// from a midpoint than that, glibc returns the correctly rounded float too — subnormal results
// included (the same double → float rounding). x < -104 gives +0 (exp(x) < 2^-150, as glibc
// returns below -103.97). Lanes near a midpoint (≈ 1.6 %), and x > 80, Inf or NaN, take std::exp
// itself (a peaked softmax has many underflowing exps, so those stay on the lanes).
void exps_avx512(float* lg, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m512d inv_ln2 = _mm512_set1_pd(1.4426950408889634), ln2_hi = _mm512_set1_pd(0.6931471805599453),
                ln2_lo = _mm512_set1_pd(2.3190468138462996e-17);
  // 1/k! for k = 11 … 1.
  static constexpr double kInvFact[11] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040,
                                          1.0 / 720,      1.0 / 120,     1.0 / 24,     1.0 / 6,     0.5,
                                          1.0};
  for (int64_t j = 0; j < n; j += 8) {
    const __mmask8 k = n - j >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << (n - j)) - 1);
    const __m256 xf = _mm256_sub_ps(_mm256_maskz_loadu_ps(k, lg + j), mv);
    const __m512d x0 = _mm512_cvtps_pd(xf);
    const __mmask8 in_range = _mm512_mask_cmp_pd_mask(k, x0, _mm512_set1_pd(-104.0), _CMP_GE_OQ) &
                              _mm512_cmp_pd_mask(x0, _mm512_set1_pd(80.0), _CMP_LE_OQ);
    const __mmask8 zero = _mm512_mask_cmp_pd_mask(k, x0, _mm512_set1_pd(-104.0), _CMP_LT_OQ);  // −Inf too
    const __m512d x = _mm512_maskz_mov_pd(in_range, x0);  // other lanes: exp(0), not used
    const __m512d t = _mm512_roundscale_pd(_mm512_mul_pd(x, inv_ln2), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512d r = _mm512_fnmadd_pd(t, ln2_lo, _mm512_fnmadd_pd(t, ln2_hi, x));
    // Σ r^k / k! for k ≤ 11 in Estrin's order (pairs, then r², r⁴, r⁸): 4 dependent FMAs deep
    // instead of Horner's 12, so the lanes of neighbouring iterations overlap.
    auto c = [&](int i) { return _mm512_set1_pd(kInvFact[11 - i]); };  // 1/i!
    const __m512d r2 = _mm512_mul_pd(r, r), r4 = _mm512_mul_pd(r2, r2), r8 = _mm512_mul_pd(r4, r4);
    const __m512d q0 = _mm512_add_pd(_mm512_set1_pd(1.0), r), q1 = _mm512_fmadd_pd(c(3), r, c(2)),
                  q2 = _mm512_fmadd_pd(c(5), r, c(4)), q3 = _mm512_fmadd_pd(c(7), r, c(6)),
                  q4 = _mm512_fmadd_pd(c(9), r, c(8)), q5 = _mm512_fmadd_pd(c(11), r, c(10));
    const __m512d s0 = _mm512_fmadd_pd(q1, r2, q0), s1 = _mm512_fmadd_pd(q3, r2, q2), s2 = _mm512_fmadd_pd(q5, r2, q4);
    const __m512d p = _mm512_fmadd_pd(s2, r8, _mm512_fmadd_pd(s1, r4, s0));
    const __m512i two_t = _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtpd_epi64(t), _mm512_set1_epi64(1023)), 52);
    const __m512d y = _mm512_mul_pd(p, _mm512_castsi512_pd(two_t));
    const __mmask8 vec = in_range & static_cast<__mmask8>(~near_float_midpoint(y));
    _mm256_mask_storeu_ps(lg + j, vec, _mm512_cvtpd_ps(y));
    _mm256_mask_storeu_ps(lg + j, zero, _mm256_setzero_ps());
    if (const unsigned rest = k & static_cast<__mmask8>(~(vec | zero))) {
      alignas(32) float xs[8];
      _mm256_store_ps(xs, xf);
      for (int i = 0; i < 8; ++i)
        if (rest >> i & 1u) lg[j + i] = std::exp(xs[i]);
    }
  }
}

// divide_avx512's bits (lg_j ← float(lg_j / denom), the quotient rounded to double first) by a
// multiply with 1/denom: that product is within 2^-52 relative of the quotient, so both round to
// the same float unless the product lies near a float rounding midpoint (near_float_midpoint);
// those lanes divide. For lg_j ≥ 0 (exps), denom > 0. VDIVPD is ~4× the cost of VMULPD.
void divide_by_reciprocal_avx512(float* lg, int64_t n, double denom) {
  const __m512d d = _mm512_set1_pd(denom), inv = _mm512_set1_pd(1.0 / denom);
  for (int64_t j = 0; j < n; j += 8) {
    const __mmask8 k = n - j >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << (n - j)) - 1);
    const __m512d e = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, lg + j));
    __m512d q = _mm512_mul_pd(e, inv);
    if (const __mmask8 near = k & near_float_midpoint(q)) q = _mm512_mask_div_pd(q, near, e, d);
    _mm256_mask_storeu_ps(lg + j, k, _mm512_cvtpd_ps(q));
  }
}

}  // namespace dsv41
