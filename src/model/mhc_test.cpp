#include "model/mhc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// An independent double-precision transcription of model.md §3.3 for one token.
void h_double(const MhcShape& s, const float* fn, const float* base, const float* scale, const float* x,
              std::vector<double>& pre, std::vector<double>& post, std::vector<double>& comb) {
  const int hc = s.hc;
  const int64_t n = hc * s.dim;
  double ms = 0;
  for (int64_t i = 0; i < n; ++i) ms += double(x[i]) * x[i];
  const double r = 1.0 / std::sqrt(ms / n + s.norm_eps);
  std::vector<double> l(s.mix_width());
  for (int64_t o = 0; o < s.mix_width(); ++o) {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += double(fn[o * n + i]) * x[i];
    const double sc = o < hc ? scale[0] : (o < 2 * hc ? scale[1] : scale[2]);
    l[o] = base[o] + r * acc * sc;
  }
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  pre.assign(hc, 0);
  post.assign(hc, 0);
  comb.assign(hc * hc, 0);
  for (int i = 0; i < hc; ++i) {
    pre[i] = sig(l[i]) + s.hc_eps;
    post[i] = 2 * sig(l[hc + i]);
  }
  for (int j = 0; j < hc; ++j) {
    double sum = 0;
    for (int i = 0; i < hc; ++i) sum += std::exp(l[2 * hc + j * hc + i]);
    for (int i = 0; i < hc; ++i) comb[j * hc + i] = std::exp(l[2 * hc + j * hc + i]) / sum + s.hc_eps;
  }
  for (int it = 0; it < s.sinkhorn_iters; ++it) {
    if (it > 0)
      for (int j = 0; j < hc; ++j) {
        double sum = 0;
        for (int i = 0; i < hc; ++i) sum += comb[j * hc + i];
        for (int i = 0; i < hc; ++i) comb[j * hc + i] /= sum + s.hc_eps;
      }
    for (int i = 0; i < hc; ++i) {
      double sum = 0;
      for (int j = 0; j < hc; ++j) sum += comb[j * hc + i];
      for (int j = 0; j < hc; ++j) comb[j * hc + i] /= sum + s.hc_eps;
    }
  }
}

class MhcShapes : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(MhcShapes, ReferenceFastAndFormulaAgree) {
  const auto [hc, dim, tokens] = GetParam();
  std::mt19937 rng(1234 + hc * 100 + dim);
  MhcShape s;
  s.hc = hc;
  s.dim = dim;
  const int64_t n = int64_t(hc) * dim;
  auto fn = random_vec(s.mix_width() * n, rng, 0.3f);
  auto base = random_vec(s.mix_width(), rng);
  std::vector<float> scale = {0.7f, 1.3f, 2.1f};
  auto x = random_vec(tokens * n, rng, 2.0f);
  MhcWeights w{fn.data(), base.data(), scale.data()};
  std::vector<float> pre(tokens * hc), post(tokens * hc), comb(tokens * hc * hc);
  std::vector<float> pre2(pre.size()), post2(post.size()), comb2(comb.size());
  mhc_coefficients_reference(s, w, x.data(), tokens, pre.data(), post.data(), comb.data());
  mhc_coefficients(CpuExec::serial(), s, w, x.data(), tokens, pre2.data(), post2.data(), comb2.data());
  for (int t = 0; t < tokens; ++t) {
    std::vector<double> dp, dq, dc;
    h_double(s, fn.data(), base.data(), scale.data(), x.data() + t * n, dp, dq, dc);
    for (int i = 0; i < hc; ++i) {
      EXPECT_NEAR(pre[t * hc + i], dp[i], 2e-6);
      EXPECT_NEAR(post[t * hc + i], dq[i], 4e-6);
      EXPECT_NEAR(pre2[t * hc + i], dp[i], 2e-6);
      EXPECT_NEAR(post2[t * hc + i], dq[i], 4e-6);
    }
    for (int k = 0; k < hc * hc; ++k) {
      EXPECT_NEAR(comb[t * hc * hc + k], dc[k], 2e-6);
      EXPECT_NEAR(comb2[t * hc * hc + k], dc[k], 2e-6);
    }
    // The last pass is a column normalisation: every output stream is ≈ a convex combination.
    for (int i = 0; i < hc; ++i) {
      double col = 0;
      for (int j = 0; j < hc; ++j) col += comb[t * hc * hc + j * hc + i];
      EXPECT_NEAR(col, 1.0, 1e-4);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MhcShapes,
                         ::testing::Values(std::make_tuple(4, 64, 3), std::make_tuple(4, 17, 5),
                                           std::make_tuple(2, 33, 2), std::make_tuple(1, 8, 1),
                                           std::make_tuple(3, 1, 4)));

TEST(Mhc, ZeroProjectionGivesBaseCoefficients) {
  MhcShape s;
  s.hc = 4;
  s.dim = 8;
  std::vector<float> fn(s.mix_width() * s.hc * s.dim, 0.0f), base(s.mix_width(), 0.0f);
  base[0] = 2.0f;
  base[5] = -1.0f;
  std::vector<float> scale = {1, 1, 1};
  std::vector<float> x(s.hc * s.dim, 1.0f);
  std::vector<float> pre(4), post(4), comb(16);
  mhc_coefficients_reference(s, {fn.data(), base.data(), scale.data()}, x.data(), 1, pre.data(), post.data(),
                             comb.data());
  EXPECT_NEAR(pre[0], 1 / (1 + std::exp(-2.0)) + 1e-6, 1e-7);
  EXPECT_NEAR(pre[1], 0.5 + 1e-6, 1e-7);
  EXPECT_NEAR(post[1], 2 / (1 + std::exp(1.0)), 1e-6);
  EXPECT_NEAR(post[0], 1.0, 1e-7);
  for (float c : comb) EXPECT_NEAR(c, 0.25, 1e-5);  // uniform logits → uniform doubly stochastic
}

TEST(Mhc, CollapseExpandAndInit) {
  MhcShape s;
  s.hc = 3;
  s.dim = 5;
  std::mt19937 rng(7);
  const int T = 2;
  auto e = random_vec(T * s.dim, rng);
  std::vector<float> x(T * s.hc * s.dim), pre(T * s.hc);
  mhc_init_streams(s, e.data(), T, x.data());
  mhc_initial_pre(s, T, pre.data());
  std::vector<float> y(T * s.dim);
  mhc_collapse(CpuExec::serial(), s, x.data(), pre.data(), T, y.data());
  EXPECT_EQ(y, e);  // one-hot mix of identical copies reads the embedding back exactly
  auto post = random_vec(T * s.hc, rng);
  auto comb = random_vec(T * s.hc * s.hc, rng);
  auto a = random_vec(T * s.dim, rng);
  auto x2 = random_vec(T * s.hc * s.dim, rng);
  std::vector<float> out(x2.size());
  mhc_expand(CpuExec::serial(), s, a.data(), x2.data(), post.data(), comb.data(), T, out.data());
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < s.hc; ++i)
      for (int c = 0; c < s.dim; ++c) {
        double want = double(post[t * s.hc + i]) * a[t * s.dim + c];
        for (int j = 0; j < s.hc; ++j)
          want += double(comb[(t * s.hc + j) * s.hc + i]) * x2[(t * s.hc + j) * s.dim + c];
        EXPECT_NEAR(out[(t * s.hc + i) * s.dim + c], want, 1e-5);
      }
}


// ---- Fast path vs scalar reference (kernels/cpu/cpu_exec.h) ---------------------------------
// Boundary sizes: one token, odd token counts, widths below / at / above the 8- and 16-float
// vector steps and not multiples of 8, hc 1, 2 and 4, and a size big enough (T·hc·d ≥ 64K) that
// the fast path splits the tokens over the thread pool.

// The fast paths on a pool of 3 threads, so the big cases really split their tokens.
struct PooledExec {
  ThreadPool pool{3};
  CpuExec ex;
  PooledExec() {
    ex = CpuExec::serial();
    ex.pool = &pool;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

struct FastCase {
  int hc;
  int64_t dim, tokens;
};
const FastCase kFastCases[] = {{1, 1, 1}, {2, 7, 3},   {4, 8, 1},    {4, 15, 5},  {4, 16, 2},
                               {2, 17, 9}, {1, 33, 4}, {4, 100, 7}, {4, 1027, 37}, {2, 1024, 33}};

TEST(MhcFast, CollapseAndExpandGiveTheReferenceBits) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  PooledExec pe;
  for (const FastCase& fc : kFastCases) {
    std::mt19937 rng(static_cast<uint32_t>(fc.hc * 1000 + fc.dim + fc.tokens));
    MhcShape s;
    s.hc = fc.hc;
    s.dim = fc.dim;
    const int64_t T = fc.tokens, n = fc.hc * fc.dim;
    auto x = random_vec(T * n, rng, 2.0f), pre = random_vec(T * fc.hc, rng), post = random_vec(T * fc.hc, rng);
    auto comb = random_vec(T * fc.hc * fc.hc, rng), a = random_vec(T * fc.dim, rng);
    std::vector<float> y1(T * fc.dim), y2(T * fc.dim, -1.0f);
    mhc_collapse_reference(s, x.data(), pre.data(), T, y1.data());
    mhc_collapse_fast(pe.ex, s, x.data(), pre.data(), T, y2.data());
    EXPECT_TRUE(same_bits(y1, y2)) << "collapse hc " << fc.hc << " d " << fc.dim << " T " << fc.tokens;
    std::vector<float> o1(T * n), o2(T * n, -1.0f);
    mhc_expand_reference(s, a.data(), x.data(), post.data(), comb.data(), T, o1.data());
    mhc_expand_fast(pe.ex, s, a.data(), x.data(), post.data(), comb.data(), T, o2.data());
    EXPECT_TRUE(same_bits(o1, o2)) << "expand hc " << fc.hc << " d " << fc.dim << " T " << fc.tokens;
  }
}

// The coefficients: the fast projection is a float GEMM, the reference accumulates in double, so
// the projection m differs by float rounding (|Δm| ≲ √n·2⁻²⁴·Σ|terms|, ≈1e-6 here with weights
// scaled like the model's, 1/√(hc·d)); pre/post pass it through a sigmoid (slope ≤ ¼ · scale) and
// comb through a softmax + Sinkhorn of doubly-stochastic values ≤ 1, so 2e-5 absolute bounds the
// outputs with a wide margin while any real error (a wrong lane, a skipped tail) is ≥ 1e-3.
TEST(MhcFast, CoefficientsMatchTheReferenceAndIgnoreChunking) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  PooledExec pe;
  for (const FastCase& fc : kFastCases) {
    std::mt19937 rng(static_cast<uint32_t>(fc.hc * 7000 + fc.dim + fc.tokens));
    MhcShape s;
    s.hc = fc.hc;
    s.dim = fc.dim;
    s.sinkhorn_iters = 20;
    const int64_t T = fc.tokens, n = fc.hc * fc.dim;
    auto fn = random_vec(s.mix_width() * n, rng, 1.0f / std::sqrt(float(n)));
    auto base = random_vec(s.mix_width(), rng, 0.5f);
    std::vector<float> scale = {0.9f, 1.2f, 1.7f};
    auto x = random_vec(T * n, rng, 3.0f);
    MhcWeights w{fn.data(), base.data(), scale.data()};
    const int hc = fc.hc;
    std::vector<float> pre(T * hc), post(T * hc), comb(T * hc * hc);
    std::vector<float> pre2(pre.size()), post2(post.size()), comb2(comb.size());
    mhc_coefficients_reference(s, w, x.data(), T, pre.data(), post.data(), comb.data());
    mhc_coefficients_fast(pe.ex, s, w, x.data(), T, pre2.data(), post2.data(), comb2.data());
    for (size_t i = 0; i < pre.size(); ++i) {
      EXPECT_NEAR(pre[i], pre2[i], 2e-5) << "pre " << i << " hc " << hc << " d " << fc.dim;
      EXPECT_NEAR(post[i], post2[i], 2e-5) << "post " << i << " hc " << hc << " d " << fc.dim;
    }
    for (size_t i = 0; i < comb.size(); ++i) EXPECT_NEAR(comb[i], comb2[i], 2e-5) << "comb " << i;
    // Token by token gives the same bits as one call (the GEMM's per-row order is fixed).
    std::vector<float> pre3(pre.size()), post3(post.size()), comb3(comb.size());
    for (int64_t t = 0; t < T; ++t)
      mhc_coefficients_fast(pe.ex, s, w, x.data() + t * n, 1, pre3.data() + t * hc, post3.data() + t * hc,
                            comb3.data() + t * hc * hc);
    EXPECT_TRUE(same_bits(pre2, pre3) && same_bits(post2, post3) && same_bits(comb2, comb3))
        << "hc " << hc << " d " << fc.dim << " T " << T;
  }
}

// The unsuffixed entries follow the exec they are given, call by call: fast = false runs the
// reference, fast = true the fast path (bit for bit each), whatever another exec asked before.
TEST(MhcFast, DispatchFollowsTheExec) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  MhcShape s;
  s.hc = 4;
  s.dim = 100;
  s.sinkhorn_iters = 20;
  const int64_t T = 7, n = s.hc * s.dim;
  std::mt19937 rng(99);
  auto fn = random_vec(s.mix_width() * n, rng, 1.0f / std::sqrt(float(n)));
  auto base = random_vec(s.mix_width(), rng, 0.5f), x = random_vec(T * n, rng, 3.0f);
  std::vector<float> scale = {0.9f, 1.2f, 1.7f};
  const MhcWeights w{fn.data(), base.data(), scale.data()};
  const size_t np = T * s.hc, nc = T * s.hc * s.hc;
  std::vector<float> pr(np), qr(np), cr(nc), pf(np), qf(np), cf(nc);
  mhc_coefficients_reference(s, w, x.data(), T, pr.data(), qr.data(), cr.data());
  PooledExec pe;
  mhc_coefficients_fast(pe.ex, s, w, x.data(), T, pf.data(), qf.data(), cf.data());
  ASSERT_FALSE(same_bits(cr, cf)) << "the test needs inputs where the two paths differ";
  CpuExec scalar = pe.ex;
  scalar.fast = false;
  EXPECT_FALSE(scalar.use_fast());
  EXPECT_TRUE(pe.ex.use_fast());
  for (int round = 0; round < 2; ++round) {
    std::vector<float> p(np), q(np), c(nc);
    mhc_coefficients(scalar, s, w, x.data(), T, p.data(), q.data(), c.data());
    EXPECT_TRUE(same_bits(p, pr) && same_bits(q, qr) && same_bits(c, cr)) << "scalar, round " << round;
    mhc_coefficients(pe.ex, s, w, x.data(), T, p.data(), q.data(), c.data());
    EXPECT_TRUE(same_bits(p, pf) && same_bits(q, qf) && same_bits(c, cf)) << "fast, round " << round;
  }
}

}  // namespace
}  // namespace dsv41
