#include "model/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

ModelConfig flash_rope_config() {
  ModelConfig c;  // V4.1-Flash defaults: d = 64, θ 10000 / 160000, YaRN factor 16 over 65536
  c.rope_scaling = YarnScaling{};
  return c;
}

TEST(Rope, FlashYarnRampIsFifteenToTwentyFive) {
  auto rope = Rope::create(flash_rope_config());
  ASSERT_TRUE(rope.ok());
  const auto& f = rope->inv_freq(RopeKind::kCompress);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double base = std::pow(160000.0, -2.0 * i / 64);
    const double gamma = std::clamp((i - 15.0) / 10.0, 0.0, 1.0);
    const double want = base / 16 * gamma + base * (1 - gamma);
    EXPECT_NEAR(f[i], want, 1e-6 * want) << i;
  }
  const auto& m = rope->inv_freq(RopeKind::kMain);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(m[i], std::pow(10000.0, -2.0 * i / 64), 1e-6 * m[i]);
}

TEST(Rope, NoScalingMeansPlainCompressTable) {
  ModelConfig c;
  c.rope_scaling.reset();
  auto rope = Rope::create(c);
  ASSERT_TRUE(rope.ok());
  for (int i = 0; i < 32; ++i)
    EXPECT_NEAR(rope->inv_freq(RopeKind::kCompress)[i], std::pow(160000.0, -2.0 * i / 64), 1e-6);
}

TEST(Rope, RotatesAdjacentPairsOfTheTailAndInverts) {
  ModelConfig c = flash_rope_config();
  c.qk_rope_head_dim = 8;
  auto rope = Rope::create(c);
  ASSERT_TRUE(rope.ok());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(24), y;
  for (auto& v : x) v = nd(rng);
  y = x;
  rope->apply(RopeKind::kCompress, y.data(), 24, 1234);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[i], x[i]);  // head channels untouched
  // Pair (16, 17) is rotated by angle 1234·f_0 as a complex number.
  const double a = 1234.0 * rope->inv_freq(RopeKind::kCompress)[0];
  EXPECT_NEAR(y[16], x[16] * std::cos(a) - x[17] * std::sin(a), 1e-4);
  EXPECT_NEAR(y[17], x[16] * std::sin(a) + x[17] * std::cos(a), 1e-4);
  for (int i = 16; i < 24; i += 2)  // norms of pairs preserved
    EXPECT_NEAR(std::hypot(y[i], y[i + 1]), std::hypot(x[i], x[i + 1]), 1e-5);
  rope->apply(RopeKind::kCompress, y.data(), 24, 1234, /*inverse=*/true);
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
  // Position 0 is the identity.
  y = x;
  rope->apply(RopeKind::kMain, y.data(), 24, 0);
  EXPECT_EQ(y, x);
}

TEST(Rope, RejectsBadRopeDim) {
  ModelConfig c;
  c.qk_rope_head_dim = 7;
  auto rope = Rope::create(c);
  ASSERT_FALSE(rope.ok());
  EXPECT_NE(rope.status().message().find("qk_rope_head_dim"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
