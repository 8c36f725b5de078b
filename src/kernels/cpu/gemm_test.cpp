// Tests of the matrix products (gemm.h): fast and portable paths against the double-accumulating
// references on random inputs at boundary sizes (ragged vector tails, partial micro-tiles, several
// cache blocks), NaN/Inf propagation, and the summation-order promise: the same bits with any
// thread count and whether rows are computed together or one at a time. Every vector ISA this
// CPU has (AVX2, AVX-512: CpuExec::isa caps the one used) runs each test, and they must agree
// bit for bit with each other.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/numerics.h"
#include "base/thread_pool.h"

namespace dsv41 {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

// Σ_i |x[r,i]·w[o,i]|: the scale of the rounding error of any summation order.
template <typename W>
double abs_dot(const float* x, const W* w, int64_t in) {
  double s = 0;
  for (int64_t i = 0; i < in; ++i) {
    float wv;
    if constexpr (sizeof(W) == 2) wv = bf16_to_f32(w[i]); else wv = w[i];
    s += std::fabs(static_cast<double>(x[i]) * wv);
  }
  return s;
}

// Float summation of n terms in 8 lanes: each lane ≤ ceil(n/8) roundings, 3 more in the
// reduction, 1 for the product; bound with u = 2^-24, doubled for margin.
double tolerance(int64_t in, double abs_sum) {
  return (static_cast<double>((in + 7) / 8) + 4.0) * std::ldexp(1.0, -23) * abs_sum + 1e-30;
}

template <typename W>
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& x,
                  const W* w, int64_t rows, int64_t in, int64_t out, const char* what) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const double tol = tolerance(in, abs_dot(x.data() + r * in, w + o * in, in));
      ASSERT_NEAR(got[r * out + o], want[r * out + o], tol)
          << what << " rows=" << rows << " in=" << in << " out=" << out << " at r=" << r << " o=" << o;
    }
}

// The vector ISAs this CPU can run, each as an exec capped to it (serial: no pool).
std::vector<CpuExec> vector_execs() {
  std::vector<CpuExec> v;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512})
    if (isa <= cpu_best_isa()) {
      CpuExec ex = CpuExec::serial();
      ex.isa = isa;
      v.push_back(ex);
    }
  return v;
}

std::string isa_of(const CpuExec& ex) { return cpu_isa_name(ex.gemm_isa()); }

// Every row count of a small batch (all tile heights and their remainders) and a prefill one.
const int64_t kRows[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 33};
const int64_t kIn[] = {1, 7, 8, 15, 16, 31, 32, 33, 100, 513};
const int64_t kOut[] = {1, 3, 8, 17, 64, 129};

TEST(Gemm, F32MatchesReferenceAtBoundarySizes) {
  std::mt19937 rng(1234);
  for (int64_t rows : kRows)
    for (int64_t in : kIn)
      for (int64_t out : kOut) {
        const std::vector<float> x = random_floats(rows * in, rng), w = random_floats(out * in, rng);
        std::vector<float> ref(rows * out), port(rows * out, kNaN), first;
        gemm_f32_reference(x.data(), rows, in, w.data(), out, ref.data());
        for (const CpuExec& ex : vector_execs()) {
          std::vector<float> fast(rows * out, kNaN);
          gemm_f32(ex, x.data(), rows, in, w.data(), out, fast.data());
          expect_close(fast, ref, x, w.data(), rows, in, out, ("gemm_f32 " + isa_of(ex)).c_str());
          if (first.empty()) first = fast;
          ASSERT_EQ(0, std::memcmp(first.data(), fast.data(), fast.size() * sizeof(float)))
              << "gemm_f32 " << isa_of(ex) << " differs from avx2: rows=" << rows << " in=" << in << " out=" << out;
        }
        gemm_f32_portable(x.data(), rows, in, w.data(), out, port.data());
        expect_close(port, ref, x, w.data(), rows, in, out, "gemm_f32_portable");
      }
}

TEST(Gemm, Bf16WeightsMatchReferenceAtBoundarySizes) {
  std::mt19937 rng(5678);
  for (int64_t rows : kRows)
    for (int64_t in : kIn)
      for (int64_t out : kOut) {
        const std::vector<float> x = random_floats(rows * in, rng);
        const std::vector<uint16_t> w = to_bf16(random_floats(out * in, rng));
        std::vector<float> ref(rows * out), port(rows * out, kNaN), first;
        gemm_bf16w_reference(x.data(), rows, in, w.data(), out, ref.data());
        for (const CpuExec& ex : vector_execs()) {
          std::vector<float> fast(rows * out, kNaN);
          gemm_bf16w(ex, x.data(), rows, in, w.data(), out, fast.data());
          expect_close(fast, ref, x, w.data(), rows, in, out, ("gemm_bf16w " + isa_of(ex)).c_str());
          if (first.empty()) first = fast;
          ASSERT_EQ(0, std::memcmp(first.data(), fast.data(), fast.size() * sizeof(float)))
              << "gemm_bf16w " << isa_of(ex) << " differs from avx2: rows=" << rows << " in=" << in << " out=" << out;
        }
        gemm_bf16w_portable(x.data(), rows, in, w.data(), out, port.data());
        expect_close(port, ref, x, w.data(), rows, in, out, "gemm_bf16w_portable");
      }
}

TEST(Gemm, Bf16WeightsEqualF32OfWidenedWeightsBitForBit) {
  std::mt19937 rng(91);
  const int64_t rows = 9, in = 515, out = 70;
  const std::vector<float> x = random_floats(rows * in, rng);
  const std::vector<uint16_t> wb = to_bf16(random_floats(out * in, rng));
  std::vector<float> wf(wb.size());
  for (size_t i = 0; i < wb.size(); ++i) wf[i] = bf16_to_f32(wb[i]);
  for (const CpuExec& ex : vector_execs()) {
    std::vector<float> a(rows * out), b(rows * out);
    gemm_bf16w(ex, x.data(), rows, in, wb.data(), out, a.data());
    gemm_f32(ex, x.data(), rows, in, wf.data(), out, b.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << isa_of(ex);
  }
}

TEST(Gemm, NanAndInfPropagate) {
  std::mt19937 rng(42);
  for (int64_t in : {7, 8, 33}) {
    const int64_t rows = 5, out = 11;
    std::vector<float> x = random_floats(rows * in, rng), w = random_floats(out * in, rng);
    x[2 * in + in - 1] = kNaN;  // row 2, last (tail) element
    w[4 * in + 0] = kNaN;       // output 4, first element
    x[3 * in + 1] = kInf;       // row 3 meets a zero weight in output 6 → Inf·0 = NaN
    w[6 * in + 1] = 0.0f;
    const std::vector<CpuExec> execs = vector_execs();
    for (size_t path = 0; path <= execs.size(); ++path) {
      std::vector<float> y(rows * out);
      if (path < execs.size()) gemm_f32(execs[path], x.data(), rows, in, w.data(), out, y.data());
      else gemm_f32_portable(x.data(), rows, in, w.data(), out, y.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          const float v = y[r * out + o];
          const bool want_nan = r == 2 || o == 4 || (r == 3 && o == 6);
          if (want_nan) {
            EXPECT_TRUE(std::isnan(v)) << "path=" << path << " in=" << in << " r=" << r << " o=" << o;
          } else if (r == 3) {
            EXPECT_TRUE(std::isinf(v)) << "path=" << path << " in=" << in << " o=" << o;
          } else {
            EXPECT_TRUE(std::isfinite(v)) << "path=" << path << " in=" << in << " r=" << r << " o=" << o;
          }
        }
    }
  }
}

TEST(Gemm, EmptyInnerDimensionGivesZeros) {
  std::vector<float> y(6, kNaN);
  const float x = 1, w = 1;
  gemm_f32(CpuExec::serial(), &x, 2, 0, &w, 3, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// Shapes large enough to go through the pool, with several output and row blocks.
TEST(Gemm, SameBitsForAnyThreadCountAndRowGrouping) {
  struct Shape { int64_t rows, in, out; };
  const Shape shapes[] = {{1, 1000, 1000}, {3, 515, 700}, {130, 100, 300}, {70, 2049, 40}};
  std::mt19937 rng(7);
  for (const Shape& s : shapes) {
    const std::vector<float> x = random_floats(s.rows * s.in, rng), w = random_floats(s.out * s.in, rng);
    const std::vector<uint16_t> wb = to_bf16(w);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3})
      for (CpuExec ex : vector_execs()) {
        ThreadPool pool(threads);
        ex.pool = &pool;
        std::vector<float> y(s.rows * s.out), yb(s.rows * s.out);
        gemm_f32(ex, x.data(), s.rows, s.in, w.data(), s.out, y.data());
        gemm_bf16w(ex, x.data(), s.rows, s.in, wb.data(), s.out, yb.data());
        results.push_back(y);
        results.push_back(yb);
      }
    for (size_t k = 2; k < results.size(); ++k)
      EXPECT_EQ(0, std::memcmp(results[k].data(), results[k % 2].data(), results[k].size() * sizeof(float)))
          << "rows=" << s.rows << " in=" << s.in << " out=" << s.out << " result " << k;
    // One row at a time (decode) gives the bits of the whole batch (prefill).
    std::vector<float> row(s.out);
    for (const CpuExec& ex : vector_execs())
      for (int64_t r = 0; r < s.rows; ++r) {
        gemm_f32(ex, x.data() + r * s.in, 1, s.in, w.data(), s.out, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), results[0].data() + r * s.out, s.out * sizeof(float)))
            << isa_of(ex) << " rows=" << s.rows << " in=" << s.in << " out=" << s.out << " row " << r;
      }
  }
}

// Batch invariance of a decode step: for every batch size 1..17 (each tile height and remainder
// of both ISAs), every row of the product equals that row computed alone, bit for bit, on every
// ISA, for f32 and bf16 weights, at the small model's shapes and ragged ones.
TEST(Gemm, EachRowOfASmallBatchEqualsTheRowAloneOnEveryIsa) {
  struct Shape { int64_t in, out; };
  const Shape shapes[] = {{256, 512}, {96, 256}, {256, 8}, {129, 37}, {7, 23}};
  std::mt19937 rng(2024);
  for (const Shape& s : shapes) {
    const std::vector<float> w = random_floats(s.out * s.in, rng);
    const std::vector<uint16_t> wb = to_bf16(w);
    const std::vector<float> x = random_floats(17 * s.in, rng);
    for (const CpuExec& ex : vector_execs()) {
      std::vector<float> alone(17 * s.out), alone_b(17 * s.out);
      for (int64_t r = 0; r < 17; ++r) {
        gemm_f32(ex, x.data() + r * s.in, 1, s.in, w.data(), s.out, alone.data() + r * s.out);
        gemm_bf16w(ex, x.data() + r * s.in, 1, s.in, wb.data(), s.out, alone_b.data() + r * s.out);
      }
      for (int64_t m = 2; m <= 17; ++m) {
        std::vector<float> y(m * s.out), yb(m * s.out);
        gemm_f32(ex, x.data(), m, s.in, w.data(), s.out, y.data());
        gemm_bf16w(ex, x.data(), m, s.in, wb.data(), s.out, yb.data());
        ASSERT_EQ(0, std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)))
            << isa_of(ex) << " f32 m=" << m << " in=" << s.in << " out=" << s.out;
        ASSERT_EQ(0, std::memcmp(yb.data(), alone_b.data(), yb.size() * sizeof(float)))
            << isa_of(ex) << " bf16 m=" << m << " in=" << s.in << " out=" << s.out;
      }
    }
  }
}

TEST(Gemm, IsaNamesRoundTripAndTheCapIsHonoured) {
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    CpuIsa back = CpuIsa::kPortable;
    ASSERT_TRUE(parse_cpu_isa(cpu_isa_name(isa), &back));
    EXPECT_EQ(back, isa);
    CpuExec ex;
    ex.isa = isa;
    EXPECT_EQ(ex.gemm_isa(), std::min(isa, cpu_best_isa()));
  }
  CpuIsa isa = CpuIsa::kPortable;
  EXPECT_TRUE(parse_cpu_isa("auto", &isa));
  EXPECT_EQ(isa, CpuIsa::kAvx512);
  EXPECT_FALSE(parse_cpu_isa("avx1024", &isa));
  EXPECT_FALSE(parse_cpu_isa("", &isa));
}

}  // namespace
}  // namespace dsv41
