// The integer indexer path (index_score_int.h) against the float path it replaces: the same bits
// on MXFP4 queries and records at every head dim it takes, ragged tiles and row counts, block
// exponents spread far apart; the range check at its edges; the cases it must refuse (off-grid
// or NaN queries, NaN key scales, exponents whose float chain would round) — on each ISA this CPU
// runs it on (AVX2, AVX-512 BW).
#include "kernels/cpu/index_score_int.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache/records.h"

namespace dsv41 {
namespace {

struct Case {
  int64_t rows;
  int nh, dh, n;
  int shift;  // per-block exponent shifts drawn from [−shift, shift] (queries and keys)
};

// An MXFP4 index record of dh channels: dh/2 code bytes, then one scale byte per 32 channels.
size_t index_record_bytes(int dh) { return size_t(dh / 2 + dh / 32); }

// q [rows, nh, dh] fake-quantised MXFP4, w [rows, nh], n index records of dh channels.
struct Inputs {
  std::vector<float> q, w;
  std::vector<std::vector<uint8_t>> records;
  Inputs(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_int_distribution<int> sh(-c.shift, c.shift);
    const auto block_shifted = [&](float* x, int dh) {
      for (int b = 0; b < dh; b += 32) {
        const int e = sh(rng);
        for (int d = b; d < b + 32; ++d) x[d] = std::ldexp(nd(rng), e);
      }
    };
    q.resize(static_cast<size_t>(c.rows * c.nh * c.dh));
    w.resize(static_cast<size_t>(c.rows * c.nh));
    for (int64_t v = 0; v < c.rows * c.nh; ++v) {
      block_shifted(q.data() + v * c.dh, c.dh);
      row_fake_quant(RowKind::kIndex, q.data() + v * c.dh, c.dh);
    }
    for (auto& x : w) x = nd(rng);
    std::vector<float> key(static_cast<size_t>(c.dh));
    for (int j = 0; j < c.n; ++j) {
      block_shifted(key.data(), c.dh);
      records.emplace_back(index_record_bytes(c.dh));
      row_pack(RowKind::kIndex, key.data(), c.dh, records.back().data());
    }
  }
  std::vector<const uint8_t*> pointers() const {
    std::vector<const uint8_t*> p;
    for (const auto& r : records) p.push_back(r.data());
    return p;
  }
};

// The float path: unpack, transpose, index_score_tile (kPortable: the definition's loop).
std::vector<float> float_scores(const Case& c, const Inputs& in, float scale) {
  std::vector<float> keys(static_cast<size_t>(c.n * c.dh)), keys_t(static_cast<size_t>(kIndexKeyTile * c.dh));
  for (int j = 0; j < c.n; ++j) row_unpack(RowKind::kIndex, in.records[j].data(), c.dh, keys.data() + j * c.dh);
  transpose_key_tile(CpuIsa::kPortable, keys.data(), c.n, c.dh, keys_t.data());
  std::vector<float> out(static_cast<size_t>(c.rows * kIndexKeyTile), -1.0f);
  const int64_t vec = int64_t{c.nh} * c.dh;
  for (int64_t r0 = 0; r0 < c.rows; r0 += kIndexTileRows) {
    const int64_t m = std::min(kIndexTileRows, c.rows - r0);
    index_score_tile(CpuIsa::kPortable, in.q.data() + r0 * vec, in.w.data() + r0 * c.nh, m, c.nh, c.dh, keys_t.data(),
                     scale, out.data() + r0 * kIndexKeyTile, kIndexKeyTile, c.n);
  }
  return out;
}

// The integer path; false where it declines the tile.
bool int_scores(CpuIsa isa, const Case& c, const Inputs& in, float scale, std::vector<float>& out) {
  IndexQueryInts q;
  if (!index_query_ints(in.q.data(), c.rows, c.nh, c.dh, q)) return false;
  IndexKeyTileInts k;
  const std::vector<const uint8_t*> p = in.pointers();
  index_key_tile_ints(isa, p.data(), c.n, c.dh, k);
  if (!index_int_tile_fits(q, k)) return false;
  out.assign(static_cast<size_t>(c.rows * kIndexKeyTile), -1.0f);
  index_score_tile_ints(isa, q, 0, c.rows, in.w.data(), k, scale, out.data(), kIndexKeyTile, c.n);
  return true;
}

std::string name(const Case& c) {
  return "rows " + std::to_string(c.rows) + " heads " + std::to_string(c.nh) + " dh " + std::to_string(c.dh) +
         " keys " + std::to_string(c.n) + " shift " + std::to_string(c.shift);
}

// The ISAs whose integer kernels this CPU runs.
std::vector<CpuIsa> int_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (std::min(isa, cpu_best_isa()) == isa && index_int_supported(isa, 32)) isas.push_back(isa);
  return isas;
}

std::string isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx2 ? "AVX2" : "AVX-512"; }

#define DSV41_REQUIRE_INT_INDEX() \
  if (int_isas().empty()) GTEST_SKIP() << "this CPU has no AVX2: no integer path"

TEST(IndexScoreInt, CodeTableIsTwiceTheE2m1ValuePlus12) {
  DSV41_REQUIRE_INT_INDEX();
  // One record per code: every channel holds it, scale byte 128 (2^1): value = e2m1 · 2 = m.
  for (int code = 0; code < 16; ++code) {
    std::vector<uint8_t> rec(index_record_bytes(32), static_cast<uint8_t>(code | code << 4));
    rec[16] = 128;
    std::vector<float> v(32);
    row_unpack(RowKind::kIndex, rec.data(), 32, v.data());
    const uint8_t* p = rec.data();
    for (CpuIsa isa : int_isas()) {
      IndexKeyTileInts k;
      index_key_tile_ints(isa, &p, 1, 32, k);
      EXPECT_EQ(k.k[0], 0) << isa_name(isa);
      for (int t = 0; t < 8; ++t)
        for (int b = 0; b < 4; ++b)
          EXPECT_EQ(int{k.bytes[t * 64 + b]} - 12, static_cast<int>(v[0])) << code << " " << isa_name(isa);
    }
  }
}

TEST(IndexScoreInt, SameBitsAsTheFloatPath) {
  DSV41_REQUIRE_INT_INDEX();
  const std::vector<Case> cases = {
      {1, 4, 64, 16, 2},  {1, 4, 64, 5, 6},   {3, 3, 32, 16, 4},  {70, 4, 64, 16, 3}, {2, 16, 128, 16, 8},
      {5, 1, 96, 9, 12},  {1, 32, 128, 1, 1}, {9, 2, 32, 16, 20}, {1, 64, 128, 16, 5},
  };
  for (CpuIsa isa : int_isas()) {
    int tiles = 0, taken = 0;
    for (uint32_t seed = 1; seed <= 6; ++seed)
      for (const Case& c : cases) {
        const Inputs in(c, seed * 31 + uint32_t(c.dh));
        const float scale = 1.0f / std::sqrt(float(c.dh));
        const std::vector<float> want = float_scores(c, in, scale);
        std::vector<float> got;
        ++tiles;
        if (!int_scores(isa, c, in, scale, got)) continue;
        ++taken;
        for (int64_t r = 0; r < c.rows; ++r)
          ASSERT_EQ(std::memcmp(got.data() + r * kIndexKeyTile, want.data() + r * kIndexKeyTile, c.n * sizeof(float)),
                    0)
              << name(c) << " seed " << seed << " row " << r << " " << isa_name(isa);
      }
    EXPECT_GE(taken * 10, tiles * 9) << taken << " of " << tiles << " tiles on the integer path, " << isa_name(isa);
  }
}

// Query block exponent u = −3 (values of magnitude [1, 2): u = ilogb − 3) against key scale bytes
// that put u + K exactly at the range's ends (−126, 114): taken, the same bits; one further: refused.
TEST(IndexScoreInt, TheExponentRangeHoldsAtItsEdges) {
  DSV41_REQUIRE_INT_INDEX();
  const Case c{1, 2, 32, 3, 0};
  for (const int sb : {5, 4, 245, 246}) {  // K = sb − 128: u + K = −126, −127, 114, 115
    Inputs in(c, 7);
    for (auto& x : in.q) x = x == 0.0f ? 0.0f : std::copysign(1.5f, x);
    for (auto& rec : in.records) rec[16] = static_cast<uint8_t>(sb);
    const std::vector<float> want = float_scores(c, in, 0.25f);
    std::vector<float> got;
    for (CpuIsa isa : int_isas()) {
      const bool taken = int_scores(isa, c, in, 0.25f, got);
      EXPECT_EQ(taken, sb == 5 || sb == 245) << "scale byte " << sb << " " << isa_name(isa);
      if (taken) {
        EXPECT_EQ(std::memcmp(got.data(), want.data(), c.n * sizeof(float)), 0)
            << "scale byte " << sb << " " << isa_name(isa);
      }
    }
  }
}

// The tile's exponent range and NaN flag cover its n keys only, not the padding past n (K = 0),
// and every block of them.
TEST(IndexScoreInt, KeyRangeCoversTheTilesKeysOnly) {
  DSV41_REQUIRE_INT_INDEX();
  for (CpuIsa isa : int_isas()) {
    for (const int n : {1, 3, 16}) {
      const Case c{1, 1, 64, n, 0};
      Inputs in(c, 5);
      for (int j = 0; j < n; ++j) {
        in.records[j][32] = static_cast<uint8_t>(200 + j);  // K = 72 + j
        in.records[j][33] = static_cast<uint8_t>(190 - j);  // K = 62 − j
      }
      const std::string what = std::to_string(n) + " keys, " + isa_name(isa);
      IndexKeyTileInts k;
      const std::vector<const uint8_t*> p = in.pointers();
      index_key_tile_ints(isa, p.data(), n, c.dh, k);
      EXPECT_EQ(k.k_min, 62 - (n - 1)) << what;
      EXPECT_EQ(k.k_max, 72 + (n - 1)) << what;
      EXPECT_FALSE(k.nan_scale) << what;
      for (int j = n; j < kIndexKeyTile; ++j) EXPECT_EQ(k.k[j], 0) << what;
      in.records[n - 1][33] = 0xFF;
      index_key_tile_ints(isa, p.data(), n, c.dh, k);
      EXPECT_TRUE(k.nan_scale) << what;
    }
  }
}

TEST(IndexScoreInt, RefusesWhatItCannotSumExactly) {
  DSV41_REQUIRE_INT_INDEX();
  const Case c{2, 2, 64, 4, 1};
  const Inputs base(c, 11);
  IndexQueryInts q;
  EXPECT_TRUE(index_query_ints(base.q.data(), c.rows, c.nh, c.dh, q));
  for (const float bad : {0.1f, std::nanf(""), INFINITY, 17.0f * 1.5f}) {
    Inputs in = base;
    in.q[37] = bad;  // into a block whose other values are on the grid
    in.q[38] = 16.0f;
    EXPECT_FALSE(index_query_ints(in.q.data(), c.rows, c.nh, c.dh, q)) << bad;
  }
  Inputs in = base;
  in.records[2][32 + 1] = 0xFF;  // the second block's scale of key 2: NaN values
  const std::vector<const uint8_t*> p = in.pointers();
  ASSERT_TRUE(index_query_ints(in.q.data(), c.rows, c.nh, c.dh, q));
  for (CpuIsa isa : int_isas()) {
    IndexKeyTileInts k;
    index_key_tile_ints(isa, p.data(), c.n, c.dh, k);
    EXPECT_TRUE(k.nan_scale) << isa_name(isa);
    EXPECT_FALSE(index_int_tile_fits(q, k)) << isa_name(isa);
  }
}

}  // namespace
}  // namespace dsv41
