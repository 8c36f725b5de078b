// Scalar number formats used by DeepSeek-V4.1 checkpoints and caches, in one place.
// Spec: ../shared/spec/model.md §2 (checkpoint dtypes) and §4 (cache rounding).
//
// Every encoder here rounds to nearest, ties to even, unless its comment says otherwise, and
// every decoder is exact (each format is a subset of float32). Behaviour on NaN/Inf is part of
// each function's contract and is tested exhaustively over all codes.
#pragma once

#include <cstdint>

namespace dsv41 {

// ---- BF16 (1-8-7) -----------------------------------------------------------------------
float bf16_to_f32(uint16_t bits);
// Round to nearest even; NaN stays a quiet NaN (sign kept), Inf stays Inf.
uint16_t f32_to_bf16(float x);
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// ---- F16 (IEEE half, for F16 checkpoint tensors) ------------------------------------------
float f16_to_f32(uint16_t bits);

// ---- FP8 E4M3 (OCP "fn": bias 7, no Inf, 0x7F/0xFF = NaN, max finite 448) ----------------
float e4m3_to_f32(uint8_t code);
// Round to nearest even, saturating: |x| > 448 (incl. Inf) encodes as ±448. NaN encodes as 0x7F.
// Values below half the smallest subnormal (2^-10) encode as ±0.
uint8_t f32_to_e4m3(float x);
inline float round_to_e4m3(float x) { return e4m3_to_f32(f32_to_e4m3(x)); }

// ---- UE8M0 (unsigned power of two: value = 2^(code-127); 0xFF = NaN) ----------------------
float ue8m0_to_f32(uint8_t code);
// Exact for powers of two in [2^-127, 2^127]; anything else is a caller bug (asserted in debug);
// callers compute the exponent themselves (see ceil_pow2_exponent).
uint8_t f32_to_ue8m0(float power_of_two);
// The smallest e with 2^e >= x for finite x > 0, computed on the float32 bits (exponent, +1 if
// any mantissa bit is set) as the reference does. Subnormal inputs are handled exactly.
int ceil_pow2_exponent(float x);

// ---- FP4 E2M1 (sign + grid {0, .5, 1, 1.5, 2, 3, 4, 6}; code = sign<<3 | index) -------------
float e2m1_to_f32(uint8_t code);  // low 4 bits used
// Nearest grid point of clamp(x, ±6); ties go to the even grid index (indices 0, 2, 4, 6, i.e.
// values 0, 1, 2, 4: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). NaN encodes as +0. Values that round to zero encode as +0 (code 0),
// as the golden reference does (model.md §9.3).
uint8_t f32_to_e2m1(float x);

}  // namespace dsv41
