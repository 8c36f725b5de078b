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
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_quant_fold.h"
#include "kernels/cpu/stored_quant_test_util.h"
#include "model/dequant.h"

namespace dsv41 {
namespace {

using Stored = testing::StoredQuant;

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

using testing::random_x;

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

// Both AVX-512 tile variants called directly, whole product in one block, with the fold range
// gemm.cpp gives them: the base decoders and, on a CPU with VBMI + GFNI, the byte-permute ones
// (gemm_quant(kAvx512) runs only the latter there). want: the vector paths' bits.
void check_avx512_blocks(const std::vector<float>& x, int64_t xrows, const QuantWeights& q, int64_t out,
                         const std::vector<float>& want, const std::string& what) {
  if (cpu_best_isa() < CpuIsa::kAvx512) return;
  const FoldRange fold = q.format == QuantFormat::kFp8E4M3 ? fold_range(x.data(), xrows * q.in) : FoldRange{};
  std::vector<float> got(xrows * out);
  gemm_quant_avx512_block(x.data(), 0, xrows, q.in, q, 0, out, out, got.data(), fold);
  expect_same_bits(got, want, what + " avx512 base decoders");
  if (!cpu_has_avx512_vbmi_gfni()) return;
  gemm_quant_avx512vbmi_block(x.data(), 0, xrows, q.in, q, 0, out, out, got.data(), fold);
  expect_same_bits(got, want, what + " avx512 vbmi/gfni decoders");
}

// Every path on `s` (rows [first, rows) as a slice view) against the widened reference.
// A NaN-free FP8 matrix is checked on both kernel paths (nan_free as scanned, and forced false).
void check_all_paths(const Stored& s, int64_t first, int64_t xrows, std::mt19937& rng, const std::string& what,
                     bool force_nan_path = false) {
  const std::vector<float> wide_all = s.widened();
  const int64_t out = s.rows - first;
  const std::vector<float> wide(wide_all.begin() + first * s.in, wide_all.end());
  QuantWeights q = s.view().rows_from(first);
  if (force_nan_path) q.nan_free = false;
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
  check_avx512_blocks(x, xrows, q, out, want, what);
}

TEST(GemmQuant, Fp8BlockScaledMatchesWidenedBitForBit) {
  std::mt19937 rng(1301);
  const int64_t shapes[][2] = {{1, 32}, {7, 37}, {13, 64}, {33, 40}, {50, 7}, {97, 100}, {64, 1}};
  for (const auto& [out, in] : shapes)
    for (int64_t rows : {1, 2, 3, 5, 9, 17}) {
      const Stored s = random_stored(QuantFormat::kFp8E4M3, out, in, 32, 32, false, false, rng);
      ASSERT_TRUE(s.view().nan_free);
      check_all_paths(s, 0, rows, rng, "fp8 32x32 " + std::to_string(out) + "x" + std::to_string(in));
      check_all_paths(s, 0, rows, rng, "fp8 32x32 NaN path " + std::to_string(out) + "x" + std::to_string(in), true);
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
    check_all_paths(e, 0, rows, rng, "fp8 extreme scales, NaN path", true);
    const Stored n = random_stored(QuantFormat::kFp8E4M3, 45, 70, 32, 32, true, false, rng);
    check_all_paths(n, 0, rows, rng, "fp8 with NaN codes");
    // One NaN code in an otherwise NaN-free matrix, in a whole block and in the ragged tail.
    for (int64_t at : {int64_t{33} * 70 + 5, int64_t{44} * 70 + 69}) {
      Stored one = random_stored(QuantFormat::kFp8E4M3, 45, 70, 32, 32, false, false, rng);
      one.codes[at] = (at & 1) ? 0xFF : 0x7F;
      ASSERT_FALSE(one.view().nan_free);
      check_all_paths(one, 0, rows, rng, "fp8 with one NaN code at " + std::to_string(at));
    }
  }
}

// Activations at the edges of float32 (subnormal, near the largest finite, zeros of both signs,
// infinities, NaN, all zero) against scales at the edges: the FP8 tiles and the AVX2 FP4 tiles of
// ≤ 2 rows scale x instead of the weights only where that is exact (FoldRange), so every mix
// must still give the widened bits.
void check_extreme_activations_and_scales(QuantFormat f, uint32_t seed) {
  std::mt19937 rng(seed);
  const bool fp8 = f == QuantFormat::kFp8E4M3;
  const float specials[] = {1e-40f, -3e-45f, 1.2e-38f, 3e38f, -1.7e38f, 0.0f, -0.0f, 1e-30f, 1e30f};
  const float nonfinite[] = {__builtin_inff(), -__builtin_inff(), __builtin_nanf("")};
  std::uniform_int_distribution<int> pick(0, 99);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t out = 8 + trial % 11, in = 64 + 32 * (trial % 3) + (trial % 5 == 0 ? (fp8 ? 7 : 6) : 0);
    const int64_t block_rows = fp8 ? (trial % 2 ? 32 : 128) : 1, block_cols = fp8 && trial % 2 == 0 ? 128 : 32;
    const Stored s = random_stored(f, out, in, block_rows, block_cols, fp8 && trial % 4 == 3, trial % 3 != 0, rng);
    const std::vector<float> wide = s.widened();
    for (int64_t rows : {1, 2, 3}) {
      std::vector<float> x = random_x(rows * in, rng);
      const int mode = trial % 4;  // 0: plain, 1: tiny / huge finite, 2: + non-finite, 3: all zero (but one)
      for (float& v : x) {
        if (mode == 1 && pick(rng) < 10) v = specials[pick(rng) % 9];
        if (mode == 2 && pick(rng) < 3) v = nonfinite[pick(rng) % 3];
        if (mode == 3) v = 0.0f;
      }
      if (mode == 3 && trial % 8 == 3) x[in / 2] = 1e-39f;
      std::vector<float> want(rows * out), got(rows * out);
      for (CpuIsa isa : vector_isas()) {
        CpuExec ex = CpuExec::serial();
        ex.isa = isa;
        gemm_f32(ex, x.data(), rows, in, wide.data(), out, want.data());
        gemm_quant(ex, x.data(), rows, in, s.view(), out, got.data());
        expect_same_bits(got, want, "trial " + std::to_string(trial) + " " + cpu_isa_name(isa));
      }
      if (!vector_isas().empty()) check_avx512_blocks(x, rows, s.view(), out, want, "trial " + std::to_string(trial));
      gemm_f32_portable(x.data(), rows, in, wide.data(), out, want.data());
      gemm_quant_portable(x.data(), rows, in, s.view(), out, got.data());
      expect_same_bits(got, want, "trial " + std::to_string(trial) + " portable");
    }
  }
}

TEST(GemmQuant, Fp8ExtremeActivationsAndScalesMatchWidened) {
  check_extreme_activations_and_scales(QuantFormat::kFp8E4M3, 1305);
}

TEST(GemmQuant, Fp4ExtremeActivationsAndScalesMatchWidened) {
  check_extreme_activations_and_scales(QuantFormat::kFp4E2M1, 1306);
}

TEST(GemmQuant, FoldRangeIsTheExactScalingRange) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "fold_range is AVX2 code";
  auto range = [](std::vector<float> x) {
    const FoldRange r = fold_range(x.data(), int64_t(x.size()));
    return std::pair<int, int>(r.lo, r.hi);
  };
  // 0.5 … 3: x · 2^k stays normal and finite for -125 ≤ k ≤ 126; the same in the vector body.
  EXPECT_EQ(range({1.0f, 0.5f, -3.0f}), std::make_pair(-125, 126));
  std::vector<float> many(37, 1.0f);
  many[20] = 0.5f;
  many[3] = -3.0f;
  many[36] = __builtin_nanf("");
  many[9] = 0.0f;
  EXPECT_EQ(range(many), std::make_pair(-125, 126));
  EXPECT_EQ(range({1e-40f, 1.0f}), std::make_pair(0, 127));  // a subnormal: only k ≥ 0
  EXPECT_EQ(range({0.0f, -0.0f}), std::make_pair(-1000, 1000));
  const FoldRange inf = fold_range(std::vector<float>{1.0f, -__builtin_inff()}.data(), 2);
  EXPECT_GT(inf.lo, inf.hi);
  for (int k = -130; k <= 130; ++k) {  // the promise itself, on a spread of values
    const std::vector<float> x = {3.0e-38f, 1.5f, 6.0e37f, -2.5e-20f};
    const FoldRange r = fold_range(x.data(), 4);
    bool exact = true;
    for (float v : x) exact &= std::ldexp(double(v), k) == double(std::ldexp(v, k)) && std::isnormal(std::ldexp(v, k));
    EXPECT_EQ(r.contains(k), exact) << k;
  }
}

TEST(GemmQuant, NanScanFindsEveryNanCodeAnywhere) {
  std::vector<uint8_t> codes((1 << 17) + 3);
  for (size_t k = 0; k < codes.size(); ++k) codes[k] = static_cast<uint8_t>(k % 255 == 127 ? 0x7E : k % 255);
  for (uint8_t c : codes) ASSERT_NE(c & 0x7F, 0x7F);
  EXPECT_TRUE(e4m3_codes_nan_free(codes.data(), int64_t(codes.size())));
  EXPECT_TRUE(e4m3_codes_nan_free(codes.data(), 0));
  for (size_t at : {size_t{0}, size_t{1} << 16, (size_t{1} << 16) - 1, codes.size() - 1}) {
    for (uint8_t nan : {uint8_t{0x7F}, uint8_t{0xFF}}) {
      std::vector<uint8_t> c = codes;
      c[at] = nan;
      EXPECT_FALSE(e4m3_codes_nan_free(c.data(), int64_t(c.size()))) << at;
      EXPECT_TRUE(e4m3_codes_nan_free(c.data(), int64_t(at))) << at;  // the NaN just past the end
    }
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

// Prefill-sized products (more than 8 rows: the widening driver, whose tasks span several row
// blocks of one widened output block) against gemm_f32 on the widened weights, bit for bit: row
// counts around the 64-row blocks and the spans, partial output blocks, odd `in`, 1 and 3
// threads (different spans), FP8 and FP4.
TEST(GemmQuant, PrefillWideningSpansMatchWidened) {
  std::mt19937 rng(1305);
  ThreadPool pool(3);
  struct Shape {
    QuantFormat f;
    int64_t out, in;
  };
  const Shape shapes[] = {{QuantFormat::kFp8E4M3, 100, 37}, {QuantFormat::kFp8E4M3, 131, 1100},
                          {QuantFormat::kFp4E2M1, 150, 64}, {QuantFormat::kFp4E2M1, 110, 1090}};
  for (const Shape& sh : shapes) {
    const Stored s = sh.f == QuantFormat::kFp8E4M3 ? random_stored(sh.f, sh.out, sh.in, 32, 32, false, false, rng)
                                                   : random_stored(sh.f, sh.out, sh.in, 1, 32, false, true, rng);
    const std::vector<float> wide = s.widened();
    for (int64_t rows : {9, 63, 64, 65, 129, 517}) {
      const std::vector<float> x = random_x(rows * s.in, rng);
      std::vector<float> want(rows * s.rows), got(rows * s.rows);
      for (CpuIsa isa : vector_isas())
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          CpuExec ex = CpuExec::serial();
          ex.pool = p;
          ex.isa = isa;
          gemm_f32(ex, x.data(), rows, s.in, wide.data(), s.rows, want.data());
          std::fill(got.begin(), got.end(), -1.0f);
          gemm_quant(ex, x.data(), rows, s.in, s.view(), s.rows, got.data());
          expect_same_bits(got, want, std::string(cpu_isa_name(isa)) + " rows " + std::to_string(rows) + " " +
                                          std::to_string(s.rows) + "x" + std::to_string(s.in) +
                                          (p ? " 3 threads" : " serial"));
        }
    }
  }
}

}  // namespace
}  // namespace dsv41
