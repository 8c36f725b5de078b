// Test support: a random block-quantised matrix as the checkpoint stores it (FP8 E4M3 or FP4 E2M1
// codes with UE8M0 block scales), its QuantWeights view as the loader builds it, and its reference
// widening (model/dequant.h), and random activations. Shared by the decode / prefill kernel tests (gemm_quant_test.cpp,
// gemm_amx_test.cpp); each fills codes and scales with the distributions it needs.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/gemm_quant.h"
#include "model/dequant.h"

namespace dsv41::testing {

struct StoredQuant {
  QuantFormat format;
  int64_t rows, in, block_rows, block_cols;
  std::vector<uint8_t> codes, scales;
  int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t scale_cols() const { return (in + block_cols - 1) / block_cols; }
  QuantWeights view() const {
    QuantWeights w;
    w.format = format;
    w.codes = codes.data();
    w.scales = scales.data();
    w.rows = rows;
    w.in = in;
    w.scale_cols = scale_cols();
    w.block_rows_log2 = std::countr_zero(static_cast<uint64_t>(block_rows));
    w.block_cols_log2 = std::countr_zero(static_cast<uint64_t>(block_cols));
    // As the loader sets it: matrices without NaN codes take the kernels' NaN-free path.
    w.nan_free = format == QuantFormat::kFp8E4M3 && e4m3_codes_nan_free(codes.data(), int64_t(codes.size()));
    return w;
  }
  // dequant.h's widening (the reference), [rows, in].
  std::vector<float> widened() const {
    TensorView w, s;
    w.name = "w";
    w.dtype = format == QuantFormat::kFp8E4M3 ? DType::kF8E4M3 : DType::kU8;
    w.shape = {rows, format == QuantFormat::kFp8E4M3 ? in : in / 2};
    w.bytes = codes;
    s.name = "w.scale";
    s.dtype = DType::kF8E8M0;
    s.shape = {scale_rows(), scale_cols()};
    s.bytes = scales;
    Result<FloatTensor> t = dequantize(w, &s);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? t->data : std::vector<float>();
  }
};

// n activations drawn from N(0, 1).
inline std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = d(rng);
  return v;
}

}  // namespace dsv41::testing
