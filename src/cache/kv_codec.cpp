// Cache record codecs (see kv_codec.h). Spec: model.md §4, §9.3–§9.4.
//
// The scalar format helpers below are local to this file on purpose: this is the one place to
// switch to the shared codecs (base/numerics.h, cache/records.h) once they exist on main.
#include "cache/kv_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace dsv41 {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;
constexpr float kE2m1Grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// 2^⌈log2 x⌉ exponent for finite x > 0, from the float32 bits (exponent, +1 if any mantissa
// bit is set) — the reference's ue8m0 scale rounding.
int ceil_log2_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const int exponent = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t mantissa = bits & 0x7FFFFF;
  if (exponent == 0) {  // subnormal: value = mantissa · 2^-149
    int e = -149;
    uint32_t m = mantissa;
    int top = 31 - __builtin_clz(m);
    e += top;
    return (m & ((1u << top) - 1)) ? e + 1 : e;
  }
  return exponent - 127 + (mantissa != 0 ? 1 : 0);
}

// E4M3 (bias 7, max 448) round to nearest even of |x| ≤ 448 already clamped; returns the code.
uint8_t encode_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (a > kE4m3Max) a = kE4m3Max;
  if (a == 0.0f) return sign;
  int e;
  std::frexp(a, &e);  // a = m·2^e, m in [0.5, 1): unbiased exponent of a is e−1
  int unbiased = e - 1;
  if (unbiased < -6) unbiased = -6;  // subnormal range shares the quantum 2^-9
  const float quantum = std::ldexp(1.0f, unbiased - 3);
  const float q = std::nearbyint(a / quantum) * quantum;  // exact power-of-two division, RNE
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  const int qunb = qe - 1;
  if (qunb < -6) {  // subnormal: E = 0, M = q / 2^-9
    return sign | static_cast<uint8_t>(q / std::ldexp(1.0f, -9));
  }
  const int mant = static_cast<int>(q / std::ldexp(1.0f, qunb - 3)) - 8;
  return sign | static_cast<uint8_t>(((qunb + 7) << 3) | mant);
}

float decode_e4m3(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (code & 0x80) ? -v : v;
}

// E2M1 code of a value already clamped to ±6: the grid index is the number of decision
// thresholds reached; at the boundaries next to an even index (0.25, 1.25, 2.5, 5) ties go down,
// next to an odd one (0.75, 1.75, 3.5) ties go up — i.e. ties to the even index.
uint8_t encode_e2m1(float q) {
  const float a = std::fabs(q);
  static const float kUp[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  static const bool kTieUp[7] = {false, true, false, true, false, true, false};
  uint8_t idx = 0;
  for (int i = 0; i < 7; ++i) {
    if (kTieUp[i] ? a >= kUp[i] : a > kUp[i]) ++idx;
  }
  return static_cast<uint8_t>((std::signbit(q) ? 8 : 0) | idx);
}

float decode_e2m1(uint8_t code) {
  const float v = kE2m1Grid[code & 7];
  return (code & 8) && v != 0.0f ? -v : v;  // zero decodes as +0 (model.md §9.3)
}

float block_amax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// ---- window: FP8 E4M3, UE8M0 scale per 32 --------------------------------------------------
void pack_window(const float* x, int64_t dim, uint8_t* rec) {
  uint8_t* scales = rec + dim;
  for (int64_t b = 0; b < dim / 32; ++b) {
    const float* xb = x + b * 32;
    const float amax = std::max(block_amax(xb, 32), 1e-4f);
    const int k = ceil_log2_bits(amax * (1.0f / kE4m3Max));
    const float scale = std::ldexp(1.0f, k);
    scales[b] = static_cast<uint8_t>(k + 127);
    for (int i = 0; i < 32; ++i) {
      const float q = std::clamp(xb[i] / scale, -kE4m3Max, kE4m3Max);
      rec[b * 32 + i] = encode_e4m3(q);
    }
  }
}

void unpack_window(const uint8_t* rec, int64_t dim, float* out) {
  const uint8_t* scales = rec + dim;
  for (int64_t b = 0; b < dim / 32; ++b) {
    const float scale = std::ldexp(1.0f, static_cast<int>(scales[b]) - 127);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = decode_e4m3(rec[b * 32 + i]) * scale;
  }
}

// ---- main: NVFP4, E4M3 scale per 16 ---------------------------------------------------------
void pack_main(const float* x, int64_t dim, uint8_t* rec) {
  uint8_t* codes = rec;
  uint8_t* scales = rec + dim / 2;
  std::memset(codes, 0, dim / 2);
  for (int64_t b = 0; b < dim / 16; ++b) {
    const float* xb = x + b * 16;
    const float amax = std::max(block_amax(xb, 16), kE2m1Max * std::ldexp(1.0f, -9));
    const uint8_t scode = encode_e4m3(amax / kE2m1Max);
    const float scale = decode_e4m3(scode);
    scales[b] = scode;
    for (int i = 0; i < 16; ++i) {
      const int64_t c = b * 16 + i;
      const uint8_t code = encode_e2m1(std::clamp(xb[i] / scale, -kE2m1Max, kE2m1Max));
      codes[c / 2] |= static_cast<uint8_t>(c % 2 ? code << 4 : code);
    }
  }
}

void unpack_main(const uint8_t* rec, int64_t dim, float* out) {
  const uint8_t* scales = rec + dim / 2;
  for (int64_t c = 0; c < dim; ++c) {
    const uint8_t code = c % 2 ? rec[c / 2] >> 4 : rec[c / 2] & 0xF;
    out[c] = decode_e2m1(code) * decode_e4m3(scales[c / 16]);
  }
}

// ---- index: MXFP4, UE8M0 scale per 32 -------------------------------------------------------
void pack_index(const float* x, int64_t dim, uint8_t* rec) {
  uint8_t* codes = rec;
  uint8_t* scales = rec + dim / 2;
  std::memset(codes, 0, dim / 2);
  for (int64_t b = 0; b < dim / 32; ++b) {
    const float* xb = x + b * 32;
    const float amax = std::max(block_amax(xb, 32), kE2m1Max * std::ldexp(1.0f, -126));
    const int k = ceil_log2_bits(amax * (1.0f / kE2m1Max));
    const float scale = std::ldexp(1.0f, k);
    scales[b] = static_cast<uint8_t>(k + 127);
    for (int i = 0; i < 32; ++i) {
      const int64_t c = b * 32 + i;
      const uint8_t code = encode_e2m1(std::clamp(xb[i] / scale, -kE2m1Max, kE2m1Max));
      codes[c / 2] |= static_cast<uint8_t>(c % 2 ? code << 4 : code);
    }
  }
}

void unpack_index(const uint8_t* rec, int64_t dim, float* out) {
  const uint8_t* scales = rec + dim / 2;
  for (int64_t c = 0; c < dim; ++c) {
    const uint8_t code = c % 2 ? rec[c / 2] >> 4 : rec[c / 2] & 0xF;
    out[c] = decode_e2m1(code) * std::ldexp(1.0f, static_cast<int>(scales[c / 32]) - 127);
  }
}

}  // namespace

int kv_record_block(KvRecordKind kind) { return kind == KvRecordKind::kMain ? 16 : 32; }

int64_t kv_record_bytes(KvRecordKind kind, int64_t dim) {
  const int block = kv_record_block(kind);
  if (dim <= 0 || dim % block != 0) return 0;
  switch (kind) {
    case KvRecordKind::kWindow: return dim + dim / 32;
    case KvRecordKind::kMain: return dim / 2 + dim / 16;
    case KvRecordKind::kIndex: return dim / 2 + dim / 32;
  }
  return 0;
}

void kv_pack(KvRecordKind kind, const float* x, int64_t dim, uint8_t* record) {
  switch (kind) {
    case KvRecordKind::kWindow: pack_window(x, dim, record); break;
    case KvRecordKind::kMain: pack_main(x, dim, record); break;
    case KvRecordKind::kIndex: pack_index(x, dim, record); break;
  }
}

void kv_unpack(KvRecordKind kind, const uint8_t* record, int64_t dim, float* out) {
  switch (kind) {
    case KvRecordKind::kWindow: unpack_window(record, dim, out); break;
    case KvRecordKind::kMain: unpack_main(record, dim, out); break;
    case KvRecordKind::kIndex: unpack_index(record, dim, out); break;
  }
}

void kv_fake_quant(KvRecordKind kind, float* x, int64_t dim) {
  uint8_t buf[4096];
  std::vector<uint8_t> big;
  uint8_t* rec = buf;
  const int64_t bytes = kv_record_bytes(kind, dim);
  if (bytes > static_cast<int64_t>(sizeof(buf))) {
    big.resize(bytes);
    rec = big.data();
  }
  kv_pack(kind, x, dim, rec);
  kv_unpack(kind, rec, dim, x);
}

}  // namespace dsv41
