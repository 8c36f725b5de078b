// Random stored weights for the CPU GEMM benchmarks: [out, in] FP8 E4M3 codes in 32 × 32 blocks
// or FP4 E2M1 codes with per-32 scales, from a fixed LCG (no NaN codes; scales 2^-7 … 2^0).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

struct BenchStoredWeights {
  std::vector<uint8_t> codes, scales;
  QuantWeights q;
  uint32_t lcg = 777;  // the generator's state after the weights (callers draw x from it)

  BenchStoredWeights(int64_t out, int64_t in, bool fp8) {
    codes.resize(static_cast<size_t>(fp8 ? out * in : out * in / 2));
    scales.resize(static_cast<size_t>(fp8 ? ((out + 31) / 32) * ((in + 31) / 32) : out * ((in + 31) / 32)));
    for (uint8_t& c : codes) {
      c = static_cast<uint8_t>(next() >> 24);
      if (fp8 && (c & 0x7F) == 0x7F) c ^= 1;  // 0x7F / 0xFF are E4M3's NaN
    }
    for (uint8_t& c : scales) c = static_cast<uint8_t>(120 + next() % 8);
    q.format = fp8 ? QuantFormat::kFp8E4M3 : QuantFormat::kFp4E2M1;
    q.codes = codes.data();
    q.scales = scales.data();
    q.rows = out;
    q.in = in;
    q.scale_cols = (in + 31) / 32;
    q.block_rows_log2 = fp8 ? 5 : 0;
  }
  BenchStoredWeights(const BenchStoredWeights&) = delete;  // q points into the vectors
  BenchStoredWeights& operator=(const BenchStoredWeights&) = delete;

  uint32_t next() { return lcg = lcg * 1664525u + 1013904223u; }
};

}  // namespace dsv41
