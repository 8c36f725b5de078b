// Exhaustive tests of the scalar number formats (numerics.h): every code of the 8- and 4-bit
// formats, every rounding tie, saturation and NaN/Inf behaviour, and all 65536 BF16/F16 codes.
#include "base/numerics.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- E4M3 --------------------------------------------------------------------------------

// Independent decode from the OCP definition, in double.
double e4m3_reference(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m * std::pow(2.0, -9) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

TEST(NumericsE4m3, DecodesAll256Codes) {
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(v), e4m3_reference(c)) << "code " << c;
    EXPECT_EQ(std::signbit(v), (c & 0x80) != 0) << "code " << c;
  }
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(bits(e4m3_to_f32(0x80)), 0x80000000u);  // -0
}

TEST(NumericsE4m3, DecodeTableMatchesScalarDecodeBitForBit) {
  const float* table = e4m3_decode_table();
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(bits(table[c]), bits(e4m3_to_f32(static_cast<uint8_t>(c)))) << c;
  }
}

TEST(NumericsE4m3, EncodeOfDecodeIsIdentityForEveryNonNanCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(NumericsE4m3, TiesBetweenNeighboursGoToEvenCode) {
  for (int c = 0; c < 0x7E; ++c) {  // every pair of adjacent positive finite codes
    const float lo = e4m3_to_f32(static_cast<uint8_t>(c));
    const float hi = e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: few significant bits
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);
    const int even = (c % 2 == 0) ? c : c + 1;
    for (int sign : {0, 0x80}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(f32_to_e4m3(s * mid), even | sign) << "tie between codes " << c << " and " << c + 1;
      EXPECT_EQ(f32_to_e4m3(s * std::nextafter(mid, 0.0f)), c | sign) << c;
      EXPECT_EQ(f32_to_e4m3(s * std::nextafter(mid, kInf)), (c + 1) | sign) << c;
    }
  }
}

TEST(NumericsE4m3, SaturatesNanAndUnderflow) {
  for (float big : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 3e38f, kInf}) {
    EXPECT_EQ(f32_to_e4m3(big), 0x7E) << big;
    EXPECT_EQ(f32_to_e4m3(-big), 0xFE) << big;
  }
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0x7F);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: tie to even (0)
  EXPECT_EQ(f32_to_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_e4m3(from_bits(1)), 0x00);  // smallest float32 subnormal
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-10f), 0x02);  // tie between 1 and 2 subnormal steps -> 2
}

// Brute force: the nearest finite code, ties to the even code, saturating.
uint8_t e4m3_brute(float x) {
  if (std::isnan(x)) return 0x7F;
  const double a = std::fmin(std::fabs(static_cast<double>(x)), 448.0);
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= 0x7E; ++c) {
    const double err = std::fabs(e4m3_reference(c) - a);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

// Every 257th float32 bit pattern from below the subnormal grid to past saturation (both signs):
// ≈ 1M values, each mantissa position and binade of the encoder's bit rounding.
TEST(NumericsE4m3, MatchesBruteForceOnASweepOfBitPatterns) {
  const uint32_t lo = std::bit_cast<uint32_t>(0x1p-11f), hi = std::bit_cast<uint32_t>(520.0f);
  for (uint32_t b = lo; b < hi; b += 257) {
    const float x = std::bit_cast<float>(b);
    ASSERT_EQ(f32_to_e4m3(x), e4m3_brute(x)) << x;
    ASSERT_EQ(f32_to_e4m3(-x), e4m3_brute(-x)) << -x;
  }
}

TEST(NumericsE4m3, MatchesBruteForceOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-14, 10);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mant(rng), exp(rng));
    ASSERT_EQ(f32_to_e4m3(x), e4m3_brute(x)) << x;
  }
}

// ---- E2M1 --------------------------------------------------------------------------------

TEST(NumericsE2m1, DecodesAll16Codes) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(v, (c & 8) ? -grid[c & 7] : grid[c & 7]) << c;
  }
  EXPECT_EQ(bits(e2m1_to_f32(8)), 0u);           // -0 decodes as +0 (model.md §9.3)
  EXPECT_EQ(e2m1_to_f32(0xF3), e2m1_to_f32(3));  // high nibble ignored
  EXPECT_EQ(e2m1_to_f32(0x3B), -1.5f);           // only the low nibble counts
}

TEST(NumericsE2m1, DecodeTableMatchesScalarDecodeBitForBit) {
  const float* table = e2m1_decode_table();
  for (int c = 0; c < 16; ++c) EXPECT_EQ(bits(table[c]), bits(e2m1_to_f32(static_cast<uint8_t>(c)))) << c;
  EXPECT_EQ(bits(table[8]), 0u);  // code 8 (-0) is +0
}

TEST(NumericsE2m1, EncodeOfDecodeIsIdentityExceptNegativeZero) {
  for (int c = 0; c < 16; ++c) {
    const uint8_t want = c == 8 ? 0 : static_cast<uint8_t>(c);
    EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(static_cast<uint8_t>(c))), want) << c;
  }
}

TEST(NumericsE2m1, EveryTieGoesToTheEvenGridIndex) {
  struct Tie {
    float at;
    int index;
  };
  // Midpoints between grid neighbours and the index they must round to (the even one).
  const Tie ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6}};
  int lower = 0;
  for (const Tie& t : ties) {
    for (int sign : {0, 8}) {
      const float s = sign ? -1.0f : 1.0f;
      const int signed_index = t.index == 0 ? 0 : (t.index | sign);
      EXPECT_EQ(f32_to_e2m1(s * t.at), signed_index) << s * t.at;
      const int below = lower == 0 ? 0 : (lower | sign);
      EXPECT_EQ(f32_to_e2m1(s * std::nextafter(t.at, 0.0f)), below) << t.at;
      EXPECT_EQ(f32_to_e2m1(s * std::nextafter(t.at, kInf)), (lower + 1) | sign) << t.at;
    }
    ++lower;
  }
}

TEST(NumericsE2m1, SaturationZeroAndNan) {
  EXPECT_EQ(f32_to_e2m1(6.0f), 7);
  EXPECT_EQ(f32_to_e2m1(100.0f), 7);
  EXPECT_EQ(f32_to_e2m1(kInf), 7);
  EXPECT_EQ(f32_to_e2m1(-kInf), 15);
  EXPECT_EQ(f32_to_e2m1(-7.0f), 15);
  EXPECT_EQ(f32_to_e2m1(kNaN), 0);
  EXPECT_EQ(f32_to_e2m1(-kNaN), 0);
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0);   // zeros are +0
  EXPECT_EQ(f32_to_e2m1(-0.2f), 0);   // rounds to zero: +0, not code 8
  EXPECT_EQ(f32_to_e2m1(-0.26f), 9);  // -0.5
  EXPECT_EQ(bits(round_to_e2m1(-0.1f)), 0u);
}

TEST(NumericsE2m1, MatchesBruteForceOnRandomFloats) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-7.0f, 7.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = dist(rng);
    const float a = std::fmin(std::fabs(x), 6.0f);
    int best = 0;
    for (int k = 1; k < 8; ++k) {
      const float d = std::fabs(grid[k] - a), db = std::fabs(grid[best] - a);
      if (d < db || (d == db && k % 2 == 0)) best = k;
    }
    const int want = best == 0 ? 0 : (best | (x < 0 ? 8 : 0));
    ASSERT_EQ(f32_to_e2m1(x), want) << x;
  }
}

// ---- BF16 / F16 --------------------------------------------------------------------------

TEST(NumericsBf16, DecodeIsTheHighHalfAndRoundTripsEveryCode) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = bf16_to_f32(static_cast<uint16_t>(b));
    ASSERT_EQ(bits(v), b << 16);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(v))));
    } else {
      ASSERT_EQ(f32_to_bf16(v), b);
    }
  }
}

TEST(NumericsBf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808000)), 0x3F80);  // tie, lower is even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F818000)), 0x3F82);  // tie, upper is even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F808001)), 0x3F81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3F807FFF)), 0x3F80);  // just below
  EXPECT_EQ(f32_to_bf16(from_bits(0xBF818000)), 0xBF82);  // negative tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3FFF8000)), 0x4000);  // carry into the exponent
  EXPECT_EQ(f32_to_bf16(from_bits(0x00008000)), 0x0000);  // subnormal tie to even (0)
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to +Inf
  EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-9f), 1.0f);
}

TEST(NumericsBf16, NanStaysQuietNanWithSign) {
  // A signalling NaN whose payload sits only in the dropped low bits must not become Inf.
  EXPECT_EQ(f32_to_bf16(from_bits(0x7F800001)), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(from_bits(0xFF800001)), 0xFFC0);
  EXPECT_EQ(f32_to_bf16(kNaN), 0x7FC0);
  EXPECT_EQ(f32_to_bf16(from_bits(0x7FFFFFFF)), 0x7FFF);  // no carry out of a NaN payload
}

TEST(NumericsF16, DecodesEveryCode) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    EXPECT_EQ(std::signbit(v), s == 1) << h;
    if (e == 31) {
      if (m == 0) {
        EXPECT_TRUE(std::isinf(v)) << h;
      } else {
        EXPECT_TRUE(std::isnan(v)) << h;
      }
      continue;
    }
    const double mag = e == 0 ? m * std::pow(2.0, -24) : (1.0 + m / 1024.0) * std::pow(2.0, e - 15);
    ASSERT_EQ(static_cast<double>(v), s ? -mag : mag) << h;
  }
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
}

// ---- UE8M0 and the power-of-two exponent -------------------------------------------------

TEST(NumericsUe8m0, DecodesAndEncodesEveryCode) {
  for (int c = 0; c < 255; ++c) {
    const float v = ue8m0_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(v), std::ldexp(1.0, c - 127)) << c;
    EXPECT_EQ(f32_to_ue8m0(v), c) << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_f32(0xFF)));
  EXPECT_EQ(ue8m0_to_f32(127), 1.0f);
  EXPECT_EQ(ue8m0_to_f32(0), 0x1p-127f);
}

TEST(NumericsUe8m0, DecodeTableMatchesScalarDecodeBitForBit) {
  const float* table = ue8m0_decode_table();
  for (int c = 0; c < 256; ++c) EXPECT_EQ(bits(table[c]), bits(ue8m0_to_f32(static_cast<uint8_t>(c)))) << c;
  EXPECT_EQ(bits(table[0]), 0x00400000u);  // 2^-127, subnormal
  EXPECT_TRUE(std::isnan(table[0xFF]));
}

TEST(NumericsUe8m0, NonPowersOfTwoEncodeAsNan) {
  for (float bad : {0.0f, -0.0f, -1.0f, 3.0f, 1.5f, 0x1p-128f, 0x1p-149f, kInf, -kInf, kNaN,
                    std::nextafter(1.0f, 2.0f), std::numeric_limits<float>::max()}) {
    EXPECT_EQ(f32_to_ue8m0(bad), 0xFF) << bad;
  }
  EXPECT_EQ(f32_to_ue8m0(0x1p127f), 254);
}

TEST(NumericsUe8m0, CeilPow2ExponentOnTheBits) {
  for (int k = -126; k <= 127; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(ceil_pow2_exponent(p), k);
    if (k < 127) {
      EXPECT_EQ(ceil_pow2_exponent(std::nextafter(p, kInf)), k + 1) << k;
    }
    if (k > -126) {
      EXPECT_EQ(ceil_pow2_exponent(std::nextafter(p, 0.0f)), k) << k;
    }
  }
  EXPECT_EQ(ceil_pow2_exponent(3.0f), 2);
  EXPECT_EQ(ceil_pow2_exponent(0.75f), 0);
  EXPECT_EQ(ceil_pow2_exponent(-3.0f), 2);  // sign bit ignored
  // Subnormals, zero, Inf, NaN give the bit formula's answers (numerics.h).
  EXPECT_EQ(ceil_pow2_exponent(0x1p-130f), -126);
  EXPECT_EQ(ceil_pow2_exponent(0.0f), -127);
  EXPECT_EQ(ceil_pow2_exponent(kInf), 128);
  EXPECT_EQ(ceil_pow2_exponent(kNaN), 129);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-120, 120);
  for (int i = 0; i < 10000; ++i) {
    const float x = std::ldexp(mant(rng), exp(rng));
    ASSERT_EQ(ceil_pow2_exponent(x), static_cast<int>(std::ceil(std::log2(static_cast<double>(x))))) << x;
  }
}

}  // namespace
}  // namespace dsv41
