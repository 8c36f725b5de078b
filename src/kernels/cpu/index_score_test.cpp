// The indexer's scoring tile: every ISA path gives index_score_reference's bits, on MXFP4 values
// (as the model feeds it: the block sums are then exact) and on arbitrary floats (the operation
// order alone fixes the bits), at ragged shapes: rows across the 8-vector groups, head dims
// with a partial 32-channel block, partial tiles; NaN propagates; and on MXFP4 values the
// score equals the exact (double) sum of the block-wise dots.
#include "kernels/cpu/index_score.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cache/records.h"

namespace dsv41 {
namespace {

struct Case {
  int64_t rows;
  int nh, dh, cols;
};

// Random q [rows, nh, dh], w [rows, nh], keys [cols, dh]; MXFP4-quantised when `mx`.
struct Inputs {
  std::vector<float> q, w, keys, keys_t;
  Inputs(const Case& c, bool mx, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    q.resize(static_cast<size_t>(c.rows * c.nh * c.dh));
    w.resize(static_cast<size_t>(c.rows * c.nh));
    keys.resize(static_cast<size_t>(c.cols * c.dh));
    for (auto& v : q) v = nd(rng) * 3.0f;
    for (auto& v : w) v = nd(rng);
    for (auto& v : keys) v = nd(rng);
    if (mx) {
      for (int64_t i = 0; i < c.rows * c.nh; ++i) row_fake_quant(RowKind::kIndex, q.data() + i * c.dh, c.dh);
      for (int j = 0; j < c.cols; ++j) row_fake_quant(RowKind::kIndex, keys.data() + int64_t{j} * c.dh, c.dh);
    }
    keys_t.resize(static_cast<size_t>(kIndexKeyTile * c.dh));
    transpose_key_tile(CpuIsa::kPortable, keys.data(), c.cols, c.dh, keys_t.data());
  }
};

std::vector<float> run(CpuIsa isa, const Case& c, const Inputs& in) {
  std::vector<float> out(static_cast<size_t>(c.rows * kIndexKeyTile), -7.0f);
  index_score_tile(isa, in.q.data(), in.w.data(), c.rows, c.nh, c.dh, in.keys_t.data(), 0.125f, out.data(),
                   kIndexKeyTile, c.cols);
  return out;
}

void expect_bits(float want, float got, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
    return;
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(want), std::bit_cast<uint32_t>(got)) << what << ": " << want << " vs " << got;
}

TEST(IndexScore, EveryIsaGivesTheReferenceBits) {
  const std::vector<Case> cases = {{1, 1, 32, 16}, {1, 4, 64, 16}, {3, 4, 64, 5},  {8, 1, 64, 16},
                                   {9, 3, 40, 11}, {17, 4, 64, 16}, {64, 4, 64, 16}, {5, 7, 128, 1},
                                   {2, 2, 33, 16}, {6, 5, 96, 9}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (bool mx : {true, false}) {
      Inputs in(c, mx, seed++);
      std::vector<float> want(static_cast<size_t>(c.rows * kIndexKeyTile));
      for (int64_t r = 0; r < c.rows; ++r)
        for (int j = 0; j < c.cols; ++j)
          want[r * kIndexKeyTile + j] = index_score_reference(in.q.data() + r * c.nh * c.dh, in.w.data() + r * c.nh,
                                                              c.nh, c.dh, in.keys.data() + int64_t{j} * c.dh, 0.125f);
      for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        if (isa > cpu_best_isa()) continue;
        const std::vector<float> got = run(isa, c, in);
        for (int64_t r = 0; r < c.rows; ++r) {
          for (int j = 0; j < kIndexKeyTile; ++j) {
            const std::string what = std::string(cpu_isa_name(isa)) + " rows " + std::to_string(c.rows) + " nh " +
                                     std::to_string(c.nh) + " dh " + std::to_string(c.dh) + " r " +
                                     std::to_string(r) + " j " + std::to_string(j) + (mx ? " mx" : "");
            if (j < c.cols) expect_bits(want[r * kIndexKeyTile + j], got[r * kIndexKeyTile + j], what);
            else EXPECT_EQ(got[r * kIndexKeyTile + j], -7.0f) << what << ": past cols untouched";
          }
        }
      }
    }
  }
}

// On MXFP4 values each 32-channel block's dot is exact: the reference equals the double sum of
// the block dots, rounded once per block boundary and head step as the definition says.
TEST(IndexScore, Mxfp4BlockDotsAreExact) {
  const Case c{4, 3, 96, 16};
  Inputs in(c, true, 99);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int j = 0; j < c.cols; ++j) {
      float total = 0.0f;
      for (int h = 0; h < c.nh; ++h) {
        const float* qh = in.q.data() + (r * c.nh + h) * c.dh;
        const float* k = in.keys.data() + int64_t{j} * c.dh;
        float s = 0.0f;
        for (int b0 = 0; b0 < c.dh; b0 += 32) {
          double exact = 0;
          for (int d = b0; d < b0 + 32; ++d) exact += double(qh[d]) * k[d];
          s = b0 == 0 ? float(exact) : s + float(exact);
          EXPECT_EQ(double(float(exact)), exact) << "a block's dot fits a float exactly";
        }
        total = std::fma(std::max(s, 0.0f) * 0.125f, in.w[r * c.nh + h], total);
      }
      const float ref = index_score_reference(in.q.data() + r * c.nh * c.dh, in.w.data() + r * c.nh, c.nh, c.dh,
                                              in.keys.data() + int64_t{j} * c.dh, 0.125f);
      EXPECT_EQ(std::bit_cast<uint32_t>(ref), std::bit_cast<uint32_t>(total)) << r << " " << j;
    }
  }
}

TEST(IndexScore, NanPropagatesOnEveryPath) {
  const Case c{3, 2, 64, 16};
  Inputs in(c, false, 7);
  in.keys_t[5 * kIndexKeyTile + 3] = std::numeric_limits<float>::quiet_NaN();  // key 3, channel 5
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa > cpu_best_isa()) continue;
    const std::vector<float> got = run(isa, c, in);
    for (int64_t r = 0; r < c.rows; ++r) {
      EXPECT_TRUE(std::isnan(got[r * kIndexKeyTile + 3])) << cpu_isa_name(isa);
      EXPECT_FALSE(std::isnan(got[r * kIndexKeyTile + 2])) << cpu_isa_name(isa);
    }
  }
}


// The tile transpose on every ISA cap against its definition, at key counts and channel counts
// around the 16 × 16 register blocks (and a tail of channels the blocks leave), the unused
// columns zeroed over whatever the buffer held.
TEST(IndexScore, TransposeKeyTileMatchesDefinitionOnEveryIsa) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  for (int dh : {1, 15, 16, 17, 32, 64, 72, 128}) {
    for (int n : {0, 1, 5, 15, 16}) {
      std::vector<float> keys(static_cast<size_t>(n * dh));
      for (auto& v : keys) v = nd(rng);
      for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
        std::vector<float> keys_t(static_cast<size_t>(kIndexKeyTile * dh), -9.0f);
        transpose_key_tile(isa, keys.data(), n, dh, keys_t.data());
        for (int d = 0; d < dh; ++d)
          for (int j = 0; j < kIndexKeyTile; ++j)
            ASSERT_EQ(keys_t[static_cast<size_t>(d * kIndexKeyTile + j)],
                      j < n ? keys[static_cast<size_t>(j * dh + d)] : 0.0f)
                << "dh=" << dh << " n=" << n << " isa " << int(isa) << " d=" << d << " j=" << j;
      }
    }
  }
}

}  // namespace
}  // namespace dsv41
