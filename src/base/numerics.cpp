// Scalar number formats: BF16, F16, FP8 E4M3, UE8M0, FP4 E2M1 (model.md §2, §4).
// Plain scalar code on float32 bits; exactness first. The decode tables for bulk work are filled
// by these functions, so they agree by construction (and are tested). The FP8 codec also runs per
// cached value in every decode step (window rows, scales), so it works on the bits, not via libm.
#include "base/numerics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace dsv41 {
namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }
float float_of(uint32_t b) { return std::bit_cast<float>(b); }

// Round a non-negative float holding a value < 2^23 to the nearest integer, ties to even.
// Written out instead of std::nearbyint so the result never depends on the FP environment.
int round_half_even(float v) {
  float fl = std::floor(v);
  float frac = v - fl;  // exact: v and fl share the exponent range of small integers
  int n = static_cast<int>(fl);
  if (frac > 0.5f || (frac == 0.5f && (n & 1))) ++n;
  return n;
}

constexpr float kE4m3Max = 448.0f;
constexpr float kE4m3MinNormal = 0.015625f;  // 2^-6
// E2M1 magnitudes by grid index.
constexpr float kE2m1Grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

// ---- BF16 --------------------------------------------------------------------------------
float bf16_to_f32(uint16_t bits) { return float_of(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_bf16(float x) {
  uint32_t b = bits_of(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x0040);  // force quiet
  // Adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to even; a carry out of
  // the mantissa bumps the exponent, which is the correct rounding (up to Inf at the top).
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

// ---- F16 ---------------------------------------------------------------------------------
float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const int exp = (bits >> 10) & 0x1F;
  const uint32_t man = bits & 0x3FF;
  float mag;
  if (exp == 0x1F) {
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);  // subnormal: man · 2^-24, exact
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x400), exp - 25);  // (1024 + man) · 2^(exp-25)
  }
  return float_of(bits_of(mag) | sign);
}

// ---- FP8 E4M3 ----------------------------------------------------------------------------
float e4m3_to_f32(uint8_t code) {
  const bool negative = code & 0x80;
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  float mag;
  if (exp == 0xF && man == 0x7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = static_cast<float>(man) * 0x1p-9f;  // subnormal: man · 2^-9, exact
  } else {
    // (8 + man) · 2^(exp-7-3) = 1.man · 2^(exp-7): the float with that exponent and mantissa
    // (built on the bits: ldexp is a libm call, and this runs for every cached value).
    mag = float_of(static_cast<uint32_t>(exp + 120) << 23 | static_cast<uint32_t>(man) << 20);
  }
  return negative ? -mag : mag;
}

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a > kE4m3Max) return sign | 0x7E;  // saturate (Inf included)
  int magnitude_code;
  if (a < kE4m3MinNormal) {
    // Subnormal range: a grid of step 2^-9. Rounding up to 8 gives code 8 = 2^-6, the
    // smallest normal, so the subnormal and normal codes join without a special case.
    magnitude_code = round_half_even(a * 512.0f);
  } else {
    // a = 1.m · 2^e, e ≥ -6: keep 3 of the 23 mantissa bits, rounding half to even on the bits;
    // a carry moves into the exponent field, which is the right rounding. Then rebias the
    // exponent (127 → 7). a <= 448 keeps the result <= 0x7E.
    const uint32_t b = bits_of(a);
    const uint32_t rounded = b + 0x7FFFFu + ((b >> 20) & 1u);
    magnitude_code = static_cast<int>((rounded >> 20) - (120u << 3));
  }
  return sign | static_cast<uint8_t>(magnitude_code);
}

const float* e4m3_decode_table() {
  struct Table {
    float v[256];
    Table() {
      for (int c = 0; c < 256; ++c) v[c] = e4m3_to_f32(static_cast<uint8_t>(c));
    }
  };
  static const Table table;  // initialised once, thread-safe (C++11 magic statics)
  return table.v;
}

// ---- UE8M0 -------------------------------------------------------------------------------
float ue8m0_to_f32(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

const float* ue8m0_decode_table() {
  struct Table {
    float v[256];
    Table() {
      for (int c = 0; c < 256; ++c) v[c] = ue8m0_to_f32(static_cast<uint8_t>(c));
    }
  };
  static const Table table;  // initialised once, thread-safe
  return table.v;
}

uint8_t f32_to_ue8m0(float power_of_two) {
  const uint32_t b = bits_of(power_of_two);
  if (b == 0x00400000u) return 0;  // 2^-127, the one subnormal power of two in range
  const uint32_t exp = (b >> 23) & 0xFF;
  const uint32_t man = b & 0x7FFFFF;
  const bool positive = !(b >> 31);
  if (!positive || man != 0 || exp == 0 || exp == 0xFF) return 0xFF;
  return static_cast<uint8_t>(exp);  // 2^(exp-127) has code exp; exp <= 254 here
}

int ceil_pow2_exponent(float x) {
  const uint32_t b = bits_of(x);
  const int exp = static_cast<int>((b >> 23) & 0xFF);
  const uint32_t man = b & 0x7FFFFF;
  return exp - 127 + (man != 0 ? 1 : 0);
}

// ---- FP4 E2M1 ----------------------------------------------------------------------------
float e2m1_to_f32(uint8_t code) {
  const int index = code & 0x7;
  if (index == 0) return 0.0f;  // code 8 (-0) decodes as +0, like the reference table
  return (code & 0x8) ? -kE2m1Grid[index] : kE2m1Grid[index];
}

const float* e2m1_decode_table() {
  struct Table {
    float v[16];
    Table() {
      for (int c = 0; c < 16; ++c) v[c] = e2m1_to_f32(static_cast<uint8_t>(c));
    }
  };
  static const Table table;  // initialised once, thread-safe
  return table.v;
}

uint8_t f32_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const float a = std::min(std::fabs(x), 6.0f);  // not NaN here: no need for fmin's libm call
  // Count the decision boundaries below a. At a midpoint the even grid index wins: the
  // boundary is passed with ">" when the upper neighbour has an odd index (0.25, 1.25, 2.5,
  // 5: stay) and with ">=" when it has an even one (0.75, 1.75, 3.5: move up).
  int index = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
              (a >= 3.5f) + (a > 5.0f);
  if (index == 0) return 0;  // zero is always +0
  return static_cast<uint8_t>((std::signbit(x) ? 0x8 : 0x0) | index);
}

}  // namespace dsv41
