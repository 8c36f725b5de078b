// The hc = 4 vector form of the mHC gates + Sinkhorn (mhc_sinkhorn.h) against the scalar
// reference, bit for bit, on random projections, bases and scales (wide and tiny logits, so
// that the normalisation runs both near-uniform and very skewed matrices), several round counts;
// other hc fall back to the reference.
#include "model/mhc_sinkhorn.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

TEST(MhcSinkhorn, VectorFormGivesTheReferenceBits) {
  std::mt19937 rng(20261202);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> mag(-3.0f, 3.0f);
  for (int hc : {4, 2, 3, 8}) {
    for (int iters : {1, 2, 20}) {
      MhcShape shape;
      shape.hc = hc;
      shape.sinkhorn_iters = iters;
      shape.hc_eps = iters == 2 ? 0.0f : 1e-6f;
      const int64_t mix = shape.mix_width();
      for (int trial = 0; trial < 200; ++trial) {
        const float spread = std::pow(10.0f, mag(rng));
        std::vector<float> m(mix), base(mix), scale(3);
        for (auto& v : m) v = nd(rng) * spread;
        for (auto& v : base) v = nd(rng);
        for (auto& v : scale) v = nd(rng);
        const MhcWeights w{nullptr, base.data(), scale.data()};
        std::vector<float> pre(hc), post(hc), comb(hc * hc), pre1(hc), post1(hc), comb1(hc * hc);
        mhc_finish(shape, w, m.data(), pre.data(), post.data(), comb.data());
        mhc_finish_reference(shape, w, m.data(), pre1.data(), post1.data(), comb1.data());
        for (int i = 0; i < hc; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(pre[i]), std::bit_cast<uint32_t>(pre1[i]));
          ASSERT_EQ(std::bit_cast<uint32_t>(post[i]), std::bit_cast<uint32_t>(post1[i]));
        }
        for (int i = 0; i < hc * hc; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(comb[i]), std::bit_cast<uint32_t>(comb1[i]))
              << "hc " << hc << " iters " << iters << " trial " << trial << " entry " << i;
      }
    }
  }
}


// Four tokens' rounds side by side (mhc_finish_rows) give mhc_finish's bits token by token, for
// token counts around the block of four and every hc (hc ≠ 4: the reference per token).
TEST(MhcSinkhorn, RowsGiveTheBitsOfOneTokenAtATime) {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> mag(-3.0f, 3.0f);
  for (int hc : {4, 3}) {
    for (int iters : {1, 20}) {
      MhcShape shape;
      shape.hc = hc;
      shape.sinkhorn_iters = iters;
      shape.hc_eps = 1e-6f;
      const int64_t mix = shape.mix_width();
      for (int64_t tokens : {1, 3, 4, 5, 8, 9}) {
        std::vector<float> m(tokens * mix), base(mix), scale(3);
        for (auto& v : m) v = nd(rng) * std::pow(10.0f, mag(rng));
        for (auto& v : base) v = nd(rng);
        for (auto& v : scale) v = nd(rng);
        const MhcWeights w{nullptr, base.data(), scale.data()};
        std::vector<float> pre(tokens * hc), post(tokens * hc), comb(tokens * hc * hc);
        std::vector<float> pre1(hc), post1(hc), comb1(hc * hc);
        mhc_finish_rows(shape, w, m.data(), tokens, pre.data(), post.data(), comb.data());
        for (int64_t t = 0; t < tokens; ++t) {
          mhc_finish(shape, w, m.data() + t * mix, pre1.data(), post1.data(), comb1.data());
          for (int i = 0; i < hc; ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(pre[t * hc + i]), std::bit_cast<uint32_t>(pre1[i]));
            ASSERT_EQ(std::bit_cast<uint32_t>(post[t * hc + i]), std::bit_cast<uint32_t>(post1[i]));
          }
          for (int i = 0; i < hc * hc; ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(comb[t * hc * hc + i]), std::bit_cast<uint32_t>(comb1[i]))
                << "hc " << hc << " iters " << iters << " tokens " << tokens << " token " << t << " entry " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv41
