// AVX-512 record unpacking (see unpack_avx512.h). The decodes are those of unpack_avx2.cpp:
//   E4M3 → float through an F16 of the same mantissa and an exponent 8 short, converted exactly
//     and multiplied by 2^8 (exact); magnitude 0x7F (NaN) patched to ±quiet NaN;
//   E2M1 → float by a lane permute of the 16-entry decode table (codes 8..15 are the negatives,
//     code 8 is +0), one permute for a whole 16-channel main block.
// A NaN block scale writes canonical NaN to the block, as the reference does.
#include "kernels/cpu/unpack_avx512.h"

#include <immintrin.h>

#include <cmath>

#include "base/numerics.h"

namespace dsv41 {
namespace {

constexpr size_t kWindowBlock = 32;  // channels per UE8M0 scale (records.h)
constexpr size_t kMainBlock = 16;    // channels per E4M3 scale
constexpr int kCanonicalNaN = 0x7FC00000;

inline void fill_nan(float* out, size_t n) {
  const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(kCanonicalNaN));
  for (size_t i = 0; i < n; i += 16) _mm512_storeu_ps(out + i, nan);
}

}  // namespace

void window_row_unpack_avx512(const uint8_t* record, size_t channels, float* out) {
  const uint8_t* values = record;             // [channels] E4M3
  const uint8_t* scales = record + channels;  // [channels/32] UE8M0
  const float* ue8m0 = ue8m0_decode_table();
  const __m512 two8 = _mm512_set1_ps(256.0f);
  const __m512 sign_bit = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(kCanonicalNaN));
  for (size_t b = 0; b < channels / kWindowBlock; ++b) {
    const float s = ue8m0[scales[b]];
    float* ob = out + b * kWindowBlock;
    if (std::isnan(s)) {
      fill_nan(ob, kWindowBlock);
      continue;
    }
    const __m512 scale = _mm512_set1_ps(s);
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + b * kWindowBlock)));
    const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi16(0x7F));
    const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(x, _mm512_set1_epi16(0x80)), 8);
    const __m512i half = _mm512_or_si512(sign, _mm512_slli_epi16(mag, 7));  // F16 bits, value · 2^-8
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7F));
    for (int h = 0; h < 2; ++h) {
      const __m256i half_h = h == 0 ? _mm512_castsi512_si256(half) : _mm512_extracti64x4_epi64(half, 1);
      __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(half_h), two8);  // exact
      // ±NaN for magnitude 0x7F, sign kept (e4m3_to_f32 returns -quiet_NaN for 0xFF).
      const __mmask16 nan_h = static_cast<__mmask16>(h == 0 ? nan : nan >> 16);
      v = _mm512_mask_blend_ps(nan_h, v, _mm512_or_ps(_mm512_and_ps(v, sign_bit), qnan));
      _mm512_storeu_ps(ob + 16 * h, _mm512_mul_ps(v, scale));
    }
  }
}

void main_row_unpack_avx512(const uint8_t* record, size_t channels, float* out) {
  const uint8_t* codes = record;                  // [channels/2] E2M1 pairs, even channel low
  const uint8_t* scales = record + channels / 2;  // [channels/16] E4M3
  const float* e4m3 = e4m3_decode_table();
  const __m512 lut = _mm512_loadu_ps(e2m1_decode_table());  // [16]
  const __m128i low = _mm_set1_epi8(0x0F);
  for (size_t b = 0; b < channels / kMainBlock; ++b) {
    const float s = e4m3[scales[b]];
    float* ob = out + b * kMainBlock;
    if (std::isnan(s)) {
      fill_nan(ob, kMainBlock);
      continue;
    }
    // 8 bytes = 16 channels: split the nibbles and interleave them into channel order.
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + b * kMainBlock / 2));
    const __m128i c = _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
    const __m512 v = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(c), lut);
    _mm512_storeu_ps(ob, _mm512_mul_ps(v, _mm512_set1_ps(s)));
  }
}

}  // namespace dsv41
