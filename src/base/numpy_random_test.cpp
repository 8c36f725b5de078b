// Expected values were produced once with numpy 1.24.2 (np.random.SeedSequence /
// default_rng(seed).bit_generator.random_raw / .integers(..., dtype=np.int64)); the test
// itself needs no numpy.
#include "base/numpy_random.h"

#include <gtest/gtest.h>

#include <vector>

namespace dsv41 {
namespace {

TEST(NumpyRandom, SeedSequenceState) {
  EXPECT_EQ(seed_sequence_state(0, 8),
            (std::vector<uint32_t>{0xb0f478be, 0xdb2cd7e7, 0x2c71ba49, 0xabf4641a, 0x9d7b8d41, 0x20c6ed6d,
                                   0x223c39d4, 0x2c4099de}));
  EXPECT_EQ(seed_sequence_state(123456789012345ull, 8),
            (std::vector<uint32_t>{1069851990u, 2775685127u, 1837280090u, 3423861599u, 1927363331u, 419240859u,
                                   2643161987u, 876222726u}));
}

TEST(NumpyRandom, Pcg64RawOutputs) {
  struct Case {
    uint64_t seed;
    uint64_t raw[3];
  };
  const Case cases[] = {
      {0, {11749869230777074271ull, 4976686463289251617ull, 755828109848996024ull}},
      {10007, {15187255322829266483ull, 959186003677246517ull, 7126631698937927467ull}},
      {5, {14849682912918955432ull, 14903876974979881461ull, 9506078739185184192ull}},
      {1099511627779ull, {14271435802380633900ull, 18370326226487632705ull, 8728610338774297736ull}},
  };
  for (const Case& c : cases) {
    NumpyPcg64 g(c.seed);
    for (uint64_t want : c.raw) EXPECT_EQ(g.next_u64(), want) << "seed " << c.seed;
  }
}

TEST(NumpyRandom, IntegersInt64) {
  struct Case {
    uint64_t seed;
    int64_t high;
    int64_t want[5];
  };
  const Case cases[] = {
      {7, 1000, {944, 625, 684, 897, 578}},  // 32-bit Lemire on buffered halves
      {8, 4294967291ll, {3090441200ll, 1404335232ll, 1007194999ll, 4240321749ll, 756055012ll}},
      {9, 4294967296ll, {1810532129ll, 3737691870ll, 4127654944ll, 1231870532ll, 491168702ll}},
      {10, 8589934599ll, {8211992162ll, 1783973165ll, 7116287383ll, 1282323674ll, 4404958117ll}},
      {11, INT64_MAX,
       {1185850812994184742ll, 4605025475050782003ll, 5547843131917349437ll, 264609397582886377ll,
        1364377312013121734ll}},
      {12, 1, {0, 0, 0, 0, 0}},
  };
  for (const Case& c : cases) {
    NumpyPcg64 g(c.seed);
    for (int64_t want : c.want) EXPECT_EQ(g.integers(0, c.high), want) << "seed " << c.seed << " high " << c.high;
  }
}

}  // namespace
}  // namespace dsv41
