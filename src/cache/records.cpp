// Block codecs of the quantised cache records: window rows (FP8), main rows (NVFP4) and index
// rows (MXFP4). Layouts and rounding are documented in records.h (model.md §4). Scalar code:
// one block at a time, the scale first, then every channel of the block. Unpacking runs on
// every decode step for every cached row it reads, so it also has a table-driven scalar path
// here and an AVX2 path (kernels/cpu/unpack_avx2.cpp), chosen per call; the reference stays.
#include "cache/records.h"
#include "cache/records_reference.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>

#include "base/numerics.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/quant_avx2.h"
#include "kernels/cpu/unpack_avx2.h"
#include "kernels/cpu/unpack_avx512.h"

namespace dsv41 {
namespace {

constexpr size_t kWindowBlock = 32;  // channels per UE8M0 scale in window rows
constexpr size_t kMainBlock = 16;    // channels per E4M3 scale in main rows
constexpr size_t kIndexBlock = 32;   // channels per UE8M0 scale in index rows

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr float kWindowAmaxFloor = 1e-4f;            // model.md §4
constexpr float kMainAmaxFloor = 6.0f * 0x1p-9f;     // scale floor 2^-9, E4M3's smallest subnormal
constexpr float kIndexAmaxFloor = 6.0f * 0x1p-126f;  // scale floor 2^-126, smallest normal float

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The scale of one block, as a float and as the byte stored in the record. `poisoned` marks a
// block with a NaN or Inf input (records.h: the whole block becomes NaN).
struct BlockScale {
  bool poisoned;
  float value;
  uint8_t code;
};

// Whether the quantisers run their AVX2 loops (kernels/cpu/quant_avx2.h, the same bits): a
// constant of the machine. The *_reference entry points pass false.
bool quant_avx2() {
  static const bool has = cpu_has_avx2_fma();
  return has;
}

// max |x| over the block; false if any element is NaN or ±Inf.
bool finite_amax(const float* x, size_t n, float* amax, bool vec) {
  if (vec) return block_amax_avx2(x, n, amax);
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
    const float a = std::fabs(x[i]);
    if (a > m) m = a;  // fmax without the libm call: no NaN gets here
  }
  *amax = m;
  return true;
}

// fmin(fmax(v, −limit), limit) — NaN gives −limit, −0 stays −0 — written with comparisons so it
// inlines (std::fmin/fmax are libm calls here, once per cached value of every decode step).
float clamp_sym(float v, float limit) {
  if (!(v >= -limit)) v = -limit;
  if (v > limit) v = limit;
  return v;
}

BlockScale window_scale(const float* x, bool vec) {
  float amax;
  if (!finite_amax(x, kWindowBlock, &amax, vec)) return {true, kNaN, 0xFF};
  // Multiply by the float32 reciprocal (not divide), then round up to a power of two on the
  // bits: both exactly as the reference, since a different rounding here moves every value
  // of the block by a factor of two at boundaries.
  const int k = ceil_pow2_exponent(std::fmax(amax, kWindowAmaxFloor) * (1.0f / kE4m3Max));
  return {false, std::ldexp(1.0f, k), static_cast<uint8_t>(k + 127)};
}

BlockScale main_scale(const float* x, bool vec) {
  float amax;
  if (!finite_amax(x, kMainBlock, &amax, vec)) return {true, kNaN, 0x7F};
  const uint8_t code = f32_to_e4m3(std::fmax(amax, kMainAmaxFloor) / kE2m1Max);  // division, §9.4
  return {false, e4m3_to_f32(code), code};
}

BlockScale index_scale(const float* x, bool vec) {
  float amax;
  if (!finite_amax(x, kIndexBlock, &amax, vec)) return {true, kNaN, 0xFF};
  const int k = ceil_pow2_exponent(std::fmax(amax, kIndexAmaxFloor) * (1.0f / kE2m1Max));
  return {false, std::ldexp(1.0f, k), static_cast<uint8_t>(k + 127)};
}

// The E2M1 code of one channel given its block's (finite) scale.
uint8_t e2m1_code(float x, float scale) { return f32_to_e2m1(clamp_sym(x / scale, kE2m1Max)); }

// FP4 rows (main and index) share the code packing and differ in block width and scale.
using ScaleFn = BlockScale (*)(const float*, bool);

void fp4_pack(const float* x, size_t channels, size_t block, ScaleFn scale_fn, uint8_t* record, bool vec) {
  uint8_t* codes = record;                 // [channels/2]
  uint8_t* scales = record + channels / 2;  // [channels/block]
  for (size_t b = 0; b < channels / block; ++b) {
    const float* xb = x + b * block;
    const BlockScale s = scale_fn(xb, vec);
    scales[b] = s.code;
    if (vec && !s.poisoned) {
      e2m1_block_codes_avx2(xb, block, s.value, codes + b * block / 2);
      continue;
    }
    for (size_t i = 0; i < block; i += 2) {
      const uint8_t lo = s.poisoned ? 0 : e2m1_code(xb[i], s.value);
      const uint8_t hi = s.poisoned ? 0 : e2m1_code(xb[i + 1], s.value);
      codes[(b * block + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void fp4_unpack(const uint8_t* record, size_t channels, size_t block, float (*scale_decode)(uint8_t),
                float* out) {
  const uint8_t* codes = record;
  const uint8_t* scales = record + channels / 2;
  for (size_t b = 0; b < channels / block; ++b) {
    const float scale = scale_decode(scales[b]);
    for (size_t i = 0; i < block; ++i) {
      const size_t c = b * block + i;
      const uint8_t byte = codes[c / 2];
      const uint8_t code = (c & 1) ? (byte >> 4) : (byte & 0xF);
      out[c] = std::isnan(scale) ? kNaN : e2m1_to_f32(code) * scale;
    }
  }
}

// Table-driven twin of fp4_unpack: same operands, same multiply, no libm calls.
void fp4_unpack_table(const uint8_t* record, size_t channels, size_t block, const float* scale_table, float* out) {
  const uint8_t* codes = record;                 // [channels/2]
  const uint8_t* scales = record + channels / 2;  // [channels/block]
  const float* e2m1 = e2m1_decode_table();       // [16]
  for (size_t b = 0; b < channels / block; ++b) {
    const float scale = scale_table[scales[b]];
    float* ob = out + b * block;
    if (std::isnan(scale)) {
      std::fill(ob, ob + block, kNaN);
      continue;
    }
    const uint8_t* cb = codes + b * block / 2;
    for (size_t i = 0; i < block / 2; ++i) {
      ob[2 * i] = e2m1[cb[i] & 0xF] * scale;
      ob[2 * i + 1] = e2m1[cb[i] >> 4] * scale;
    }
  }
}

// Which unpack implementation the dispatching entries run (records.h, "Unpack
// implementations"): a constant of the machine. Every path gives the reference's bits, so no
// option of an engine needs to choose it.
// kAvx512: window and main rows by the AVX-512 loops (kernels/cpu/unpack_avx512.h), index rows
// by the AVX2 ones.
enum class UnpackPath { kTable, kAvx2, kAvx512 };

UnpackPath unpack_path() {
  static const UnpackPath path = !(cpu_has_avx2_fma() && cpu_has_f16c()) ? UnpackPath::kTable
                                 : cpu_best_isa() >= CpuIsa::kAvx512   ? UnpackPath::kAvx512
                                                                       : UnpackPath::kAvx2;
  return path;
}

void fp4_fake_quant(float* x, size_t channels, size_t block, ScaleFn scale_fn, bool vec) {
  for (size_t b = 0; b < channels / block; ++b) {
    float* xb = x + b * block;
    const BlockScale s = scale_fn(xb, vec);
    if (vec && !s.poisoned) {
      e2m1_block_fake_quant_avx2(xb, block, s.value);
      continue;
    }
    for (size_t i = 0; i < block; ++i) {
      xb[i] = s.poisoned ? kNaN : round_to_e2m1(clamp_sym(xb[i] / s.value, kE2m1Max)) * s.value;
    }
  }
}

void window_pack(const float* x, size_t channels, uint8_t* record, bool vec) {
  assert(check_row_channels(RowKind::kWindow, channels).ok());
  uint8_t* values = record;             // [channels] E4M3
  uint8_t* scales = record + channels;  // [channels/32] UE8M0
  for (size_t b = 0; b < channels / kWindowBlock; ++b) {
    const float* xb = x + b * kWindowBlock;
    const BlockScale s = window_scale(xb, vec);
    scales[b] = s.code;
    if (vec && !s.poisoned) {
      e4m3_block_codes_avx2(xb, kWindowBlock, s.value, values + b * kWindowBlock);
      continue;
    }
    for (size_t i = 0; i < kWindowBlock; ++i) {
      // x / scale divides by a power of two: exact, as in the reference.
      values[b * kWindowBlock + i] = s.poisoned ? 0 : f32_to_e4m3(clamp_sym(xb[i] / s.value, kE4m3Max));
    }
  }
}

void window_fake_quant(float* x, size_t channels, bool vec) {
  assert(check_row_channels(RowKind::kWindow, channels).ok());
  for (size_t b = 0; b < channels / kWindowBlock; ++b) {
    float* xb = x + b * kWindowBlock;
    const BlockScale s = window_scale(xb, vec);
    if (vec && !s.poisoned) {
      e4m3_block_fake_quant_avx2(xb, kWindowBlock, s.value);
      continue;
    }
    for (size_t i = 0; i < kWindowBlock; ++i) {
      xb[i] = s.poisoned ? kNaN : round_to_e4m3(clamp_sym(xb[i] / s.value, kE4m3Max)) * s.value;
    }
  }
}

}  // namespace

// ---- window rows ---------------------------------------------------------------------------
void window_row_pack(const float* x, size_t channels, uint8_t* record) { window_pack(x, channels, record, quant_avx2()); }
void window_row_pack_reference(const float* x, size_t channels, uint8_t* record) { window_pack(x, channels, record, false); }

void window_row_unpack_reference(const uint8_t* record, size_t channels, float* out) {
  assert(check_row_channels(RowKind::kWindow, channels).ok());
  const uint8_t* values = record;
  const uint8_t* scales = record + channels;
  for (size_t b = 0; b < channels / kWindowBlock; ++b) {
    const float scale = ue8m0_to_f32(scales[b]);
    for (size_t i = 0; i < kWindowBlock; ++i) {
      const size_t c = b * kWindowBlock + i;
      out[c] = std::isnan(scale) ? kNaN : e4m3_to_f32(values[c]) * scale;
    }
  }
}

void window_row_unpack_table(const uint8_t* record, size_t channels, float* out) {
  assert(check_row_channels(RowKind::kWindow, channels).ok());
  const uint8_t* values = record;
  const uint8_t* scales = record + channels;
  const float* e4m3 = e4m3_decode_table();    // [256]
  const float* ue8m0 = ue8m0_decode_table();  // [256]
  for (size_t b = 0; b < channels / kWindowBlock; ++b) {
    const float scale = ue8m0[scales[b]];
    float* ob = out + b * kWindowBlock;
    if (std::isnan(scale)) {
      std::fill(ob, ob + kWindowBlock, kNaN);
      continue;
    }
    const uint8_t* vb = values + b * kWindowBlock;
    for (size_t i = 0; i < kWindowBlock; ++i) ob[i] = e4m3[vb[i]] * scale;
  }
}

void window_row_unpack(const uint8_t* record, size_t channels, float* out) {
  switch (unpack_path()) {
    case UnpackPath::kAvx512: return window_row_unpack_avx512(record, channels, out);
    case UnpackPath::kAvx2: return window_row_unpack_avx2(record, channels, out);
    case UnpackPath::kTable: return window_row_unpack_table(record, channels, out);
  }
}

void window_row_fake_quant(float* x, size_t channels) { window_fake_quant(x, channels, quant_avx2()); }
void window_row_fake_quant_reference(float* x, size_t channels) { window_fake_quant(x, channels, false); }

// ---- main rows -----------------------------------------------------------------------------
void main_row_pack(const float* x, size_t channels, uint8_t* record) {
  assert(check_row_channels(RowKind::kMain, channels).ok());
  fp4_pack(x, channels, kMainBlock, main_scale, record, quant_avx2());
}
void main_row_pack_reference(const float* x, size_t channels, uint8_t* record) {
  assert(check_row_channels(RowKind::kMain, channels).ok());
  fp4_pack(x, channels, kMainBlock, main_scale, record, false);
}

void main_row_unpack_reference(const uint8_t* record, size_t channels, float* out) {
  assert(check_row_channels(RowKind::kMain, channels).ok());
  fp4_unpack(record, channels, kMainBlock, e4m3_to_f32, out);
}

void main_row_unpack_table(const uint8_t* record, size_t channels, float* out) {
  assert(check_row_channels(RowKind::kMain, channels).ok());
  fp4_unpack_table(record, channels, kMainBlock, e4m3_decode_table(), out);
}

void main_row_unpack(const uint8_t* record, size_t channels, float* out) {
  switch (unpack_path()) {
    case UnpackPath::kAvx512: return main_row_unpack_avx512(record, channels, out);
    case UnpackPath::kAvx2: return main_row_unpack_avx2(record, channels, out);
    case UnpackPath::kTable: return main_row_unpack_table(record, channels, out);
  }
}

void main_row_fake_quant(float* x, size_t channels) {
  assert(check_row_channels(RowKind::kMain, channels).ok());
  fp4_fake_quant(x, channels, kMainBlock, main_scale, quant_avx2());
}
void main_row_fake_quant_reference(float* x, size_t channels) {
  assert(check_row_channels(RowKind::kMain, channels).ok());
  fp4_fake_quant(x, channels, kMainBlock, main_scale, false);
}

// ---- index rows ----------------------------------------------------------------------------
void index_row_pack(const float* x, size_t channels, uint8_t* record) {
  assert(check_row_channels(RowKind::kIndex, channels).ok());
  fp4_pack(x, channels, kIndexBlock, index_scale, record, quant_avx2());
}
void index_row_pack_reference(const float* x, size_t channels, uint8_t* record) {
  assert(check_row_channels(RowKind::kIndex, channels).ok());
  fp4_pack(x, channels, kIndexBlock, index_scale, record, false);
}

void index_row_unpack_reference(const uint8_t* record, size_t channels, float* out) {
  assert(check_row_channels(RowKind::kIndex, channels).ok());
  fp4_unpack(record, channels, kIndexBlock, ue8m0_to_f32, out);
}

void index_row_unpack_table(const uint8_t* record, size_t channels, float* out) {
  assert(check_row_channels(RowKind::kIndex, channels).ok());
  fp4_unpack_table(record, channels, kIndexBlock, ue8m0_decode_table(), out);
}

void index_row_unpack(const uint8_t* record, size_t channels, float* out) {
  switch (unpack_path()) {
    case UnpackPath::kAvx512:
    case UnpackPath::kAvx2: return index_row_unpack_avx2(record, channels, out);
    case UnpackPath::kTable: return index_row_unpack_table(record, channels, out);
  }
}

void index_row_fake_quant(float* x, size_t channels) {
  assert(check_row_channels(RowKind::kIndex, channels).ok());
  fp4_fake_quant(x, channels, kIndexBlock, index_scale, quant_avx2());
}
void index_row_fake_quant_reference(float* x, size_t channels) {
  assert(check_row_channels(RowKind::kIndex, channels).ok());
  fp4_fake_quant(x, channels, kIndexBlock, index_scale, false);
}

// ---- dispatch ------------------------------------------------------------------------------
void row_pack(RowKind kind, const float* x, size_t channels, uint8_t* record) {
  switch (kind) {
    case RowKind::kWindow: return window_row_pack(x, channels, record);
    case RowKind::kMain: return main_row_pack(x, channels, record);
    case RowKind::kIndex: return index_row_pack(x, channels, record);
  }
}

void row_unpack(RowKind kind, const uint8_t* record, size_t channels, float* out) {
  switch (kind) {
    case RowKind::kWindow: return window_row_unpack(record, channels, out);
    case RowKind::kMain: return main_row_unpack(record, channels, out);
    case RowKind::kIndex: return index_row_unpack(record, channels, out);
  }
}

void row_unpack_reference(RowKind kind, const uint8_t* record, size_t channels, float* out) {
  switch (kind) {
    case RowKind::kWindow: return window_row_unpack_reference(record, channels, out);
    case RowKind::kMain: return main_row_unpack_reference(record, channels, out);
    case RowKind::kIndex: return index_row_unpack_reference(record, channels, out);
  }
}

void row_unpack_table(RowKind kind, const uint8_t* record, size_t channels, float* out) {
  switch (kind) {
    case RowKind::kWindow: return window_row_unpack_table(record, channels, out);
    case RowKind::kMain: return main_row_unpack_table(record, channels, out);
    case RowKind::kIndex: return index_row_unpack_table(record, channels, out);
  }
}

void row_pack_reference(RowKind kind, const float* x, size_t channels, uint8_t* record) {
  switch (kind) {
    case RowKind::kWindow: return window_row_pack_reference(x, channels, record);
    case RowKind::kMain: return main_row_pack_reference(x, channels, record);
    case RowKind::kIndex: return index_row_pack_reference(x, channels, record);
  }
}

void row_fake_quant_reference(RowKind kind, float* x, size_t channels) {
  switch (kind) {
    case RowKind::kWindow: return window_row_fake_quant_reference(x, channels);
    case RowKind::kMain: return main_row_fake_quant_reference(x, channels);
    case RowKind::kIndex: return index_row_fake_quant_reference(x, channels);
  }
}

void row_fake_quant(RowKind kind, float* x, size_t channels) {
  switch (kind) {
    case RowKind::kWindow: return window_row_fake_quant(x, channels);
    case RowKind::kMain: return main_row_fake_quant(x, channels);
    case RowKind::kIndex: return index_row_fake_quant(x, channels);
  }
}

}  // namespace dsv41
