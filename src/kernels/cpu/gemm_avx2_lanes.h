// The AVX2 GEMM's lane helpers, shared by gemm_avx2.cpp and gemm_quant_avx2.cpp so the float and
// quantised paths reduce in the one order of gemm.h. Include only from files built with -mavx2
// -mfma (file-local functions: no inline definition can leak to callers on other CPUs).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv41 {
namespace {

// Lanes [0, n) set, n in 1..7.
inline __m256i tail_mask(int64_t n) {
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n));
}

// The fixed lane reduction of gemm.h: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4 .. l3+l7
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));       // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  s = _mm_add_ss(s, _mm_movehdup_ps(s));        // lane 0 + lane 1
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace dsv41
