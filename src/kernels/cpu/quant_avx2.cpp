// AVX2 cache-record quantisers (see quant_avx2.h). Built with -mavx2 -mfma -mf16c.
// Each lane does the scalar codec's arithmetic (base/numerics.cpp, cache/records.cpp) in the
// same float operations: the divide by the scale (IEEE, correctly rounded in both), the clamp,
// the E4M3 rounding on the float bits (normal range) or of x·512 to an integer (subnormal range),
// the E2M1 decision boundaries, and the final multiply by the scale.
#include "kernels/cpu/quant_avx2.h"

#include <immintrin.h>

namespace dsv41 {
namespace {

inline __m256 abs_ps(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
inline __m256 sign_ps(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN))); }

// clamp_sym(v, limit) of records.cpp for finite v: −limit below, limit above, −0 kept.
inline __m256 clamp_ps(__m256 v, float limit) {
  return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-limit)), _mm256_set1_ps(limit));
}

// |v| ≤ 448 (finite) → the E4M3 magnitude as a float (the code's decoded value) and the code.
inline __m256 e4m3_magnitude(__m256 a, __m256i* code) {
  const __m256i b = _mm256_castps_si256(a);
  // Normal range: keep 3 mantissa bits, half to even on the bits; a carry moves into the exponent.
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 20), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFFF)), odd),
                                           _mm256_set1_epi32(~0xFFFFF));
  // Subnormal range (a < 2^-6): a grid of step 2^-9, a·512 rounded half to even.
  const __m256 steps = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 sub = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
  if (code) {
    const __m256i normal_code = _mm256_sub_epi32(_mm256_srli_epi32(rounded, 20), _mm256_set1_epi32(120 << 3));
    *code = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(normal_code),
                                                 _mm256_castsi256_ps(_mm256_cvtps_epi32(steps)), sub));
  }
  return _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_mul_ps(steps, _mm256_set1_ps(0x1p-9f)), sub);
}

// |v| ≤ 6 → the E2M1 grid index (0..7) as int32: the decision boundaries of f32_to_e2m1.
inline __m256i e2m1_index(__m256 a) {
  __m256i idx = _mm256_setzero_si256();
  auto count = [&](__m256 m) { idx = _mm256_sub_epi32(idx, _mm256_castps_si256(m)); };  // mask lanes are −1
  count(_mm256_cmp_ps(a, _mm256_set1_ps(0.25f), _CMP_GT_OQ));
  count(_mm256_cmp_ps(a, _mm256_set1_ps(0.75f), _CMP_GE_OQ));
  count(_mm256_cmp_ps(a, _mm256_set1_ps(1.25f), _CMP_GT_OQ));
  count(_mm256_cmp_ps(a, _mm256_set1_ps(1.75f), _CMP_GE_OQ));
  count(_mm256_cmp_ps(a, _mm256_set1_ps(2.5f), _CMP_GT_OQ));
  count(_mm256_cmp_ps(a, _mm256_set1_ps(3.5f), _CMP_GE_OQ));
  count(_mm256_cmp_ps(a, _mm256_set1_ps(5.0f), _CMP_GT_OQ));
  return idx;
}

}  // namespace

bool block_amax_avx2(const float* x, size_t n, float* amax) {
  const __m256i exp_mask = _mm256_set1_epi32(0x7F800000);
  __m256 m = _mm256_setzero_ps();
  __m256i bad = _mm256_setzero_si256();
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exp_mask), exp_mask));
    m = _mm256_max_ps(m, abs_ps(v));
  }
  if (!_mm256_testz_si256(bad, bad)) return false;
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  *amax = _mm_cvtss_f32(h);
  return true;
}

void e4m3_block_fake_quant_avx2(float* x, size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = clamp_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), 448.0f);
    const __m256 q = _mm256_or_ps(e4m3_magnitude(abs_ps(v), nullptr), sign_ps(v));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(q, s));
  }
}

void e4m3_block_codes_avx2(const float* x, size_t n, float scale, uint8_t* codes) {
  const __m256 s = _mm256_set1_ps(scale);
  alignas(32) int32_t c[8];
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = clamp_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), 448.0f);
    __m256i code;
    e4m3_magnitude(abs_ps(v), &code);
    code = _mm256_or_si256(code, _mm256_srli_epi32(_mm256_castps_si256(sign_ps(v)), 24));  // sign → 0x80
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), code);
    for (int j = 0; j < 8; ++j) codes[i + j] = static_cast<uint8_t>(c[j]);
  }
}

void e2m1_block_fake_quant_avx2(float* x, size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 grid = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = clamp_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), 6.0f);
    const __m256i idx = e2m1_index(abs_ps(v));
    // A zero index is +0 whatever the sign (f32_to_e2m1 never gives code 8).
    const __m256 nonzero = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_setzero_si256()));
    const __m256 q = _mm256_or_ps(_mm256_permutevar8x32_ps(grid, idx), _mm256_and_ps(sign_ps(v), nonzero));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(q, s));
  }
}

void e2m1_block_codes_avx2(const float* x, size_t n, float scale, uint8_t* codes) {
  const __m256 s = _mm256_set1_ps(scale);
  alignas(32) int32_t c[8];
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = clamp_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s), 6.0f);
    const __m256i idx = e2m1_index(abs_ps(v));
    const __m256i nonzero = _mm256_cmpgt_epi32(idx, _mm256_setzero_si256());
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(sign_ps(v)), 28), nonzero);  // → 0x8
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), _mm256_or_si256(idx, sign));
    for (int j = 0; j < 8; j += 2) codes[(i + j) / 2] = static_cast<uint8_t>(c[j] | (c[j + 1] << 4));
  }
}

}  // namespace dsv41
