#include "kernels/cpu/attention_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

TEST(AttentionKernels, FastMatchesReferenceAtBoundarySizes) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t D : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 512}) {
    for (int64_t n : {0, 1, 2, 5, 129}) {
      std::vector<float> a(D), rows(n * D), p(n), y1(n), y2(n);
      for (auto& v : a) v = nd(rng);
      for (auto& v : rows) v = nd(rng);
      for (auto& v : p) v = std::fabs(nd(rng));
      dot_rows_reference(a.data(), rows.data(), n, D, y1.data());
      dot_rows(a.data(), rows.data(), n, D, y2.data());
      for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(y1[j], y2[j], 1e-5 * std::sqrt(double(D)) * 4) << D << " " << n;
      std::vector<float> o1(D, 0.5f), o2(D, 0.5f);
      weighted_sum_rows_reference(p.data(), rows.data(), n, D, o1.data());
      weighted_sum_rows(p.data(), rows.data(), n, D, o2.data());
      for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(o1[d], o2[d], 1e-5 * std::sqrt(double(n + 1)) * 4) << D << " " << n;
    }
  }
}

}  // namespace
}  // namespace dsv41
