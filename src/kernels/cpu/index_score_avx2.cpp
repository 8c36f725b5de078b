// Indexer scoring on AVX2 (see index_score.h): the tile's 16 keys in two 8-lane halves, the
// (row, head) query vectors 2 at a time (4 FMA chains per block). Per lane the operations are
// those of index_score_reference, in its order.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/index_score.h"

namespace dsv41 {
namespace {

template <int N>
void dots(const float* q, int64_t p0, int dh, const float* keys_t, __m256* s /* [N][2] */) {
  for (int b0 = 0; b0 < dh; b0 += kIndexDotBlock) {
    __m256 acc[N][2];
    for (int i = 0; i < N; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    const int end = std::min(dh, b0 + kIndexDotBlock);
    for (int d = b0; d < end; ++d) {
      const __m256 k0 = _mm256_loadu_ps(keys_t + d * kIndexKeyTile);
      const __m256 k1 = _mm256_loadu_ps(keys_t + d * kIndexKeyTile + 8);
      for (int i = 0; i < N; ++i) {
        const __m256 qd = _mm256_broadcast_ss(q + (p0 + i) * dh + d);
        acc[i][0] = _mm256_fmadd_ps(qd, k0, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(qd, k1, acc[i][1]);
      }
    }
    for (int i = 0; i < N; ++i)
      for (int h = 0; h < 2; ++h) s[2 * i + h] = b0 == 0 ? acc[i][h] : _mm256_add_ps(s[2 * i + h], acc[i][h]);
  }
}

}  // namespace

void index_score_tile_avx2(const float* q, const float* w, int64_t rows, int nh, int dh, const float* keys_t,
                           float scale, float* out, int64_t out_stride, int cols) {
  __m256 total[kIndexTileRows][2];
  for (int64_t r = 0; r < rows; ++r) total[r][0] = total[r][1] = _mm256_setzero_ps();
  const __m256 vscale = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  const int64_t P = rows * nh;
  for (int64_t p0 = 0; p0 < P; p0 += 2) {
    const int n = static_cast<int>(std::min<int64_t>(2, P - p0));
    __m256 s[4];
    if (n == 2) dots<2>(q, p0, dh, keys_t, s);
    else dots<1>(q, p0, dh, keys_t, s);
    for (int i = 0; i < n; ++i) {
      const int64_t r = (p0 + i) / nh;
      const __m256 wv = _mm256_set1_ps(w[p0 + i]);
      for (int h = 0; h < 2; ++h) {
        const __m256 relu = _mm256_mul_ps(_mm256_max_ps(zero, s[2 * i + h]), vscale);
        total[r][h] = _mm256_fmadd_ps(relu, wv, total[r][h]);
      }
    }
  }
  float tmp[kIndexKeyTile];
  for (int64_t r = 0; r < rows; ++r) {
    _mm256_storeu_ps(tmp, total[r][0]);
    _mm256_storeu_ps(tmp + 8, total[r][1]);
    std::copy(tmp, tmp + cols, out + r * out_stride);
  }
}

}  // namespace dsv41
