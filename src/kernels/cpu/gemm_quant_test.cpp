// gemm_quant (FP8 / FP4 straight from the stored bytes) against the scalar widened reference:
// dequant.h's float32 widening, multiplied by gemm_f32 on the same ISA path. The promise is bit
// identity (gemm_quant.h), so the test compares bits (NaN against NaN), on fresh random codes and
// scales at boundary shapes: odd rows / columns, partial 32- and 128-blocks, row slices that start
// inside a block row, scale codes at both extremes, E4M3 NaN codes.
#include "kernels/cpu/gemm_quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "model/dequant.h"

namespace dsv41 {
namespace {

struct Stored {
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

// Scale codes around 2^0 with, when `extremes`, the smallest (2^-127) and largest finite (2^127)
// codes and the two-multiply range (≥ 247) mixed in.
Stored random_stored(QuantFormat f, int64_t rows, int64_t in, int64_t br, int64_t bc, bool nan_codes, bool extremes,
                     std::mt19937& rng) {
  Stored s{f, rows, in, br, bc, {}, {}};
  const int64_t nbytes = rows * (f == QuantFormat::kFp8E4M3 ? in : in / 2);
  std::uniform_int_distribution<int> byte(0, 255);
  s.codes.resize(nbytes);
  for (uint8_t& c : s.codes) {
    c = static_cast<uint8_t>(byte(rng));
    if (f == QuantFormat::kFp8E4M3 && !nan_codes && (c & 0x7F) == 0x7F) c ^= 1;
  }
  s.scales.resize(s.scale_rows() * s.scale_cols());
  std::uniform_int_distribution<int> near(120, 134), pick(0, 9);
  const uint8_t extreme[] = {0, 1, 254, 247, 246, 250};
  for (uint8_t& c : s.scales) c = static_cast<uint8_t>(extremes && pick(rng) < 3 ? extreme[byte(rng) % 6] : near(rng));
  return s;
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      ASSERT_TRUE(std::isnan(got[k])) << what << " at " << k << ": " << got[k];
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &got[k], 4);
    std::memcpy(&b, &want[k], 4);
    ASSERT_EQ(a, b) << what << " at " << k << ": " << got[k] << " vs " << want[k];
  }
}

std::vector<CpuIsa> vector_isas() {
  std::vector<CpuIsa> v;
  for (CpuIsa i : {CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (i <= cpu_best_isa()) v.push_back(i);
  return v;
}

// Every path on `s` (rows [first, rows) as a slice view) against the widened reference.
void check_all_paths(const Stored& s, int64_t first, int64_t xrows, std::mt19937& rng, const std::string& what) {
  const std::vector<float> wide_all = s.widened();
  const int64_t out = s.rows - first;
  const std::vector<float> wide(wide_all.begin() + first * s.in, wide_all.end());
  const QuantWeights q = s.view().rows_from(first);
  const std::vector<float> x = random_x(xrows * s.in, rng);
  std::vector<float> want(xrows * out), got(xrows * out);
  gemm_f32_portable(x.data(), xrows, s.in, wide.data(), out, want.data());
  gemm_quant_portable(x.data(), xrows, s.in, q, out, got.data());
  expect_same_bits(got, want, what + " portable");
  for (CpuIsa isa : vector_isas()) {
    CpuExec ex = CpuExec::serial();
    ex.isa = isa;
    gemm_f32(ex, x.data(), xrows, s.in, wide.data(), out, want.data());
    gemm_quant(ex, x.data(), xrows, s.in, q, out, got.data());
    expect_same_bits(got, want, what + " " + cpu_isa_name(isa));
  }
}

TEST(GemmQuant, Fp8BlockScaledMatchesWidenedBitForBit) {
  std::mt19937 rng(1301);
  const int64_t shapes[][2] = {{1, 32}, {7, 37}, {13, 64}, {33, 40}, {50, 7}, {97, 100}, {64, 1}};
  for (const auto& [out, in] : shapes)
    for (int64_t rows : {1, 2, 3, 5, 9, 17}) {
      const Stored s = random_stored(QuantFormat::kFp8E4M3, out, in, 32, 32, false, false, rng);
      check_all_paths(s, 0, rows, rng, "fp8 32x32 " + std::to_string(out) + "x" + std::to_string(in));
    }
}

TEST(GemmQuant, Fp8LargeBlocksSlicesExtremesAndNaN) {
  std::mt19937 rng(1302);
  for (int64_t rows : {1, 4, 8}) {
    const Stored s = random_stored(QuantFormat::kFp8E4M3, 260, 200, 128, 128, false, false, rng);
    check_all_paths(s, 0, rows, rng, "fp8 128x128");
    check_all_paths(s, 100, rows, rng, "fp8 128x128 rows from 100");
    const Stored e = random_stored(QuantFormat::kFp8E4M3, 70, 90, 32, 32, false, true, rng);
    check_all_paths(e, 0, rows, rng, "fp8 extreme scales");
    check_all_paths(e, 5, rows, rng, "fp8 extreme scales rows from 5");
    const Stored n = random_stored(QuantFormat::kFp8E4M3, 45, 70, 32, 32, true, false, rng);
    check_all_paths(n, 0, rows, rng, "fp8 with NaN codes");
  }
}

TEST(GemmQuant, Fp4RowScaledMatchesWidenedBitForBit) {
  std::mt19937 rng(1303);
  const int64_t shapes[][2] = {{1, 32}, {7, 38}, {13, 64}, {33, 2}, {50, 96}, {97, 130}};
  for (const auto& [out, in] : shapes)
    for (int64_t rows : {1, 2, 3, 6, 9, 17}) {
      const Stored s = random_stored(QuantFormat::kFp4E2M1, out, in, 1, 32, false, rows == 3, rng);
      check_all_paths(s, 0, rows, rng, "fp4 " + std::to_string(out) + "x" + std::to_string(in));
      if (out > 3) check_all_paths(s, 3, rows, rng, "fp4 rows from 3");
    }
}

TEST(GemmQuant, ThreadedLargeProductMatchesWidened) {
  std::mt19937 rng(1304);
  ThreadPool pool(3);
  const Stored s = random_stored(QuantFormat::kFp8E4M3, 700, 512, 32, 32, false, false, rng);
  const std::vector<float> wide = s.widened();
  for (int64_t rows : {1, 70}) {
    const std::vector<float> x = random_x(rows * s.in, rng);
    std::vector<float> want(rows * s.rows), got(rows * s.rows);
    for (CpuIsa isa : vector_isas()) {
      CpuExec ex = CpuExec::serial();
      ex.pool = &pool;
      ex.isa = isa;
      gemm_f32(ex, x.data(), rows, s.in, wide.data(), s.rows, want.data());
      gemm_quant(ex, x.data(), rows, s.in, s.view(), s.rows, got.data());
      expect_same_bits(got, want, std::string("threaded ") + cpu_isa_name(isa));
    }
  }
}

}  // namespace
}  // namespace dsv41
