// The batch-1 expert kernels' placed decode (exact_units.cuh; docs/CUDA.md "Batch-1 experts
// without conversions"): the batched up projection and the down + expand chain on stored FP4
// routed and FP8 shared experts, every ExpertDecode against the float decode of before, bit for
// bit, and against the simple bodies; and (DISABLED_, run by hand on the GPU) their time at the
// synthetic real-geometry model's shapes, old and new alternated, against a device copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_check_stored.h"
#include "backends/cuda/exact_units.cuh"
#include "backends/cuda/fast_kernels.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

constexpr fast::ExpertDecode kDecodes[] = {fast::ExpertDecode::kPlaced, fast::ExpertDecode::kPlacedAhead,
                                           fast::ExpertDecode::kStream, fast::ExpertDecode::kStreamShort,
                                           fast::ExpertDecode::kDefault};

const char* decode_name(fast::ExpertDecode d) {
  switch (d) {
    case fast::ExpertDecode::kFloat: return "float";
    case fast::ExpertDecode::kPlaced: return "placed";
    case fast::ExpertDecode::kPlacedAhead: return "placed-ahead";
    case fast::ExpertDecode::kStream: return "stream";
    case fast::ExpertDecode::kStreamShort: return "stream-2";
    default: return "default";
  }
}

// A stored [rows, in] matrix as the checkpoint holds it (kc::random_stored), with `extremes`: a few
// scale blocks at the placed decode's limits and past them (FP4 UE8M0 252 / 253 / 254, FP8 246 /
// 247 / 254, their codes held to magnitudes whose products stay finite, and 255 = NaN) and, FP8,
// three NaN codes.
testing::StoredQuant stored_matrix(std::mt19937& rng, QuantFormat f, int64_t rows, int64_t in, bool extremes) {
  const bool fp8 = f == QuantFormat::kFp8E4M3;
  testing::StoredQuant q = kc::random_stored(rng, f, rows, in, fp8 ? 32 : 1);
  if (!extremes) return q;
  const uint8_t big[4] = {uint8_t(fp8 ? 246 : 252), uint8_t(fp8 ? 247 : 253), 254, 255};
  const int64_t rb = fp8 ? in : in / 2, block_rows = fp8 ? 32 : 1, block_cols = 32;
  const size_t stride = std::max<size_t>(7, q.scales.size() / 40);  // ≈ 40 blocks: most rows keep finite sums
  for (size_t i = 5; i < q.scales.size(); i += stride) {
    const uint8_t s = big[(i / stride) % 4];
    q.scales[i] = s;
    const int64_t br = int64_t(i) / q.scale_cols(), bc = int64_t(i) % q.scale_cols();
    for (int64_t r = br * block_rows; r < std::min(rows, (br + 1) * block_rows); ++r)
      for (int64_t c = bc * block_cols; c < std::min(in, (bc + 1) * block_cols); c += fp8 ? 1 : 2) {
        uint8_t& code = q.codes[size_t(r * rb + (fp8 ? c : c / 2))];
        code &= fp8 ? 0x87 : 0x99;  // FP8: exponent 0 (|v| < 2^-6); FP4: magnitudes 0 and 0.5
      }
  }
  if (fp8)
    for (int64_t i : {int64_t(7), rows * in / 2 + 3, rows * in - 1}) q.codes[size_t(i)] = (i % 2) ? 0xFF : 0x7F;
  return q;
}

// Activations with the cases the placed decode's range argument covers: zeros of both signs, the
// smallest float subnormal, a small subnormal, a large value.
std::vector<float> activations(std::mt19937& rng, int64_t n) {
  auto x = kc::randn(rng, n);
  const float special[] = {0.0f, -0.0f, 0x1p-149f, 1e-40f, 3e30f, -1e-30f};
  for (int64_t i = 0; i < n; i += 97) x[size_t(i)] = special[(i / 97) % 6];
  return x;
}

// ---- The placed decode on the host (no device needed; exact_units.cuh's functions are host code
// too, prmt by its PTX definition) ------------------------------------------------------------------

// Every FP4 nibble at every position of a word (random neighbours) and every E4M3 code at every
// byte: the placed double is the code's value · 2^-1022 / 2^-1016 with the code's sign (E2M1 −0
// as −0), and placed_ok refuses exactly the FP8 units holding a NaN code.
TEST(FastExpertsHost, PlacedCodesAreTheirValues) {
  std::mt19937 rng(1903);
  for (int pos = 0; pos < 8; ++pos)
    for (uint32_t code = 0; code < 16; ++code) {
      const uint32_t p = (uint32_t(rng()) & ~(0xFu << (4 * pos))) | code << (4 * pos);
      uint32_t hw[8];
      fast::exact::high_words<4>(p, hw);
      for (int i = 0; i < 8; ++i) {
        const uint32_t nib = (p >> (4 * i)) & 0xFu;
        const double got = fast::exact::high_word_double(hw[i]);
        ASSERT_EQ(got, std::ldexp(double(dk::e2m1_value(uint8_t(nib))), -1022)) << "fp4 nibble " << nib << " at " << i;
        ASSERT_EQ(std::signbit(got), (nib & 8u) != 0) << "fp4 nibble " << nib << " at " << i;
      }
    }
  for (int pos = 0; pos < 4; ++pos)
    for (uint32_t code = 0; code < 256; ++code) {
      uint32_t p = (uint32_t(rng()) & ~(0xFFu << (8 * pos))) | code << (8 * pos);
      for (int i = 0; i < 4; ++i)  // neighbours never NaN: the unit's NaN test sees only this code
        if (i != pos && ((p >> (8 * i)) & 0x7Fu) == 0x7Fu) p ^= 1u << (8 * i);
      uint32_t hw[4];
      fast::exact::high_words<3>(p, hw);
      const bool nan = (code & 0x7Fu) == 0x7Fu;
      ASSERT_EQ(fast::exact::placed_ok<3>(make_uint4(p, 0x01020304u, 0x7E7E7E7Eu, 0xFEFEFEFEu), 120), !nan) << code;
      ASSERT_EQ(fast::exact::placed_ok<3>(make_uint4(0x01020304u, 0x05060708u, p, 0u), 120), !nan) << code;
      for (int i = 0; i < 4; ++i) {
        const uint32_t c = (p >> (8 * i)) & 0xFFu;
        if ((c & 0x7Fu) == 0x7Fu) continue;
        const double got = fast::exact::high_word_double(hw[i]);
        ASSERT_EQ(got, std::ldexp(double(dk::e4m3_value(uint8_t(c))), -1016)) << "fp8 code " << c << " at " << i;
        ASSERT_EQ(std::signbit(got), (c & 0x80u) != 0) << "fp8 code " << c << " at " << i;
      }
    }
}

// The two ways to add a row's units on the host, as units::dot_units and exact::lane_rows do it
// (one lane's units, each of one UE8M0 scale): the float decode (code → float × scale, then
// fma(double(x), double(w), acc)) and the placed one (the sum held as sum · 2^-(kOff + E) over the
// unit, x · 2^512, the placed codes; units placed_ok refuses by the float decode). Bit for bit
// equal over rows of 160 units with every scale code 0 … 255 and activations with zeros of both
// signs, subnormals and large values: the range argument of exact_units.cuh, checked.
template <int kMode>
void placed_sums_equal_float_sums(std::mt19937& rng) {
  using P = fast::exact::Placed<kMode>;
  constexpr int V = kMode == 4 ? 32 : 16, kUnits = 160;
  std::uniform_int_distribution<int> normal_scale(110, 140), any_scale(0, 255);
  const float special[] = {0.0f, -0.0f, 0x1p-149f, 1e-40f, 3e30f, -1e-30f, 1e-20f};
  int64_t finite = 0;
  for (int row = 0; row < 400; ++row) {
    double want = 0, got = 0;
    for (int u = 0; u < kUnits; ++u) {
      const uint32_t e = uint32_t(rng() % 40 == 0 ? any_scale(rng) : normal_scale(rng));
      uint32_t words[4] = {uint32_t(rng()), uint32_t(rng()), uint32_t(rng()), uint32_t(rng())};
      if (kMode == 3 && rng() % 64 != 0)  // NaN codes (0x7F / 0xFF) in one unit of 64 only
        for (uint32_t& w : words)
          for (int b = 0; b < 4; ++b)
            if (((w >> (8 * b)) & 0x7Fu) == 0x7Fu) w ^= 1u << (8 * b);
      const uint4 unit = make_uint4(words[0], words[1], words[2], words[3]);
      float x[V];
      for (int i = 0; i < V; ++i) x[i] = rng() % 13 == 0 ? special[rng() % 7] : float(int(rng() % 2001) - 1000) * 1e-3f;
      const float s = dk::ue8m0_value(uint8_t(e));
      const auto weight = [&](int i) {  // the float decode of column i of the unit
        if (kMode == 4) return dk::e2m1_value(uint8_t((words[i / 8] >> (4 * (i % 8))) & 0xFu)) * s;
        return dk::e4m3_value(uint8_t((words[i / 4] >> (8 * (i % 4))) & 0xFFu)) * s;
      };
      for (int i = 0; i < V; ++i) want = std::fma(double(x[i]), double(weight(i)), want);
      if (!fast::exact::placed_ok<kMode>(unit, e)) {
        for (int i = 0; i < V; ++i) got = std::fma(double(x[i]), double(weight(i)), got);
        continue;
      }
      got *= fast::exact::pow2(-(P::kOff + int(e)));
      for (int q = 0; q < 4; ++q) {
        uint32_t hw[P::kCols];
        fast::exact::high_words<kMode>(words[q], hw);
        for (int j = 0; j < P::kCols; ++j)
          got = std::fma(double(x[q * P::kCols + j]) * fast::exact::pow2(fast::exact::kXShift),
                         fast::exact::high_word_double(hw[j]), got);
      }
      got *= fast::exact::pow2(P::kOff + int(e));
    }
    finite += std::isfinite(want) ? 1 : 0;
    if (std::isnan(want) && std::isnan(got)) continue;
    ASSERT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want))
        << "kind " << kMode << " row " << row << ": placed " << got << " vs float " << want;
  }
  EXPECT_GT(finite, 100) << "kind " << kMode << ": too few finite rows for the check to mean much";
}

TEST(FastExpertsHost, PlacedSumsEqualFloatSums) {
  std::mt19937 rng(1904);
  placed_sums_equal_float_sums<4>(rng);
  placed_sums_equal_float_sums<3>(rng);
}

struct ExpertCase {
  int64_t T;
  int k, E;
  int64_t d, inter;
  bool extremes;
};

std::string case_name(const ExpertCase& c) {
  return "T " + std::to_string(c.T) + " k " + std::to_string(c.k) + " E " + std::to_string(c.E) + " d " +
         std::to_string(c.d) + " inter " + std::to_string(c.inter) + (c.extremes ? " extremes" : "");
}

// Every ExpertDecode gives the float decode's bits: h and hs of the batched up projection (routed
// FP4 experts + an FP8 shared one), a and out of the down + expand chain. Shapes: the synthetic
// model's (d 5,120, inter 2,304, top 6) at 1, 2, 5, 8 tokens; d 1,056 (33 FP4 units: lane 0 two,
// the rest one; FP8 66), inter 96 (3 FP4 down units: lanes 3 … 31 idle) and 40 (down rows not
// whole units: the float path) with outputs not a multiple of 4; d 32 (one FP4 unit), inter 5;
// scales at and past the decode's limits, NaN codes. Then the synthetic shape at 1 token against
// the simple bodies (a float rounding: the sums' order differs).
TEST(FastExpertsCuda, PlacedDecodeEqualsFloatDecode) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1901);
  const ExpertCase cases[] = {{1, 6, 8, 5120, 2304, false}, {2, 6, 8, 5120, 2304, true}, {5, 6, 8, 5120, 2304, false},
                              {8, 6, 8, 5120, 2304, false}, {1, 6, 8, 1056, 96, true},   {3, 2, 4, 1056, 40, true},
                              {8, 3, 4, 32, 5, true},       {1, 6, 8, 2048, 2304, true}};
  for (const ExpertCase& c : cases) {
    const std::string what = case_name(c);
    std::vector<dk::ExpertW> table;
    for (int e = 0; e <= c.E; ++e) {  // E routed FP4 experts, then the shared FP8 one
      const QuantFormat f = e < c.E ? QuantFormat::kFp4E2M1 : QuantFormat::kFp8E4M3;
      const auto w = [&](int64_t rows, int64_t in) {
        return kc::up_stored(dev, stored_matrix(rng, f, rows, in, c.extremes && e % 3 != 1));
      };
      const dk::DevWeight w1 = w(c.inter, c.d), w3 = w(c.inter, c.d), w2 = w(c.d, c.inter);
      table.push_back({w1, w3, w2});
    }
    const dk::ExpertW* dt = dev.up(table);
    const dk::ExpertW* ds = dt + c.E;
    std::vector<int32_t> experts(size_t(c.T * c.k));
    for (int64_t t = 0; t < c.T; ++t)  // distinct experts within a token, as the router picks them
      for (int j = 0; j < c.k; ++j) experts[size_t(t * c.k + j)] = int32_t((t * 3 + j) % c.E);
    const float* dx = dev.up(activations(rng, c.T * c.d));
    const float* dw = dev.up(kc::randn(rng, c.T * c.k));
    const int32_t* dexp = dev.up(experts);
    const int64_t nh = c.T * c.k * c.inter, nhs = c.T * c.inter;
    float* h = dev.template zeros<float>(nh);
    float* hs = dev.template zeros<float>(nhs);
    dk::Batched<dk::ExpertUpK> ups;
    ups.count[ups.n] = nh;
    ups.body[ups.n++] = dk::ExpertUpK{dx, dt, dexp, dw, c.k, c.d, c.inter, 10.0f, h};
    ups.count[ups.n] = nhs;
    ups.body[ups.n++] = dk::ExpertUpK{dx, ds, nullptr, nullptr, 1, c.d, c.inter, 10.0f, hs};
    const int hc = 4;
    const float* xs = dev.up(kc::randn(rng, c.T * hc * c.d));
    const float* post = dev.up(kc::randn(rng, c.T * hc));
    const float* comb = dev.up(kc::randn(rng, c.T * hc * hc));
    float* a = dev.template zeros<float>(c.T * c.d);
    float* out = dev.template zeros<float>(c.T * hc * c.d);
    const dk::ExpertDownK down{dt, dexp, c.k, c.d, c.inter, h, ds, c.inter, hs, a};
    const dk::DownExpandChain chain{down, dk::MhcExpandK{a, xs, post, comb, hc, c.d, out}, c.T};
    const auto run = [&](fast::ExpertDecode d) -> std::vector<std::vector<float>> {
      EXPECT_EQ(cudaMemset(h, 0xFF, nh * sizeof(float)), cudaSuccess);
      EXPECT_EQ(cudaMemset(a, 0xFF, c.T * c.d * sizeof(float)), cudaSuccess);
      EXPECT_TRUE(fast::launch_experts_up(ups, d)) << what;
      EXPECT_TRUE(fast::launch_down_expand(chain, d)) << what;
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      return std::vector<std::vector<float>>{dev.down(h, nh), dev.down(hs, nhs), dev.down(a, c.T * c.d),
                                             dev.down(out, c.T * hc * c.d)};
    };
    const auto want = run(fast::ExpertDecode::kFloat);
    int64_t finite = 0;
    for (float v : want[0]) finite += std::isfinite(v) ? 1 : 0;
    EXPECT_GT(finite, nh / 2) << what << ": most outputs must be finite for the comparison to mean much";
    const char* parts[] = {"h", "hs", "down", "down + expand"};
    for (fast::ExpertDecode d : kDecodes) {
      const auto got = run(d);
      for (int p = 0; p < 4; ++p)
        kc::expect_same_bits(got[size_t(p)], want[size_t(p)], what + " " + decode_name(d) + " " + parts[p]);
    }
    if (c.T != 1 || c.d != 5120) continue;
    // Against the simple bodies (the float path was checked so in FusedExpertsEqualSeparate).
    const auto fast_h = run(fast::ExpertDecode::kDefault);
    ex.set_fast_kernels(false);
    ex.for_each(nh + nhs, ups);
    ex.run_chain(chain);
    ex.sync();
    ex.set_fast_kernels(true);
    const std::vector<std::vector<float>> simple = {dev.down(h, nh), dev.down(hs, nhs), dev.down(a, c.T * c.d)};
    for (int p = 0; p < 3; ++p)
      for (size_t i = 0; i < simple[size_t(p)].size(); ++i) {
        const double s = simple[size_t(p)][i], f = fast_h[size_t(p)][i];
        if (std::isnan(s)) {
          ASSERT_TRUE(std::isnan(f)) << what << " " << parts[p] << " at " << i;
          continue;
        }
        ASSERT_LE(std::fabs(f - s), 1e-6 * std::fabs(s) + 1e-9)
            << what << " " << parts[p] << " at " << i << ": fast " << f << " vs simple " << s;
      }
  }
}

// Time of the batch-1 expert kernels at the synthetic model's shapes and mini-flash's (bench/configs/
// flash-synthetic.json: d 5,120, 32 routed FP4 experts of inter 2,304 with per-32 row scales, top
// 6, one FP8 shared expert with 32 × 32 blocks, hc 4), every decode alternated launch by launch,
// each launch on other experts than the one before (the 6 chosen rotate over the 32; 4 copies of
// the shared expert), so L2 (50 MB) holds none of its weights. Bytes: the codes and scales of the
// distinct experts the launch reads. Against a device copy of 1 GiB (read + written).
TEST(FastExpertsCuda, DISABLED_SyntheticExpertBandwidth) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1902);
  const int k = 6, hc = 4, kShared = 4;
  cudaEvent_t t0, t1;
  DSV41_CUDA_OK(cudaEventCreate(&t0));
  DSV41_CUDA_OK(cudaEventCreate(&t1));
  const int64_t copy_bytes = int64_t(1) << 30;
  void *ca = nullptr, *cb = nullptr;
  DSV41_CUDA_OK(cudaMalloc(&ca, copy_bytes));
  DSV41_CUDA_OK(cudaMalloc(&cb, copy_bytes));
  const auto time_us = [&](const std::function<void()>& f) {
    cudaEventRecord(t0);
    f();
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    return 1e3 * double(ms);
  };
  double copy_us = 1e30;
  for (int i = 0; i < 5; ++i)
    copy_us = std::min(copy_us, time_us([&] { cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice); }));
  const double copy_gbs = 2.0 * double(copy_bytes) / copy_us * 1e-3;
  cudaFree(ca);
  cudaFree(cb);
  std::printf("copy: %.1f us for 1 GiB, %.1f GB/s (read + write)\n", copy_us, copy_gbs);
  // The synthetic model's experts, and mini-flash's (d 1,024, inter 512) as 12 copies of its 16
  // experts so that a launch finds none of them in L2 either.
  struct Shape {
    const char* name;
    int E;
    int64_t d, inter;
  };
  for (const Shape& shape : {Shape{"synthetic", 32, 5120, 2304}, Shape{"mini-flash", 192, 1024, 512}}) {
    const int E = shape.E;
    const int64_t d = shape.d, inter = shape.inter;
    // One matrix's bytes (codes + scales), stored as random_stored makes them.
    const auto matrix = [&](QuantFormat f, int64_t rows, int64_t in, int64_t& bytes) {
      const testing::StoredQuant q = kc::random_stored(rng, f, rows, in, f == QuantFormat::kFp8E4M3 ? 32 : 1);
      bytes += int64_t(q.codes.size() + q.scales.size());
      return kc::up_stored(dev, q);
    };
    std::vector<dk::ExpertW> table;
    int64_t routed_up = 0, routed_down = 0, shared_up = 0, shared_down = 0;
    for (int e = 0; e < E + kShared; ++e) {
      const QuantFormat f = e < E ? QuantFormat::kFp4E2M1 : QuantFormat::kFp8E4M3;
      int64_t up = 0, dn = 0;
      const dk::DevWeight w1 = matrix(f, inter, d, up), w3 = matrix(f, inter, d, up), w2 = matrix(f, d, inter, dn);
      table.push_back({w1, w3, w2});
      (e < E ? routed_up : shared_up) = up;
      (e < E ? routed_down : shared_down) = dn;
    }
    const dk::ExpertW* dt = dev.up(table);
    for (int64_t T : {1, 8}) {
      const int launches = 24;
      std::vector<const int32_t*> picks;  // launch i: experts (6 i + j + t) mod 32
      int64_t distinct_max = 0;
      for (int i = 0; i < launches; ++i) {
        std::vector<int32_t> ex_ids(size_t(T * k));
        std::vector<bool> seen(E);
        int64_t distinct = 0;
        for (int64_t t = 0; t < T; ++t)
          for (int j = 0; j < k; ++j) {
            const int32_t id = int32_t((6 * i + j + 5 * t) % E);
            ex_ids[size_t(t * k + j)] = id;
            distinct += seen[size_t(id)] ? 0 : 1;
            seen[size_t(id)] = true;
          }
        distinct_max = std::max(distinct_max, distinct);
        picks.push_back(dev.up(ex_ids));
      }
      const float* x = dev.up(kc::randn(rng, T * d));
      const float* wts = dev.up(kc::randn(rng, T * k, 0.3f));
      const float* xs = dev.up(kc::randn(rng, T * hc * d));
      const float* post = dev.up(kc::randn(rng, T * hc));
      const float* comb = dev.up(kc::randn(rng, T * hc * hc));
      float* h = dev.template zeros<float>(T * k * inter);
      float* hs = dev.template zeros<float>(T * inter);
      float* a = dev.template zeros<float>(T * d);
      float* out = dev.template zeros<float>(T * hc * d);
      const auto up_of = [&](int i, int sh) {
        dk::Batched<dk::ExpertUpK> b;
        b.count[b.n] = T * k * inter;
        b.body[b.n++] = dk::ExpertUpK{x, dt, picks[size_t(i)], wts, k, d, inter, 10.0f, h};
        b.count[b.n] = T * inter;
        b.body[b.n++] = dk::ExpertUpK{x, dt + E + sh, nullptr, nullptr, 1, d, inter, 10.0f, hs};
        return b;
      };
      const auto chain_of = [&](int i, int sh) {
        const dk::ExpertDownK down{dt, picks[size_t(i)], k, d, inter, h, dt + E + sh, inter, hs, a};
        return dk::DownExpandChain{down, dk::MhcExpandK{a, xs, post, comb, hc, d, out}, T};
      };
      const fast::ExpertDecode decodes[] = {fast::ExpertDecode::kFloat, fast::ExpertDecode::kPlaced,
                                            fast::ExpertDecode::kPlacedAhead, fast::ExpertDecode::kStream,
                                            fast::ExpertDecode::kStreamShort};
      constexpr int kVariants = int(std::size(decodes));
      std::vector<double> up_us(kVariants), down_us(kVariants);
      for (int i = 0; i < 2; ++i)  // warm-up
        for (fast::ExpertDecode dc : decodes) {
          fast::launch_experts_up(up_of(i, i % kShared), dc);
          fast::launch_down_expand(chain_of(i, (i + 1) % kShared), dc);
        }
      for (int i = 0; i < launches; ++i)
        for (int v = 0; v < kVariants; ++v) {
          // Each launch on other experts (and another shared copy) than the launch before.
          const int li = (i + v * 6) % launches, sh = (3 * i + v) % kShared;
          up_us[size_t(v)] += time_us([&] { fast::launch_experts_up(up_of(li, sh), decodes[v]); });
          down_us[size_t(v)] += time_us([&] { fast::launch_down_expand(chain_of(li, (sh + 2) % kShared), decodes[v]); });
        }
      DSV41_CUDA_OK(cudaGetLastError());
      // Bytes a launch reads at most (T = 1: 6 routed + the shared expert).
      const int64_t up_bytes = distinct_max * routed_up + shared_up, down_bytes = distinct_max * routed_down + shared_down;
      for (int v = 0; v < kVariants; ++v) {
        const double uu = up_us[size_t(v)] / launches, du = down_us[size_t(v)] / launches;
        const double ug = double(up_bytes) / uu * 1e-3, dg = double(down_bytes) / du * 1e-3;
        std::printf(
            "experts %s T %ld %-13s up %8.2f us %7.1f GB/s %.2f of copy (%.1f MB) | down+expand %8.2f us %7.1f GB/s %.2f of "
            "copy (%.1f MB)\n",
            shape.name, long(T), decode_name(decodes[v]), uu, ug, ug / copy_gbs, double(up_bytes) * 1e-6, du, dg, dg / copy_gbs,
            double(down_bytes) * 1e-6);
      }
    }
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

}  // namespace
}  // namespace dsv41
