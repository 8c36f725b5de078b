// Checks of the device kernels on weights in their stored formats (dk::DevWeight with codes: FP8
// E4M3 with UE8M0 32×32 / 128×128 block scales, FP4 E2M1 with per-32 row scales), run through an
// executor: HostExec in the CPU build (device_kernels_test.cpp), CudaExec on a GPU
// (cuda_backend_test.cu, fast kernels off and on). Test support only (header-only, GoogleTest).
//
// The stored matrices are random as the checkpoint holds them (kernels/cpu/stored_quant_test_util.h)
// at boundary shapes: one row, odd row counts, `in` not a multiple of the scale block (partial
// blocks), not a multiple of 8 (the fast kernels' scalar path), 128-row blocks, a row slice that
// starts inside a block row (wo_a's groups); scales drawn around 1 with whole blocks at the extremes
// (UE8M0 0 = the subnormal 2^-127, 1, and 2^113 over codes below 2, so that no sum overflows), and
// every E4M3 / E2M1 code present; NaN-free except in one matrix whose NaN codes must give NaN rows.
// What must hold:
// - against the CPU engine's stored path (gemm_quant_portable, which gives the widened matrix's
//   gemm_f32 bits) and the float64 reference on the widening: within the kernel checks' 1e-5;
// - when `bitwise` (the simple bodies: HostExec, or CudaExec with fast kernels off): the GEMM and
//   the experts on the stored bytes give the same bits as the same bodies on the widened float32
//   matrix, i.e. the decode is the host tables' code × scale to the bit, subnormal products included.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/device_kernels_check.h"
#include "kernels/cpu/stored_quant_test_util.h"

namespace dsv41::kernel_checks {

// A random stored matrix: codes uniform over every code (NaN codes only when `nans`), scales
// 124–130 with every seventh block at an extreme (0, 1 or 240; a 240 block's codes are kept below
// magnitude 2 so that its products stay finite). fixed_scale ≥ 0: every block that scale code.
inline testing::StoredQuant random_stored(std::mt19937& rng, QuantFormat f, int64_t rows, int64_t in,
                                          int64_t block_rows, bool nans = false, int fixed_scale = -1) {
  // FP8: square blocks (32×32 or 128×128); FP4: one scale per row per 32 columns.
  const bool fp8 = f == QuantFormat::kFp8E4M3;
  testing::StoredQuant q{f, rows, in, fp8 ? block_rows : 1, fp8 ? block_rows : 32, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), sc(124, 130);
  q.scales.resize(size_t(q.scale_rows() * q.scale_cols()));
  for (size_t i = 0; i < q.scales.size(); ++i) {
    static constexpr uint8_t kExtreme[3] = {0, 1, 240};
    q.scales[i] = fixed_scale >= 0 ? uint8_t(fixed_scale) : i % 7 == 3 ? kExtreme[(i / 7) % 3] : uint8_t(sc(rng));
  }
  const int64_t rb = f == QuantFormat::kFp8E4M3 ? in : in / 2;
  q.codes.resize(size_t(rows * rb));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < rb; ++b) {
      uint8_t c = uint8_t(byte(rng));
      const int64_t col = f == QuantFormat::kFp8E4M3 ? b : 2 * b;
      const uint8_t s = q.scales[size_t((r / q.block_rows) * q.scale_cols() + col / q.block_cols)];
      if (f == QuantFormat::kFp8E4M3) {
        if (!nans && (c & 0x7F) == 0x7F) c &= 0xFE;  // 0x7F → 0x7E: the largest finite magnitude
        if (s == 240) c &= 0xBF;                     // exponent field ≤ 7: |value| < 2
      } else if (s == 240) {
        c &= 0x99;  // both nibbles keep sign and the lowest bit: magnitudes 0 and 0.5
      }
      q.codes[size_t(r * rb + b)] = c;
    }
  return q;
}

template <class Exec>
dk::DevWeight up_stored(Dev<Exec>& dev, const testing::StoredQuant& q) {
  dk::DevWeight w;
  w.codes = dev.up(q.codes);
  w.scales = dev.up(q.scales);
  w.in = q.in;
  w.scale_cols = int32_t(q.scale_cols());
  w.fp4 = q.format == QuantFormat::kFp4E2M1;
  w.rows_log2 = uint8_t(std::countr_zero(uint64_t(q.block_rows)));
  w.cols_log2 = uint8_t(std::countr_zero(uint64_t(q.block_cols)));
  return w;
}

// got equals want: the same bits, or both NaN.
inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) && std::isnan(got[i])) continue;
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Close as in expect_close (plus slack[i] where given), NaN where the reference is NaN.
inline void expect_close_nan(const std::vector<float>& got, const std::vector<float>& want, double rel,
                             const std::string& what, const std::vector<double>& slack = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i << ": " << got[i] << " vs NaN";
      continue;
    }
    ASSERT_LE(std::fabs(double(got[i]) - want[i]),
              rel * std::max(1.0, std::fabs(double(want[i]))) + (slack.empty() ? 0.0 : slack[i]))
        << what << " at " << i << ": " << got[i] << " vs " << want[i];
  }
}

struct StoredCase {
  QuantFormat format;
  int64_t rows, in, out, block_rows;
  bool nans;
  const char* name;
};

inline std::vector<StoredCase> stored_gemm_cases() {
  using F = QuantFormat;
  return {
      {F::kFp8E4M3, 1, 256, 97, 32, false, "fp8 decode row"},
      {F::kFp8E4M3, 1, 1, 1, 32, false, "fp8 1x1x1"},
      {F::kFp8E4M3, 5, 37, 19, 32, false, "fp8 odd in (partial block, scalar)"},
      {F::kFp8E4M3, 9, 264, 65, 32, false, "fp8 9 rows, in 264 (partial block)"},
      {F::kFp8E4M3, 3, 200, 130, 128, false, "fp8 128x128 blocks"},
      {F::kFp8E4M3, 70, 64, 33, 32, false, "fp8 70 rows"},
      {F::kFp8E4M3, 4, 96, 40, 32, true, "fp8 with NaN codes"},
      {F::kFp4E2M1, 1, 256, 97, 1, false, "fp4 decode row"},
      {F::kFp4E2M1, 7, 40, 21, 1, false, "fp4 in 40 (partial block)"},
      {F::kFp4E2M1, 3, 38, 17, 1, false, "fp4 in 38 (scalar)"},
      {F::kFp4E2M1, 9, 520, 31, 1, false, "fp4 9 rows, in 520"},
  };
}

template <class Exec>
void check_stored_gemm(Exec& ex, bool bitwise) {
  std::mt19937 rng(61);
  Dev<Exec> dev(ex);
  for (const StoredCase& c : stored_gemm_cases()) {
    const testing::StoredQuant q = random_stored(rng, c.format, c.out, c.in, c.block_rows, c.nans);
    const std::vector<float> wide = q.widened();
    ASSERT_EQ(int64_t(wide.size()), c.out * c.in) << c.name;
    const auto x = randn(rng, c.rows * c.in);
    const float* dx = dev.up(x);
    const dk::DevWeight ws = up_stored(dev, q);
    float* y = dev.template zeros<float>(c.rows * c.out);
    ex.for_each(c.rows * c.out, dk::GemmK{dx, c.in, ws, c.in, c.out, y, c.out});
    const std::vector<float> got = dev.down(y, c.rows * c.out);
    // The CPU engine's stored path (the widened gemm_f32's bits: float lanes, so its error is up
    // to ≈ in · 2^-24 · Σ|x·w|, not relative to the result) and the float64 reference.
    std::vector<float> cpu(size_t(c.rows * c.out)), ref(size_t(c.rows * c.out));
    gemm_quant_portable(x.data(), c.rows, c.in, q.view(), c.out, cpu.data());
    gemm_f32_reference(x.data(), c.rows, c.in, wide.data(), c.out, ref.data());
    std::vector<double> slack(size_t(c.rows * c.out));
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        double mag = 0;
        for (int64_t i = 0; i < c.in; ++i) mag += std::fabs(double(x[size_t(r * c.in + i)]) * wide[size_t(o * c.in + i)]);
        slack[size_t(r * c.out + o)] = double(c.in) * 0x1p-24 * mag;
      }
    expect_close_nan(got, cpu, kRel, std::string(c.name) + " vs gemm_quant", slack);
    expect_close_nan(got, ref, kRel, std::string(c.name) + " vs reference");
    if (bitwise) {
      float* yw = dev.template zeros<float>(c.rows * c.out);
      ex.for_each(c.rows * c.out, dk::GemmK{dx, c.in, {dev.up(wide), nullptr}, c.in, c.out, yw, c.out});
      expect_same_bits(got, dev.down(yw, c.rows * c.out), std::string(c.name) + " stored vs widened");
    }
  }
  // A row slice that starts inside a block row (DevWeight::offset, as wo_a's output groups): rows
  // [5, 25) of a 32×32-block FP8 matrix and [120, 140) of a 128×128 one (across a block row).
  for (auto [block, first] : {std::pair<int64_t, int64_t>{32, 5}, {128, 120}}) {
    const int64_t rows = 3, in = 72, out = 20;
    const testing::StoredQuant q = random_stored(rng, QuantFormat::kFp8E4M3, first + out + 7, in, block);
    const std::vector<float> wide = q.widened();
    const auto x = randn(rng, rows * in);
    const dk::DevWeight ws = up_stored(dev, q).offset(first * in);
    float* y = dev.template zeros<float>(rows * out);
    ex.for_each(rows * out, dk::GemmK{dev.up(x), in, ws, in, out, y, out});
    std::vector<float> ref(size_t(rows * out));
    gemm_f32_reference(x.data(), rows, in, wide.data() + first * in, out, ref.data());
    expect_close_nan(dev.down(y, rows * out), ref, kRel, "fp8 row slice from " + std::to_string(first));
  }
}

// The routed and shared experts over FP4 routed / FP8 shared tables (as the checkpoint stores
// them) against the same bodies over the widened float32 tables.
template <class Exec>
void check_stored_experts(Exec& ex, bool bitwise) {
  std::mt19937 rng(62);
  Dev<Exec> dev(ex);
  for (auto [T, d, inter, k] : {std::tuple<int64_t, int64_t, int64_t, int>{1, 256, 96, 3}, {5, 40, 24, 2},
                                {9, 64, 38, 1}}) {
    const int E = 5;
    const int64_t si = inter + 8;  // shared intermediate width
    std::vector<dk::ExpertW> stored(E), wide(E);
    const auto up = [&](QuantFormat f, int64_t rows, int64_t in) {
      const testing::StoredQuant q = random_stored(rng, f, rows, in, 32);
      return std::make_pair(up_stored(dev, q), dk::DevWeight{dev.up(q.widened()), nullptr});
    };
    for (int e = 0; e < E; ++e) {
      auto [a1, b1] = up(QuantFormat::kFp4E2M1, inter, d);
      auto [a3, b3] = up(QuantFormat::kFp4E2M1, inter, d);
      auto [a2, b2] = up(QuantFormat::kFp4E2M1, d, inter);
      stored[e] = {a1, a3, a2};
      wide[e] = {b1, b3, b2};
    }
    auto [s1, w1] = up(QuantFormat::kFp8E4M3, si, d);
    auto [s3, w3] = up(QuantFormat::kFp8E4M3, si, d);
    auto [s2, w2] = up(QuantFormat::kFp8E4M3, d, si);
    const std::vector<dk::ExpertW> shs = {{s1, s3, s2}}, shw = {{w1, w3, w2}};
    std::vector<int32_t> experts(size_t(T * k));
    std::vector<float> weights(size_t(T * k));
    std::uniform_real_distribution<float> u(0.1f, 1.0f);
    for (int64_t t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        experts[size_t(t * k + j)] = int32_t((t + 2 * j) % E);
        weights[size_t(t * k + j)] = u(rng);
      }
    // Activations small enough that the 2^113 blocks' sums stay finite through SwiGLU and down.
    const auto x = randn(rng, T * d, 1e-3f);
    const float* dx = dev.up(x);
    const int32_t* dexp = dev.up(experts);
    const float* dwt = dev.up(weights);
    std::vector<float> outs[2];
    for (int s = 0; s < 2; ++s) {
      const dk::ExpertW* table = dev.up(s == 0 ? stored : wide);
      const dk::ExpertW* shared = dev.up(s == 0 ? shs : shw);
      float* h = dev.template zeros<float>(T * k * inter);
      float* hs = dev.template zeros<float>(T * si);
      float* y = dev.template zeros<float>(T * d);
      ex.for_each(T * k * inter, dk::ExpertUpK{dx, table, dexp, dwt, k, d, inter, 10.0f, h});
      ex.for_each(T * si, dk::ExpertUpK{dx, shared, nullptr, nullptr, 1, d, si, 10.0f, hs});
      ex.for_each(T * d, dk::ExpertDownK{table, dexp, k, d, inter, h, shared, si, hs, y});
      outs[s] = dev.down(h, T * k * inter);
      const auto hv = dev.down(hs, T * si), yv = dev.down(y, T * d);
      outs[s].insert(outs[s].end(), hv.begin(), hv.end());
      outs[s].insert(outs[s].end(), yv.begin(), yv.end());
    }
    const std::string what = "experts " + std::to_string(T) + "x" + std::to_string(d) + "x" + std::to_string(inter);
    expect_close_nan(outs[0], outs[1], kRel, what + " stored vs widened");
    if (bitwise) expect_same_bits(outs[0], outs[1], what + " stored vs widened, bitwise");
  }
}

}  // namespace dsv41::kernel_checks
