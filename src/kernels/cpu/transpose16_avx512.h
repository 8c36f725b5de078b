// The 16 × 16 transpose of 32-bit elements in AVX-512 registers, shared by the indexer's float and
// integer key tiles (index_score_avx512.cpp, index_score_int_avx512.cpp): pairs of rows
// interleaved, then quadruples, then 128-bit lanes. Include only from files built with AVX-512
// (internal linkage: no symbol shared with another object, docs/ARCHITECTURE.md).
#pragma once

#include <immintrin.h>

namespace dsv41 {

// out[c · 16 + j] = element c of r[j], for c, j < 16 (out need not be aligned).
static inline void transpose16x16(const __m512* r, float* out) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane L: (a4L, b4L, a4L+1, b4L+1), (a4L+2, b4L+2, …)
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + k], lane L: element 4L + k of rows 4i … 4i + 3
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {  // element 4L + k: lane L of u[k], u[4 + k], u[8 + k], u[12 + k]
    const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
    _mm512_storeu_ps(out + (0 + k) * 16, _mm512_shuffle_f32x4(v0, w0, 0x88));
    _mm512_storeu_ps(out + (8 + k) * 16, _mm512_shuffle_f32x4(v0, w0, 0xDD));
    _mm512_storeu_ps(out + (4 + k) * 16, _mm512_shuffle_f32x4(v1, w1, 0x88));
    _mm512_storeu_ps(out + (12 + k) * 16, _mm512_shuffle_f32x4(v1, w1, 0xDD));
  }
}

}  // namespace dsv41
