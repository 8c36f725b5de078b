// Indexer scoring on integer instructions, AVX2 (see index_score_int.h): the AVX-512 BW kernels'
// tile layout and arithmetic (index_score_int_avx512.cpp) on 256-bit registers, a tile's 16 keys
// as two halves of 8. The keys' packed code dwords are transposed 8 × 8 at a time, then each row
// of codes becomes bytes m + 12 by one table lookup per nibble; vpmaddubsw + vpaddw sum a block's
// 32 products in 16-bit lanes and vpmaddwd widens them, as there. Per lane the float operations
// after that are index_score_tile's, so the bits are the AVX-512 kernels' and the float path's.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/index_score_int.h"

namespace dsv41 {
namespace {

// r[i] = row i of an 8 × 8 matrix of dwords → r[i] = column i.
inline void transpose8x8(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

// Up to 8 dwords of a key's codes from dword `first` (fewer: the rest zero, never read past).
inline __m256i code_dwords(const uint8_t* record, int first, int count) {
  if (count >= 8) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(record + 4 * first));
  alignas(32) uint32_t d[8] = {};
  std::memcpy(d, record + 4 * first, static_cast<size_t>(4 * count));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(d));
}

}  // namespace

void index_key_tile_ints_avx2(const uint8_t* const* records, int n, int dh, IndexKeyTileInts& out) {
  const int half = dh / 2, blocks = dh / kIndexDotBlock, code_dwords_per_key = half / 4;
  out.n = n;
  out.dh = dh;
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIndexCodeBytes)));
  const __m256i low = _mm256_set1_epi8(0x0F);
  // Code dwords [u0, u0 + 8) of keys [8h, 8h + 8): transposed, dword u of the 8 keys is one row;
  // looked up, its low nibbles are dword group u of the tile and its high ones group dh/8 + u
  // (keys past n: zero codes, m = 0).
  for (int u0 = 0; u0 < code_dwords_per_key; u0 += 8) {
    const int count = std::min(8, code_dwords_per_key - u0);
    for (int h = 0; h < 2; ++h) {
      __m256i r[8];
      for (int j = 0; j < 8; ++j)
        r[j] = 8 * h + j < n ? code_dwords(records[8 * h + j], u0, count) : _mm256_setzero_si256();
      transpose8x8(r);
      for (int u = 0; u < count; ++u) {
        const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(r[u], low));
        const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(r[u], 4), low));
        _mm256_store_si256(reinterpret_cast<__m256i*>(out.bytes + (u0 + u) * 64 + 32 * h), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(out.bytes + (code_dwords_per_key + u0 + u) * 64 + 32 * h), hi);
      }
    }
  }
  // The scales: K = s − 128 per (block, key), 0 past n; their range and the NaN code over the n
  // keys in locals (a byte read may alias out's fields, which would be stored again each time).
  int k_min = 1 << 30, k_max = -(1 << 30);
  bool nan = false;
  for (int j = 0; j < kIndexKeyTile; ++j) {
    const uint8_t* scales = j < n ? records[j] + half : nullptr;
    for (int b = 0; b < blocks; ++b) {
      const int k = scales ? int{scales[b]} - 128 : 0;
      out.k[b * kIndexKeyTile + j] = k;
      if (!scales) continue;
      nan |= scales[b] == 0xFF;
      k_min = std::min(k_min, k);
      k_max = std::max(k_max, k);
    }
  }
  out.k_min = k_min;
  out.k_max = k_max;
  out.nan_scale = nan;
}

void index_score_tile_ints_avx2(const IndexQueryInts& q, int64_t r0, int64_t rows, const float* w,
                                const IndexKeyTileInts& k, float scale, float* out, int64_t out_stride, int cols) {
  const int nh = q.nh, dh = q.dh, blocks = dh / kIndexDotBlock, half_dwords = dh / 8;
  const __m256 vscale = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi32(127);
  for (int64_t r = 0; r < rows; ++r) {
    __m256 total[2] = {zero, zero};
    for (int h = 0; h < nh; ++h) {
      const int64_t v = (r0 + r) * nh + h;
      const int8_t* a = q.a.data() + v * dh;
      __m256 s[2] = {zero, zero};
      for (int b = 0; b < blocks; ++b) {
        __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int half = 0; half < 2; ++half)
          for (int t = half * half_dwords + 4 * b, e = t + 4; t < e; ++t) {
            int32_t qd;
            std::memcpy(&qd, a + 4 * t, 4);
            const __m256i qv = _mm256_set1_epi32(qd);
            for (int i = 0; i < 2; ++i) {
              const __m256i kt = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.bytes + t * 64 + 32 * i));
              acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(kt, qv));
            }
          }
        const size_t vb = static_cast<size_t>(v * blocks + b);
        for (int i = 0; i < 2; ++i) {
          const __m256i sum = _mm256_sub_epi32(_mm256_madd_epi16(acc[i], ones), _mm256_set1_epi32(12 * q.asum[vb]));
          const __m256i e = _mm256_add_epi32(
              _mm256_set1_epi32(q.u[vb]),
              _mm256_load_si256(reinterpret_cast<const __m256i*>(k.k + b * kIndexKeyTile + 8 * i)));
          const __m256 pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, bias), 23));
          const __m256 block = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), pow2);
          s[i] = b == 0 ? block : _mm256_add_ps(s[i], block);
        }
      }
      for (int i = 0; i < 2; ++i) {
        const __m256 relu = _mm256_mul_ps(_mm256_max_ps(zero, s[i]), vscale);
        total[i] = _mm256_fmadd_ps(relu, _mm256_set1_ps(w[r * nh + h]), total[i]);
      }
    }
    alignas(32) float lanes[16];
    _mm256_store_ps(lanes, total[0]);
    _mm256_store_ps(lanes + 8, total[1]);
    std::copy_n(lanes, cols, out + r * out_stride);
  }
}

}  // namespace dsv41
