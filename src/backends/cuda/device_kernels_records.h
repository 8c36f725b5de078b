// The cache records as the device backend keeps them: packed rows in device memory (FP8 window
// rows, NVFP4 main rows, MXFP4 index keys; byte layouts in format/record_layout.h), written by a
// pack body that repeats cache/records.cpp's pack operation for operation (so the bytes equal
// row_pack's) and decoded on read by the kernels that use them (attention, indexer) through
// KeyRows / KeyRow. A decoded value is the unpack reference's `value · scale` (NaN for a NaN
// scale), one float multiply, so a kernel reading a record gets the bits a float32 row unpacked
// on the host would give it. See device_kernels_common.h for how kernel bodies run.
#pragma once

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"
#include "backends/cuda/device_kernels_quant.h"
#include "format/record_layout.h"

namespace dsv41::dk {

// Bytes of one record of `kind` with D channels (record_layout.h's row_bytes, usable on the device).
DSV41_HD inline int64_t record_bytes(RowKind kind, int64_t D) {
  return kind == RowKind::kWindow ? D + D / 32 : kind == RowKind::kMain ? D / 2 + D / 16 : D / 2 + D / 32;
}

// Channel c of a record of `kind` with D channels, as row_unpack gives it.
DSV41_HD inline float record_value(RowKind kind, const uint8_t* rec, int64_t D, int64_t c) {
  if (kind == RowKind::kWindow) {
    const float scale = ue8m0_value(rec[D + c / 32]);
    return is_nan(scale) ? q_nan() : e4m3_value(rec[c]) * scale;
  }
  const uint8_t byte = rec[c / 2];
  const uint8_t code = (c & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
  const float scale = kind == RowKind::kMain ? e4m3_value(rec[D / 2 + c / 16]) : ue8m0_value(rec[D / 2 + c / 32]);
  return is_nan(scale) ? q_nan() : e2m1_value(code) * scale;
}

// One row of keys as a kernel reads it: float32 values or a packed record; empty = absent.
struct KeyRow {
  const float* f = nullptr;
  const uint8_t* rec = nullptr;
  RowKind kind = RowKind::kMain;
  int64_t D = 0;
  DSV41_HD explicit operator bool() const { return f != nullptr || rec != nullptr; }
  DSV41_HD float operator[](int64_t c) const { return f ? f[c] : record_value(kind, rec, D, c); }
};

// Where row r of paged records lies: page r >> shift of the table, record r mod 2^shift in it
// (the backend's mirrors, device_pages.h).
DSV41_HD inline uint8_t* paged_row(uint8_t* const* pages, int shift, int64_t record_bytes, int64_t r) {
  return pages[r >> shift] + (r & ((int64_t(1) << shift) - 1)) * record_bytes;
}

// Rows [n, D] of keys: float32 (kernel tests, the float reference) or packed records of `kind`,
// contiguous (rec) or in pages (pages, page_shift: paged_row).
struct KeyRows {
  const float* f = nullptr;
  const uint8_t* rec = nullptr;
  RowKind kind = RowKind::kMain;
  int64_t D = 0;
  uint8_t* const* pages = nullptr;
  int page_shift = 0;
  static KeyRows floats(const float* f, int64_t D) { return {f, nullptr, RowKind::kMain, D}; }
  static KeyRows records(const uint8_t* rec, RowKind kind, int64_t D) { return {nullptr, rec, kind, D}; }
  static KeyRows paged(uint8_t* const* pages, int shift, RowKind kind, int64_t D) {
    return {nullptr, nullptr, kind, D, pages, shift};
  }
  DSV41_HD bool empty() const { return f == nullptr && rec == nullptr && pages == nullptr; }
  DSV41_HD KeyRow row(int64_t r) const {
    if (f) return {f + r * D, nullptr, kind, D};
    if (pages) return {nullptr, paged_row(pages, page_shift, record_bytes(kind, D), r), kind, D};
    return {nullptr, rec ? rec + r * record_bytes(kind, D) : nullptr, kind, D};
  }
};

DSV41_HD inline uint8_t q_f32_to_e2m1(float x) {  // numerics.cpp f32_to_e2m1
  if (is_nan(x)) return 0;
  float a = q_fabs(x);
  if (a > 6.0f) a = 6.0f;
  const int index = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  if (index == 0) return 0;
  return static_cast<uint8_t>((q_signbit(x) ? 0x8 : 0x0) | index);
}

// row_pack of one scale block per index: block b of row r of src [rows, D] into record r of dst
// [rows, record_bytes(kind, D)] (its codes and its scale byte). Records.cpp's rounding: window
// scale 2^⌈log2(max(amax, 1e-4) · (1/448))⌉, E4M3 codes; main scale E4M3(max(amax, 6·2^-9) / 6),
// E2M1 codes; index scale 2^⌈log2(max(amax, 6·2^-126) · (1/6))⌉, E2M1 codes. A block holding a NaN
// or ±Inf gets code bytes 0 and the NaN scale byte.
struct PackK {
  const float* src;
  int64_t D;
  RowKind kind;
  uint8_t* dst;
  DSV41_HD void operator()(int64_t id) const {
    const int n = FakeQuantK::block(kind);
    const int64_t per_row = D / n, r = id / per_row, b = id % per_row;
    const float* xb = src + r * D + b * n;
    uint8_t* rec = dst + r * record_bytes(kind, D);
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < n; ++i) {
      if (!q_finite(xb[i])) finite = false;
      const float a = q_fabs(xb[i]);
      if (a > amax) amax = a;
    }
    if (kind == RowKind::kWindow) {
      uint8_t* codes = rec + b * n;
      if (!finite) {
        for (int i = 0; i < n; ++i) codes[i] = 0;
        rec[D + b] = 0xFF;
        return;
      }
      const int k = q_ceil_pow2_exponent(q_max(amax, 1e-4f) * (1.0f / 448.0f));
      const float s = q_pow2(k);
      for (int i = 0; i < n; ++i) codes[i] = q_f32_to_e4m3(q_clamp_sym(xb[i] / s, 448.0f));
      rec[D + b] = static_cast<uint8_t>(k + 127);
      return;
    }
    uint8_t* codes = rec + b * n / 2;
    uint8_t* scale = rec + D / 2 + b;
    if (!finite) {
      for (int i = 0; i < n / 2; ++i) codes[i] = 0;
      *scale = kind == RowKind::kMain ? 0x7F : 0xFF;
      return;
    }
    float s;
    if (kind == RowKind::kMain) {
      *scale = q_f32_to_e4m3(q_max(amax, 6.0f * 0x1p-9f) / 6.0f);
      s = e4m3_value(*scale);
    } else {
      const int k = q_ceil_pow2_exponent(q_max(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
      *scale = static_cast<uint8_t>(k + 127);
      s = q_pow2(k);
    }
    for (int i = 0; i < n; i += 2) {
      const uint8_t lo = q_f32_to_e2m1(q_clamp_sym(xb[i] / s, 6.0f));
      const uint8_t hi = q_f32_to_e2m1(q_clamp_sym(xb[i + 1] / s, 6.0f));
      codes[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
};

// PackK into paged records: block b of row r of src [rows, D] into row first_row + r of the pages
// (paged_row), the same bytes PackK writes.
struct PackPagedK {
  const float* src;
  int64_t D;
  RowKind kind;
  uint8_t* const* pages;
  int shift;
  int64_t first_row;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t per_row = D / FakeQuantK::block(kind), r = id / per_row;
    PackK{src + r * D, D, kind, paged_row(pages, shift, record_bytes(kind, D), first_row + r)}(id % per_row);
  }
};

// out[r, c] = channel c of record r of `kind` with D channels (tests: decode on read as a kernel).
struct DecodeK {
  const uint8_t* rec;
  RowKind kind;
  int64_t D;
  float* out;
  DSV41_HD void operator()(int64_t id) const {
    out[id] = record_value(kind, rec + (id / D) * record_bytes(kind, D), D, id % D);
  }
};

}  // namespace dsv41::dk
