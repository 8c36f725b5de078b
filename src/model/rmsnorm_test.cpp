#include "model/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

TEST(RmsNorm, MatchesDefinitionOnRandomRows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (int64_t n : {1, 2, 31, 64, 513}) {
    std::vector<float> x(3 * n), w(n), y(3 * n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = nd(rng);
    rmsnorm_rows(x.data(), 3, n, w.data(), 1e-6, y.data());
    for (int64_t r = 0; r < 3; ++r) {
      long double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += (long double)x[r * n + i] * x[r * n + i];
      const long double inv = 1.0L / std::sqrt(ss / n + 1e-6L);
      for (int64_t i = 0; i < n; ++i) {
        const double want = (double)(w[i] * x[r * n + i] * inv);
        EXPECT_NEAR(y[r * n + i], want, 2e-6 * std::fabs(want) + 1e-30) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(RmsNorm, UnweightedInPlaceAndTinyEps) {
  // eps 1e-20 (V4.1) must not flush: a row of 1e-6 values (mean square 1e-12) still normalises to ±1.
  std::vector<float> x = {1e-6f, -1e-6f, 1e-6f, -1e-6f};
  rmsnorm_row(x.data(), 4, nullptr, 1e-20, x.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(std::fabs(x[i]), 1.0f, 1e-6f);
  EXPECT_LT(x[1], 0.f);
  // All zeros stay zeros (finite), thanks to eps.
  std::vector<float> z(8, 0.f), out(8, 1.f);
  rmsnorm_row(z.data(), 8, nullptr, 1e-20, out.data());
  for (float v : out) EXPECT_EQ(v, 0.f);
}


// rmsnorm_rows runs four rows' sums side by side: every row must keep rmsnorm_row's bits, for
// row counts around the block of four, in place too, weighted or not.
TEST(RmsNorm, RowsGiveTheBitsOfOneRowAtATime) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (int64_t n : {1, 3, 64, 256, 257}) {
    for (int64_t rows : {1, 3, 4, 5, 8, 9, 16}) {
      std::vector<float> x(rows * n), w(n), want(rows * n), got(rows * n);
      for (auto& v : x) v = nd(rng) * std::exp(nd(rng));  // magnitudes spread over a few decades
      for (auto& v : w) v = nd(rng);
      for (const float* weight : {static_cast<const float*>(w.data()), static_cast<const float*>(nullptr)}) {
        for (int64_t r = 0; r < rows; ++r) rmsnorm_row(x.data() + r * n, n, weight, 1e-6, want.data() + r * n);
        rmsnorm_rows(x.data(), rows, n, weight, 1e-6, got.data());
        std::vector<float> inplace = x;
        rmsnorm_rows(inplace.data(), rows, n, weight, 1e-6, inplace.data());
        for (int64_t i = 0; i < rows * n; ++i) {
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0) << "n=" << n << " rows=" << rows << " i=" << i;
          ASSERT_EQ(std::memcmp(&inplace[i], &want[i], sizeof(float)), 0) << "in place, n=" << n << " rows=" << rows;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv41
