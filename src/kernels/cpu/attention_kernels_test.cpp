#include "kernels/cpu/attention_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
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

// The multi-head loops give dot_rows / weighted_sum_rows's bits head by head, on every ISA cap
// (the AVX-512 loops only where the CPU has them and D is a multiple of 16; the rest falls back).
TEST(AttentionKernels, HeadsMatchOneHeadAtATimeBitForBit) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    for (int64_t D : {8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 512}) {
      for (int64_t heads : {1, 2, 3, 4, 5, 8, 9}) {
        for (int64_t n : {0, 1, 2, 3, 4, 5, 6, 7, 64, 129}) {
          const int64_t qs = D + 3, ys = n + 2;  // strides wider than the rows
          std::vector<float> q(heads * qs), rows(n * D), y(heads * ys, -7.0f), y1(heads * ys, -7.0f);
          for (auto& v : q) v = nd(rng);
          for (auto& v : rows) v = nd(rng);
          dot_rows_heads(isa, q.data(), qs, heads, rows.data(), n, D, y.data(), ys);
          for (int64_t h = 0; h < heads; ++h) dot_rows(q.data() + h * qs, rows.data(), n, D, y1.data() + h * ys);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_EQ(bits(y[i]), bits(y1[i])) << cpu_isa_name(isa) << " D " << D << " heads " << heads << " n " << n;
          const int64_t ps = n + 1, os = D + 5;
          std::vector<float> p(heads * ps), out(heads * os), out1;
          for (auto& v : p) v = std::fabs(nd(rng));
          for (auto& v : out) v = nd(rng);
          out1 = out;
          weighted_sum_rows_heads(isa, p.data(), ps, heads, rows.data(), n, D, out.data(), os);
          for (int64_t h = 0; h < heads; ++h)
            weighted_sum_rows(p.data() + h * ps, rows.data(), n, D, out1.data() + h * os);
          for (size_t i = 0; i < out.size(); ++i)
            ASSERT_EQ(bits(out[i]), bits(out1[i])) << cpu_isa_name(isa) << " D " << D << " heads " << heads << " n " << n;
        }
      }
    }
  }
}


// sink_softmax gives the reference's bits on every ISA cap, at lengths around the vector widths
// (4, 8, 16), with −inf logits (masked keys), a max that is a zero of either sign, a max from the
// sink or from a logit, and logits spread far enough that exps underflow.
TEST(AttentionKernels, SinkSoftmaxMatchesReferenceBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t n : {0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 127, 128, 129}) {
    for (int variant = 0; variant < 5; ++variant) {
      std::vector<float> lg(n);
      for (auto& v : lg) v = nd(rng) * (variant == 3 ? 60.0f : 3.0f);
      float sink = nd(rng);
      if (variant == 1) {
        for (int64_t j = 0; j < n; j += 3) lg[j] = ninf;
      } else if (variant == 2) {  // the max is a zero of each sign, the sink below it
        for (auto& v : lg) v = -std::fabs(v) - 1.0f;
        if (n > 0) lg[0] = -0.0f;
        if (n > 1) lg[n - 1] = 0.0f;
        sink = -2.0f;
      } else if (variant == 4) {
        sink = 50.0f;  // the sink is the max
      }
      std::vector<float> want = lg;
      sink_softmax_reference(want.data(), n, 0.088f, sink);
      for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        std::vector<float> got = lg;
        sink_softmax(isa, got.data(), n, 0.088f, sink);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(std::memcmp(&got[j], &want[j], sizeof(float)), 0)
              << "n=" << n << " variant " << variant << " isa " << int(isa) << " j=" << j << ": " << got[j] << " vs "
              << want[j];
      }
    }
  }
}

// exps_shifted gives std::exp's bits on every ISA cap: a million differences spread over the
// vector range [-87, 0] (where ~1.6 % of results land near a rounding midpoint and take the
// fallback) and past its ends (denormal and overflowing results, ±Inf, NaN), a shift m that is
// not zero (the difference is taken in float first), and lengths off the 8-lane width.
TEST(AttentionKernels, ExpsShiftedGiveTheBitsOfStdExp) {
  std::mt19937 rng(18);
  std::uniform_real_distribution<float> in_range(-87.5f, 0.0f), wide(-110.0f, 95.0f);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(1000003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 10 == 9 ? wide(rng) : in_range(rng);
  const float specials[] = {0.0f, -0.0f, -inf, inf, std::numeric_limits<float>::quiet_NaN(), -87.0f,
                            std::nextafter(-87.0f, -inf), 80.0f, std::nextafter(80.0f, inf), -1e-30f,
                            std::numeric_limits<float>::denorm_min(), -103.9f, 88.7f, 89.0f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7919] = specials[i];
  for (float m : {0.0f, 2.75f}) {
    std::vector<float> lg = x;
    if (m != 0.0f)
      for (float& v : lg) v = v + m;  // lg − m in float then differs from x by rounding only
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{9}, static_cast<int64_t>(lg.size())}) {
        std::vector<float> got(lg.begin(), lg.begin() + n);
        exps_shifted(isa, got.data(), n, m);
        for (int64_t j = 0; j < n; ++j) {
          const float want = std::exp(lg[j] - m);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got[j])) << "j=" << j;
            continue;
          }
          ASSERT_EQ(std::memcmp(&got[j], &want, sizeof(float)), 0)
              << "isa " << int(isa) << " m=" << m << " n=" << n << " j=" << j << " x=" << lg[j] - m << ": "
              << got[j] << " vs " << want;
        }
      }
    }
  }
}

// sink_softmax_heads gives sink_softmax's bits head by head: 64 heads (8 full groups of summed
// chains) and 13 (a partial group), lengths around the lane widths and the tile path's 640, a
// stride past n (cells beyond n untouched), −inf logits, a sink that is the max, and logits
// spread so far that exps and probabilities underflow.
TEST(AttentionKernels, SinkSoftmaxHeadsMatchesOneHeadAtATime) {
  std::mt19937 rng(19);
  std::normal_distribution<float> nd;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t heads : {64, 13})
    for (int64_t n : {1, 7, 8, 17, 640}) {
      const int64_t lstride = n + 5;
      std::vector<float> lg(heads * lstride), sinks(heads);
      for (float& v : lg) v = nd(rng) * 30.0f;
      for (int64_t h = 0; h < heads; ++h) {
        sinks[h] = h % 5 == 4 ? 5000.0f : nd(rng);
        if (h % 7 == 3) lg[h * lstride + n / 2] = ninf;
      }
      // scaling 1: exps spread over [-200, 0], so many underflow to subnormals and zeros (and
      // their quotients with them).
      for (float scaling : {0.044f, 1.0f})
        for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
          std::vector<float> want = lg, got = lg;
          for (int64_t h = 0; h < heads; ++h) sink_softmax(isa, want.data() + h * lstride, n, scaling, sinks[h]);
          sink_softmax_heads(isa, got.data(), lstride, heads, n, scaling, sinks.data());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                << "heads " << heads << " n=" << n << " scaling " << scaling << " isa " << int(isa)
                << " h=" << i / lstride << " j=" << i % lstride << ": " << got[i] << " vs " << want[i];
        }
    }
}

// divide_by_denominator gives the division's bits where the multiply by 1/denom alone would not:
// quotients built to land on (or next to) a float rounding midpoint M = f + half a step, where
// the product and the double quotient can round to different floats; then random quotients.
TEST(AttentionKernels, DivideByDenominatorGivesTheBitsOfTheDivision) {
  std::mt19937 rng(20);
  std::uniform_real_distribution<float> unit(0.001f, 1.0f);
  std::vector<float> e;
  std::vector<double> denoms;
  int64_t product_differs = 0;
  for (int i = 0; i < 4000; ++i) {
    const float x = unit(rng), f = unit(rng);
    const double mid = static_cast<double>(f) + 0.5 * (static_cast<double>(std::nextafter(f, 2.0f)) - f);
    double d = static_cast<double>(x) / mid;
    d = std::nextafter(d, i % 3 == 0 ? 0.0 : i % 3 == 1 ? 10.0 : d);
    e.push_back(x);
    denoms.push_back(d);
    const float by_div = static_cast<float>(x / d), by_mul = static_cast<float>(x * (1.0 / d));
    if (std::memcmp(&by_div, &by_mul, sizeof(float)) != 0) ++product_differs;
  }
  ASSERT_GT(product_differs, 0) << "no case where the reciprocal alone rounds differently: the test checks nothing";
  for (int i = 0; i < 2000; ++i) {
    e.push_back(unit(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 140)));  // subnormal quotients too
    denoms.push_back(1.0 + 600.0 * unit(rng));
  }
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512})
    for (size_t i = 0; i < e.size(); ++i) {
      float got[9];
      for (float& g : got) g = e[i];
      divide_by_denominator(isa, got, 9, denoms[i]);  // 8 lanes and a tail
      const float want = static_cast<float>(e[i] / denoms[i]);
      for (float g : got)
        ASSERT_EQ(std::memcmp(&g, &want, sizeof(float)), 0)
            << "isa " << int(isa) << " case " << i << ": " << e[i] << " / " << denoms[i] << " = " << g << " vs " << want;
    }
}

}  // namespace
}  // namespace dsv41
