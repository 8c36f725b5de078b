// The cache records' fake-quantisers (cache/records.h: quantise, then dequantise to float) as a
// device kernel body, so the FP8 window kv rows and the MXFP4 indexer queries are rounded where
// they are computed instead of after a host round trip. The scalar codecs below repeat
// base/numerics.cpp and cache/records.cpp operation for operation on float32 bits (no libm call,
// no fused multiply-add possible: every rounding step is a single compare, divide or multiply),
// so the results equal row_fake_quant's bit for bit on both executors (device_kernels_check.h
// tests every kind on random, tie, tiny, huge and non-finite blocks). record_codecs.cuh holds the
// GPU-only twins of the pack / unpack codecs.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cuda/device_kernels_common.h"
#include "format/record_layout.h"

namespace dsv41::dk {

DSV41_HD inline uint32_t q_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

DSV41_HD inline float q_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

DSV41_HD inline float q_nan() { return q_float(0x7FC00000u); }  // std::numeric_limits<float>::quiet_NaN()
DSV41_HD inline bool q_finite(float x) { return (q_bits(x) & 0x7F800000u) != 0x7F800000u; }
DSV41_HD inline float q_fabs(float x) { return q_float(q_bits(x) & 0x7FFFFFFFu); }
DSV41_HD inline bool q_signbit(float x) { return (q_bits(x) >> 31) != 0; }

// numerics.cpp round_half_even: v ≥ 0 and < 2^23.
DSV41_HD inline int q_round_half_even(float v) {
  const float fl = floorf(v);
  const float frac = v - fl;
  int n = static_cast<int>(fl);
  if (frac > 0.5f || (frac == 0.5f && (n & 1))) ++n;
  return n;
}

DSV41_HD inline uint8_t q_f32_to_e4m3(float x) {
  if (is_nan(x)) return 0x7F;
  const uint8_t sign = q_signbit(x) ? 0x80 : 0x00;
  const float a = q_fabs(x);
  if (a > 448.0f) return sign | 0x7E;
  int magnitude_code;
  if (a < 0.015625f) {
    magnitude_code = q_round_half_even(a * 512.0f);
  } else {
    const uint32_t b = q_bits(a);
    const uint32_t rounded = b + 0x7FFFFu + ((b >> 20) & 1u);
    magnitude_code = static_cast<int>((rounded >> 20) - (120u << 3));
  }
  return sign | static_cast<uint8_t>(magnitude_code);
}

DSV41_HD inline float q_e4m3_to_f32(uint8_t code) {
  const int exp = (code >> 3) & 0xF, man = code & 0x7;
  float mag;
  if (exp == 0xF && man == 0x7) {
    mag = q_nan();
  } else if (exp == 0) {
    mag = static_cast<float>(man) * 0x1p-9f;
  } else {
    mag = q_float(static_cast<uint32_t>(exp + 120) << 23 | static_cast<uint32_t>(man) << 20);
  }
  return (code & 0x80) ? -mag : mag;
}

DSV41_HD inline float q_e2m1_round(float x) {  // e2m1_to_f32(f32_to_e2m1(x))
  if (is_nan(x)) return 0.0f;
  float a = q_fabs(x);
  if (a > 6.0f) a = 6.0f;
  const int index = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  if (index == 0) return 0.0f;
  const float g = index == 1 ? 0.5f : index == 2 ? 1.0f : index == 3 ? 1.5f : index == 4 ? 2.0f
                : index == 5 ? 3.0f : index == 6 ? 4.0f : 6.0f;
  return q_signbit(x) ? -g : g;
}

DSV41_HD inline int q_ceil_pow2_exponent(float x) {
  const uint32_t b = q_bits(x);
  return static_cast<int>((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0 ? 1 : 0);
}

DSV41_HD inline float q_pow2(int k) {  // ldexp(1.0f, k), exact for −149 ≤ k ≤ 127
  if (k >= -126) return q_float(static_cast<uint32_t>(k + 127) << 23);
  return q_float(1u << (k + 149));
}

DSV41_HD inline float q_clamp_sym(float v, float limit) {  // records.cpp clamp_sym: NaN → −limit
  if (!(v >= -limit)) v = -limit;
  if (v > limit) v = limit;
  return v;
}

DSV41_HD inline float q_max(float a, float b) { return a > b ? a : b; }  // a finite, b > 0: fmax

// row_fake_quant of one scale block per index, in place: window rows (FP8 E4M3 + UE8M0 per 32),
// main rows (NVFP4: E2M1 + E4M3 per 16), index rows and queries (MXFP4: E2M1 + UE8M0 per 32).
// Rows of any width that is a multiple of the block are a run of blocks, so a launch covers
// [rows, width] / block indices (record_layout.h's check_row_channels holds for the widths used).
struct FakeQuantK {
  float* x;
  RowKind kind;
  static DSV41_HD int block(RowKind k) { return k == RowKind::kMain ? 16 : 32; }
  DSV41_HD void operator()(int64_t id) const {
    const int n = block(kind);
    float* xb = x + id * n;
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < n; ++i) {
      if (!q_finite(xb[i])) finite = false;
      const float a = q_fabs(xb[i]);
      if (a > amax) amax = a;
    }
    if (!finite) {
      for (int i = 0; i < n; ++i) xb[i] = q_nan();
      return;
    }
    if (kind == RowKind::kWindow) {
      const float s = q_pow2(q_ceil_pow2_exponent(q_max(amax, 1e-4f) * (1.0f / 448.0f)));
      for (int i = 0; i < n; ++i) xb[i] = q_e4m3_to_f32(q_f32_to_e4m3(q_clamp_sym(xb[i] / s, 448.0f))) * s;
    } else {
      // Main: E4M3 scale of amax / 6 (a division); index: power of two above amax · (1/6).
      const float s = kind == RowKind::kMain
                          ? q_e4m3_to_f32(q_f32_to_e4m3(q_max(amax, 6.0f * 0x1p-9f) / 6.0f))
                          : q_pow2(q_ceil_pow2_exponent(q_max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f)));
      for (int i = 0; i < n; ++i) xb[i] = q_e2m1_round(q_clamp_sym(xb[i] / s, 6.0f)) * s;
    }
  }
};

// RoPE then the fake-quantiser over the same rows, one index per quantiser block: the block's
// rotated pairs first (RopeK's body for each pair inside it), then FakeQuantK's body for it — the
// two launches' float operations on every element in their order, so their bits, in one launch.
// Needs quant.x == rope.x, rows of rope.dim holding whole quantiser blocks and an even start of the
// rotated tail (fits()); a pair never straddles two blocks then.
struct RopeQuantK {
  RopeK rope;
  FakeQuantK quant;
  DSV41_HD bool fits() const {
    const int n = FakeQuantK::block(quant.kind);
    return quant.x == rope.x && rope.dim % n == 0 && (rope.dim - rope.rope_dim) % 2 == 0 && rope.rope_dim % 2 == 0;
  }
  // Quantiser blocks of `rows` rows (of rope.heads heads each).
  DSV41_HD int64_t blocks(int64_t rows) const { return rows * rope.heads * rope.dim / FakeQuantK::block(quant.kind); }
  DSV41_HD void operator()(int64_t id) const {
    const int64_t n = FakeQuantK::block(quant.kind), half = rope.rope_dim / 2, tail = rope.dim - rope.rope_dim;
    const int64_t rh = id * n / rope.dim, c0 = id * n % rope.dim;
    for (int64_t c = c0 > tail ? c0 : tail; c < c0 + n; c += 2) rope(rh * half + (c - tail) / 2);
    quant(id);
  }
};

}  // namespace dsv41::dk
