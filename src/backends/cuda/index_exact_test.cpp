// The arithmetic of the integer indexer scores (index_exact.h) on the CPU: where it calls a sum
// exact, the block integer sums scaled by their powers of two give the simple body's double chain
// bit for bit (IndexScoreK: Σ_c double(record value)·q_c in channel order); the query and key
// decompositions reproduce the values; the inputs it must refuse are refused. The GPU kernel
// (index_scores_int.cu) runs these same functions around its MMAs; fast_attention_test.cu checks
// it against the simple kernel on a device.
#include "backends/cuda/index_exact.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/device_kernels_attention.h"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_records.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// The simple body's chain (IndexScoreK::head_dot) for one record and one query row.
double simple_dot(const uint8_t* rec, const float* q, int dh) {
  dk::IndexScoreK k{};
  k.q = q;
  k.keys = dk::KeyRows::records(rec, RowKind::kIndex, dh);
  k.nh = 1;
  k.dh = dh;
  return k.head_dot(0, 0, 0);
}

struct Exact {
  bool eligible = false;
  double acc = 0;
};

// What the kernel forms for one (record, query row): per block the integer sum of the query's
// integers and the codes' 2·E2M1, then index_exact_dot, where the spans allow.
Exact exact_dot(const uint8_t* rec, const float* q, int dh) {
  const int nb = dh / 32;
  std::vector<int> units(static_cast<size_t>(nb)), sums(static_cast<size_t>(nb), 0);
  std::vector<uint8_t> scales(static_cast<size_t>(nb));
  uint32_t nonzero = 0;
  for (int b = 0; b < nb; ++b) {
    int8_t n[32];
    units[size_t(b)] = dk::index_query_block(q + b * 32, n);
    scales[size_t(b)] = rec[dh / 2 + b];
    for (int c = 0; c < 32; ++c) {
      const int ch = b * 32 + c;
      const uint8_t code = (ch & 1) ? uint8_t(rec[ch / 2] >> 4) : uint8_t(rec[ch / 2] & 0xF);
      nonzero |= (code & 7) ? 1u << b : 0u;
      sums[size_t(b)] += int(n[c]) * dk::index_key_value(code);
    }
  }
  Exact e;
  e.eligible = dk::index_query_span(units.data(), nb) + dk::index_key_span(scales.data(), nonzero, nb) <=
               dk::kIndexExactSpan;
  for (int& u : units)
    if (u == dk::kIndexZeroBlock || u == dk::kIndexNotExact) u = 0;
  e.acc = dk::index_exact_dot(sums.data(), units.data(), scales.data(), nb);
  return e;
}

TEST(IndexExact, KeyValuesAreTheRecordsValues) {
  for (int s = 0; s <= 252; ++s)
    for (int code = 0; code < 16; ++code) {
      const float want = dk::e2m1_value(uint8_t(code)) * dk::ue8m0_value(uint8_t(s));
      EXPECT_EQ(double(want), dk::index_key_value(uint8_t(code)) * dk::index_pow2(s - 128)) << s << " " << code;
    }
}

TEST(IndexExact, QueryBlocksDecomposeOrAreRefused) {
  std::mt19937 rng(5);
  const int dh = 128;
  const std::vector<float> q = kc::cached(RowKind::kIndex, kc::randn(rng, 64 * dh, 3.0f), dh);
  for (int b = 0; b < 64 * dh / 32; ++b) {
    int8_t n[32];
    const int unit = dk::index_query_block(q.data() + b * 32, n);
    ASSERT_LT(unit, dk::kIndexZeroBlock) << "a fake-quantised block " << b << " is refused";
    for (int c = 0; c < 32; ++c) {
      EXPECT_LT(std::abs(int(n[c])), 16);
      EXPECT_EQ(double(q[size_t(b * 32 + c)]), n[c] * dk::index_pow2(unit)) << b << " " << c;
    }
  }
  std::vector<float> x(q.begin(), q.begin() + 32);
  int8_t n[32];
  x[3] = 0.3f * std::fabs(x[0]) + 1e-3f;  // off the block's grid
  EXPECT_EQ(dk::index_query_block(x.data(), n), dk::kIndexNotExact);
  x[3] = NAN;
  EXPECT_EQ(dk::index_query_block(x.data(), n), dk::kIndexNotExact);
  x[3] = INFINITY;
  EXPECT_EQ(dk::index_query_block(x.data(), n), dk::kIndexNotExact);
  std::vector<float> zero(32, 0.0f);
  zero[7] = -0.0f;
  EXPECT_EQ(dk::index_query_block(zero.data(), n), dk::kIndexZeroBlock);
  std::vector<float> tiny(32, 0x1p-149f);  // subnormal queries: units below float's range are fine
  const int unit = dk::index_query_block(tiny.data(), n);
  EXPECT_EQ(unit, -152);
  EXPECT_EQ(n[0], 8);
}

// Fake-quantised queries and packed keys whose blocks are scaled by powers of two over a wide range:
// every eligible (entry, head) equals the chain bit for bit, and most are eligible.
TEST(IndexExact, EligibleSumsEqualTheDoubleChain) {
  std::mt19937 rng(11);
  const int dh = 128, G = 300, H = 32;
  std::uniform_int_distribution<int> shift(-12, 12);
  auto scaled = [&](int64_t rows) {
    std::vector<float> x = kc::randn(rng, rows * dh, 2.0f);
    for (int64_t b = 0; b < rows * dh / 32; ++b) {
      const float f = std::ldexp(1.0f, shift(rng));
      for (int c = 0; c < 32; ++c) x[size_t(b * 32 + c)] *= f;
    }
    return x;
  };
  const std::vector<float> q = kc::cached(RowKind::kIndex, scaled(H), dh);
  const std::vector<uint8_t> rec = kc::pack_rows(RowKind::kIndex, scaled(G), dh);
  const int64_t rb = dk::record_bytes(RowKind::kIndex, dh);
  int eligible = 0;
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < H; ++h) {
      const Exact e = exact_dot(rec.data() + g * rb, q.data() + h * dh, dh);
      if (!e.eligible) continue;
      ++eligible;
      ASSERT_EQ(bits(e.acc), bits(simple_dot(rec.data() + g * rb, q.data() + h * dh, dh))) << g << " " << h;
    }
  EXPECT_GT(eligible, G * H * 8 / 10);  // 88.7 % with these per-block shifts of ±12 on both sides
}

// The bound itself: every product at its largest (|n| = 15, |nk| = 12, all of one sign so that no
// partial sum cancels), the query's blocks spanning `span − 1` bits and the key's last block one
// exponent above its others: at a total span of kIndexExactSpan the sum is still exact; one more
// is refused.
TEST(IndexExact, TheSpanBoundHoldsAtItsEdge) {
  const int dh = 128;
  for (int span : {dk::kIndexExactSpan, dk::kIndexExactSpan + 1})
    for (float sign : {1.0f, -1.0f}) {
      std::vector<float> q(dh);
      for (int c = 0; c < dh; ++c) q[size_t(c)] = sign * std::ldexp(15.0f, c < 32 ? -20 : c < 96 ? -10 : -21 + span);
      std::vector<uint8_t> rec(static_cast<size_t>(dk::record_bytes(RowKind::kIndex, dh)), sign > 0 ? 0x77 : 0xFF);
      for (int b = 0; b < 4; ++b) rec[size_t(dh / 2 + b)] = b == 3 ? 128 : 127;  // codes ±6, scales 2^0 / 2^1
      const Exact e = exact_dot(rec.data(), q.data(), dh);
      ASSERT_EQ(e.eligible, span <= dk::kIndexExactSpan) << span;
      if (e.eligible) EXPECT_EQ(bits(e.acc), bits(simple_dot(rec.data(), q.data(), dh))) << span << " " << sign;
    }
}

// Why the bound is needed at all: a sum whose exponents span 45 bits, built so that the chain's
// partial sums lose a low bit (block 0 odd, block 3 at the top): the chain's double differs from
// the exact value — the kernel refuses it and runs the chain.
TEST(IndexExact, AWiderSpanRoundsTheChainAndIsRefused) {
  const int dh = 128;
  std::vector<float> q(dh);
  for (int c = 0; c < dh; ++c)
    q[size_t(c)] = c == 0 ? 0x1p-20f * 15 : c < 31 ? 0x1p-20f : c == 31 ? 0x1p-19f : c < 96 ? 0x1p-10f * 15 : 0x1p24f * 15;
  std::vector<uint8_t> rec(static_cast<size_t>(dk::record_bytes(RowKind::kIndex, dh)), 0x77);
  for (int i = 0; i < 16; ++i) rec[size_t(i)] = 0x11;  // block 0: codes 0.5 (nk = 1)
  for (int b = 0; b < 4; ++b) rec[size_t(dh / 2 + b)] = b == 3 ? 128 : 127;
  const Exact e = exact_dot(rec.data(), q.data(), dh);
  EXPECT_FALSE(e.eligible);
  EXPECT_NE(bits(e.acc), bits(simple_dot(rec.data(), q.data(), dh)));
}

// Key scale bytes the kernel must refuse: 0xFF (a NaN block) and ≥ 253 (its float overflows).
TEST(IndexExact, KeyScalesNearOverflowOrNaNAreRefused) {
  const uint8_t ok[4] = {1, 100, 200, 252}, big[4] = {120, 121, 253, 122}, nan[4] = {120, 0xFF, 121, 122};
  EXPECT_EQ(dk::index_key_span(ok, 0xF, 4), 251);
  EXPECT_EQ(dk::index_key_span(ok, 0x2, 4), 0);  // one nonzero block spans nothing
  EXPECT_GT(dk::index_key_span(big, 0x1, 4), dk::kIndexExactSpan);
  EXPECT_GT(dk::index_key_span(nan, 0x1, 4), dk::kIndexExactSpan);
  const int units[4] = {3, dk::kIndexZeroBlock, -5, 2}, bad[4] = {3, dk::kIndexNotExact, -5, 2};
  EXPECT_EQ(dk::index_query_span(units, 4), 8);
  EXPECT_GT(dk::index_query_span(bad, 4), dk::kIndexExactSpan);
}

}  // namespace
}  // namespace dsv41
