// The AVX-512 GEMM's pair-accumulator reduction, shared by gemm_avx512.cpp and the quantised
// tiles (gemm_quant_avx512_tile.h) so all reduce in the one order of gemm.h. Include only from files built
// with the AVX-512 flags (file-local functions).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv41 {
namespace {

// Reduces 4 pair accumulators (outputs A..H, two per register) with the AVX2 lane tree: the sums
// of A..H in order.
inline __m256 reduce_pairs(__m512 z0, __m512 z1, __m512 z2, __m512 z3) {
  // 128-bit quarters q0..q3 of each output's 8 lanes: q0 = l0..l3, q1 = l4..l7 → s = q0 + q1.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xDD));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(z2, z3, 0x88), _mm512_shuffle_f32x4(z2, z3, 0xDD));
  // Quarter k now holds (l0+l4, l1+l5, l2+l6, l3+l7) of output k of s01 (A,B,C,D) / s23 (E..H).
  const __m512 v = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
  // Quarter k: ((l0+l4)+(l2+l6), (l1+l5)+(l3+l7)) of output k, then of output 4 + k.
  const __m512 t = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, 0xB1));
  // Quarter k: element 0 = output k, element 2 = output 4 + k.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, t));
}

// reduce_pairs, storing the first n ≤ 8 results at y.
inline void reduce_store(__m512 z0, __m512 z1, __m512 z2, __m512 z3, float* y, int n) {
  _mm256_mask_storeu_ps(y, static_cast<__mmask8>((1u << n) - 1), reduce_pairs(z0, z1, z2, z3));
}

// Stores the R × O sums of a tile's P = ⌈O/2⌉ pair accumulators per row, y's rows ldy apart.
template <int R, int O, int P>
inline void store_pair_tile(const __m512 (&acc)[R][P], float* y, int64_t ldy) {
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; p += 4) {
      const int n = O - 2 * p < 8 ? O - 2 * p : 8;
      reduce_store(acc[r][p], p + 1 < P ? acc[r][p + 1] : zero, p + 2 < P ? acc[r][p + 2] : zero,
                   p + 3 < P ? acc[r][p + 3] : zero, y + r * ldy + 2 * p, n);
    }
}

}  // namespace
}  // namespace dsv41
