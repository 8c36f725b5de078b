// Tests of the matrix products (gemm.h): fast and portable paths against the double-accumulating
// references on random inputs at boundary sizes (ragged vector tails, partial micro-tiles, several
// cache blocks), NaN/Inf propagation, and the summation-order promise: the same bits with any
// thread count and whether rows are computed together or one at a time.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
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

const int64_t kRows[] = {1, 2, 3, 7, 8, 9, 33};
const int64_t kIn[] = {1, 7, 8, 15, 16, 31, 32, 33, 100, 513};
const int64_t kOut[] = {1, 3, 8, 17, 64, 129};

TEST(Gemm, F32MatchesReferenceAtBoundarySizes) {
  std::mt19937 rng(1234);
  for (int64_t rows : kRows)
    for (int64_t in : kIn)
      for (int64_t out : kOut) {
        const std::vector<float> x = random_floats(rows * in, rng), w = random_floats(out * in, rng);
        std::vector<float> ref(rows * out), fast(rows * out, kNaN), port(rows * out, kNaN);
        gemm_f32_reference(x.data(), rows, in, w.data(), out, ref.data());
        gemm_f32(CpuExec::serial(), x.data(), rows, in, w.data(), out, fast.data());
        gemm_f32_portable(x.data(), rows, in, w.data(), out, port.data());
        expect_close(fast, ref, x, w.data(), rows, in, out, "gemm_f32");
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
        std::vector<float> ref(rows * out), fast(rows * out, kNaN), port(rows * out, kNaN);
        gemm_bf16w_reference(x.data(), rows, in, w.data(), out, ref.data());
        gemm_bf16w(CpuExec::serial(), x.data(), rows, in, w.data(), out, fast.data());
        gemm_bf16w_portable(x.data(), rows, in, w.data(), out, port.data());
        expect_close(fast, ref, x, w.data(), rows, in, out, "gemm_bf16w");
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
  std::vector<float> a(rows * out), b(rows * out);
  gemm_bf16w(CpuExec::serial(), x.data(), rows, in, wb.data(), out, a.data());
  gemm_f32(CpuExec::serial(), x.data(), rows, in, wf.data(), out, b.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
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
    for (int path = 0; path < 2; ++path) {
      std::vector<float> y(rows * out);
      if (path == 0) gemm_f32(CpuExec::serial(), x.data(), rows, in, w.data(), out, y.data());
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
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      CpuExec ex = CpuExec::serial();
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
    for (int64_t r = 0; r < s.rows; ++r) {
      gemm_f32(CpuExec::serial(), x.data() + r * s.in, 1, s.in, w.data(), s.out, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), results[0].data() + r * s.out, s.out * sizeof(float)))
          << "rows=" << s.rows << " in=" << s.in << " out=" << s.out << " row " << r;
    }
  }
}

}  // namespace
}  // namespace dsv41
