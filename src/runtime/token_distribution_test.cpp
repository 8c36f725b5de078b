#include "runtime/token_distribution.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/rng.h"

namespace dsv41 {
namespace {

// Rows of several kinds: flat, peaked, with tied values and NaN holes.
std::vector<float> row(Xoshiro256& r, int V, int kind) {
  std::vector<float> l(V);
  for (float& v : l) v = float(r.uniform() * 6 - 3);
  if (kind == 1)
    for (int i = 0; i < 3; ++i) l[r.next() % V] += 8;
  if (kind == 2)
    for (float& v : l) v = std::round(v);  // many ties: the id order decides
  if (kind == 3)
    for (int i = 0; i < V / 10; ++i) l[r.next() % V] = NAN;
  return l;
}

std::vector<SamplingParams> filter_sets() {
  std::vector<SamplingParams> out;
  for (float t : {1.0f, 0.6f})
    for (int k : {0, 1, 5, 100})
      for (float p : {1.0f, 0.9f, 0.3f})
        for (float mp : {0.0f, 0.05f}) {
          SamplingParams s;
          s.temperature = t, s.top_k = k, s.top_p = p, s.min_p = mp;
          out.push_back(s);
        }
  return out;
}

TEST(TokenDistribution, FastEqualsSamplerDistribution) {
  Xoshiro256 r(1);
  TokenDistribution a, b;
  for (const SamplingParams& s : filter_sets())
    for (int kind = 0; kind < 4; ++kind)
      for (int V : {1, 7, 300}) {
        const auto l = row(r, V, kind);
        sampler_distribution(l, s, &a);
        fast_distribution(l, s, &b);
        ASSERT_TRUE(a.usable() && b.usable());
        EXPECT_EQ(a.weight, b.weight) << "V " << V << " kind " << kind << " top_k " << s.top_k << " top_p " << s.top_p;
        const bool filtered = (s.top_k > 0 && s.top_k < V) || s.top_p < 1 || s.min_p > 0;
        if (filtered) {
          EXPECT_EQ(a.total, b.total);
          EXPECT_EQ(a.order, b.order);
        } else {
          EXPECT_NEAR(a.total, b.total, 1e-12);
        }
        for (double u : {0.0, 0.1, 0.37, 0.5, 0.77, 0.999}) EXPECT_EQ(pick_ordered(a, u), pick_ordered(b, u));
      }
}

// pick_ordered on the exact distribution is the Sampler: same u, same token.
TEST(TokenDistribution, PickOrderedIsTheSampler) {
  Xoshiro256 r(2);
  TokenDistribution d;
  for (const SamplingParams& base : filter_sets()) {
    SamplingParams s = base;
    s.seed = r.next();
    auto sampler = Sampler::create(s);
    ASSERT_TRUE(sampler.ok());
    Xoshiro256 mirror(s.seed);
    for (int i = 0; i < 20; ++i) {
      const auto l = row(r, 200, i % 4);
      sampler_distribution(l, s, &d);
      EXPECT_EQ(pick_ordered(d, mirror.uniform()), sampler->sample(l));
    }
  }
}

// Both walks have the distribution's law: over a fine grid of u, each token's share is its prob.
TEST(TokenDistribution, WalksHaveTheDistributionsLaw) {
  Xoshiro256 r(3);
  SamplingParams s;
  s.temperature = 0.8f;
  s.top_p = 0.95f;
  TokenDistribution d;
  fast_distribution(row(r, 50, 1), s, &d);
  const int n = 100000;
  std::vector<int> by_id(50), ordered(50);
  for (int i = 0; i < n; ++i) {
    by_id[size_t(pick_by_id(d, (i + 0.5) / n))]++;
    ordered[size_t(pick_ordered(d, (i + 0.5) / n))]++;
  }
  for (int32_t t = 0; t < 50; ++t) {
    EXPECT_NEAR(by_id[size_t(t)] / double(n), d.prob(t), 2.0 / n);
    EXPECT_NEAR(ordered[size_t(t)] / double(n), d.prob(t), 2.0 / n);
  }
}

TEST(TokenDistribution, UnusableRows) {
  SamplingParams s;
  s.temperature = 1.0f;
  TokenDistribution d;
  for (const std::vector<float>& l : {std::vector<float>(5, NAN), std::vector<float>{0.f, INFINITY}, std::vector<float>{}}) {
    fast_distribution(l, s, &d);
    EXPECT_FALSE(d.usable());
    EXPECT_EQ(pick_ordered(d, 0.5), -1);
    EXPECT_EQ(pick_by_id(d, 0.5), -1);
    sampler_distribution(l, s, &d);
    EXPECT_FALSE(d.usable());
  }
}

TEST(TokenDistribution, BiasAndPenalties) {
  SamplingParams s;
  s.logit_bias = {{1, 2.0f}, {9, 5.0f}};  // id 9 is outside this row: ignored
  s.presence_penalty = 0.5f;
  s.frequency_penalty = 0.25f;
  const std::vector<float> l = {1.f, 1.f, 1.f};
  std::vector<float> scratch;
  const TokenCounts counts = {{2, 3}};
  auto out = bias_and_penalise(l, s, counts, &scratch);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], 1.f);
  EXPECT_EQ(out[1], 3.f);
  EXPECT_EQ(out[2], 1.f - (0.5f + 0.25f * 3));
  SamplingParams plain;
  EXPECT_EQ(bias_and_penalise(l, plain, {}, &scratch).data(), l.data());  // nothing to apply: no copy
}

}  // namespace
}  // namespace dsv41
