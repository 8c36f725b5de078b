#include "runtime/sampling.h"

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

}  // namespace
}  // namespace dsv41
