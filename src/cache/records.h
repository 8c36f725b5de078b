// Quantised cache records: the byte layout of one cached row of each kind, and its three
// codecs. Spec: ../shared/spec/model.md §4; golden README and model.md §9.3/§9.4.
//
// The reference (Hugging Face `deepseek_v41`) never stores packed bytes: it fake-quantises
// (quantise, then dequantise to float) and keeps the floats. Every value it keeps is exactly
// representable in BF16, so a packed record reproduces it bit for bit when the rounding
// matches. Each kind therefore has three entry points that agree bit for bit (tested):
//   *_row_pack       float row -> packed record bytes
//   *_row_unpack     packed record bytes -> float row
//   *_row_fake_quant float row -> float row, in place (what the reference applies)
// so unpack(pack(x)) == fake_quant(x) for every x. fake_quant is idempotent (its outputs are
// fixed points) with one exception inherited from the reference: a main-row block whose E4M3
// scale is subnormal (amax below about 6·2^-6 = 0.094) can round its scale so coarsely that
// the block max no longer lands on 6·scale, and a second pass picks another scale. Normalised
// latents never get there; the tests pin both behaviours.
//
// Channel counts come from the config (head_dim for window and main rows, index_head_dim for
// index rows); they must be positive multiples of the kind's block width (check with
// check_row_channels once, at load time). The block widths are properties of the formats.
//
// ---- Record layouts: format/record_layout.h (byte layouts, block widths, row sizes). ----------
//
// ---- Rounding (per block; amax = max |x| over the block) ------------------------------------
// Window: scale = 2^ceil_pow2_exponent(max(amax, 1e-4) · (1/448)) (float32 multiply by the
//   rounded reciprocal, as the reference does); value = e4m3(clamp(x / scale, ±448)) · scale.
// Main:   scale = e4m3(max(amax, 6·2^-9) / 6) (division, golden README §9.4; the E4M3 encode
//   saturates at 448 where torch's cast would give NaN, which only matters for amax >= 2880,
//   never reached by normalised latents); value = e2m1(clamp(x / scale, ±6)) · scale.
// Index:  scale = 2^ceil_pow2_exponent(max(amax, 6·2^-126) · (1/6)); value = e2m1(clamp(x /
//   scale, ±6)) · scale.
// E4M3 values keep the sign of zero (-0 stays -0, as torch's cast does); E2M1 zeros are +0
//   (numerics.h). All-zero blocks give the clamp's scale and all-zero codes.
//
// ---- Non-finite input --------------------------------------------------------------------------
// A block containing any NaN or ±Inf becomes all NaN: fake_quant writes the canonical quiet
// NaN (0x7FC00000) to every channel of that block; pack writes code bytes 0 and a NaN scale
// byte (UE8M0 0xFF, E4M3 0x7F); unpack turns a NaN scale into canonical NaN for the whole
// block. The reference ends in the same place (a NaN/Inf amax makes its scale NaN or Inf and
// every dequantised value NaN), so a poisoned row stays visible instead of being clamped into
// plausible numbers. Other blocks of the row are unaffected.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "format/record_layout.h"

namespace dsv41 {

// In all codecs: `x`/`out` hold `channels` floats, `record` holds *_row_bytes(channels) bytes;
// pointers are borrowed for the call only and the float and byte buffers must not overlap.

// Window rows: FP8 E4M3 + UE8M0 per 32 channels.
void window_row_pack(const float* x, size_t channels, uint8_t* record);
void window_row_unpack(const uint8_t* record, size_t channels, float* out);
void window_row_fake_quant(float* x, size_t channels);

// Main rows: NVFP4 (E2M1 + E4M3 per 16 channels).
void main_row_pack(const float* x, size_t channels, uint8_t* record);
void main_row_unpack(const uint8_t* record, size_t channels, float* out);
void main_row_fake_quant(float* x, size_t channels);

// Index rows (keys, and each query head): MXFP4 (E2M1 + UE8M0 per 32 channels).
void index_row_pack(const float* x, size_t channels, uint8_t* record);
void index_row_unpack(const uint8_t* record, size_t channels, float* out);
void index_row_fake_quant(float* x, size_t channels);

// ---- Unpack implementations ------------------------------------------------------------------
// The *_row_unpack functions above choose from CPUID alone: AVX-512 for window/main rows (unpack_avx512.h)
// where the CPU has it, else the AVX2/F16C path (kernels/cpu/unpack_avx2.h) with AVX2, FMA, F16C, else the
// table-driven scalar path; tests run each path, and the plain reference, by name. All agree bit for bit
// (tested on random records holding every code, NaN codes and every scale code); the only
// arithmetic in each is the same float32 `value · scale` multiply.
// Reference: element by element through the scalar decoders of numerics.h.
void window_row_unpack_reference(const uint8_t* record, size_t channels, float* out);
void main_row_unpack_reference(const uint8_t* record, size_t channels, float* out);
void index_row_unpack_reference(const uint8_t* record, size_t channels, float* out);
// Portable fast path: the numerics.h decode tables (E4M3 256, UE8M0 256, E2M1 16 entries).
void window_row_unpack_table(const uint8_t* record, size_t channels, float* out);
void main_row_unpack_table(const uint8_t* record, size_t channels, float* out);
void index_row_unpack_table(const uint8_t* record, size_t channels, float* out);
void row_unpack_reference(RowKind kind, const uint8_t* record, size_t channels, float* out);
void row_unpack_table(RowKind kind, const uint8_t* record, size_t channels, float* out);

// Dispatch on the kind (for tests and generic cache code). Scalar pack / fake-quant: records_reference.h.
void row_pack(RowKind kind, const float* x, size_t channels, uint8_t* record);
void row_unpack(RowKind kind, const uint8_t* record, size_t channels, float* out);
void row_fake_quant(RowKind kind, float* x, size_t channels);

}  // namespace dsv41
