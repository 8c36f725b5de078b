// Indexer scoring on AVX-512 (see index_score.h): one register holds a tile's 16 keys, so a
// query channel times the tile is one broadcast FMA and no horizontal sum is needed. The (row,
// head) query vectors are taken 8 at a time: 8 independent FMA chains per block keep both FMA
// pipes busy. Per lane the operations are those of index_score_reference, in its order.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/index_score.h"
#include "kernels/cpu/transpose16_avx512.h"

namespace dsv41 {
namespace {

// Dots of query vectors p0 … p0+N−1 (each dh channels at q + p·dh) with the tile's keys.
template <int N>
void dots(const float* q, int64_t p0, int dh, const float* keys_t, __m512* s) {
  for (int b0 = 0; b0 < dh; b0 += kIndexDotBlock) {
    __m512 acc[N];
    for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_ps();
    const int end = std::min(dh, b0 + kIndexDotBlock);
    for (int d = b0; d < end; ++d) {
      const __m512 k = _mm512_loadu_ps(keys_t + d * kIndexKeyTile);
      for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(q[(p0 + i) * dh + d]), k, acc[i]);
    }
    for (int i = 0; i < N; ++i) s[i] = b0 == 0 ? acc[i] : _mm512_add_ps(s[i], acc[i]);
  }
}

}  // namespace

void index_score_tile_avx512(const float* q, const float* w, int64_t rows, int nh, int dh, const float* keys_t,
                             float scale, float* out, int64_t out_stride, int cols) {
  __m512 total[kIndexTileRows];
  for (int64_t r = 0; r < rows; ++r) total[r] = _mm512_setzero_ps();
  const __m512 vscale = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  const int64_t P = rows * nh;  // query vectors, row-major: p = r · nh + h (so w[p] is its weight)
  for (int64_t p0 = 0; p0 < P; p0 += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, P - p0));
    __m512 s[8];
    switch (n) {
      case 8: dots<8>(q, p0, dh, keys_t, s); break;
      case 7: dots<7>(q, p0, dh, keys_t, s); break;
      case 6: dots<6>(q, p0, dh, keys_t, s); break;
      case 5: dots<5>(q, p0, dh, keys_t, s); break;
      case 4: dots<4>(q, p0, dh, keys_t, s); break;
      case 3: dots<3>(q, p0, dh, keys_t, s); break;
      case 2: dots<2>(q, p0, dh, keys_t, s); break;
      default: dots<1>(q, p0, dh, keys_t, s); break;
    }
    // Heads in order per row (p runs through a row's heads before the next row's).
    for (int i = 0; i < n; ++i) {
      const int64_t r = (p0 + i) / nh;
      const __m512 relu = _mm512_mul_ps(_mm512_max_ps(zero, s[i]), vscale);  // max(0, NaN) = NaN
      total[r] = _mm512_fmadd_ps(relu, _mm512_set1_ps(w[p0 + i]), total[r]);
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  for (int64_t r = 0; r < rows; ++r) _mm512_mask_storeu_ps(out + r * out_stride, mask, total[r]);
}

// transpose_key_tile's blocks of 16 channels × the 16 keys (rows past n zero), in registers
// (transpose16_avx512.h): output row c holds channel d0 + c of keys 0 … 15.
int transpose_key_tile_avx512(const float* keys, int n, int dh, float* keys_t) {
  const int blocks = dh / 16;
  for (int b = 0; b < blocks; ++b) {
    const int d0 = b * 16;
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < n ? _mm512_loadu_ps(keys + int64_t{j} * dh + d0) : _mm512_setzero_ps();
    transpose16x16(r, keys_t + int64_t{d0} * 16);
  }
  return blocks * 16;
}

}  // namespace dsv41
