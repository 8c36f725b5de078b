// The fast kernels (fast_kernels.h) against the simple kernel bodies they replace
// (device_kernels.h), on the GPU (each test skips without a CUDA device): the same random device
// inputs run once with CudaExec's fast kernels off and once on, at boundary shapes — 1 row, odd
// sizes (scalar loads), vector-load sizes, many rows (several GEMM row tiles, many blocks),
// strided rows, one and eight mHC streams, absent top-k slots, a window cut at a floor.
// Tolerance: most fast kernels sum in double like the simple ones, in another order, so results
// agree to a float rounding of the same double (≤ 1e-6 relative); Sinkhorn's 20 rounds may carry
// one such difference further (1e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_check_stored.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

// Runs `launch` with the fast kernels off and on (after `reset` each time) and compares the n
// floats at `out`. Counts that the fast run made `fast_launches` launches.
void fast_vs_simple(CudaExec& ex, const std::function<void()>& reset, const std::function<void()>& launch,
                    const float* out, int64_t n, double rel, const std::string& what, int64_t fast_launches = 1) {
  kc::Dev<CudaExec> dev(ex);
  ex.set_fast_kernels(false);
  reset();
  launch();
  const std::vector<float> want = dev.down(out, n);
  ex.set_fast_kernels(true);
  reset();
  const int64_t before = ex.counts().launches;
  launch();
  const std::vector<float> got = dev.down(out, n);
  ex.sync();
  ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
  EXPECT_EQ(ex.counts().launches - before, fast_launches) << what;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(want[i])) {
      ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << what << " at " << i;
      if (!std::isnan(want[i])) ASSERT_EQ(got[i], want[i]) << what << " at " << i;
      continue;
    }
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), rel * std::max(1e-3, std::fabs(double(want[i]))))
        << what << " at " << i << ": fast " << got[i] << " vs simple " << want[i];
  }
}

// Runs `a` and `b` (fast kernels on, after `reset` each time) and requires the n floats at `out`
// to be the same bits; `b` must make `b_launches` launches.
void same_bits(CudaExec& ex, const std::function<void()>& reset, const std::function<void()>& a,
               const std::function<void()>& b, const float* out, int64_t n, const std::string& what,
               int64_t b_launches = 1) {
  kc::Dev<CudaExec> dev(ex);
  reset();
  a();
  const std::vector<float> want = dev.down(out, n);
  reset();
  const int64_t before = ex.counts().launches;
  b();
  const std::vector<float> got = dev.down(out, n);
  ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
  EXPECT_EQ(ex.counts().launches - before, b_launches) << what;
  ASSERT_EQ(std::memcmp(got.data(), want.data(), size_t(n) * sizeof(float)), 0) << what << ": bits differ";
}

std::string shape(std::initializer_list<int64_t> v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& w) {
  std::vector<uint16_t> b(w.size());
  for (size_t i = 0; i < w.size(); ++i) b[i] = f32_to_bf16(w[i]);
  return b;
}

TEST(FastKernelsCuda, GemmMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(41);
  // rows × in × out: 1 row (decode), odd `in` (scalar loads), vector sizes, row tiles 8 + partial.
  for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 8192}, {1, 1, 1}, {1, 37, 19},
                               {7, 131, 33}, {8, 128, 96}, {9, 264, 65}, {70, 256, 130}, {3, 1024, 24}}) {
    const auto x = kc::randn(rng, rows * in), w = kc::randn(rng, out * in, 0.2f);
    const float* dx = dev.up(x);
    for (bool bf16 : {false, true}) {
      const dk::DevWeight dw = bf16 ? dk::DevWeight{nullptr, dev.up(to_bf16(w))} : dk::DevWeight{dev.up(w), nullptr};
      float* y = dev.template zeros<float>(rows * out);
      fast_vs_simple(
          ex, [] {}, [&] { ex.for_each(rows * out, dk::GemmK{dx, in, dw, in, out, y, out}); }, y, rows * out, 1e-6,
          std::string("gemm ") + (bf16 ? "bf16 " : "f32 ") + shape({rows, in, out}));
    }
  }
  // Strided and misaligned rows (the attention output's column groups): x from column 3 of
  // [rows, in + 5], y into columns [out, 2·out) of [rows, 2·out + 1].
  for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{5, 64, 19}, {11, 40, 8}}) {
    const int64_t xs = in + 5, ys = 2 * out + 1;
    const auto xw = kc::randn(rng, rows * xs), w = kc::randn(rng, out * in, 0.2f);
    const float* dx = dev.up(xw) + 3;
    for (bool bf16 : {false, true}) {
      const dk::DevWeight dw = bf16 ? dk::DevWeight{nullptr, dev.up(to_bf16(w))} : dk::DevWeight{dev.up(w), nullptr};
      float* y = dev.template zeros<float>(rows * ys);
      fast_vs_simple(
          ex, [] {}, [&] { ex.for_each(rows * out, dk::GemmK{dx, xs, dw, in, out, y + out, ys}); }, y, rows * ys,
          1e-6, std::string("gemm strided ") + (bf16 ? "bf16 " : "f32 ") + shape({rows, in, out}));
    }
  }
}

// Stored FP8 / FP4 weights (the fast kernels' in-register decode, device_kernels_check_stored.h):
// fast against the simple body on the same bytes, at the load kinds' boundaries (8-code vector
// loads, partial scale blocks, `in` not a multiple of 8: scalar, 128×128 blocks, row tiles) and at
// fixed extreme scales: every block 2^-127 (all products subnormal), 2^-126, or 2^113 (codes < 2).
// Bound per output: the double sums differ only in order, so a float rounding of nearly the same
// double: 1e-6 |simple| + 1e-12 Σ|x·w| (+ one subnormal step).
TEST(FastKernelsCuda, StoredGemmMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(47);
  struct Case {
    QuantFormat f;
    int64_t rows, in, out, block;
    int scale;
  };
  const QuantFormat F8 = QuantFormat::kFp8E4M3, F4 = QuantFormat::kFp4E2M1;
  for (const Case& c : {Case{F8, 1, 1024, 300, 32, -1}, Case{F8, 8, 264, 65, 32, -1}, Case{F8, 9, 37, 19, 32, -1},
                        Case{F8, 3, 520, 40, 128, -1}, Case{F8, 2, 512, 64, 32, 0}, Case{F8, 2, 512, 64, 32, 1},
                        Case{F8, 2, 512, 64, 32, 240}, Case{F4, 1, 1024, 300, 1, -1}, Case{F4, 9, 40, 33, 1, -1},
                        Case{F4, 3, 38, 17, 1, -1}, Case{F4, 2, 512, 64, 1, 0}, Case{F4, 2, 512, 64, 1, 240},
                        Case{F4, 70, 256, 24, 1, -1}}) {
    const testing::StoredQuant q = kc::random_stored(rng, c.f, c.out, c.in, c.block, false, c.scale);
    const std::vector<float> wide = q.widened();
    const auto x = kc::randn(rng, c.rows * c.in);
    const float* dx = dev.up(x);
    const dk::DevWeight w = kc::up_stored(dev, q);
    float* y = dev.template zeros<float>(c.rows * c.out);
    const std::string what = std::string(c.f == F8 ? "fp8 " : "fp4 ") + shape({c.rows, c.in, c.out}) + " scale " +
                             std::to_string(c.scale);
    ex.set_fast_kernels(false);
    ex.for_each(c.rows * c.out, dk::GemmK{dx, c.in, w, c.in, c.out, y, c.out});
    const std::vector<float> want = dev.down(y, c.rows * c.out);
    ex.set_fast_kernels(true);
    const int64_t before = ex.counts().launches;
    ex.for_each(c.rows * c.out, dk::GemmK{dx, c.in, w, c.in, c.out, y, c.out});
    const std::vector<float> got = dev.down(y, c.rows * c.out);
    ex.sync();
    ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
    EXPECT_EQ(ex.counts().launches - before, 1) << what;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        double mag = 0;
        for (int64_t i = 0; i < c.in; ++i) mag += std::fabs(double(x[r * c.in + i]) * wide[o * c.in + i]);
        const double want_v = want[r * c.out + o], got_v = got[r * c.out + o];
        ASSERT_TRUE(std::isfinite(want_v)) << what;
        ASSERT_LE(std::fabs(got_v - want_v), 1e-6 * std::fabs(want_v) + 1e-12 * mag + 1e-44)
            << what << " at (" << r << ", " << o << "): fast " << got_v << " vs simple " << want_v;
      }
  }
  // NaN codes give NaN outputs on the fast path too.
  const testing::StoredQuant q = kc::random_stored(rng, F8, 16, 256, 32, true);
  const std::vector<float> wide = q.widened();
  const auto x = kc::randn(rng, 256);
  float* y = dev.template zeros<float>(16);
  ex.for_each(16, dk::GemmK{dev.up(x), 256, kc::up_stored(dev, q), 256, 16, y, 16});
  const std::vector<float> got = dev.down(y, 16);
  for (int64_t o = 0; o < 16; ++o) {
    bool nan = false;
    for (int64_t i = 0; i < 256; ++i) nan = nan || std::isnan(wide[o * 256 + i]);
    EXPECT_EQ(std::isnan(got[o]), nan) << "fp8 NaN codes, output " << o;
  }
}

// The tiled GEMM (fast_gemm.cu) against the simple body, every weight kind it reads (bf16,
// float32, FP8 32×32 and 128×128 blocks, FP4), at the shapes that decide its paths: row tiles of
// 1 / 2 / 4 / 8 and partial ones (3, 5, 9, 17 rows), outputs not a multiple of its four per warp,
// `in` split over 2 … 8 warps (8192 × 24) or not at all, a last 16-byte step only partly inside
// `in` (1280, 96), a weight row slice from inside a 128-row block, strided x and y. Bound per
// output as StoredGemmMatchesSimple's: exact products summed in double in another order, so
// 1e-6 |simple| + 1e-12 Σ|x·w| + one subnormal step.
TEST(FastKernelsCuda, TiledGemmMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(48);
  enum Kind { kF32, kBf16, kFp8, kFp8Big, kFp4 };
  struct Case {
    Kind kind;
    int64_t rows, in, out;
    int64_t x_pad = 0, y_pad = 0, row0 = 0;  // x, y row strides in + x_pad, out + y_pad; weight rows from row0
  };
  std::vector<Case> cases;
  for (Kind kind : {kF32, kBf16, kFp8, kFp8Big, kFp4}) {
    for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 16, 17}) cases.push_back({kind, rows, 1024, 37});
    // `in` not a multiple of any kind's step, split over at most 2 warps: the staged path (x widened
    // once per block in shared memory) for every kind at tiles of 2 … 8 rows.
    for (int64_t rows : {2, 4, 5, 8, 9, 16}) cases.push_back({kind, rows, 352, 70});
    cases.push_back({kind, 8, 1280, 4102});  // the head's shape at batch 8: no split, partial last group
    cases.push_back({kind, 1, 8192, 24});
    cases.push_back({kind, 9, 8192, 6});
    cases.push_back({kind, 2, 1280, 130});
    cases.push_back({kind, 3, 96, 5});
    cases.push_back({kind, 1, 4096, 1030});
    cases.push_back({kind, 5, 512, 70, 4, 3, kind == kFp8Big ? 120 : 5});
  }
  for (const Case& c : cases) {
    const int64_t all_rows = c.row0 + c.out;
    std::vector<float> wide;
    dk::DevWeight w;
    if (c.kind == kF32 || c.kind == kBf16) {
      wide = kc::randn(rng, all_rows * c.in, 0.2f);
      if (c.kind == kBf16) {
        const std::vector<uint16_t> b = to_bf16(wide);
        for (size_t i = 0; i < b.size(); ++i) wide[i] = bf16_to_f32(b[i]);
        w = dk::DevWeight{nullptr, dev.up(b)};
      } else {
        w = dk::DevWeight{dev.up(wide), nullptr};
      }
    } else {
      const QuantFormat f = c.kind == kFp4 ? QuantFormat::kFp4E2M1 : QuantFormat::kFp8E4M3;
      const testing::StoredQuant q = kc::random_stored(rng, f, all_rows, c.in, c.kind == kFp8Big ? 128 : 32);
      wide = q.widened();
      w = kc::up_stored(dev, q);
    }
    w = w.offset(c.row0 * c.in);
    const int64_t xs = c.in + c.x_pad, ys = c.out + c.y_pad;
    const auto x = kc::randn(rng, c.rows * xs);
    const float* dx = dev.up(x);
    float* y = dev.template zeros<float>(c.rows * ys);
    const dk::GemmK k{dx, xs, w, c.in, c.out, y, ys};
    const std::string what = std::string("tiled gemm kind ") + std::to_string(int(c.kind)) + " " +
                             shape({c.rows, c.in, c.out, c.x_pad, c.y_pad, c.row0});
    ASSERT_NE(fast::gemm_tiled_kind(k), 0) << what << ": the tiled kernel must take this shape";
    ex.set_fast_kernels(false);
    ex.for_each(c.rows * c.out, k);
    const std::vector<float> want = dev.down(y, c.rows * ys);
    ex.set_fast_kernels(true);
    const int64_t before = ex.counts().launches;
    ex.for_each(c.rows * c.out, k);
    const std::vector<float> got = dev.down(y, c.rows * ys);
    ex.sync();
    ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
    EXPECT_EQ(ex.counts().launches - before, 1) << what;
    // The staged path (the default) adds the same terms in the same order as the register path.
    DSV41_CUDA_OK(cudaMemset(y, 0, c.rows * ys * sizeof(float)));
    ASSERT_TRUE(fast::launch_gemm_tiled(c.rows, k, 0, false)) << what;
    DSV41_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> reg = dev.down(y, c.rows * ys);
    ASSERT_EQ(std::memcmp(reg.data(), got.data(), got.size() * sizeof(float)), 0)
        << what << ": staged vs register path bits";
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        double mag = 0;
        for (int64_t i = 0; i < c.in; ++i) mag += std::fabs(double(x[r * xs + i]) * wide[(c.row0 + o) * c.in + i]);
        const double want_v = want[r * ys + o], got_v = got[r * ys + o];
        ASSERT_TRUE(std::isfinite(want_v)) << what;
        ASSERT_LE(std::fabs(got_v - want_v), 1e-6 * std::fabs(want_v) + 1e-12 * mag + 1e-44)
            << what << " at (" << r << ", " << o << "): fast " << got_v << " vs simple " << want_v;
      }
  }
  // Outside its shapes (`in` not a multiple of the unit, misaligned x) it declines: the warp kernel runs.
  const dk::DevWeight wb{nullptr, dev.up(to_bf16(kc::randn(rng, 4 * 36)))};
  const float* dx = dev.up(kc::randn(rng, 2 * 40));
  EXPECT_EQ(fast::gemm_tiled_kind(dk::GemmK{dx, 36, wb, 36, 4, nullptr, 4}), 0);
  EXPECT_EQ(fast::gemm_tiled_kind(dk::GemmK{dx + 1, 40, dk::DevWeight{nullptr, wb.bf16}, 32, 4, nullptr, 4}), 0);
}

// GEMMs whose split-K takes all 8 warps of an output group, in launches with blocks enough for the
// serial split (fast_gemm.cu; wo_a's 8 groups at 2 … 8 rows): every warp forms the 8 parts of its
// outputs in turn over x staged for the block. Against each GEMM on the register path (one warp a
// part), bit for bit, and against the simple body within the tiled test's bound. `in` is 8 steps
// and a half (part 0 takes steps 0 and 8, whose upper lanes are past `in`), `out` 1030 (a partial
// output group and warps past `out` in the last block), 4 GEMMs a launch (132 blocks a row tile);
// rows 2, 3, 4, 5, 8, 9 (a second tile of one row), 16; every weight kind (f32, bf16, FP8 32/128, FP4).
TEST(FastKernelsCuda, SerialSplitGemmEqualsRegisterPath) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(49);
  enum Kind { kF32, kBf16, kFp8, kFp8Big, kFp4 };
  constexpr int64_t kGemms = 4, kOut = 1030;
  for (Kind kind : {kF32, kBf16, kFp8, kFp8Big, kFp4}) {
    const int64_t unit = kind == kF32 ? 4 : kind == kBf16 ? 8 : kind == kFp4 ? 32 : 16;
    const int64_t in = 8 * 32 * unit + 16 * unit;
    std::vector<float> wide;
    dk::DevWeight w;
    if (kind == kF32 || kind == kBf16) {
      wide = kc::randn(rng, kGemms * kOut * in, 0.2f);
      if (kind == kBf16) {
        const std::vector<uint16_t> b = to_bf16(wide);
        for (size_t i = 0; i < b.size(); ++i) wide[i] = bf16_to_f32(b[i]);
        w = dk::DevWeight{nullptr, dev.up(b)};
      } else {
        w = dk::DevWeight{dev.up(wide), nullptr};
      }
    } else {
      const QuantFormat f = kind == kFp4 ? QuantFormat::kFp4E2M1 : QuantFormat::kFp8E4M3;
      const testing::StoredQuant q = kc::random_stored(rng, f, kGemms * kOut, in, kind == kFp8Big ? 128 : 32);
      wide = q.widened();
      w = kc::up_stored(dev, q);
    }
    for (int64_t rows : {2, 3, 4, 5, 8, 9, 16}) {
      const std::string what = "serial split kind " + std::to_string(int(kind)) + " rows " + std::to_string(rows);
      // x: rows of kGemms slices of `in` (as wo_a reads the attention output); y likewise.
      const int64_t xs = kGemms * in, ys = kGemms * kOut;
      const auto x = kc::randn(rng, rows * xs);
      const float* dx = dev.up(x);
      float* y = dev.template zeros<float>(rows * ys);
      dk::Batched<dk::GemmK> b;
      for (int64_t g = 0; g < kGemms; ++g) {
        b.count[b.n] = rows * kOut;
        b.body[b.n++] = dk::GemmK{dx + g * in, xs, w.offset(g * kOut * in), in, kOut, y + g * kOut, ys};
      }
      ASSERT_TRUE(fast::launch(rows * ys, b)) << what;
      DSV41_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> got = dev.down(y, rows * ys);
      DSV41_CUDA_OK(cudaMemset(y, 0, rows * ys * sizeof(float)));
      for (int64_t g = 0; g < kGemms; ++g) ASSERT_TRUE(fast::launch_gemm_tiled(rows, b.body[g], 0, false)) << what;
      DSV41_CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> reg = dev.down(y, rows * ys);
      ASSERT_EQ(std::memcmp(reg.data(), got.data(), got.size() * sizeof(float)), 0)
          << what << ": serial split vs register path bits";
      if (rows != 9) continue;  // the simple body's values, at one shape a kind (host sums are slow)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < ys; ++o) {
          const int64_t g = o / kOut;
          double want = 0, mag = 0;
          for (int64_t i = 0; i < in; ++i) {
            const double t = double(x[r * xs + g * in + i]) * wide[o * in + i];
            want += t;
            mag += std::fabs(t);
          }
          ASSERT_LE(std::fabs(got[r * ys + o] - want), 1e-6 * std::fabs(want) + 1e-12 * mag + 1e-44)
              << what << " at (" << r << ", " << o << ")";
        }
    }
  }
}

// Random inputs hardly show a change of the order of the double sums once a result is rounded to
// float (a part-order mutant of the serial split passed SerialSplitGemmEqualsRegisterPath on the
// H200). Here f32 weights of 2^-20 · N(0, 1) hold pairs of ±2^20 that cancel, their x values made
// equal: between parts (step 0 lane 0 against step 1 lane 3: split-K order) and inside one step
// (lanes 5 and 22: the warp-sum tree). A sum then keeps only the small terms' rounding on the 2^-32
// grid of the large ones, which a float result shows: another order of the parts or of the lanes
// gives other bits. The staged / serial paths (default) against the register path, bit for bit:
// the serial split (4 GEMMs of 8½ steps → 1030, rows 2 and 8) and the staged path with split 2
// (one GEMM of 3 steps → 70, rows 8) and without split (one step of 100 values → 70, rows 4: the
// lane pair only).
TEST(FastKernelsCuda, TiledGemmSumOrderEqualsRegisterPath) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(50);
  struct Case {
    int64_t gemms, rows, in, out;
  };
  constexpr int64_t kWidth = 32 * 4;  // f32: 4 values a lane, 128 a step
  for (const Case& c : {Case{4, 2, 8 * kWidth + 64, 1030}, Case{4, 8, 8 * kWidth + 64, 1030},
                        Case{1, 8, 3 * kWidth, 70}, Case{1, 4, 100, 70}}) {
    const std::string what = "sum order, gemms " + std::to_string(c.gemms) + " rows " + std::to_string(c.rows) +
                             " in " + std::to_string(c.in);
    // Column pairs (a, b) with w[a] = +2^20, w[b] = -2^20 and x[a] = x[b].
    const int64_t lane_step = c.in >= 3 * kWidth ? 2 : 0;  // the step of the lane pair
    std::vector<std::pair<int64_t, int64_t>> pairs = {{lane_step * kWidth + 5 * 4, lane_step * kWidth + 22 * 4 + 2}};
    if (c.in > kWidth + 3 * 4 + 1) pairs.push_back({0, kWidth + 3 * 4 + 1});
    std::vector<float> w = kc::randn(rng, c.gemms * c.out * c.in, 1.0f / 1048576);
    for (int64_t o = 0; o < c.gemms * c.out; ++o)
      for (const auto& [a, b] : pairs) w[o * c.in + a] = 1048576.0f, w[o * c.in + b] = -1048576.0f;
    const int64_t xs = c.gemms * c.in, ys = c.gemms * c.out;
    std::vector<float> x = kc::randn(rng, c.rows * xs);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t g = 0; g < c.gemms; ++g)
        for (const auto& [a, b] : pairs) x[r * xs + g * c.in + b] = x[r * xs + g * c.in + a];
    const dk::DevWeight dw{dev.up(w), nullptr};
    const float* dx = dev.up(x);
    float* y = dev.template zeros<float>(c.rows * ys);
    dk::Batched<dk::GemmK> b;
    for (int64_t g = 0; g < c.gemms; ++g) {
      b.count[b.n] = c.rows * c.out;
      b.body[b.n++] = dk::GemmK{dx + g * c.in, xs, dw.offset(g * c.out * c.in), c.in, c.out, y + g * c.out, ys};
    }
    ASSERT_TRUE(fast::launch(c.rows * ys, b)) << what;
    DSV41_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> got = dev.down(y, c.rows * ys);
    DSV41_CUDA_OK(cudaMemset(y, 0, c.rows * ys * sizeof(float)));
    for (int64_t g = 0; g < c.gemms; ++g) ASSERT_TRUE(fast::launch_gemm_tiled(c.rows, b.body[g], 0, false)) << what;
    DSV41_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> reg = dev.down(y, c.rows * ys);
    for (int64_t i = 0; i < c.rows * ys; ++i)
      ASSERT_EQ(std::memcmp(&reg[i], &got[i], sizeof(float)), 0)
          << what << " at (" << i / ys << ", " << i % ys << "): " << got[i] << " vs register path " << reg[i];
  }
}

// Several GEMMs in one launch (dk::Batched, as wo_a's groups and wq_a + wkv run): wo_a's shape —
// x column slices of one row, weight row slices (FP8 32-blocks), y column slices — at 1 and 5
// rows; bodies of two weight kinds (bf16 + FP8: the tiled kernel takes one kind a launch, so
// each runs alone); and several RMSNorms of different widths in one launch.
TEST(FastKernelsCuda, BatchedGemmsAndNormsMatchSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(49);
  const int64_t groups = 8, gin = 256, olr = 64;
  // Scales 2^0 (code 127): the relative bound then holds per output (the extreme blocks are
  // StoredGemmMatchesSimple's and TiledGemmMatchesSimple's, with Σ|x·w| per output).
  const testing::StoredQuant q = kc::random_stored(rng, QuantFormat::kFp8E4M3, groups * olr, gin, 32, false, 127);
  const dk::DevWeight w = kc::up_stored(dev, q);
  for (int64_t rows : {1, 5}) {
    const float* o = dev.up(kc::randn(rng, rows * groups * gin));
    float* mid = dev.template zeros<float>(rows * groups * olr);
    dk::Batched<dk::GemmK> b;
    int64_t total = 0;
    for (int64_t g = 0; g < groups; ++g) {
      b.count[b.n] = rows * olr;
      b.body[b.n++] = dk::GemmK{o + g * gin, groups * gin, w.offset(g * olr * gin), gin, olr, mid + g * olr, groups * olr};
      total += rows * olr;
    }
    fast_vs_simple(
        ex, [] {}, [&] { ex.for_each(total, b); }, mid, rows * groups * olr, 1e-6,
        "wo_a groups, rows " + std::to_string(rows));
  }
  {  // two kinds
    const int64_t rows = 3, in = 512;
    const float* x = dev.up(kc::randn(rng, rows * in));
    const dk::DevWeight wb{nullptr, dev.up(to_bf16(kc::randn(rng, 40 * in, 0.2f)))};
    const dk::DevWeight w8 = kc::up_stored(dev, kc::random_stored(rng, QuantFormat::kFp8E4M3, 24, in, 32, false, 127));
    float* y = dev.template zeros<float>(rows * 64);
    dk::Batched<dk::GemmK> b;
    b.count[b.n] = rows * 40;
    b.body[b.n++] = dk::GemmK{x, in, wb, in, 40, y, 64};
    b.count[b.n] = rows * 24;
    b.body[b.n++] = dk::GemmK{x, in, w8, in, 24, y + 40, 64};
    fast_vs_simple(
        ex, [] {}, [&] { ex.for_each(rows * 64, b); }, y, rows * 64, 1e-6, "bf16 + fp8 batched");
  }
  {  // norms: q_norm and kv_norm widths, in place
    const int64_t rows = 5, n1 = 1280, n2 = 512;
    const auto x1 = kc::randn(rng, rows * n1, 3.0f), x2 = kc::randn(rng, rows * n2, 3.0f);
    float* d1 = dev.up(x1);
    float* d2 = dev.up(x2);
    const float* w1 = dev.up(kc::randn(rng, n1));
    dk::Batched<dk::RmsNormK> b;
    b.count[b.n] = rows;
    b.body[b.n++] = dk::RmsNormK{d1, n1, w1, 1e-6f, d1};
    b.count[b.n] = rows;
    b.body[b.n++] = dk::RmsNormK{d2, n2, nullptr, 1e-6f, d2};
    const auto reset = [&] {
      ex.upload(d1, x1.data(), rows * n1 * int64_t(sizeof(float)));
      ex.upload(d2, x2.data(), rows * n2 * int64_t(sizeof(float)));
    };
    fast_vs_simple(ex, reset, [&] { ex.for_each(2 * rows, b); }, d1, rows * n1, 1e-6, "batched rmsnorm, first");
    fast_vs_simple(ex, reset, [&] { ex.for_each(2 * rows, b); }, d2, rows * n2, 1e-6, "batched rmsnorm, second");
  }
}

// mHC collapse + RMSNorm in one kernel (dk::CollapseNormChain) against its two simple launches:
// hc 4 × d 1024 (mini-flash), 5120 (the synthetic model) and odd widths, the head's row list,
// with and without a weight.
TEST(FastKernelsCuda, CollapseNormMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(50);
  // (d ≥ 2,048 at ≤ 16 rows: the cluster split of session 22, the synthetic model's 5,120 and an
  // odd width whose last block holds a partial share.)
  for (auto [hc, d, T] : {std::tuple<int, int64_t, int64_t>{4, 1024, 1}, {4, 1024, 9}, {4, 37, 3}, {1, 300, 2},
                          {4, 5120, 1}, {4, 5120, 8}, {4, 2048 + 37, 3}, {2, 8192, 2}, {4, 5120, 17}}) {
    const float* x = dev.up(kc::randn(rng, T * hc * d, 2.0f));
    const float* pre = dev.up(kc::randn(rng, T * hc));
    const float* w = dev.up(kc::randn(rng, d));
    const int64_t* rows = dev.up(std::vector<int64_t>{T - 1, 0});
    for (bool pick : {false, true}) {
      const int64_t n = pick ? 2 : T;
      float* y = dev.template zeros<float>(n * d);
      const dk::CollapseNormChain c{dk::MhcCollapseK{x, pre, pick ? rows : nullptr, hc, d, y},
                                    dk::RmsNormK{y, d, pick ? nullptr : w, 1e-6f, y}, n};
      fast_vs_simple(
          ex, [] {}, [&] { ex.run_chain(c); }, y, n * d, 1e-6,
          "collapse + norm " + shape({hc, d, T}) + (pick ? " rows" : ""));
    }
  }
}

// The inverse RoPE beside the window stores (dk::Both<RopeK, WindowStoreK>, attend_run's fused
// launch) a warp per scale block against the simple one-thread-per-index kernel, bit for bit: the
// rotated rows, the staging copy and the packed FP8 ring records (codes and scale bytes). Two
// jobs (one row into the last of 4 slots, two rows wrapping from slot 2 of 3 to slot 0), D 512
// (the kv row) and 96, a block holding an Inf (codes 0, the NaN scale byte), a block of zeros
// (the scale floor), the RoPE part an odd number of indices (not whole warps).
TEST(FastKernelsCuda, RopeWindowStoreEqualsSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(57);
  for (const int64_t D : {int64_t{512}, int64_t{96}}) {
    const int64_t rows = 3, rec = dk::record_bytes(RowKind::kWindow, D), slots[2] = {4, 3};
    auto src = kc::randn(rng, rows * D, 4.0f);
    src[size_t(2 * D + 37)] = INFINITY;                                 // row 2 (job 1's second), block 1
    for (int64_t c = 64; c < 96; ++c) src[size_t(D + c)] = 0.0f;        // row 1 (job 1's first), block 2
    const float* dsrc = dev.up(src);
    const int64_t heads = 3, dim = 40, rd = 18, half = rd / 2, nrope = 2 * heads * half;  // 54 indices
    const auto x = kc::randn(rng, 2 * heads * dim);
    const float *cs = dev.up(kc::randn(rng, 4 * half)), *sn = dev.up(kc::randn(rng, 4 * half));
    struct Out {
      float* x;
      float* stage;
      uint8_t* ring[2];
    };
    const auto run = [&](bool fast) {
      Out o{dev.up(x), dev.template zeros<float>(rows * D), {}};
      for (int j = 0; j < 2; ++j) o.ring[j] = dev.template zeros<uint8_t>(slots[j] * rec);
      dk::WindowStoreK w;
      w.n = 2;
      w.D = D;
      w.jobs[0] = {dsrc, o.ring[0], slots[0], 3, 1, o.stage};
      w.jobs[1] = {dsrc + D, o.ring[1], slots[1], 2, 2, o.stage + D};
      const dk::RopeK rope{o.x, heads, dim, rd, cs, sn, 1, true};
      ex.set_fast_kernels(fast);
      const int64_t before = ex.counts().launches;
      ex.for_each(nrope + rows * dk::WindowStoreK::blocks(D), dk::Both<dk::RopeK, dk::WindowStoreK>{rope, nrope, w});
      EXPECT_EQ(ex.counts().launches - before, 1);
      return o;
    };
    const Out want = run(false), got = run(true);
    ex.sync();
    ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
    const std::string what = "rope + window store D " + std::to_string(D);
    EXPECT_EQ(dev.down(got.x, 2 * heads * dim), dev.down(want.x, 2 * heads * dim)) << what << ": rope";
    const auto gs = dev.down(got.stage, rows * D), ws = dev.down(want.stage, rows * D);
    EXPECT_EQ(std::memcmp(gs.data(), ws.data(), gs.size() * sizeof(float)), 0) << what << ": staging";
    for (int j = 0; j < 2; ++j) {
      const auto g = dev.down(got.ring[j], slots[j] * rec), wr = dev.down(want.ring[j], slots[j] * rec);
      EXPECT_EQ(g, wr) << what << ": ring of job " << j;
      EXPECT_NE(wr, std::vector<uint8_t>(wr.size(), 0)) << what << ": job " << j << " wrote nothing";
    }
    const auto r1 = dev.down(want.ring[1], slots[1] * rec);  // row 2 went to slot 0: block 1 not finite
    EXPECT_EQ(r1[size_t(D + 1)], 0xFF) << what;
  }
  ex.set_fast_kernels(true);
}

// The router in one kernel (dk::RouterChain) against its three simple launches: mini-flash's 16
// experts top-6 (sqrt-softplus, bias) and 8 top-2 (softmax), the image rows' bias, 1 … 9 tokens.
// Experts must be the same; scores and weights within a float rounding.
TEST(FastKernelsCuda, RouterMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(51);
  struct Case {
    int E, k;
    dk::Scoring scoring;
    int64_t T, d;
    bool image;
    bool ties = false;  // gate and bias zero: every expert scores the same (the lowest indices win)
    bool bf16 = false;  // the gate stored as bf16 (else float)
  };
  // (E ≤ 32 with sqrt-softplus or sigmoid: the warp selection, one expert a lane; E 33 … 256: the
  // warp selection with up to 8 experts a lane — 33 puts a second one on lane 0 alone, 256 is
  // V4.1-Flash's; softmax: one thread. The gate float or bf16, both prefetched.)
  for (const Case& c : {Case{16, 6, dk::Scoring::kSqrtSoftplus, 1, 1024, false}, Case{16, 6, dk::Scoring::kSqrtSoftplus, 9, 1024, true},
                        Case{8, 2, dk::Scoring::kSoftmax, 5, 256, false}, Case{8, 1, dk::Scoring::kSigmoid, 3, 100, false},
                        Case{32, 8, dk::Scoring::kSqrtSoftplus, 4, 64, false}, Case{33, 8, dk::Scoring::kSigmoid, 2, 64, true},
                        Case{16, 6, dk::Scoring::kSqrtSoftplus, 2, 64, false, true},
                        Case{20, 5, dk::Scoring::kSigmoid, 3, 64, true, true},
                        Case{256, 8, dk::Scoring::kSqrtSoftplus, 2, 128, false},
                        Case{64, 8, dk::Scoring::kSqrtSoftplus, 3, 64, true, true},
                        Case{100, 7, dk::Scoring::kSigmoid, 1, 96, true},
                        Case{16, 6, dk::Scoring::kSqrtSoftplus, 1, 1024, false, false, true},
                        // (kRouterAhead: 8 steps a batch — 1,024 floats / 2,048 bf16 a lane row — then
                        // the tail one step at a time: two batches and 32 / 64 more, lanes 0 … 7 only.)
                        Case{16, 6, dk::Scoring::kSqrtSoftplus, 2, 2080, false},
                        Case{16, 6, dk::Scoring::kSqrtSoftplus, 1, 4160, false, false, true},
                        // (Gate rows ≥ 2,048 at ≤ 16 tokens: the cluster split of session 22 — the
                        // synthetic model's 32 × 5,120, an odd width whose last blocks hold nothing,
                        // bf16, the one-block kernel again at 17 tokens.)
                        Case{32, 6, dk::Scoring::kSqrtSoftplus, 1, 5120, false},
                        Case{32, 6, dk::Scoring::kSqrtSoftplus, 8, 5120, true},
                        Case{20, 4, dk::Scoring::kSigmoid, 3, 2056, false, false, true},
                        Case{32, 6, dk::Scoring::kSqrtSoftplus, 2, 2048, false, true},
                        Case{32, 6, dk::Scoring::kSqrtSoftplus, 17, 5120, false}}) {
    const float* h = dev.up(kc::randn(rng, c.T * c.d));
    const std::vector<float> gate_f =
        c.ties ? std::vector<float>(size_t(c.E * c.d), 0.0f) : kc::randn(rng, c.E * c.d, 0.05f);
    const dk::DevWeight gate = c.bf16 ? dk::DevWeight{nullptr, dev.up(to_bf16(gate_f))} : dk::DevWeight{dev.up(gate_f), nullptr};
    const float* bias = dev.up(c.ties ? std::vector<float>(size_t(c.E), 0.0f) : kc::randn(rng, c.E, 0.1f));
    const float* bias_vl = dev.up(c.ties ? std::vector<float>(size_t(c.E), 0.0f) : kc::randn(rng, c.E, 0.1f));
    std::vector<uint8_t> img(c.T);
    for (int64_t t = 0; t < c.T; ++t) img[t] = uint8_t(t % 2);
    const uint8_t* is_image = dev.up(img);
    float* out = dev.template zeros<float>(c.T * (c.E + c.k));  // scores, then weights
    int32_t* experts = dev.template zeros<int32_t>(c.T * c.k);
    const dk::RouterChain chain{
        dk::GemmK{h, c.d, gate, c.d, c.E, out, c.E}, dk::ScaleK{out, 1.3f, true},
        dk::RouteK{out, bias, c.E, c.k, c.scoring, true, 1.5f, experts, out + c.T * c.E, c.image ? bias_vl : nullptr,
                   c.image ? is_image : nullptr},
        c.T};
    const std::string what = "router " + shape({c.E, c.k, int64_t(c.scoring), c.T, c.d}) + (c.image ? " image" : "") +
                             (c.bf16 ? " bf16" : "");
    ex.set_fast_kernels(false);
    ex.run_chain(chain);
    const std::vector<int32_t> want = dev.down(experts, c.T * c.k);
    if (c.ties)
      for (int64_t i = 0; i < c.T * c.k; ++i) EXPECT_EQ(want[size_t(i)], i % c.k) << "simple router, ties";
    fast_vs_simple(ex, [] {}, [&] { ex.run_chain(chain); }, out, c.T * (c.E + c.k), 1e-6, what);
    EXPECT_EQ(dev.down(experts, c.T * c.k), want) << what;
  }
}

// The Engram gate one block per (token, stream) against its simple body: mini-flash's 4 × 1024,
// an odd width, 1 and 5 tokens.
TEST(FastKernelsCuda, EngramGateMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(52);
  for (auto [hc, d, T] : {std::tuple<int, int64_t, int64_t>{4, 1024, 1}, {4, 1024, 5}, {2, 37, 3}}) {
    const float* x = dev.up(kc::randn(rng, T * hc * d));
    const float* kv = dev.up(kc::randn(rng, T * (hc + 1) * d));
    const float* qw = dev.up(kc::randn(rng, hc * d));
    const float* kw = dev.up(kc::randn(rng, hc * d));
    float* gate = dev.template zeros<float>(T * hc);
    fast_vs_simple(
        ex, [] {}, [&] { ex.for_each(T * hc, dk::EngramGateK{x, kv, qw, kw, hc, d, 1e-6f, gate}); }, gate, T * hc, 1e-6,
        "engram gate " + shape({hc, d, T}));
  }
}

TEST(FastKernelsCuda, RmsNormMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(42);
  // (kStagedNorm: rows of up to 2,048 with every element loaded at once — 1,280 the q norm's, 2,048
  // 8 a thread —, 2,049 the loop.)
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 256}, {5, 7}, {3, 1031}, {300, 128}, {2, 1280},
                         {1, 2048}, {2, 2049}}) {
    const auto x = kc::randn(rng, rows * n, 3.0f), w = kc::randn(rng, n);
    float* dx = dev.up(x);
    const float* dw = dev.up(w);
    for (bool weight : {false, true}) {  // in place, as the backend runs it
      fast_vs_simple(
          ex, [&] { ex.upload(dx, x.data(), rows * n * int64_t(sizeof(float))); },
          [&] { ex.for_each(rows, dk::RmsNormK{dx, n, weight ? dw : nullptr, 1e-6f, dx}); }, dx, rows * n, 1e-6,
          "rmsnorm " + shape({rows, n}) + (weight ? " weighted" : ""));
    }
  }
}

TEST(FastKernelsCuda, MhcCoefficientsMatchSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(43);
  // (hc 4: the 512-thread kernel, flat 96 … 4096, or with the partials scratch and few tokens the
  // mix split over blocks — S = min(64, flat / 64, 128 / tokens) slices: flat 128 (2 slices, the
  // least split), flat 64 (1: not split), flat 4,096 = mini-flash's at 1 token (64 slices of 64), 3
  // tokens (42 of 98, the last 78) and 8 tokens (16), flat 4,100 (64 slices, the last of 5),
  // 8,192 × 2 (64 of 128), 16,384 × 1 and × 8, 4,000 × 2 (62 of 65, the last 35); other hc: the
  // general one. Flat above 10,240 with slices in multiples of 8: r_t by clusters of 8 — 16,384 × 1
  // and × 8, the synthetic model's 20,480 × 1, 10,400 × 4 (32 slices); 20,480 × 3 (42 slices) not.)
  double* partials = dev.template zeros<double>(8 * dk::MhcCoeffChain::kMhcPartials);
  for (auto [hc, dim, T] : {std::tuple<int, int64_t, int64_t>{4, 256, 1}, {4, 24, 9}, {1, 7, 3}, {8, 33, 2}, {4, 256, 70},
                            {4, 1024, 3}, {4, 33, 2}, {2, 64, 3}, {4, 4096, 1}, {4, 4096, 8}, {4, 1000, 2},
                            {4, 4096, 9}, {4, 32, 1}, {4, 16, 1}, {4, 1024, 1}, {4, 1024, 8}, {4, 1025, 1},
                            {4, 2048, 2}, {4, 5120, 1}, {4, 2600, 4}, {4, 5120, 3}}) {
    const int64_t flat = hc * dim, mix = (2 + hc) * hc;
    const auto x = kc::randn(rng, T * flat), fn = kc::randn(rng, mix * flat, 0.1f), base = kc::randn(rng, mix);
    const std::vector<float> scale = {0.7f, 1.3f, 0.9f};
    const float *dx = dev.up(x), *dfn = dev.up(fn), *dbase = dev.up(base), *dscale = dev.up(scale);
    // pre, post, comb and the rsqrt scratch side by side in one output buffer.
    const int64_t n = T * (hc + hc + hc * hc + 1);
    float* outb = dev.template zeros<float>(n);
    float *pre = outb, *post = pre + T * hc, *comb = post + T * hc, *r = comb + T * hc * hc;
    float* m = dev.template zeros<float>(T * mix);
    const dk::MhcCoeffChain c{dk::MhcRsqrtK{dx, flat, 1e-6f, r}, dk::MhcMixK{dx, r, dfn, flat, mix, m},
                              dk::MhcFinishK{m, dbase, dscale, hc, 20, 1e-6f, pre, post, comb}, T, partials, 8};
    fast_vs_simple(
        ex, [] {}, [&] { ex.run_chain(c); }, outb, n, 1e-5, "mhc coefficients " + shape({hc, dim, T}));
  }
}

// The mHC expand in front of the split coefficient kernel (dk::ExpandCoeffChain) against the
// expand launch followed by the coefficient chain: the same bits for the expanded streams, pre,
// post, comb and the rsqrt. mini-flash's flat 4,096 at 1 and 8 tokens (64 and 16 slices), flat 4,000
// (a shorter last slice), 9 tokens and hc 8 (the fused kernel declines: the two launches), 2 tokens
// of flat 1,024, flat 4,100 (64 slices, the last of 5; the token's last 4 values formed one at a
// time by threads 0 … 3 after the batched groups of 8; at 4,000 threads ≥ 160 take that tail one
// group early), flat 128 (2 slices, only the one-at-a-time tail), flat 64 (1 slice: declined).
TEST(FastKernelsCuda, ExpandCoefficientsEqualSeparate) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(46);
  double* partials = dev.template zeros<double>(8 * dk::MhcCoeffChain::kMhcPartials);
  for (auto [hc, dim, T, fused] : {std::tuple<int, int64_t, int64_t, bool>{4, 1024, 1, true}, {4, 1024, 8, true},
                                   {4, 1000, 3, true}, {4, 256, 2, true}, {4, 1024, 9, false}, {8, 64, 2, false},
                                   {4, 1025, 1, true}, {4, 32, 1, true}, {4, 16, 1, false}}) {
    const int64_t flat = hc * dim, mix = (2 + hc) * hc;
    const float* a = dev.up(kc::randn(rng, T * dim));
    const float* x = dev.up(kc::randn(rng, T * flat));
    const float* post_in = dev.up(kc::randn(rng, T * hc));
    const float* comb_in = dev.up(kc::randn(rng, T * hc * hc, 0.5f));
    const auto fn = kc::randn(rng, mix * flat, 0.1f), base = kc::randn(rng, mix);
    const std::vector<float> scale = {0.7f, 1.3f, 0.9f};
    const float *dfn = dev.up(fn), *dbase = dev.up(base), *dscale = dev.up(scale);
    // The expanded streams, then pre, post, comb and the rsqrt, side by side in one buffer.
    const int64_t n = T * (flat + hc + hc + hc * hc + 1);
    float* outb = dev.template zeros<float>(n);
    float *x2 = outb, *pre = x2 + T * flat, *post = pre + T * hc, *comb = post + T * hc, *r = comb + T * hc * hc;
    float* m = dev.template zeros<float>(T * mix);
    const dk::MhcExpandK expand{a, x, post_in, comb_in, hc, dim, x2};
    const dk::MhcCoeffChain c{dk::MhcRsqrtK{x2, flat, 1e-6f, r}, dk::MhcMixK{x2, r, dfn, flat, mix, m},
                              dk::MhcFinishK{m, dbase, dscale, hc, 20, 1e-6f, pre, post, comb}, T, partials, 8};
    const std::string what = "expand + mhc coefficients " + shape({hc, dim, T});
    const auto poison = [&] { ex.upload(outb, std::vector<float>(size_t(n), NAN).data(), n * int64_t(sizeof(float))); };
    same_bits(
        ex, poison,
        [&] {
          ex.for_each(T * flat, expand);
          ex.run_chain(c);
        },
        [&] { ex.run_chain(dk::ExpandCoeffChain{expand, c}); }, outb, n, what, fused ? 1 : 2);
  }
}

TEST(FastKernelsCuda, ExpertsMatchSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(44);
  const int E = 5;
  for (auto [T, k, d, inter, lim] : {std::tuple<int64_t, int, int64_t, int64_t, float>{1, 2, 256, 96, 10.0f},
                                     {7, 2, 31, 5, 0.0f}, {3, 1, 40, 33, 1.0f}, {70, 3, 64, 96, 1.0f}}) {
    std::vector<dk::ExpertW> table;
    for (int e = 0; e <= E; ++e) {
      const auto w1 = kc::randn(rng, inter * d, 0.3f), w3 = kc::randn(rng, inter * d, 0.3f),
                 w2 = kc::randn(rng, d * inter, 0.3f);
      if (e % 2)
        table.push_back({{dev.up(w1), nullptr}, {dev.up(w3), nullptr}, {dev.up(w2), nullptr}});
      else
        table.push_back({{nullptr, dev.up(to_bf16(w1))}, {nullptr, dev.up(to_bf16(w3))}, {nullptr, dev.up(to_bf16(w2))}});
    }
    const dk::ExpertW* dt = dev.up(table);
    const dk::ExpertW* ds = dt + E;
    std::vector<int32_t> experts(T * k);
    for (int64_t i = 0; i < T * k; ++i) experts[i] = int32_t((i * 3 + i / k) % E);
    const auto x = kc::randn(rng, T * d), wts = kc::randn(rng, T * k);
    const float *dx = dev.up(x), *dw = dev.up(wts);
    const int32_t* dexp = dev.up(experts);
    float* h = dev.template zeros<float>(T * k * inter);
    float* hs = dev.template zeros<float>(T * inter);
    float* y = dev.template zeros<float>(T * d);
    const std::string s = shape({T, k, d, inter}) + " lim " + std::to_string(lim);
    fast_vs_simple(
        ex, [] {}, [&] { ex.for_each(T * k * inter, dk::ExpertUpK{dx, dt, dexp, dw, k, d, inter, lim, h}); }, h,
        T * k * inter, 1e-6, "expert up " + s);
    fast_vs_simple(
        ex, [] {}, [&] { ex.for_each(T * inter, dk::ExpertUpK{dx, ds, nullptr, nullptr, 1, d, inter, lim, hs}); },
        hs, T * inter, 1e-6, "shared expert up " + s);
    for (bool shared : {false, true})
      fast_vs_simple(
          ex, [] {},
          [&] {
            ex.for_each(T * d, dk::ExpertDownK{dt, dexp, k, d, inter, h, shared ? ds : nullptr, inter, hs, y});
          },
          y, T * d, 1e-6, "expert down " + s + (shared ? " + shared" : ""));
  }
}

// The fused expert launches against the separate ones (same bits) and the simple bodies (a float
// rounding): the routed and shared up projections as one dk::Batched launch, and the down
// projection + mHC expand as one kernel (dk::DownExpandChain). Shapes: mini-flash (d 1024, inter
// 512, top-6 + shared, FP4 experts, hc 4) at 1 and 3 tokens; 9 experts + shared (more experts
// than the block's 8 warps), d 31 (a partial group of 4 columns), no shared expert, 70 tokens,
// bf16 / f32 tables, hc 1.
TEST(FastKernelsCuda, FusedExpertsEqualSeparate) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(45);
  const int E = 12;
  struct Shape {
    int64_t T;
    int k;
    int64_t d, inter;
    int hc;
    bool fp4, shared;
  };
  for (const Shape& c : {Shape{1, 6, 1024, 512, 4, true, true}, Shape{3, 6, 1024, 512, 4, true, true},
                         Shape{2, 9, 64, 40, 4, false, true}, Shape{7, 2, 31, 5, 2, false, true},
                         Shape{70, 3, 64, 96, 1, false, false}}) {
    std::vector<dk::ExpertW> table;
    for (int e = 0; e <= E; ++e) {
      if (c.fp4) {
        const auto w = [&](int64_t rows, int64_t in) {
          return kc::up_stored(dev, kc::random_stored(rng, QuantFormat::kFp4E2M1, rows, in, 1, false, 124));
        };
        table.push_back({w(c.inter, c.d), w(c.inter, c.d), w(c.d, c.inter)});
        continue;
      }
      const auto w1 = kc::randn(rng, c.inter * c.d, 0.3f), w3 = kc::randn(rng, c.inter * c.d, 0.3f),
                 w2 = kc::randn(rng, c.d * c.inter, 0.3f);
      if (e % 2)
        table.push_back({{dev.up(w1), nullptr}, {dev.up(w3), nullptr}, {dev.up(w2), nullptr}});
      else
        table.push_back({{nullptr, dev.up(to_bf16(w1))}, {nullptr, dev.up(to_bf16(w3))}, {nullptr, dev.up(to_bf16(w2))}});
    }
    const dk::ExpertW* dt = dev.up(table);
    const dk::ExpertW* ds = c.shared ? dt + E : nullptr;
    const int64_t T = c.T, k = c.k, d = c.d, inter = c.inter, hc = c.hc;
    std::vector<int32_t> experts(T * k);
    for (int64_t i = 0; i < T * k; ++i) experts[i] = int32_t((i * 5 + i / k) % E);
    const float* dx = dev.up(kc::randn(rng, T * d));
    const float* dw = dev.up(kc::randn(rng, T * k));
    const int32_t* dexp = dev.up(experts);
    float* h = dev.template zeros<float>(T * k * inter);
    float* hs = dev.template zeros<float>(T * inter);
    const dk::ExpertUpK up{dx, dt, dexp, dw, int(k), d, inter, 10.0f, h};
    const dk::ExpertUpK sup{dx, ds, nullptr, nullptr, 1, d, inter, 10.0f, hs};
    dk::Batched<dk::ExpertUpK> ups;
    ups.count[ups.n] = T * k * inter;
    ups.body[ups.n++] = up;
    if (c.shared) {
      ups.count[ups.n] = T * inter;
      ups.body[ups.n++] = sup;
    }
    const int64_t nup = T * k * inter + (c.shared ? T * inter : 0);
    const std::string s = shape({T, k, d, inter, hc}) + (c.fp4 ? " fp4" : "") + (c.shared ? " + shared" : "");
    const auto separate_up = [&] {
      ex.for_each(T * k * inter, up);
      if (c.shared) ex.for_each(T * inter, sup);
    };
    same_bits(ex, [] {}, separate_up, [&] { ex.for_each(nup, ups); }, h, T * k * inter, "batched up, routed " + s);
    if (c.shared) same_bits(ex, [] {}, separate_up, [&] { ex.for_each(nup, ups); }, hs, T * inter, "batched up, shared " + s);
    fast_vs_simple(ex, [] {}, [&] { ex.for_each(nup, ups); }, h, T * k * inter, 1e-6, "batched up vs simple " + s);
    // Down + expand: h and hs as the up projections left them.
    const float* x = dev.up(kc::randn(rng, T * hc * d));
    const float* post = dev.up(kc::randn(rng, T * hc));
    const float* comb = dev.up(kc::randn(rng, T * hc * hc));
    float* a = dev.template zeros<float>(T * d);
    float* out = dev.template zeros<float>(T * hc * d);
    const dk::ExpertDownK down{dt, dexp, int(k), d, inter, h, ds, inter, hs, a};
    const dk::MhcExpandK expand{a, x, post, comb, int(hc), d, out};
    const dk::DownExpandChain chain{down, expand, T};
    const auto separate = [&] {
      ex.for_each(T * d, down);
      ex.for_each(T * hc * d, expand);
    };
    same_bits(ex, [] {}, separate, [&] { ex.run_chain(chain); }, a, T * d, "down " + s);
    same_bits(ex, [] {}, separate, [&] { ex.run_chain(chain); }, out, T * hc * d, "down + expand " + s);
    // (Against the simple bodies the down sums differ by a float rounding; the expand after them is
    // the same body either way, so only the down output is compared.)
    fast_vs_simple(ex, [] {}, [&] { ex.run_chain(chain); }, a, T * d, 1e-6, "down vs simple " + s);
  }
}

// The selected (main) rows of an attention test on the device: NVFP4 records of them (the
// backend's mirrors; the kernels decode them on read) where D is whole blocks, else float rows.
inline dk::KeyRows main_rows(kc::Dev<CudaExec>& dev, const std::vector<float>& main, int64_t D) {
  if (D % 16 != 0) return dk::KeyRows::floats(dev.up(main), D);
  return dk::KeyRows::records(dev.up(kc::pack_rows(RowKind::kMain, main, D)), RowKind::kMain, D);
}

TEST(FastKernelsCuda, SinkAttentionMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(45);
  // T × H × D, window, top-k, start, floor, main rows G. The last case: a long top-k (L = 1,264).
  struct Case {
    int64_t T, H, D, win, k, start, floor, G;
  };
  for (const Case& c : {Case{1, 4, 128, 64, 64, 300, 0, 150}, Case{1, 1, 16, 6, 4, 0, 0, 3},
                        Case{6, 3, 130, 8, 5, 20, 17, 10}, Case{40, 4, 128, 64, 64, 70, 0, 40},
                        Case{3, 2, 33, 5, 0, 9, 0, 0}, Case{2, 4, 128, 64, 1200, 1500, 0, 1300}}) {
    const int64_t first = std::max(c.floor, c.start - (c.win - 1)), nkeys = c.start + c.T - first;
    const auto keys = kc::randn(rng, nkeys * c.D), q = kc::randn(rng, c.T * c.H * c.D, 0.3f);
    const auto main = kc::randn(rng, std::max<int64_t>(c.G, 1) * c.D), sink = kc::randn(rng, c.H);
    std::vector<int32_t> topk(std::max<int64_t>(c.T * c.k, 1), -1);
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.k && c.G > 0; ++j)
        topk[i * c.k + j] = (j % 7 == 3) ? -1 : int32_t((i * 13 + j * 5) % c.G);  // some absent slots
    const int64_t L = c.win + c.k;
    dk::AttnGeom g{c.T, c.H, c.D, L, c.start, c.win, c.floor, first, c.k, dev.up(keys),
                   c.k ? main_rows(dev, main, c.D) : dk::KeyRows{}, c.k ? dev.up(topk) : nullptr};
    float* logits = dev.template zeros<float>(c.T * c.H * L);
    float* o = dev.template zeros<float>(c.T * c.H * c.D);
    const float* dq = dev.up(q);
    const float* dsink = dev.up(sink);
    const float scaling = 1.0f / std::sqrt(float(c.D));
    const dk::AttnChain chain{dk::AttnLogitsK{g, dq, scaling, logits}, dk::AttnSoftmaxK{g, dsink, logits},
                              dk::AttnValuesK{g, logits, o}};
    fast_vs_simple(
        ex, [] {}, [&] { ex.run_chain(chain); }, o, c.T * c.H * c.D, 1e-6,
        "sink attention " + shape({c.T, c.H, c.D, c.win, c.k, c.start, c.floor}));
  }
}

// Several segments' attention in one launch (dk::AttnBatch) against their simple chains: segments
// of different shapes (1 and 40 rows, D 16 / 33 / 128 / 130, windows cut at a floor, no top-k,
// absent slots), half of them reading their window from a ring in place; one job alone; the
// largest batch (kMax jobs of one row each, as a decode step of many sequences).
TEST(FastKernelsCuda, SinkAttentionBatchMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(46);
  struct Case {
    int64_t T, H, D, win, k, start, floor, G;
    bool ring;
  };
  const std::vector<Case> mixed = {Case{1, 4, 128, 64, 64, 300, 0, 150, true}, Case{1, 1, 16, 6, 4, 0, 0, 3, false},
                                   Case{6, 3, 130, 8, 5, 20, 17, 10, true},    Case{40, 4, 128, 64, 64, 70, 0, 40, false},
                                   Case{3, 2, 33, 5, 0, 9, 0, 0, true},        Case{2, 4, 128, 64, 64, 5, 0, 1, true}};
  std::vector<Case> decode;
  for (int j = 0; j < dk::AttnBatch::kMax; ++j)
    decode.push_back(Case{1, 4, 128, 64, 64, 100 + 37 * j, 0, 25 + 9 * j, j % 2 == 0});
  for (const std::vector<Case>& cases : {mixed, std::vector<Case>{mixed[2]}, decode}) {
    const int64_t H = cases[0].H;
    int64_t outs = 0, scratch = 0;
    for (Case c : cases) {
      c.H = H;
      outs += c.T * H * c.D;
      scratch += c.T * H * (c.win + c.k);
    }
    float* o = dev.template zeros<float>(outs);
    float* logits = dev.template zeros<float>(scratch);
    dk::AttnBatch b;
    b.sink = dev.up(kc::randn(rng, H));
    b.scaling = 0.09f;
    int64_t at_o = 0, at_l = 0;
    for (Case c : cases) {
      c.H = H;
      const int64_t first = std::max(c.floor, c.start - (c.win - 1)), nkeys = c.start + c.T - first;
      const auto keys = kc::randn(rng, nkeys * c.D), q = kc::randn(rng, c.T * H * c.D, 0.3f);
      const auto main = kc::randn(rng, std::max<int64_t>(c.G, 1) * c.D);
      std::vector<int32_t> topk(std::max<int64_t>(c.T * c.k, 1), -1);
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t j = 0; j < c.k && c.G > 0; ++j) topk[i * c.k + j] = (j % 7 == 3) ? -1 : int32_t((i * 13 + j * 5) % c.G);
      const int64_t L = c.win + c.k;
      dk::AttnGeom g{c.T, H, c.D, L, c.start, c.win, c.floor, first, c.k, dev.up(keys),
                     c.k ? main_rows(dev, main, c.D) : dk::KeyRows{}, c.k ? dev.up(topk) : nullptr};
      if (c.ring) {  // positions before start in slot p mod slots (slots ≥ window), the rest apart
        const int64_t slots = c.win + 3;
        std::vector<float> ring(slots * c.D, NAN);
        for (int64_t p = first; p < c.start; ++p)
          std::copy_n(keys.data() + (p - first) * c.D, c.D, ring.data() + (p % slots) * c.D);
        g.keys = nullptr;
        // FP8 records (the backend's ring copies) where D is whole blocks, else float rows.
        g.ring = c.D % 32 == 0 ? dk::KeyRows::records(dev.up(kc::pack_rows(RowKind::kWindow, ring, c.D)),
                                                      RowKind::kWindow, c.D)
                               : dk::KeyRows::floats(dev.up(ring), c.D);
        g.slots = slots;
        g.fresh = dev.up(std::vector<float>(keys.begin() + (c.start - first) * c.D, keys.end()));
      }
      b.jobs[b.n++] = {g, dev.up(q), logits + at_l, o + at_o};
      at_o += c.T * H * c.D;
      at_l += c.T * H * L;
    }
    fast_vs_simple(
        ex, [] {}, [&] { ex.run_chain(b); }, o, outs, 1e-6, "sink attention batch of " + std::to_string(b.n));
  }
}

// The DSpark drafter's block attention (dk::DraftAttnChain: one block per (block row, head))
// against its simple bodies: requests whose rings are empty, shorter than the longest (absent
// slots past them), wrapped around their slots and cut at a low bound; FP8 record rings (D whole
// blocks) and float rings (D = 33, scalar); one request of one block row; a batch of 16 requests.
TEST(FastKernelsCuda, DraftAttentionMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(47);
  struct Case {
    int64_t requests, B, H, D, window;
  };
  for (const Case& c : {Case{1, 5, 4, 128, 64}, Case{3, 5, 4, 128, 64}, Case{1, 1, 1, 32, 4}, Case{4, 3, 2, 33, 9},
                        Case{16, 5, 4, 128, 64}, Case{2, 5, 3, 64, 200}}) {
    const int64_t R = c.requests * c.B, slots = c.window + 5;
    std::vector<dk::DraftRing> rings;
    int64_t longest = 0;
    for (int64_t i = 0; i < c.requests; ++i) {
      // Ring lengths: empty, short, full (wrapped: lo past the slots), the window cut at lo.
      const int64_t n = i % 4 == 0 ? (i == 0 && c.requests > 1 ? 0 : c.window) : (i * 7) % (c.window + 1);
      const int64_t lo = 3 * slots + 11 * i;
      const auto rows = kc::randn(rng, slots * c.D);
      const dk::KeyRows kr = c.D % 32 == 0
                                 ? dk::KeyRows::records(dev.up(kc::pack_rows(RowKind::kWindow, rows, c.D)),
                                                        RowKind::kWindow, c.D)
                                 : dk::KeyRows::floats(dev.up(rows), c.D);
      rings.push_back({kr, slots, lo, n});
      longest = std::max(longest, n);
    }
    const int64_t L = longest + c.B;
    const dk::DraftAttnGeom g{dev.up(rings), c.B, c.H, c.D, L, dev.up(kc::randn(rng, R * c.D))};
    const float* q = dev.up(kc::randn(rng, R * c.H * c.D, 0.3f));
    const float* sink = dev.up(kc::randn(rng, c.H));
    float* logits = dev.template zeros<float>(R * c.H * L);
    float* o = dev.template zeros<float>(R * c.H * c.D);
    dk::DraftAttnChain chain{dk::DraftAttnLogitsK{g, q, 1.0f / std::sqrt(float(c.D)), logits},
                             dk::DraftAttnSoftmaxK{g, sink, logits}, dk::DraftAttnValuesK{g, logits, o}, R};
    const std::string what = "draft attention " + shape({c.requests, c.B, c.H, c.D, c.window});
    for (bool staged : {false, true}) {
      chain.keys_in_shared = staged;
      fast_vs_simple(
          ex, [] {}, [&] { ex.run_chain(chain); }, o, R * c.H * c.D, 1e-6, what + (staged ? " staged" : ""));
    }
    // The keys staged in shared memory: the same values in the same order as decoding them again.
    dk::DraftAttnChain unstaged = chain;
    unstaged.keys_in_shared = false;
    ex.set_fast_kernels(true);
    same_bits(
        ex, [] {}, [&] { ex.run_chain(unstaged); }, [&] { ex.run_chain(chain); }, o, R * c.H * c.D,
        what + " staged vs not");
  }
}

// A greedy draft slot on the device (dk::DraftSlotChain: the Markov bias over many blocks, the
// argmax one block per request) against its simple bodies, slot after slot (each slot's bias
// follows the previous pick): the biased logits and the picks bit for bit; requests wanting fewer
// slots, ties (a repeated maximum must pick the lower id), NaN entries (skipped) and an all-NaN
// row (−1, and no bias after it).
TEST(FastKernelsCuda, DraftSlotMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(48);
  for (const int64_t V : {int64_t(8192), int64_t(37), int64_t(1000)}) {
    const int64_t n = 5, B = 5, r = 16;
    const std::vector<int32_t> wanted = {5, 1, 3, 5, 2};
    std::vector<int32_t> head_rows = {0};
    for (int32_t w : wanted) head_rows.push_back(head_rows.back() + w);
    const int64_t want = head_rows.back();
    auto logits = kc::randn(rng, want * V);
    // Request 1 (one slot, anchor V − 1 with a zero embedding): a repeated maximum, ties to the lower
    // id; request 2: NaN entries; request 4's slot 0: all NaN.
    logits[size_t(head_rows[1] * V + V / 3)] = 50.0f;
    logits[size_t(head_rows[1] * V + V / 2)] = 50.0f;
    for (int64_t v = 0; v < V; v += 3) logits[size_t(head_rows[2] * V + v)] = NAN;
    for (int64_t v = 0; v < V; ++v) logits[size_t(head_rows[4] * V + v)] = NAN;
    const std::vector<int32_t> anchors = {1, int32_t(V - 1), 0, 7, 3};
    auto embed_rows = kc::randn(rng, V * r);
    std::fill_n(embed_rows.begin() + (V - 1) * r, r, 0.0f);  // request 1's anchor: no bias, so its tie stays
    const float* embed = dev.up(embed_rows);
    const float* head = dev.up(kc::randn(rng, V * r, 0.05f));
    float* dlogits = dev.up(logits);
    int32_t* ids = dev.template zeros<int32_t>(n * B);
    dk::DraftSlot slot{embed, head, dev.up(anchors), dev.up(head_rows), V, r, B, 0, dlogits, ids};
    std::vector<float> got_l[2];
    std::vector<int32_t> got_ids[2];
    for (int fast = 0; fast < 2; ++fast) {
      ex.set_fast_kernels(fast == 1);
      ex.copy(dlogits, dev.up(logits), want * V * int64_t(sizeof(float)));
      ex.copy(ids, dev.template zeros<int32_t>(n * B), n * B * int64_t(sizeof(int32_t)));
      for (int j = 0; j < B; ++j) {
        slot.j = j;
        ex.run_chain(dk::DraftSlotChain{dk::DraftMarkovK{slot}, dk::DraftPickK{slot}, n});
      }
      got_l[fast] = dev.down(dlogits, want * V);
      got_ids[fast] = dev.down(ids, n * B);
      ex.sync();
      ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
    }
    EXPECT_EQ(got_ids[0], got_ids[1]) << "V " << V;
    EXPECT_EQ(got_ids[1][size_t(1 * B)], int32_t(V / 3)) << "V " << V << ": a tie must pick the lower id";
    EXPECT_EQ(got_ids[1][size_t(4 * B)], -1) << "V " << V << ": an all-NaN row picks nothing";
    int differ = 0;
    for (int64_t i = 0; i < want * V; ++i)
      differ += std::memcmp(&got_l[0][size_t(i)], &got_l[1][size_t(i)], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0) << "V " << V;
  }
}

// Every greedy slot in one launch (dk::DraftSlotsChain: a cluster of blocks per request) against
// the slots one by one, simple bodies and fast kernels (two launches a slot): the picks and the
// biased logits bit for bit. Vocabularies below, at and past the cluster's 8,192 threads and
// several strides of them; requests wanting 5, 1, 3, 5 and 2 slots (and one request alone
// wanting 4, then none); a tie, NaN entries, an all-NaN row as in DraftSlotMatchesSimple.
TEST(FastKernelsCuda, DraftSlotsInOneLaunchMatchSlotBySlot) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(49);
  struct Case {
    int64_t V;
    std::vector<int32_t> wanted;
  };
  const std::vector<int32_t> mixed = {5, 1, 3, 5, 2};
  for (const Case& c : {Case{8192, mixed}, Case{37, mixed}, Case{8191, mixed}, Case{8193, mixed}, Case{20000, mixed},
                        Case{1000, {4}}, Case{1000, {0, 3}}}) {
    const int64_t V = c.V, n = int64_t(c.wanted.size()), B = 5, r = 16;
    std::vector<int32_t> head_rows = {0};
    for (int32_t w : c.wanted) head_rows.push_back(head_rows.back() + w);
    const int64_t want = head_rows.back();
    auto logits = kc::randn(rng, want * V);
    std::vector<int32_t> anchors(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) anchors[size_t(i)] = int32_t((7 * i + 1) % V);
    auto embed_rows = kc::randn(rng, V * r);
    if (n == 5) {  // the cases of DraftSlotMatchesSimple: a tie (no bias: a zero anchor row), NaNs, all NaN
      anchors[1] = int32_t(V - 1);
      std::fill_n(embed_rows.begin() + (V - 1) * r, r, 0.0f);
      logits[size_t(head_rows[1] * V + V / 3)] = 50.0f;
      logits[size_t(head_rows[1] * V + V / 2)] = 50.0f;
      for (int64_t v = 0; v < V; v += 3) logits[size_t(head_rows[2] * V + v)] = NAN;
      for (int64_t v = 0; v < V; ++v) logits[size_t(head_rows[4] * V + v)] = NAN;
    }
    const float* embed = dev.up(embed_rows);
    const float* head = dev.up(kc::randn(rng, V * r, 0.05f));
    float* dlogits = dev.up(logits);
    int32_t* ids = dev.template zeros<int32_t>(n * B);
    const dk::DraftSlot slot{embed, head, dev.up(anchors), dev.up(head_rows), V, r, B, 0, dlogits, ids};
    const std::string what = "V " + std::to_string(V) + ", " + std::to_string(n) + " requests";
    std::vector<float> got_l[3];
    std::vector<int32_t> got_ids[3];
    for (int mode = 0; mode < 3; ++mode) {  // simple slot by slot, fast slot by slot, one launch
      ex.set_fast_kernels(mode > 0);
      ex.copy(dlogits, dev.up(logits), want * V * int64_t(sizeof(float)));
      ex.copy(ids, dev.template zeros<int32_t>(n * B), n * B * int64_t(sizeof(int32_t)));
      const int64_t before = ex.counts().launches;
      if (mode == 2) {
        ex.run_chain(dk::DraftSlotsChain{slot, n});
        EXPECT_EQ(ex.counts().launches - before, 1) << what;
      } else {
        dk::DraftSlot s = slot;
        for (int j = 0; j < B; ++j) {
          s.j = j;
          ex.run_chain(dk::DraftSlotChain{dk::DraftMarkovK{s}, dk::DraftPickK{s}, n});
        }
      }
      got_l[mode] = dev.down(dlogits, want * V);
      got_ids[mode] = dev.down(ids, n * B);
      ex.sync();
      ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
    }
    for (int mode = 1; mode < 3; ++mode) {
      EXPECT_EQ(got_ids[0], got_ids[mode]) << what << ", mode " << mode;
      int differ = 0;
      for (int64_t i = 0; i < want * V; ++i)
        differ += std::memcmp(&got_l[0][size_t(i)], &got_l[mode][size_t(i)], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << what << ", mode " << mode << ": biased logits differ";
    }
    if (n == 5) {
      EXPECT_EQ(got_ids[2][size_t(1 * B)], int32_t(V / 3)) << what << ": a tie must pick the lower id";
      EXPECT_EQ(got_ids[2][size_t(4 * B)], -1) << what << ": an all-NaN row picks nothing";
    }
  }
}

}  // namespace
}  // namespace dsv41
