// AVX2/F16C unpacking of packed cache records (see unpack_avx2.h; layouts in cache/records.h).
// The only arithmetic is the final `value · scale` multiply, the same float32 multiply the
// reference does on the same two operands, so the results match bit for bit; everything before
// it is exact decoding:
//   E4M3 -> float: the 7 magnitude bits shifted into an F16's exponent/mantissa fields give an
//     F16 of the same mantissa and an exponent 8 short (biases 7 vs 15; subnormals line up
//     too), converted by F16C and multiplied by 2^8 (exact). The NaN codes (magnitude 0x7F)
//     are patched to ±quiet NaN, the bits e4m3_to_f32 returns.
//   E2M1 -> float: nibbles split and interleaved into one code per byte (channel order), then a
//     lane permute from the 16-entry decode table (numerics.h), sign half chosen by bit 3.
// Scales are decoded per block from the numerics.h tables; a NaN scale writes canonical NaN
// to the whole block, as the reference does. The only file of this module built with -mavx2.
#include "kernels/cpu/unpack_avx2.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cmath>

#include "base/numerics.h"

namespace dsv41 {
namespace {

constexpr size_t kWindowBlock = 32;  // channels per UE8M0 scale (records.h)
constexpr size_t kMainBlock = 16;    // channels per E4M3 scale
constexpr size_t kIndexBlock = 32;   // channels per UE8M0 scale
constexpr int kCanonicalNaN = 0x7FC00000;

inline void fill_nan(float* out, size_t n) {
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(kCanonicalNaN));
  for (size_t i = 0; i < n; i += 8) _mm256_storeu_ps(out + i, nan);
}

// 16 E4M3 codes -> 16 floats times `scale`, stored at out[0..16).
inline void e4m3x16_scaled(__m128i codes, __m256 scale, float* out) {
  const __m256i x = _mm256_cvtepu8_epi16(codes);  // [16] u16
  const __m256i mag = _mm256_and_si256(x, _mm256_set1_epi16(0x7F));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(0x80)), 8);
  const __m256i half = _mm256_or_si256(sign, _mm256_slli_epi16(mag, 7));  // F16 bits, value · 2^-8
  const __m256i nan16 = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F));
  const __m256 two8 = _mm256_set1_ps(256.0f);
  const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(kCanonicalNaN));
  for (int h = 0; h < 2; ++h) {
    const __m128i half_h = h == 0 ? _mm256_castsi256_si128(half) : _mm256_extracti128_si256(half, 1);
    const __m128i nan_h = h == 0 ? _mm256_castsi256_si128(nan16) : _mm256_extracti128_si256(nan16, 1);
    __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(half_h), two8);  // exact
    // ±NaN for magnitude 0x7F, sign kept (e4m3_to_f32 returns -quiet_NaN for 0xFF).
    const __m256 nan_value = _mm256_or_ps(_mm256_and_ps(v, sign_bit), qnan);
    v = _mm256_blendv_ps(v, nan_value, _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan_h)));
    _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(v, scale));
  }
}

// The E2M1 decode table as two 8-lane vectors: codes 0..7 and 8..15.
struct E2m1Lanes {
  __m256 pos, neg;
};
inline E2m1Lanes e2m1_lanes() {
  const float* t = e2m1_decode_table();
  return {_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8)};
}

// 8 E2M1 codes (one per byte, low 8 bytes of `codes`) -> 8 floats times `scale` at out[0..8).
inline void e2m1x8_scaled(__m128i codes, const E2m1Lanes& lut, __m256 scale, float* out) {
  const __m256i idx = _mm256_cvtepu8_epi32(codes);
  const __m256 pos = _mm256_permutevar8x32_ps(lut.pos, idx);  // uses idx & 7
  const __m256 neg = _mm256_permutevar8x32_ps(lut.neg, idx);
  const __m256 v = _mm256_blendv_ps(pos, neg, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));  // bit 3
  _mm256_storeu_ps(out, _mm256_mul_ps(v, scale));
}

// 16 packed bytes (32 E2M1 codes, even channel in the low nibble) -> 32 scaled floats.
inline void e2m1x32_scaled(__m128i bytes, const E2m1Lanes& lut, __m256 scale, float* out) {
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, low);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
  const __m128i c0 = _mm_unpacklo_epi8(lo, hi);  // channels 0..15, one code per byte
  const __m128i c1 = _mm_unpackhi_epi8(lo, hi);  // channels 16..31
  e2m1x8_scaled(c0, lut, scale, out);
  e2m1x8_scaled(_mm_srli_si128(c0, 8), lut, scale, out + 8);
  e2m1x8_scaled(c1, lut, scale, out + 16);
  e2m1x8_scaled(_mm_srli_si128(c1, 8), lut, scale, out + 24);
}

}  // namespace

// Asks CPUID directly: clang 14 rejects __builtin_cpu_supports("f16c") ("invalid cpu feature
// string"), which broke the clang fuzz build. F16C instructions are VEX-encoded, so the OS must
// also save the YMM state (OSXSAVE set and XCR0 bits 1-2 on), as for AVX itself.
bool cpu_has_f16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    if (!(ecx & bit_F16C) || !(ecx & bit_OSXSAVE)) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    // Inline asm: the _xgetbv intrinsic would need -mxsave on this file.
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & 0x6u) == 0x6u;
  }();
  return has;
}

void window_row_unpack_avx2(const uint8_t* record, size_t channels, float* out) {
  const uint8_t* values = record;             // [channels] E4M3
  const uint8_t* scales = record + channels;  // [channels/32] UE8M0
  const float* ue8m0 = ue8m0_decode_table();
  for (size_t b = 0; b < channels / kWindowBlock; ++b) {
    const float s = ue8m0[scales[b]];
    float* ob = out + b * kWindowBlock;
    if (std::isnan(s)) {
      fill_nan(ob, kWindowBlock);
      continue;
    }
    const __m256 scale = _mm256_set1_ps(s);
    const uint8_t* vb = values + b * kWindowBlock;
    e4m3x16_scaled(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vb)), scale, ob);
    e4m3x16_scaled(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vb + 16)), scale, ob + 16);
  }
}

void main_row_unpack_avx2(const uint8_t* record, size_t channels, float* out) {
  const uint8_t* codes = record;                 // [channels/2] E2M1 pairs
  const uint8_t* scales = record + channels / 2;  // [channels/16] E4M3
  const float* e4m3 = e4m3_decode_table();
  const E2m1Lanes lut = e2m1_lanes();
  const __m128i low = _mm_set1_epi8(0x0F);
  for (size_t b = 0; b < channels / kMainBlock; ++b) {
    const float s = e4m3[scales[b]];
    float* ob = out + b * kMainBlock;
    if (std::isnan(s)) {
      fill_nan(ob, kMainBlock);
      continue;
    }
    const __m256 scale = _mm256_set1_ps(s);
    // 8 bytes = 16 channels.
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + b * kMainBlock / 2));
    const __m128i lo = _mm_and_si128(bytes, low);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low);
    const __m128i c = _mm_unpacklo_epi8(lo, hi);  // channels 0..15 of the block
    e2m1x8_scaled(c, lut, scale, ob);
    e2m1x8_scaled(_mm_srli_si128(c, 8), lut, scale, ob + 8);
  }
}

void index_row_unpack_avx2(const uint8_t* record, size_t channels, float* out) {
  const uint8_t* codes = record;                 // [channels/2] E2M1 pairs
  const uint8_t* scales = record + channels / 2;  // [channels/32] UE8M0
  const float* ue8m0 = ue8m0_decode_table();
  const E2m1Lanes lut = e2m1_lanes();
  for (size_t b = 0; b < channels / kIndexBlock; ++b) {
    const float s = ue8m0[scales[b]];
    float* ob = out + b * kIndexBlock;
    if (std::isnan(s)) {
      fill_nan(ob, kIndexBlock);
      continue;
    }
    e2m1x32_scaled(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + b * kIndexBlock / 2)), lut,
                   _mm256_set1_ps(s), ob);
  }
}

}  // namespace dsv41
