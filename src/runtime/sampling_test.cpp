#include "runtime/sampling.h"
#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsv41 {
namespace {

TEST(Sampling, GreedyTiesToLowestIdAndSkipsNaN) {
  std::vector<float> l = {1, 3, NAN, 3, 2};
  EXPECT_EQ(argmax_logits(l), 1);
  auto s = Sampler::create({});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->sample(l), 1);
}

TEST(Sampling, RejectsBadParameters) {
  EXPECT_FALSE(Sampler::create({-1.0f, 1.0f, 0}).ok());
  EXPECT_FALSE(Sampler::create({1.0f, 0.0f, 0}).ok());
  EXPECT_FALSE(Sampler::create({1.0f, 1.5f, 0}).ok());
  EXPECT_FALSE(Sampler::create({NAN, 1.0f, 0}).ok());
}

TEST(Sampling, SeededAndDistributedAsSoftmax) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = .1 .2 .3 .4
  auto a = Sampler::create({1.0f, 1.0f, 42});
  auto b = Sampler::create({1.0f, 1.0f, 42});
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int> counts(4);
  for (int i = 0; i < 20000; ++i) {
    const int32_t x = a->sample(l);
    EXPECT_EQ(x, b->sample(l));
    counts[x]++;
  }
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(counts[k] / 20000.0, 0.1 * (k + 1), 0.015);
}

TEST(Sampling, TopPKeepsTheNucleusOnly) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  auto s = Sampler::create({1.0f, 0.7f, 7});  // keeps ids 3, 2 (mass .7)
  ASSERT_TRUE(s.ok());
  std::vector<int> counts(4);
  for (int i = 0; i < 5000; ++i) counts[s->sample(l)]++;
  EXPECT_EQ(counts[0] + counts[1], 0);
  EXPECT_NEAR(counts[3] / 5000.0, 4.0 / 7.0, 0.03);
  auto tiny = Sampler::create({1.0f, 1e-6f, 7});  // always at least the top token
  for (int i = 0; i < 10; ++i) EXPECT_EQ(tiny->sample(l), 3);
}

TEST(Sampling, XoshiroSeedingAndFirstOutput) {
  // splitmix64 from state 0 yields 0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, ... (published
  // reference values); xoshiro256**'s first output is rotl(s1·5, 7)·9.
  const uint64_t s1 = 0x6E789E6AA1B965F4ull;
  const uint64_t x = s1 * 5;
  const uint64_t want = ((x << 7) | (x >> 57)) * 9;
  Xoshiro256 r(0);
  EXPECT_EQ(r.next(), want);
}

TEST(Sampling, TopKMinPAndLogitBiasFilter) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};  // p = .1 .2 .3 .4
  SamplingParams k2{1.0f, 1.0f, 7};
  k2.top_k = 2;
  SamplingParams mp{1.0f, 1.0f, 7};
  mp.min_p = 0.6f;  // keeps p ≥ .24: ids 2 and 3
  auto a = Sampler::create(k2), b = Sampler::create(mp);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int> ca(4), cb(4);
  for (int i = 0; i < 20000; ++i) {
    ca[a->sample(l)]++;
    cb[b->sample(l)]++;
  }
  for (const auto& c : {ca, cb}) {
    EXPECT_EQ(c[0] + c[1], 0);
    EXPECT_NEAR(c[3] / 20000.0, 4.0 / 7.0, 0.015);  // renormalised over {.3, .4}
  }
  SamplingParams bias{};  // greedy
  bias.logit_bias = {{0, 100.0f}};
  auto g = Sampler::create(bias);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->sample(l), 0);
  bias.logit_bias = {{2, -1e30f}, {3, -1e30f}};
  bias.temperature = 1.0f;
  auto t = Sampler::create(bias);
  for (int i = 0; i < 200; ++i) EXPECT_LT(t->sample(l), 2);
  SamplingParams bad{};
  bad.top_k = -1;
  EXPECT_FALSE(Sampler::create(bad).ok());
  bad = {};
  bad.min_p = 1.5f;
  EXPECT_FALSE(Sampler::create(bad).ok());
  bad = {};
  bad.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(Sampler::create(bad).ok());
}

// repetition_penalty: the context's ids and the returned ones, each once, positive logits divided,
// negative ones multiplied; after the bias, before presence / frequency; 1 changes nothing.
TEST(Sampling, RepetitionPenaltyScalesContextAndReturnedTokens) {
  const std::vector<float> l = {2.0f, 1.5f, -1.0f, 0.9f};
  auto run = [](const std::vector<float>& logits, float r, std::vector<int32_t> context, int n, float presence = 0) {
    SamplingParams p{};
    p.repetition_penalty = r;
    p.presence_penalty = presence;
    auto s = Sampler::create(p, context);
    EXPECT_TRUE(s.ok());
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(s->sample(logits));
    return out;
  };
  EXPECT_EQ(run(l, 1, {0, 0, 1}, 3), (std::vector<int32_t>{0, 0, 0}));
  // Context {0} (twice: scaled once): 2.0 / 2 = 1.0 < 1.5 → 1; then 1 is seen too: 1.0 vs 0.75
  // vs 0.9 → 0, which is already seen (still 1.0, not 0.5) → 0 again.
  EXPECT_EQ(run(l, 2, {0, 0}, 3), (std::vector<int32_t>{1, 0, 0}));
  // No context: only returned tokens: 0 first, then 1.0 < 1.5 → 1, then 1.0 > 0.75 → 0.
  EXPECT_EQ(run(l, 2, {}, 3), (std::vector<int32_t>{0, 1, 0}));
  // A negative logit is multiplied: −1 · 4 = −4 < −2 → 1 (divided it would win).
  EXPECT_EQ(run({-1.0f, -2.0f}, 4, {0}, 1), (std::vector<int32_t>{1}));
  // Presence after the scaling: once 0 is returned, 2.0 / 2 − 0.6 = 0.4 < 0.55 → 1 (presence
  // first would leave (2.0 − 0.6) / 2 = 0.7 and pick 0 again).
  EXPECT_EQ(run({2.0f, 0.55f}, 2, {}, 2, 0.6f), (std::vector<int32_t>{0, 1}));
  for (float bad : {0.0f, -1.0f, INFINITY}) {
    SamplingParams p{};
    p.repetition_penalty = bad;
    EXPECT_FALSE(Sampler::create(p).ok()) << bad;
  }
  // The rejection rule's sampler refuses it (its distributions know no context).
  SamplingParams p{};
  p.repetition_penalty = 1.2f;
  p.temperature = 1;
  EXPECT_FALSE(SpeculativeSampler::create(p).ok());
}

TEST(Sampling, PresenceAndFrequencyPenaltiesLowerReturnedTokens) {
  const std::vector<float> l = {1.0f, 0.5f, -3.0f};
  auto run = [&](float presence, float frequency) {
    SamplingParams p{};
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    auto s = Sampler::create(p);
    EXPECT_TRUE(s.ok());
    std::vector<int32_t> out;
    for (int i = 0; i < 4; ++i) out.push_back(s->sample(l));
    return out;
  };
  EXPECT_EQ(run(0, 0), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(run(0, 0.3f), (std::vector<int32_t>{0, 0, 1, 0}));  // 1.0, 0.7, 0.4 < 0.5, then 0.4 > 0.2
  EXPECT_EQ(run(0.6f, 0), (std::vector<int32_t>{0, 1, 0, 0}));  // 0.4 < 0.5, then 0.4 > −0.1
  SamplingParams bad{};
  bad.frequency_penalty = 2.5f;
  EXPECT_FALSE(Sampler::create(bad).ok());
}

}  // namespace
}  // namespace dsv41
