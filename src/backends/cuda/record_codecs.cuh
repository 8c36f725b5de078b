// Device twins of the scalar number formats (base/numerics.h) and of the block scales of the
// cache records (cache/records.cpp). Same operations in the same order on float32 bits, so
// every result is bit-identical to the CPU codecs (tested on random and special inputs). Built
// without fast math: the divisions and multiplies below are IEEE round-to-nearest, subnormals
// kept, exactly as on the host.
#pragma once

#include <cstdint>

namespace dsv41::cuda {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr float kWindowAmaxFloor = 1e-4f;
constexpr float kMainAmaxFloor = 6.0f * 0x1p-9f;
constexpr float kIndexAmaxFloor = 6.0f * 0x1p-126f;

__device__ __forceinline__ float canonical_nan() { return __int_as_float(0x7FC00000); }

__device__ __forceinline__ int round_half_even_dev(float v) {
  const float fl = floorf(v);
  const float frac = v - fl;
  int n = static_cast<int>(fl);
  if (frac > 0.5f || (frac == 0.5f && (n & 1))) ++n;
  return n;
}

__device__ __forceinline__ float e4m3_to_f32_dev(uint8_t code) {
  const int exp = (code >> 3) & 0xF, man = code & 0x7;
  float mag;
  if (exp == 0xF && man == 0x7) {
    mag = canonical_nan();
  } else if (exp == 0) {
    mag = ldexpf(static_cast<float>(man), -9);
  } else {
    mag = ldexpf(static_cast<float>(8 + man), exp - 10);
  }
  return (code & 0x80) ? -mag : mag;
}

__device__ __forceinline__ uint8_t f32_to_e4m3_dev(float x) {
  if (isnan(x)) return 0x7F;
  const uint8_t sign = signbit(x) ? 0x80 : 0x00;
  const float a = fabsf(x);
  if (a > kE4m3Max) return sign | 0x7E;
  int magnitude_code;
  if (a < 0.015625f) {
    magnitude_code = round_half_even_dev(a * 512.0f);
  } else {
    int e2;
    const float f = frexpf(a, &e2);
    const float m = f * 2.0f;
    magnitude_code = ((e2 - 1 + 7) << 3) + round_half_even_dev((m - 1.0f) * 8.0f);
  }
  return sign | static_cast<uint8_t>(magnitude_code);
}

// 2^(code-127), code 0 = 2^-127 (subnormal), 0xFF = NaN.
__device__ __forceinline__ float ue8m0_to_f32_dev(uint8_t code) {
  if (code == 0xFF) return canonical_nan();
  if (code == 0) return __int_as_float(0x00400000);
  return __int_as_float(static_cast<int>(code) << 23);
}

__device__ __forceinline__ int ceil_pow2_exponent_dev(float x) {
  const uint32_t b = __float_as_uint(x);
  return static_cast<int>((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0 ? 1 : 0);
}

__device__ __forceinline__ float e2m1_to_f32_dev(uint8_t code) {
  const int index = code & 0x7;
  // grid {0, .5, 1, 1.5, 2, 3, 4, 6} as selects (no local-memory table).
  const float grid = index == 0 ? 0.0f : index == 1 ? 0.5f : index == 2 ? 1.0f : index == 3 ? 1.5f
                   : index == 4 ? 2.0f : index == 5 ? 3.0f : index == 6 ? 4.0f : 6.0f;
  if (index == 0) return 0.0f;  // code 8 (−0) decodes as +0, like the reference table
  return (code & 0x8) ? -grid : grid;
}

__device__ __forceinline__ uint8_t f32_to_e2m1_dev(float x) {
  if (isnan(x)) return 0;
  const float a = fminf(fabsf(x), 6.0f);
  const int index = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  if (index == 0) return 0;
  return static_cast<uint8_t>((signbit(x) ? 0x8 : 0x0) | index);
}

__device__ __forceinline__ float clamp_sym_dev(float v, float limit) { return fminf(fmaxf(v, -limit), limit); }

}  // namespace dsv41::cuda
