// Batch-1 weight products (fast_gemm.cu; docs/CUDA.md "Batch-1 GEMMs at the weight bandwidth"):
// 1-row tiled GEMMs at boundary shapes against the simple body; and (DISABLED_, run by hand on the
// GPU) the achieved bandwidth of the mini-flash shapes at 1 and 8 rows against a device copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_check_stored.h"
#include "backends/cuda/fast_kernels.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

// 1-row GEMMs (the batch-1 decode's products) against the simple body, every stored kind and the
// wide kinds: `in` one step and a half over the lanes (1280: wq_b's; the upper lanes of the last
// step idle), `in` ending inside a 32-column scale block (FP8 48, 80, 1296), outputs not a multiple
// of 4 (a warp's) nor of the 32-row scale blocks (37, 1031, 4102), a weight row slice starting
// inside a scale block (row0 5, 120), strided x and y, `in` split over 2 … 8 warps (8192, 4096).
// Bound as TiledGemmMatchesSimple's: 1e-6 |simple| + 1e-12 Σ|x·w| + one subnormal step.
TEST(FastGemmCuda, OneRowGemmMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1602);
  enum Kind { kF32, kBf16, kFp8, kFp8Big, kFp4 };
  struct Case {
    Kind kind;
    int64_t in, out;
    int64_t x_pad = 0, y_pad = 0, row0 = 0;
  };
  std::vector<Case> cases;
  for (Kind kind : {kFp8, kFp8Big, kFp4, kBf16, kF32}) {
    cases.push_back({kind, 1280, 4102});
    cases.push_back({kind, 1024, 37, 4, 3, kind == kFp8Big ? 120 : 5});
    cases.push_back({kind, 8192, 1031});
    cases.push_back({kind, 4096, 130, 0, 0, 33});
    cases.push_back({kind, 96, 5});
    if (kind != kFp4) {
      cases.push_back({kind, 48, 1031});
      cases.push_back({kind, 80, 37, 0, 1, 7});
      cases.push_back({kind, 1296, 70});
    }
  }
  for (const Case& c : cases) {
    const int64_t all_rows = c.row0 + c.out;
    std::vector<float> wide;
    dk::DevWeight w;
    if (c.kind == kF32 || c.kind == kBf16) {
      wide = kc::randn(rng, all_rows * c.in, 0.2f);
      if (c.kind == kBf16) {
        std::vector<uint16_t> b(wide.size());
        for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(wide[i]), wide[i] = bf16_to_f32(b[i]);
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
    const auto x = kc::randn(rng, xs);
    const float* dx = dev.up(x);
    float* y = dev.template zeros<float>(ys);
    const dk::GemmK k{dx, xs, w, c.in, c.out, y, ys};
    const std::string what = "1-row gemm kind " + std::to_string(int(c.kind)) + " in " + std::to_string(c.in) +
                             " out " + std::to_string(c.out) + " row0 " + std::to_string(c.row0);
    ASSERT_NE(fast::gemm_tiled_kind(k), 0) << what << ": the tiled kernel must take this shape";
    ex.set_fast_kernels(false);
    ex.for_each(c.out, k);
    const std::vector<float> want = dev.down(y, ys);
    ex.set_fast_kernels(true);
    DSV41_CUDA_OK(cudaMemset(y, 0, ys * sizeof(float)));
    const int64_t before = ex.counts().launches;
    ex.for_each(c.out, k);
    const std::vector<float> got = dev.down(y, ys);
    ex.sync();
    ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
    EXPECT_EQ(ex.counts().launches - before, 1) << what;
    for (int64_t o = 0; o < c.out; ++o) {
      double mag = 0;
      for (int64_t i = 0; i < c.in; ++i) mag += std::fabs(double(x[size_t(i)]) * wide[size_t((c.row0 + o) * c.in + i)]);
      const double want_v = want[size_t(o)], got_v = got[size_t(o)];
      ASSERT_TRUE(std::isfinite(want_v)) << what;
      ASSERT_LE(std::fabs(got_v - want_v), 1e-6 * std::fabs(want_v) + 1e-12 * mag + 1e-44)
          << what << " at " << o << ": fast " << got_v << " vs simple " << want_v;
    }
    for (int64_t o = c.out; o < ys; ++o) ASSERT_EQ(got[size_t(o)], 0.0f) << what << ": wrote past `out` at " << o;
  }
}

// The achieved bandwidth of mini-flash's weight products at 1 and 8 rows (random FP8 codes with
// 32 × 32 UE8M0 blocks; weights in enough copies that L2 (50 MB) holds none between launches, as
// in a decode step over 8 layers), against a device-to-device copy of 1 GiB (bytes read + written).
// Prints one line a shape: µs a launch, GB/s of weight bytes + scales, fraction of the copy rate.
TEST(FastGemmCuda, DISABLED_WeightProductBandwidth) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1603);
  cudaEvent_t t0, t1;
  DSV41_CUDA_OK(cudaEventCreate(&t0));
  DSV41_CUDA_OK(cudaEventCreate(&t1));
  auto time_us = [&](int reps, const std::function<void(int)>& launch) {
    for (int i = 0; i < 3; ++i) launch(i);
    cudaEventRecord(t0);
    for (int i = 0; i < reps; ++i) launch(i);
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms = 0;
    cudaEventElapsedTime(&ms, t0, t1);
    return 1e3 * double(ms) / reps;
  };
  const int64_t copy_bytes = int64_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  DSV41_CUDA_OK(cudaMalloc(&a, copy_bytes));
  DSV41_CUDA_OK(cudaMalloc(&b, copy_bytes));
  const double copy_us = time_us(10, [&](int) { cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * double(copy_bytes) / copy_us * 1e-3;
  cudaFree(a);
  cudaFree(b);
  std::printf("copy: %.1f us for 1 GiB, %.1f GB/s (read + write)\n", copy_us, copy_gbs);
  struct Shape {
    const char* name;
    int64_t in, out, gemms;  // gemms > 1: dk::Batched of that many (wo_a's groups, x column slices)
    bool fp4;
  };
  const Shape shapes[] = {{"wq_b 1280->32768 fp8", 1280, 32768, 1, false},
                          {"wo_a 8 x 4096->1024 fp8 (Batched)", 4096, 1024, 8, false},
                          {"wo_b 8192->1024 fp8", 8192, 1024, 1, false},
                          {"wq_a 1024->1280 fp8", 1024, 1280, 1, false},
                          {"i_wqb 1280->4096 fp8", 1280, 4096, 1, false},
                          {"expert-like 1024->1024 fp4", 1024, 1024, 1, true}};
  for (const Shape& sh : shapes) {
    const int64_t rows_all = sh.out * sh.gemms;
    const int64_t code_bytes = sh.fp4 ? rows_all * sh.in / 2 : rows_all * sh.in;
    const int64_t scale_bytes = sh.fp4 ? rows_all * (sh.in / 32) : ((rows_all + 31) / 32) * ((sh.in + 31) / 32);
    const int64_t bytes = code_bytes + scale_bytes;
    const int copies = int(std::max<int64_t>(2, (int64_t(200) << 20) / bytes + 1));
    std::vector<uint8_t> codes(static_cast<size_t>(code_bytes));
    std::uniform_int_distribution<int> byte(0, 255), sc(118, 124);
    for (auto& v : codes) v = uint8_t(byte(rng) & 0xEF);  // no NaN codes
    std::vector<uint8_t> scales(static_cast<size_t>(scale_bytes));
    for (auto& v : scales) v = uint8_t(sc(rng));
    std::vector<dk::DevWeight> ws;
    for (int i = 0; i < copies; ++i) {
      dk::DevWeight w;
      w.codes = dev.up(codes);
      w.scales = dev.up(scales);
      w.in = sh.in;
      w.fp4 = sh.fp4;
      w.scale_cols = int32_t(sh.fp4 ? sh.in / 32 : (sh.in + 31) / 32);
      w.rows_log2 = sh.fp4 ? 0 : 5;
      w.cols_log2 = 5;
      ws.push_back(w);
    }
    for (int64_t rows : {1, 8}) {
      const int64_t xs = sh.in * sh.gemms, ys = sh.out * sh.gemms;
      const float* x = dev.up(kc::randn(rng, rows * xs));
      float* y = dev.template zeros<float>(rows * ys);
      auto launch = [&](int i) {
        const dk::DevWeight& w = ws[size_t(i % copies)];
        if (sh.gemms == 1) {
          fast::launch(rows * sh.out, dk::GemmK{x, xs, w, sh.in, sh.out, y, ys});
          return;
        }
        dk::Batched<dk::GemmK> bt;
        for (int64_t g = 0; g < sh.gemms; ++g) {
          bt.body[bt.n] = dk::GemmK{x + g * sh.in, xs, w.offset(g * sh.out * sh.in), sh.in, sh.out, y + g * sh.out, ys};
          bt.count[bt.n++] = rows * sh.out;
        }
        fast::launch(rows * ys, bt);
      };
      const double us = time_us(40, launch);
      DSV41_CUDA_OK(cudaGetLastError());
      const double gbs = double(bytes) / us * 1e-3;
      std::printf("%-36s rows %ld: %8.2f us, %7.1f GB/s weights, %.2f of the copy rate (%.1f MB)\n", sh.name,
                  long(rows), us, gbs, gbs / copy_gbs, double(bytes) * 1e-6);
    }
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
}

}  // namespace
}  // namespace dsv41
