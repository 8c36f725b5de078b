// QuantWeights element access and the portable inner loop of gemm_quant (see gemm_quant.h); the
// driver and dispatch live with the other products in gemm.cpp.
#include "kernels/cpu/gemm_quant.h"

#include <vector>

#include "base/numerics.h"

namespace dsv41 {

QuantWeights QuantWeights::rows_from(int64_t r) const {
  QuantWeights v = *this;
  v.codes = codes + r * row_bytes();
  v.rows = rows - r;
  const int64_t first = row_phase + r;
  v.scales = scales + (first >> block_rows_log2) * scale_cols;
  v.row_phase = static_cast<int32_t>(first & ((int64_t{1} << block_rows_log2) - 1));
  return v;
}

float QuantWeights::at(int64_t r, int64_t c) const {
  const float s = ue8m0_decode_table()[scales[((row_phase + r) >> block_rows_log2) * scale_cols + (c >> block_cols_log2)]];
  if (format == QuantFormat::kFp8E4M3) return e4m3_decode_table()[codes[r * in + c]] * s;
  const uint8_t byte = codes[r * (in / 2) + c / 2];
  return e2m1_decode_table()[(c & 1) ? (byte >> 4) : (byte & 0x0F)] * s;
}

bool e4m3_codes_nan_free(const uint8_t* codes, int64_t n) {
  // Branch-free over chunks so the compiler vectorises it: (c & 0x7F) + 1 has bit 7 set only for
  // the magnitude 0x7F, the NaN code.
  constexpr int64_t kChunk = 1 << 16;
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t e = n - b < kChunk ? n : b + kChunk;
    uint8_t any = 0;
    for (int64_t i = b; i < e; ++i) any |= static_cast<uint8_t>((codes[i] & 0x7F) + 1);
    if (any & 0x80) return false;
  }
  return true;
}

void gemm_quant_portable(const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out, float* y) {
  // 8 lanes, unfused, as gemm_f32_portable; the row is dequantised once and reused for every row of x.
  std::vector<float> wrow(static_cast<size_t>(in > 0 ? in : 0));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) wrow[i] = w.at(o, i);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t i = 0; i < in; ++i) l[i % 8] += xr[i] * wrow[i];
      y[r * out + o] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    }
  }
}

}  // namespace dsv41
