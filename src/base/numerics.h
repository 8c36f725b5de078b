// Scalar number formats used by DeepSeek-V4.1 checkpoints and caches, in one place.
// Spec: ../shared/spec/model.md §2 (checkpoint dtypes) and §4 (cache rounding); golden README
// and model.md §9 (what the Hugging Face reference does where sources differ).
//
// Every encoder here rounds to nearest, ties to even, unless its comment says otherwise, and
// every decoder is exact (each format is a subset of float32). Behaviour on NaN/Inf is part of
// each function's contract and is tested exhaustively over all codes (numerics_test.cpp).
// The block codecs built from these scalars live in cache/records.h.
#pragma once

#include <cstdint>

namespace dsv41 {

// ---- BF16 (1-8-7) -----------------------------------------------------------------------
float bf16_to_f32(uint16_t bits);  // exact: the bits become the high half of a float32
// Round to nearest even; NaN stays a quiet NaN (sign and high payload kept), ±Inf stays ±Inf,
// finite values past the largest BF16 round to ±Inf (IEEE behaviour, as torch does).
uint16_t f32_to_bf16(float x);
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// ---- F16 (IEEE half, for F16 checkpoint tensors) ------------------------------------------
float f16_to_f32(uint16_t bits);  // exact, subnormals included; Inf -> Inf, NaN -> NaN (sign kept)

// ---- FP8 E4M3 (OCP "fn": bias 7, no Inf, 0x7F/0xFF = NaN, max finite 448) ----------------
// Codes 0x00..0x07 are subnormals k·2^-9; 0x80 is -0. Used for checkpoint weights
// (F8_E4M3, with F8_E8M0 block scales), window-KV records and NVFP4 block scales.
float e4m3_to_f32(uint8_t code);  // 0x7F -> +NaN, 0xFF -> -NaN
// Round to nearest even, saturating: |x| > 448 (incl. Inf) encodes as ±448 (0x7E/0xFE), sign
// kept, so -0 and negative values that round to zero encode as 0x80. NaN encodes as 0x7F.
// Values at or below half the smallest subnormal (2^-10) encode as ±0.
// (torch's float8_e4m3fn cast differs only above 464: it gives NaN where this saturates.)
uint8_t f32_to_e4m3(float x);
inline float round_to_e4m3(float x) { return e4m3_to_f32(f32_to_e4m3(x)); }
// All 256 decoded values, table[code] == e4m3_to_f32(code) bit for bit (tested), for bulk
// dequantisation (FP8 weights, window rows). Built on first use; thread-safe; lives forever.
const float* e4m3_decode_table();

// ---- UE8M0 (unsigned power of two: value = 2^(code-127); 0xFF = NaN) ----------------------
// Code 0 is 2^-127 (a float32 subnormal). Used as F8_E8M0 checkpoint scales (FP8 weight blocks,
// FP4 expert weights, Engram rows) and as window/index record scales.
float ue8m0_to_f32(uint8_t code);
// The code of an exact power of two in [2^-127, 2^127]. Anything else (not a power of two,
// out of range, <= 0, Inf, NaN) returns 0xFF (NaN): callers compute the exponent themselves
// (see ceil_pow2_exponent) and pass 2^e, so 0xFF here means a caller bug that shows as NaN.
uint8_t f32_to_ue8m0(float power_of_two);
// All 256 decoded values, table[code] == ue8m0_to_f32(code) bit for bit (tested), for the block
// scales of bulk unpacking (cache records). Built on first use; thread-safe; lives forever.
const float* ue8m0_decode_table();
// ⌈log2 x⌉ for x > 0 computed on the float32 bits, as the reference kernel does: biased
// exponent field − 127, plus 1 if any mantissa bit is set. Exact for normal x. For subnormal x
// the formula gives −126 (2^-126 >= x, but not the tightest power); no codec reaches that case
// because every codec clamps amax first. Other inputs give what the formula gives, sign bit
// ignored: ±0 -> −127, ±Inf -> 128, NaN -> 129 (the codecs handle non-finite blocks before).
int ceil_pow2_exponent(float x);

// ---- FP4 E2M1 (sign + grid {0, .5, 1, 1.5, 2, 3, 4, 6}; code = sign<<3 | index) -------------
// Only the low 4 bits are used, so a byte holding two codes decodes as e2m1_to_f32(b) (low
// nibble) and e2m1_to_f32(b >> 4) (high nibble). Code 8 (-0) decodes as +0, as the reference's
// lookup table does (model.md §9.3); it has the same value as -0.
float e2m1_to_f32(uint8_t code);
// Nearest grid point of clamp(x, ±6); ties go to the even grid index (indices 0, 2, 4, 6, i.e.
// values 0, 1, 2, 4: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). ±Inf saturates
// to ±6. NaN encodes as +0. Values that round to zero (including -0) encode as +0 (code 0),
// never as code 8, so an encoded zero always decodes as +0 like the golden reference.
uint8_t f32_to_e2m1(float x);
inline float round_to_e2m1(float x) { return e2m1_to_f32(f32_to_e2m1(x)); }
// All 16 decoded values, table[code] == e2m1_to_f32(code) bit for bit (tested; code 8 is +0),
// for bulk unpacking (cache records): codes 0..7 first, then their negatives 8..15.
const float* e2m1_decode_table();

}  // namespace dsv41
