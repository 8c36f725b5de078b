// Indexer scoring on integer instructions, AVX-512 BW (see index_score_int.h): a key tile's packed
// codes are transposed so that four channels of the 16 keys are one register, then become bytes
// m + 12 by one table lookup per 64 codes; a query's four channels are one broadcast dword, so
// vpmaddubsw + vpaddw sum a block's 32 products of all 16 keys in 16-bit lanes (|sum| ≤ 5,760)
// and one vpmaddwd widens them. Per lane the float operations after that are index_score_tile's.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/index_score_int.h"
#include "kernels/cpu/transpose16_avx512.h"

namespace dsv41 {

void index_key_tile_ints_avx512(const uint8_t* const* records, int n, int dh, IndexKeyTileInts& out) {
  const int half = dh / 2, blocks = dh / kIndexDotBlock, code_dwords = half / 4;
  out.n = n;
  out.dh = dh;
  // The codes: the 16 keys' code bytes transposed as dwords first (dword u of every key in one
  // row: code bytes 4u … 4u + 3, keys past n all zero), then each row's low and high nibbles
  // looked up at once — dword group u and dh/8 + u of the tile. One transpose of the packed bytes
  // and a lookup per 64 codes of the tile, instead of a lookup per key and a transpose of the
  // looked-up bytes (twice the data). Code 0 looks up 12, so the keys past n get m = 0.
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIndexCodeBytes)));
  const __m512i low = _mm512_set1_epi8(0x0F);
  const __mmask64 codes = half >= 64 ? ~__mmask64{0} : (__mmask64{1} << half) - 1;
  __m512 r[16];
  for (int j = 0; j < kIndexKeyTile; ++j)
    r[j] = j < n ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi8(codes, records[j])) : _mm512_setzero_ps();
  alignas(64) uint32_t packed[16 * 16];
  transpose16x16(r, reinterpret_cast<float*>(packed));
  for (int u = 0; u < code_dwords; ++u) {
    const __m512i v = _mm512_load_si512(packed + 16 * u);
    const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
    const __m512i hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low));
    _mm512_store_si512(out.bytes + u * 64, lo);
    _mm512_store_si512(out.bytes + (code_dwords + u) * 64, hi);
  }
  // The scales: K = s − 128 per (block, key), 0 past n; then their range and the NaN code (0xFF,
  // K = 127) over the n keys in registers. (Tracked in out's fields as the bytes were read, each
  // field was stored again after every byte: a byte may alias them.)
  for (int j = 0; j < kIndexKeyTile; ++j) {
    const uint8_t* scales = j < n ? records[j] + half : nullptr;
    for (int b = 0; b < blocks; ++b) out.k[b * kIndexKeyTile + j] = scales ? int{scales[b]} - 128 : 0;
  }
  const __mmask16 keys = static_cast<__mmask16>((1u << n) - 1u);
  __m512i k_lo = _mm512_set1_epi32(1 << 30), k_hi = _mm512_set1_epi32(-(1 << 30));
  __mmask16 nan = 0;
  for (int b = 0; b < blocks; ++b) {
    const __m512i k = _mm512_load_si512(out.k + b * kIndexKeyTile);
    k_lo = _mm512_mask_min_epi32(k_lo, keys, k_lo, k);
    k_hi = _mm512_mask_max_epi32(k_hi, keys, k_hi, k);
    nan |= _mm512_mask_cmpeq_epi32_mask(keys, k, _mm512_set1_epi32(0xFF - 128));
  }
  out.k_min = _mm512_reduce_min_epi32(k_lo);
  out.k_max = _mm512_reduce_max_epi32(k_hi);
  out.nan_scale = nan != 0;
}

void index_score_tile_ints_avx512(const IndexQueryInts& q, int64_t r0, int64_t rows, const float* w,
                                  const IndexKeyTileInts& k, float scale, float* out, int64_t out_stride, int cols) {
  const int nh = q.nh, dh = q.dh, blocks = dh / kIndexDotBlock, half_dwords = dh / 8;
  const __m512 vscale = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  const __m512i ones = _mm512_set1_epi16(1), bias = _mm512_set1_epi32(127);
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  for (int64_t r = 0; r < rows; ++r) {
    __m512 total = _mm512_setzero_ps();
    for (int h = 0; h < nh; ++h) {
      const int64_t v = (r0 + r) * nh + h;
      const int8_t* a = q.a.data() + v * dh;
      __m512 s = zero;
      for (int b = 0; b < blocks; ++b) {
        __m512i acc = _mm512_setzero_si512();
        for (int half = 0; half < 2; ++half)
          for (int t = half * half_dwords + 4 * b, e = t + 4; t < e; ++t) {
            int32_t qd;
            __builtin_memcpy(&qd, a + 4 * t, 4);
            const __m512i kt = _mm512_load_si512(k.bytes + t * 64);
            acc = _mm512_add_epi16(acc, _mm512_maddubs_epi16(kt, _mm512_set1_epi32(qd)));
          }
        const size_t vb = static_cast<size_t>(v * blocks + b);
        const __m512i sum = _mm512_sub_epi32(_mm512_madd_epi16(acc, ones), _mm512_set1_epi32(12 * q.asum[vb]));
        const __m512i e = _mm512_add_epi32(_mm512_set1_epi32(q.u[vb]), _mm512_load_si512(k.k + b * kIndexKeyTile));
        const __m512 pow2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, bias), 23));
        const __m512 block = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), pow2);
        s = b == 0 ? block : _mm512_add_ps(s, block);
      }
      const __m512 relu = _mm512_mul_ps(_mm512_max_ps(zero, s), vscale);
      total = _mm512_fmadd_ps(relu, _mm512_set1_ps(w[r * nh + h]), total);
    }
    _mm512_mask_storeu_ps(out + r * out_stride, mask, total);
  }
}

}  // namespace dsv41
