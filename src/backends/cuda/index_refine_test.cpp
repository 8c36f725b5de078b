// Filter and refine on the CPU (index_refine.h): the fast score stays within its bound of the simple
// body's (dk::IndexScoreK) on fresh random rows — trained-like and wide block spreads, subnormal and
// large scales, queries off the MXFP4 grid —, and the top-k set recovered from the fast scores
// equals select_topk's on the exact scores, ties included (repeated keys give equal scores), while
// scoring only a few entries exactly.
#include "backends/cuda/index_refine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

}  // namespace
}  // namespace dsv41
