#include "model/engram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Engram, ReferenceFastAndFormulaAgree) {
  for (auto [hc, dim, cols, head] : {std::tuple{4, 16, 6, 8}, std::tuple{2, 9, 3, 5}, std::tuple{1, 4, 1, 1}}) {
    std::mt19937 rng(dim + cols);
    EngramShape s;
    s.hc = hc;
    s.dim = dim;
    s.columns = cols;
    s.head_dim = head;
    const int64_t rows = 37, T = 5;
    auto table = random_vec(rows * head, rng);
    auto wkv = random_vec((hc + 1) * dim * cols * head, rng, 0.4f);
    auto qw = random_vec(hc * dim, rng), kw = random_vec(hc * dim, rng);
    EngramWeights w{table.data(), rows, wkv.data(), qw.data(), kw.data()};
    std::vector<int64_t> ids(T * cols);
    for (auto& id : ids) id = rng() % rows;
    auto x0 = random_vec(T * hc * dim, rng);
    auto x1 = x0, x2 = x0;
    ASSERT_TRUE(engram_forward_reference(s, w, ids.data(), T, x1.data()).ok());
    ASSERT_TRUE(engram_forward(s, w, ids.data(), T, x2.data()).ok());
    for (int64_t t = 0; t < T; ++t) {
      // kv in double
      const int64_t in = cols * head;
      std::vector<double> kv((hc + 1) * dim);
      for (size_t o = 0; o < kv.size(); ++o)
        for (int c = 0; c < cols; ++c)
          for (int k = 0; k < head; ++k)
            kv[o] += double(wkv[o * in + c * head + k]) * table[ids[t * cols + c] * head + k];
      for (int i = 0; i < hc; ++i) {
        double xx = 0, kk = 0, dot = 0;
        for (int c = 0; c < dim; ++c) {
          const double xv = x0[(t * hc + i) * dim + c], kv_ = kv[i * dim + c];
          xx += xv * xv;
          kk += kv_ * kv_;
          dot += xv * qw[i * dim + c] * kw[i * dim + c] * kv_;
        }
        dot /= std::sqrt(xx / dim + 1e-20) * std::sqrt(kk / dim + 1e-20) * std::sqrt(double(dim));
        const double gate = 1 / (1 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
        for (int c = 0; c < dim; ++c) {
          const double want = x0[(t * hc + i) * dim + c] + gate * kv[hc * dim + c];
          EXPECT_NEAR(x1[(t * hc + i) * dim + c], want, 1e-4 * (1 + std::fabs(want)));
          EXPECT_NEAR(x2[(t * hc + i) * dim + c], want, 1e-4 * (1 + std::fabs(want)));
        }
      }
    }
    ids[3] = rows;  // out of range: error, nothing written
    auto x3 = x0;
    EXPECT_FALSE(engram_forward(s, w, ids.data(), T, x3.data()).ok());
    EXPECT_EQ(x3, x0);
  }
}

}  // namespace
}  // namespace dsv41
