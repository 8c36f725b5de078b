#include "model/engram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/numerics.h"
#include "base/thread_pool.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/dequant.h"

namespace dsv41 {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Engram, ReferenceFastAndFormulaAgree) {
  for (auto [hc, dim, cols, head] : {std::tuple{4, 16, 6, 8}, std::tuple{2, 9, 3, 5}, std::tuple{1, 4, 1, 1}}) {
    std::mt19937 rng(dim + cols);
    EngramShape s;
    s.hc = hc;
    s.dim = dim;
    s.columns = cols;
    s.head_dim = head;
    const int64_t rows = 37, T = 5;
    auto table = random_vec(rows * head, rng);
    auto wkv = random_vec((hc + 1) * dim * cols * head, rng, 0.4f);
    auto qw = random_vec(hc * dim, rng), kw = random_vec(hc * dim, rng);
    EngramWeights w{table.data(), rows, wkv.data(), qw.data(), kw.data()};
    std::vector<int64_t> ids(T * cols);
    for (auto& id : ids) id = rng() % rows;
    auto x0 = random_vec(T * hc * dim, rng);
    auto x1 = x0, x2 = x0;
    ASSERT_TRUE(engram_forward_reference(s, w, ids.data(), T, x1.data()).ok());
    ASSERT_TRUE(engram_forward(CpuExec::serial(), s, w, ids.data(), T, x2.data()).ok());
    for (int64_t t = 0; t < T; ++t) {
      // kv in double
      const int64_t in = cols * head;
      std::vector<double> kv((hc + 1) * dim);
      for (size_t o = 0; o < kv.size(); ++o)
        for (int c = 0; c < cols; ++c)
          for (int k = 0; k < head; ++k)
            kv[o] += double(wkv[o * in + c * head + k]) * table[ids[t * cols + c] * head + k];
      for (int i = 0; i < hc; ++i) {
        double xx = 0, kk = 0, dot = 0;
        for (int c = 0; c < dim; ++c) {
          const double xv = x0[(t * hc + i) * dim + c], kv_ = kv[i * dim + c];
          xx += xv * xv;
          kk += kv_ * kv_;
          dot += xv * qw[i * dim + c] * kw[i * dim + c] * kv_;
        }
        dot /= std::sqrt(xx / dim + 1e-20) * std::sqrt(kk / dim + 1e-20) * std::sqrt(double(dim));
        const double gate = 1 / (1 + std::exp(-std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
        for (int c = 0; c < dim; ++c) {
          const double want = x0[(t * hc + i) * dim + c] + gate * kv[hc * dim + c];
          EXPECT_NEAR(x1[(t * hc + i) * dim + c], want, 1e-4 * (1 + std::fabs(want)));
          EXPECT_NEAR(x2[(t * hc + i) * dim + c], want, 1e-4 * (1 + std::fabs(want)));
        }
      }
    }
    ids[3] = rows;  // out of range: error, nothing written
    auto x3 = x0;
    EXPECT_FALSE(engram_forward(CpuExec::serial(), s, w, ids.data(), T, x3.data()).ok());
    EXPECT_EQ(x3, x0);
  }
}

// ---- Fast path vs scalar reference, and rows gathered from stored (BF16 / FP8) tables --------

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// A stored table: BF16 (no scale) or F8_E4M3 with a row-wise F32 scale [rows, ceil(head/32)] of
// powers of two, as the release stores it. Owns the bytes the views point at.
struct StoredTable {
  std::vector<uint8_t> bytes, scale_bytes;
  TensorView view, scale;
  bool has_scale = false;
  StoredTable(int64_t rows, int64_t head, bool fp8, std::mt19937& rng) {
    view.name = fp8 ? "engram.fp8" : "engram.bf16";
    view.shape = {rows, head};
    view.file = "test";
    if (fp8) {
      view.dtype = DType::kF8E4M3;
      bytes.resize(rows * head);
      for (auto& b : bytes) {
        b = static_cast<uint8_t>(rng());
        if ((b & 0x7F) == 0x7F) b = 0x3C;  // E4M3 NaN codes → an ordinary value
      }
      const int64_t sc = (head + 31) / 32;
      std::vector<float> s(rows * sc);
      for (auto& v : s) v = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 6);
      scale_bytes.resize(s.size() * 4);
      std::memcpy(scale_bytes.data(), s.data(), scale_bytes.size());
      scale.name = "engram.fp8.scale";
      scale.dtype = DType::kF32;
      scale.shape = {rows, sc};
      scale.bytes = std::span<const uint8_t>(scale_bytes);
      scale.file = "test";
      has_scale = true;
    } else {
      view.dtype = DType::kBF16;
      bytes.resize(rows * head * 2);
      std::normal_distribution<float> nd;
      for (int64_t i = 0; i < rows * head; ++i) {
        const uint16_t h = f32_to_bf16(nd(rng));
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    view.bytes = std::span<const uint8_t>(bytes);
  }
  const TensorView* scale_ptr() const { return has_scale ? &scale : nullptr; }
};

// Tolerance of fast vs reference: the fast projection is a float GEMM over columns·head_dim
// inputs (the reference sums in double), so kv differs by float rounding (≈ √in · 2⁻²⁴ relative,
// < 1e-6 here with unit-scaled weights); the gate is a smooth function of sums of such values
// (its sums are both in double), so the written x differ by ≲ 1e-6 · (1 + |x|). 2e-5 leaves a
// margin yet catches any real fault (a wrong row, lane or tail moves values by ≳ 1e-2).
TEST(EngramFast, MatchesReferenceAndStoredTablesGiveTheWidenedBits) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  ThreadPool pool(3);  // the fast paths' token loops split over 3 threads
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  struct Case {
    int hc;
    int64_t dim;
    int cols;
    int64_t head, tokens;
  };
  for (const Case& k : {Case{1, 9, 1, 5, 1}, Case{2, 17, 3, 8, 5}, Case{4, 64, 6, 32, 7}, Case{4, 1027, 12, 40, 17}}) {
    std::mt19937 rng(static_cast<uint32_t>(k.dim * 31 + k.cols));
    EngramShape s;
    s.hc = k.hc;
    s.dim = k.dim;
    s.columns = k.cols;
    s.head_dim = k.head;
    const int64_t rows = 37, T = k.tokens, in = k.cols * k.head;
    auto table = random_vec(rows * k.head, rng);
    auto wkv = random_vec((k.hc + 1) * k.dim * in, rng, 1.0f / std::sqrt(float(in)));
    auto qw = random_vec(k.hc * k.dim, rng), kw = random_vec(k.hc * k.dim, rng);
    EngramWeights w{table.data(), rows, wkv.data(), qw.data(), kw.data()};
    std::vector<int64_t> ids(T * k.cols);
    for (auto& id : ids) id = rng() % rows;
    auto x0 = random_vec(T * k.hc * k.dim, rng, 1.5f);
    const std::string where = "hc " + std::to_string(k.hc) + " d " + std::to_string(k.dim) + " T " + std::to_string(T);

    std::vector<float> r1(T * in), r2(T * in, -1.0f);
    ASSERT_TRUE(engram_gather_reference(s, w, ids.data(), T, r1.data()).ok());
    ASSERT_TRUE(engram_gather_fast(ex, s, w, ids.data(), T, r2.data()).ok());
    EXPECT_TRUE(same_bits(r1, r2)) << where;

    auto x1 = x0, x2 = x0;
    ASSERT_TRUE(engram_forward_reference(s, w, ids.data(), T, x1.data()).ok());
    ASSERT_TRUE(engram_forward_fast(ex, s, w, ids.data(), T, x2.data()).ok());
    for (size_t i = 0; i < x1.size(); ++i) ASSERT_NEAR(x1[i], x2[i], 2e-5 * (1 + std::fabs(x1[i]))) << where << " " << i;
    // One call or token by token: the same bits.
    auto x3 = x0;
    for (int64_t t = 0; t < T; ++t)
      ASSERT_TRUE(engram_forward_fast(ex, s, w, ids.data() + t * k.cols, 1, x3.data() + t * k.hc * k.dim).ok());
    EXPECT_TRUE(same_bits(x2, x3)) << where;

    // Rows dequantised from a stored table = the whole table widened, bit for bit, both paths.
    for (bool fp8 : {false, true}) {
      StoredTable st(rows, k.head, fp8, rng);
      Result<FloatTensor> widened = dequantize(st.view, st.scale_ptr());
      ASSERT_TRUE(widened.ok()) << widened.status().to_string();
      EngramWeights dense{widened->data.data(), rows, wkv.data(), qw.data(), kw.data()};
      EngramWeights stored{nullptr, rows, wkv.data(), qw.data(), kw.data(), &st.view, st.scale_ptr()};
      std::vector<float> g1(T * in), g2(T * in), g3(T * in);
      ASSERT_TRUE(engram_gather_reference(s, dense, ids.data(), T, g1.data()).ok());
      ASSERT_TRUE(engram_gather_reference(s, stored, ids.data(), T, g2.data()).ok());
      ASSERT_TRUE(engram_gather_fast(ex, s, stored, ids.data(), T, g3.data()).ok());
      EXPECT_TRUE(same_bits(g1, g2) && same_bits(g1, g3)) << where << (fp8 ? " fp8" : " bf16");
      auto a1 = x0, a2 = x0, b1 = x0, b2 = x0;
      ASSERT_TRUE(engram_forward_fast(ex, s, dense, ids.data(), T, a1.data()).ok());
      ASSERT_TRUE(engram_forward_fast(ex, s, stored, ids.data(), T, a2.data()).ok());
      ASSERT_TRUE(engram_forward_reference(s, dense, ids.data(), T, b1.data()).ok());
      ASSERT_TRUE(engram_forward_reference(s, stored, ids.data(), T, b2.data()).ok());
      EXPECT_TRUE(same_bits(a1, a2) && same_bits(b1, b2)) << where << (fp8 ? " fp8" : " bf16");
      // A bad id fails before anything is written, on either path and either table.
      auto bad = ids;
      bad.back() = -1;
      auto x4 = x0;
      EXPECT_FALSE(engram_forward_fast(ex, s, stored, bad.data(), T, x4.data()).ok());
      EXPECT_FALSE(engram_forward_reference(s, stored, bad.data(), T, x4.data()).ok());
      EXPECT_EQ(x4, x0);
    }
  }
}

// A stored row whose scale is NaN: the lookup fails naming the tensor, x untouched, both paths.
TEST(EngramFast, UndecodableStoredRowFailsNamingTheTensor) {
  std::mt19937 rng(77);
  EngramShape s;
  s.hc = 2;
  s.dim = 9;
  s.columns = 3;
  s.head_dim = 40;
  const int64_t rows = 37, T = 4, in = s.columns * s.head_dim;
  StoredTable st(rows, s.head_dim, true, rng);
  const float nan = std::nanf("");
  std::memcpy(st.scale_bytes.data() + 4 * (5 * 2 + 1), &nan, 4);  // row 5, second block
  auto wkv = random_vec((s.hc + 1) * s.dim * in, rng), qw = random_vec(s.hc * s.dim, rng);
  EngramWeights w{nullptr, rows, wkv.data(), qw.data(), qw.data(), &st.view, st.scale_ptr()};
  std::vector<int64_t> ids(T * s.columns, 1);
  ids[7] = 5;
  const auto x0 = random_vec(T * s.hc * s.dim, rng);
  const CpuExec ex = CpuExec::serial();
  for (bool fast : {false, true}) {
    if (fast && !cpu_has_avx2_fma()) continue;
    auto x = x0;
    const Status st_ = fast ? engram_forward_fast(ex, s, w, ids.data(), T, x.data())
                            : engram_forward_reference(s, w, ids.data(), T, x.data());
    ASSERT_FALSE(st_.ok());
    EXPECT_NE(st_.message().find("engram.fp8"), std::string::npos) << st_.message();
    EXPECT_EQ(x, x0);
  }
}

}  // namespace
}  // namespace dsv41
