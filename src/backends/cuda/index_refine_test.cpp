// Filter and refine on the CPU (index_refine.h): the fast score stays within its bound of the simple
// body's (dk::IndexScoreK) on fresh random rows — trained-like and wide block spreads, subnormal and
// large scales, queries off the MXFP4 grid —, and the top-k set recovered from the fast scores
// equals select_topk's on the exact scores, ties included (repeated keys give equal scores), while
// scoring only a few entries exactly.
#include "backends/cuda/index_refine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_records.h"
#include "model/indexer.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

struct Rows {
  std::vector<float> q, hw;      // [rows, nh·dh], [rows, nh]
  std::vector<uint8_t> records;  // [G] MXFP4 index records
};

// rows × G of nh heads × dh: blocks scaled by 2^(base + 0 … spread) (a trained indexer's spread is
// 0–2; 7 is wide), keys repeated every `repeat` entries when > 0 (equal scores), a query block of
// row 1 pushed off its grid when `off_grid`.
Rows make_rows(std::mt19937& rng, int64_t rows, int64_t G, int nh, int dh, int spread, int base, int repeat,
               bool off_grid, bool hard) {
  std::uniform_int_distribution<int> shift(0, spread);
  const auto scaled = [&](int64_t n, float sd) {
    std::vector<float> x = kc::randn(rng, n * dh, sd);
    for (int64_t b = 0; b < n * dh / 32; ++b) {
      const float f = std::ldexp(1.0f, base + shift(rng));
      for (int c = 0; c < 32; ++c) x[size_t(b * 32 + c)] *= f;
    }
    return x;
  };
  Rows out;
  out.q = kc::cached(RowKind::kIndex, scaled(rows * nh, 1.0f), dh);
  if (off_grid && rows > 1) out.q[size_t(nh * dh + 3)] = 0.3f * std::fabs(out.q[size_t(nh * dh)]) + 1e-3f;
  std::vector<float> keys = scaled(G, 1.0f);
  if (repeat > 0)
    for (int64_t g = repeat; g < G; ++g) std::copy_n(keys.begin() + (g % repeat) * dh, dh, keys.begin() + g * dh);
  if (hard) kc::harden_index_keys(keys, G, dh);  // keys the fused form cannot take, or huge ones
  out.records = kc::pack_rows(RowKind::kIndex, keys, dh);
  out.hw = kc::randn(rng, rows * nh, 0.5f);
  return out;
}

struct Case {
  int64_t rows, G;
  int nh, dh, k, spread, base, repeat;
  bool off_grid;
  bool hard = false;
  int bs = 8, nb = 16;  // candidate blocks for the band rule (refine_row)
};

TEST(IndexRefine, FastScoresStayWithinTheirBoundsAndTheSelectionIsExact) {
  std::mt19937 rng(37);
  for (const Case& c : {Case{3, 4000, 64, 128, 512, 1, 0, 0, false}, Case{4, 3000, 16, 64, 64, 2, -3, 0, false},
                        Case{3, 2500, 64, 128, 256, 7, -4, 0, false}, Case{3, 2000, 16, 128, 64, 1, 0, 37, false},
                        Case{3, 1500, 16, 128, 100, 1, -130, 0, false}, Case{3, 1500, 16, 128, 100, 1, 100, 0, false},
                        Case{3, 1200, 16, 128, 40, 1, 0, 0, true}, Case{2, 30, 16, 64, 64, 1, 0, 0, false},
                        Case{2, 3000, 16, 32, 128, 1, 0, 0, false, true, 32, 16},
                        Case{2, 3000, 32, 128, 128, 1, 0, 0, false, true, 8, 64}}) {
    const Rows in = make_rows(rng, c.rows, c.G, c.nh, c.dh, c.spread, c.base, c.repeat, c.off_grid, c.hard);
    std::vector<float> exact(size_t(c.rows * c.G));
    dk::IndexScoreK k{in.q.data(), in.hw.data(), dk::KeyRows::records(in.records.data(), RowKind::kIndex, c.dh),
                      c.G,         c.nh,         c.dh,
                      c.G * 4 - 1, 4,            1.0f / std::sqrt(float(c.dh)),
                      nullptr,     0,            0,
                      exact.data()};
    for (int64_t id = 0; id < c.rows * c.G; ++id) k(id);
    int64_t live = 0, rescored_all = 0, banded_all = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t visible = std::min(c.G, (k.start + r + 1) / k.ratio);
      std::vector<dk::IndexApprox> approx(size_t(c.G), dk::IndexApprox{-INFINITY, 0});
      for (int64_t g = 0; g < visible; ++g) {
        approx[size_t(g)] = dk::index_approx_score(k, r, g);
        const float e = exact[size_t(r * c.G + g)];
        if (std::isfinite(approx[size_t(g)].bound)) {
          ASSERT_LE(std::abs(double(approx[size_t(g)].score) - double(e)), approx[size_t(g)].bound)
              << "row " << r << " entry " << g << " spread " << c.spread << " base " << c.base;
        }
      }
      int64_t rescored = 0;
      const std::vector<int32_t> got =
          dk::refine_topk(approx, c.k, [&](int64_t g) { return exact[size_t(r * c.G + g)]; }, &rescored);
      std::vector<int32_t> want(size_t(c.k));
      select_topk(exact.data() + r * c.G, c.G, c.k, want.data());
      ASSERT_EQ(got, want) << "row " << r << " G " << c.G << " k " << c.k << " spread " << c.spread << " repeat "
                           << c.repeat;
      // The GPU's band rule (β, the k-th fast score, block maxima) gives both selections exactly.
      int64_t banded = 0;
      {
        const dk::RefinedRow band = dk::refine_row(
            approx, c.k, c.bs, c.nb, visible, [&](int64_t g) { return exact[size_t(r * c.G + g)]; },
            [](const float* v, int64_t n, int width, int32_t* out) { select_topk(v, n, width, out); });
        ASSERT_EQ(band.topk, want) << "band rule, row " << r << " G " << c.G << " k " << c.k << " spread " << c.spread;
        const int64_t blocks = (c.G + c.bs - 1) / c.bs;
        std::vector<float> bmax(static_cast<size_t>(blocks));
        for (int64_t b = 0; b < blocks; ++b)
          dk::BlockMaxK{exact.data() + r * c.G, c.G, blocks, k.start, c.bs, k.ratio, bmax.data()}(b);
        std::vector<int32_t> want_blocks(static_cast<size_t>(c.nb));
        select_topk(bmax.data(), blocks, c.nb, want_blocks.data());
        ASSERT_EQ(band.candidates, want_blocks) << "band rule's blocks, row " << r << " G " << c.G;
        banded = band.rescored;
        // The GPU's rule since session 50: fast scores in head order, exact where known (β = 0), so
        // only unknown entries are scored again — against the GPU's simple body, the FFMA chain.
        std::vector<float> chain(size_t(c.G), -INFINITY);
        std::vector<dk::IndexApprox> ordered(size_t(c.G), dk::IndexApprox{-INFINITY, 0});
        int64_t unknown = 0;
        for (int64_t g = 0; g < visible; ++g) {
          float total = 0.0f;
          for (int64_t h = 0; h < c.nh; ++h)
            total = std::fmaf(std::fmax(float(k.head_dot(r, g, h)), 0.0f) * k.scale, in.hw[size_t(r * c.nh + h)], total);
          chain[size_t(g)] = total;
          const dk::IndexApprox& a = approx[size_t(g)];
          ordered[size_t(g)] = a.exact_in_head_order ? dk::IndexApprox{a.score, 0.0} : dk::IndexApprox{NAN, INFINITY};
          unknown += a.exact_in_head_order ? 0 : 1;
        }
        const auto exact_chain = [&](int64_t g) { return chain[size_t(g)]; };
        const dk::RefinedRow head_order = dk::refine_row(
            ordered, c.k, c.bs, c.nb, visible, exact_chain,
            [](const float* v, int64_t n, int width, int32_t* out) { select_topk(v, n, width, out); });
        std::vector<int32_t> want_chain(size_t(c.k)), want_chain_blocks(size_t(c.nb));
        select_topk(chain.data(), c.G, c.k, want_chain.data());
        std::vector<float> cmax(static_cast<size_t>(blocks));
        for (int64_t b = 0; b < blocks; ++b)
          dk::BlockMaxK{chain.data(), c.G, blocks, k.start, c.bs, k.ratio, cmax.data()}(b);
        select_topk(cmax.data(), blocks, c.nb, want_chain_blocks.data());
        ASSERT_EQ(head_order.topk, want_chain) << "head order, row " << r << " G " << c.G << " k " << c.k;
        ASSERT_EQ(head_order.candidates, want_chain_blocks) << "head order's blocks, row " << r << " G " << c.G;
        ASSERT_EQ(head_order.rescored, unknown) << "head order: only the unknown entries scored again";
      }
      live += visible;
      rescored_all += rescored;
      banded_all += banded;
      if (c.off_grid && r == 1) {
        EXPECT_GT(rescored, 0) << "a row off the MXFP4 grid has no bound to go by";
      }
    }
    std::printf("G %lld, %d heads × %d, top %d, spread %d, base %d, repeat %d%s%s: %lld of %lld entries scored "
                "again exactly (the band rule, %d blocks of %d kept too: %lld)\n",
                static_cast<long long>(c.G), c.nh, c.dh, c.k, c.spread, c.base, c.repeat,
                c.off_grid ? ", a query off its grid" : "", c.hard ? ", hard keys" : "",
                static_cast<long long>(rescored_all), static_cast<long long>(live), c.nb, c.bs,
                static_cast<long long>(banded_all));
  }
}

// A per-row β from the worst case instead of the largest per-entry bound: every entry's magnitude
// Σ_h |w_h|·ReLU_h is at most R = Σ_h |w_h|·c_h·Σ_c |n'_hc|·96 (the shifted key integers are at most
// 12·2^3), so error·R·max_g 2^(S_g − 128) bounds every entry of the row — a bound the GPU could form
// without the magnitude FMA a (entry, head). The band rule must still select exactly; how many more
// entries it scores again is printed (docs/CUDA.md, session 45: 250–440× the β, +15–25 % entries).
double row_worst(const dk::IndexScoreK& k, int64_t r) {
  const int nb = int(k.dh / 32);
  double R = 0;
  for (int64_t h = 0; h < k.nh; ++h) {
    const float* qh = k.q + (r * k.nh + h) * k.dh;
    int8_t n[128];
    int unit[4];
    for (int b = 0; b < nb; ++b) unit[b] = dk::index_query_block(qh + b * 32, n + b * 32);
    int qleast = 1 << 20;
    for (int b = 0; b < nb; ++b)
      if (unit[b] != dk::kIndexZeroBlock) qleast = std::min(qleast, unit[b]);
    if (qleast > 200) continue;
    const double c = std::ldexp(double(k.scale), qleast);
    double l1 = 0;
    for (int b = 0; b < nb; ++b)
      if (unit[b] != dk::kIndexZeroBlock)
        for (int c2 = 0; c2 < 32; ++c2) l1 += std::abs(int(n[b * 32 + c2])) * double(1 << (unit[b] - qleast));
    R += std::fabs(double(k.hw[r * k.nh + h])) * c * l1 * 96.0;
  }
  return R;
}

TEST(IndexRefine, AWorstCasePerRowBetaStillSelectsExactly) {
  std::mt19937 rng(45);
  struct E { int64_t rows, G; int nh, dh, k, spread; int nb; };
  for (const E& c : {E{2, 4000, 64, 128, 512, 1, 16}, E{1, 20000, 64, 128, 512, 1, 64}, E{1, 6000, 32, 128, 256, 0, 32}}) {
    const Rows in = make_rows(rng, c.rows, c.G, c.nh, c.dh, c.spread, 0, 0, false, false);
    std::vector<float> exact(size_t(c.rows * c.G));
    dk::IndexScoreK k{in.q.data(), in.hw.data(), dk::KeyRows::records(in.records.data(), RowKind::kIndex, c.dh),
                      c.G, c.nh, c.dh, c.G * 4 - 1, 4, 1.0f / std::sqrt(float(c.dh)), nullptr, 0, 0, exact.data()};
    for (int64_t id = 0; id < c.rows * c.G; ++id) k(id);
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t visible = std::min(c.G, (k.start + r + 1) / k.ratio);
      std::vector<dk::IndexApprox> approx(size_t(c.G), dk::IndexApprox{-INFINITY, 0});
      double beta = 0, kfmax = 0;  // beta: the largest finite per-entry bound
      for (int64_t g = 0; g < visible; ++g) {
        approx[size_t(g)] = dk::index_approx_score(k, r, g);
        if (std::isfinite(approx[size_t(g)].bound)) beta = std::max(beta, approx[size_t(g)].bound);
        const uint8_t* rec = k.keys.row(g).rec;
        int least = 255;
        for (int b = 0; b < c.dh / 32; ++b) least = std::min(least, int(rec[c.dh / 2 + b]));
        kfmax = std::max(kfmax, std::ldexp(1.0, least - 128));
      }
      const double worst = row_worst(k, r) * kfmax * dk::index_refine_error(c.nh) * (1 + 0x1p-10);
      const auto ex = [&](int64_t g) { return exact[size_t(r * c.G + g)]; };
      const auto sel = [](const float* v, int64_t n, int width, int32_t* out) { select_topk(v, n, width, out); };
      const dk::RefinedRow a = dk::refine_row(approx, c.k, 8, c.nb, visible, ex, sel);
      std::vector<dk::IndexApprox> loose = approx;
      for (auto& x : loose) if (std::isfinite(x.bound) && !(x.score == -INFINITY && x.bound == 0)) x.bound = worst;
      const dk::RefinedRow b = dk::refine_row(loose, c.k, 8, c.nb, visible, ex, sel);
      // the spread of the scores near the k-th: the exact k-th and 2k-th
      std::vector<float> row(exact.begin() + r * c.G, exact.begin() + r * c.G + visible);
      std::sort(row.begin(), row.end(), std::greater<float>());
      std::printf("G %lld nh %d spread %d nb %d row %lld: beta %.3g, worst-case beta %.3g (x%.0f); k-th %.4g, "
                  "k-th - 2k-th %.3g; rescored %lld -> %lld\n", (long long)c.G, c.nh, c.spread, c.nb, (long long)r,
                  beta, worst, worst / beta, row[size_t(c.k - 1)], row[size_t(c.k - 1)] - row[size_t(2 * c.k - 1)],
                  (long long)a.rescored, (long long)b.rescored);
      ASSERT_GT(worst, beta) << "the worst case must bound every entry's bound";
      ASSERT_EQ(b.topk, a.topk) << "row " << r << " G " << c.G;
      ASSERT_EQ(b.candidates, a.candidates) << "row " << r << " G " << c.G;
    }
  }
}

// The premise of a fast scorer that sums in head order (index_refine.h, index_head_order_exact):
// where the fused form knows an entry and the row's product quantum keeps both chains out of
// float's subnormals, its score is the GPU simple body's FFMA chain in head order bit for bit — so
// such entries would need no bound and no exact re-scoring. Not vacuous: the same sum in reverse
// head order differs on many entries, and at scores near 2^-120 the condition turns entries away
// (and bits do differ there).
TEST(IndexRefine, HeadOrderFastScoresAreTheSimpleFmaChainBitForBit) {
  std::mt19937 rng(41);
  struct Mix {
    int nh, spread, base;
    bool hard;
  };
  for (const Mix& m : {Mix{64, 1, 0, false}, Mix{32, 2, -3, false}, Mix{32, 1, 0, true}, Mix{64, 0, -60, false},
                       Mix{16, 1, -30, false}}) {
    const int64_t rows = 3, G = 3000;
    const int dh = 128;
    const Rows in = make_rows(rng, rows, G, m.nh, dh, m.spread, m.base, 0, false, m.hard);
    dk::IndexScoreK k{in.q.data(), in.hw.data(), dk::KeyRows::records(in.records.data(), RowKind::kIndex, dh),
                      G,           m.nh,         dh,
                      G * 4 - 1,   4,            1.0f / std::sqrt(float(dh)),
                      nullptr,     0,            0,
                      nullptr};
    int64_t known = 0, exact = 0, reversed_differs = 0, turned_away = 0, turned_away_differs = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < G; ++g) {
        float relu[64];  // the simple body's ReLU terms; summed forwards (its chain) and backwards
        for (int64_t h = 0; h < m.nh; ++h) relu[h] = std::fmax(float(k.head_dot(r, g, h)), 0.0f) * k.scale;
        const float* w = in.hw.data() + r * m.nh;
        float chain = 0.0f, reversed = 0.0f;
        for (int64_t h = 0; h < m.nh; ++h) {
          chain = std::fmaf(relu[h], w[h], chain);
          reversed = std::fmaf(relu[m.nh - 1 - h], w[m.nh - 1 - h], reversed);
        }
        const dk::IndexApprox a = dk::index_approx_score(k, r, g);
        if (!std::isfinite(a.bound)) continue;
        ++known;
        reversed_differs += reversed != chain;
        if (!a.exact_in_head_order) {
          ++turned_away;
          turned_away_differs += a.score != chain;
          continue;
        }
        ++exact;
        ASSERT_EQ(std::bit_cast<uint32_t>(a.score), std::bit_cast<uint32_t>(chain))
            << "row " << r << " entry " << g << " heads " << m.nh << " base " << m.base << ": " << a.score << " vs "
            << chain;
      }
    std::printf("%d heads, spread %d, base %d%s: %lld known, %lld exact in head order (%lld turned away, %lld of "
                "them different); reverse order differs on %lld\n",
                m.nh, m.spread, m.base, m.hard ? ", hard keys" : "", (long long)known, (long long)exact,
                (long long)turned_away, (long long)turned_away_differs, (long long)reversed_differs);
    if (m.base >= -30) {
      EXPECT_EQ(exact, known) << "trained-like scales stay normal: every known entry exact";
      EXPECT_GT(reversed_differs, known / 10) << "the head order must matter for the test to mean anything";
    } else {
      EXPECT_GT(turned_away_differs, 0) << "near 2^-120 some scores differ, and the condition must turn them away";
    }
  }
}

}  // namespace
}  // namespace dsv41
