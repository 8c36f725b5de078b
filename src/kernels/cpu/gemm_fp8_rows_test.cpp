// The FP8 multi-row product (gemm_fp8_rows.h) against gemm_f32 on dequant.h's widened matrix, bit
// for bit, on fresh random codes and scales: 5–16 rows, outputs that cross block rows (32 and
// 128) and views that start inside one, columns that end in a partial block, scale codes at both
// extremes, activations at float32's edges (where the block falls back), NaN codes; directly, and
// through gemm_quant and gemm_many (the dispatch that sends batched decode here).
#include "kernels/cpu/gemm_fp8_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_many.h"
#include "kernels/cpu/stored_quant_test_util.h"

namespace dsv41 {
namespace {

using Stored = testing::StoredQuant;

Stored random_fp8(int64_t rows, int64_t in, int64_t block, bool extreme_scales, bool nan_codes, std::mt19937& rng) {
  Stored s{QuantFormat::kFp8E4M3, rows, in, block, block, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), near(118, 136), pick(0, 9);
  s.codes.resize(static_cast<size_t>(rows * in));
  for (uint8_t& c : s.codes) {
    c = static_cast<uint8_t>(byte(rng));
    if (!nan_codes && (c & 0x7F) == 0x7F) c ^= 1;
  }
  s.scales.resize(static_cast<size_t>(s.scale_rows() * s.scale_cols()));
  const uint8_t extreme[] = {0, 1, 254, 247, 246, 250};
  for (uint8_t& c : s.scales)
    c = static_cast<uint8_t>(extreme_scales && pick(rng) < 2 ? extreme[byte(rng) % 6] : near(rng));
  return s;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      ASSERT_TRUE(std::isnan(got[k])) << what << " at " << k;
      continue;
    }
    ASSERT_EQ(std::memcmp(&got[k], &want[k], 4), 0) << what << " at " << k << ": " << got[k] << " vs " << want[k];
  }
}

TEST(GemmFp8Rows, MatchesTheWidenedProductBitForBit) {
  if (cpu_best_isa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(2026);
  CpuExec ex = CpuExec::serial();
  const float specials[] = {1e-40f, 3e38f, -1.7e38f, 0.0f, -0.0f, 1e-30f, 1e30f, __builtin_inff()};
  struct Shape {
    int64_t out, in, block, first;
  };
  const Shape shapes[] = {{37, 64, 32, 0}, {70, 96, 32, 5}, {33, 100, 32, 0}, {260, 256, 128, 100}, {9, 32, 32, 3},
                          {130, 128, 128, 0}};
  for (const Shape& sh : shapes)
    for (int variant = 0; variant < 4; ++variant) {
      // 0: plain; 1: extreme scales; 2: activations at float32's edges; 3: NaN codes.
      const Stored s = random_fp8(sh.out + sh.first, sh.in, sh.block, variant == 1, variant == 3, rng);
      const std::vector<float> wide_all = s.widened();
      const std::vector<float> wide(wide_all.begin() + sh.first * sh.in, wide_all.end());
      const QuantWeights q = s.view().rows_from(sh.first);
      for (int64_t rows : {5, 7, 8, 11, 16}) {
        std::vector<float> x = testing::random_x(rows * sh.in, rng);
        if (variant == 2)
          for (size_t i = 0; i < x.size(); i += 7) x[i] = specials[(i / 7) % 8];
        const std::string what = "out " + std::to_string(sh.out) + " in " + std::to_string(sh.in) + " block " +
                                 std::to_string(sh.block) + " from " + std::to_string(sh.first) + " variant " +
                                 std::to_string(variant) + " rows " + std::to_string(rows);
        std::vector<float> want(rows * sh.out), got(rows * sh.out, -1.0f);
        gemm_f32(ex, x.data(), rows, sh.in, wide.data(), sh.out, want.data());
        const FoldRange fold = fold_range(x.data(), rows * sh.in);
        gemm_fp8_rows_avx512_block(x.data(), 0, rows, sh.in, q, 0, sh.out, sh.out, got.data(), fold);
        expect_same_bits(got, want, what + " block");
        if (rows > kGemmManyMaxRows) continue;  // gemm_quant widens above this (gemm.cpp)
        std::fill(got.begin(), got.end(), -1.0f);
        gemm_quant(ex, x.data(), rows, sh.in, q, sh.out, got.data());
        expect_same_bits(got, want, what + " gemm_quant");
        std::fill(got.begin(), got.end(), -1.0f);
        GemmJob job;
        job.x = x.data();
        job.rows = rows;
        job.in = sh.in;
        job.out = sh.out;
        job.quant = &q;
        job.y = got.data();
        gemm_many(ex, std::span<const GemmJob>(&job, 1));
        expect_same_bits(got, want, what + " gemm_many");
      }
    }
}

}  // namespace
}  // namespace dsv41
