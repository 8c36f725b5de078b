// The grouped tensor-core experts (mma_gemm.h) against a float64 host reference of the simple
// bodies (ExpertUpK, ExpertDownK) on random inputs, and the backend with them on against the CPU
// engine. Shapes: mini-flash's (16 tokens, top-6 of 16, FP4, d 1024, inter 512), 17 tokens over 5
// FP8 experts (32×32 blocks) with a partial output tile (inter 96) and a narrow down (d 64), 64
// tokens top-6 of 32 FP4 without a shared expert, 300 tokens over 8 bf16 experts (groups of
// several 64-row tiles and a partial one) with a shared expert wider than the routed ones; one
// expert of each shape gets no rows.
// Bound: the tensor cores' fp32 sums of exact products against the double sums,
// |Δ| ≤ (K / 16) · 2^-21 · Σ|x·w| + 1e-6 · |sum|, carried through the SwiGLU: each of the 3 · K / 16
// MMAs of a sum (three activation parts) adds into the fp32 accumulator with at most about an ulp
// of error (the tensor core truncates; 2^-23 · |accumulator| ≤ 2^-23 · Σ|x·w|). A first bound of
// 2^-20 · Σ|x·w| failed on the H200 at K 1280 (error 1.1 · that bound: 0.118 on a sum of 17,592,
// Σ|x·w| ≈ 1.1e5), as the truncations of successive MMAs do not cancel.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/backend_compare_check.h"
#include "backends/cuda/backend_stored_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_backend.h"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/device_kernels_check_stored.h"
#include "backends/cuda/mma_gemm_launch.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;
namespace ts = testing_scenario;

enum class Kind { kFp4, kFp8, kBf16 };

// A random [rows, in] weight on the device and its exact float values on the host.
struct TestWeight {
  dk::DevWeight dev;
  std::vector<float> host;
};

TestWeight random_weight(kc::Dev<CudaExec>& dev, std::mt19937& rng, Kind kind, int64_t rows, int64_t in) {
  if (kind == Kind::kBf16) {
    std::vector<uint16_t> bits(size_t(rows * in));
    std::vector<float> host(bits.size());
    const auto v = kc::randn(rng, rows * in, 0.3f);
    for (size_t i = 0; i < bits.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &v[i], 4);
      bits[i] = uint16_t(u >> 16);
      host[i] = dk::bf16_to_f32(bits[i]);
    }
    return {{nullptr, dev.up(bits)}, host};
  }
  const QuantFormat f = kind == Kind::kFp4 ? QuantFormat::kFp4E2M1 : QuantFormat::kFp8E4M3;
  const testing::StoredQuant q = kc::random_stored(rng, f, rows, in, 32);
  return {kc::up_stored(dev, q), q.widened()};
}

struct Shape {
  int64_t T;
  int k, E;
  int64_t d, inter, shared_inter;  // shared_inter 0: no shared expert
  Kind kind;
  int empty;  // an expert no token chooses
};

struct Host {
  std::vector<TestWeight> w1, w3, w2;  // [E] routed, then the shared one
  std::vector<int32_t> experts;
  std::vector<float> x, wts;
};

// Each token's k distinct experts, never `empty`.
std::vector<int32_t> choose(std::mt19937& rng, const Shape& s) {
  std::vector<int32_t> all;
  for (int e = 0; e < s.E; ++e)
    if (e != s.empty) all.push_back(e);
  std::vector<int32_t> out;
  for (int64_t t = 0; t < s.T; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    out.insert(out.end(), all.begin(), all.begin() + s.k);
  }
  return out;
}

// Σ_c a[c] · b[c] and Σ |a[c] · b[c]| in double.
std::pair<double, double> dot(const float* a, const float* b, int64_t n) {
  double s = 0, abs = 0;
  for (int64_t c = 0; c < n; ++c) {
    s += double(a[c]) * b[c];
    abs += std::fabs(double(a[c]) * b[c]);
  }
  return {s, abs};
}

// The bound's factor on Σ|x·w| for a sum over K (see the top).
double sum_bound(int64_t K) { return double(K / 16 + 1) * 0x1p-21; }

// h of one (row, output) against its reference sums g, u (with their Σ|x·w| sg, su).
void expect_h(float got, double g, double sg, double u, double su, double wt, float lim, int64_t K,
              const std::string& what) {
  const double eg = sum_bound(K) * sg + 1e-6 * std::fabs(g), eu = sum_bound(K) * su + 1e-6 * std::fabs(u);
  if (lim > 0) {
    u = std::clamp(u, -double(lim), double(lim));
    g = std::min(g, double(lim));
  }
  const double silu = g / (1 + std::exp(-g)), want = wt * silu * u;
  const double tol = std::fabs(wt) * (1.1 * eg * (std::fabs(u) + eu) + (std::fabs(silu) + 1.1 * eg) * eu) +
                     1e-6 * std::fabs(want) + 1e-30;
  ASSERT_LE(std::fabs(got - want), tol) << what << ": got " << got << " want " << want;
}

TEST(MmaGemmCuda, GroupedExpertsMatchReference) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1914);
  for (const Shape& s : {Shape{16, 6, 16, 1024, 512, 512, Kind::kFp4, 5}, Shape{17, 2, 5, 64, 96, 64, Kind::kFp8, 3},
                         Shape{64, 6, 32, 256, 160, 0, Kind::kFp4, 0}, Shape{300, 3, 8, 128, 64, 96, Kind::kBf16, 7}}) {
    const std::string what = "T " + std::to_string(s.T) + " k " + std::to_string(s.k) + " E " + std::to_string(s.E) +
                             " d " + std::to_string(s.d) + " inter " + std::to_string(s.inter) + " shared " +
                             std::to_string(s.shared_inter);
    const bool shared = s.shared_inter > 0;
    Host h;
    std::vector<dk::ExpertW> table;
    for (int e = 0; e <= s.E; ++e) {
      const int64_t inter = e < s.E ? s.inter : s.shared_inter;
      if (e == s.E && !shared) break;
      h.w1.push_back(random_weight(dev, rng, s.kind, inter, s.d));
      h.w3.push_back(random_weight(dev, rng, s.kind, inter, s.d));
      h.w2.push_back(random_weight(dev, rng, s.kind, s.d, inter));
      table.push_back({h.w1.back().dev, h.w3.back().dev, h.w2.back().dev});
      ASSERT_TRUE(fast::mma_expert_fits(table.back(), s.d, inter)) << what;
    }
    const dk::ExpertW* dt = dev.up(table);
    h.experts = choose(rng, s);
    h.x = kc::randn(rng, s.T * s.d);
    h.wts = kc::randn(rng, s.T * s.k);
    const int64_t mk = s.T * s.k, slots = mk + (shared ? s.T : 0);
    const float *dx = dev.up(h.x), *dw = dev.up(h.wts);
    const int32_t* dexp = dev.up(h.experts);
    float* hexp = dev.template zeros<float>(mk * s.inter);
    float* hs = dev.template zeros<float>(s.T * std::max<int64_t>(s.shared_inter, 1));
    float* y = dev.template zeros<float>(s.T * s.d);
    int32_t* ws = dev.template zeros<int32_t>(slots + 2 * (s.E + 2));
    float* parts = dev.template zeros<float>(slots * s.d);
    const dk::ExpertGroups groups{ws, ws + slots, ws + slots + s.E + 2};
    const float lim = 10.0f;
    const dk::ExpertUpK up{dx, dt, dexp, dw, s.k, s.d, s.inter, lim, hexp};
    const dk::ExpertUpK sup{dx, shared ? dt + s.E : nullptr, nullptr, nullptr, 1, s.d, s.shared_inter, lim, hs};
    ASSERT_TRUE(fast::launch_chain(dk::GroupedUpChain{up, sup, s.T, s.E, groups})) << what;
    ex.sync();
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << what;
    const std::vector<float> got_h = dev.down(hexp, mk * s.inter), got_hs = dev.down(hs, s.T * s.shared_inter);
    // Up: every routed (token, choice) row and the shared rows.
    for (int64_t slot = 0; slot < slots; ++slot) {
      const bool routed = slot < mk;
      const int64_t t = routed ? slot / s.k : slot - mk, e = routed ? h.experts[slot] : s.E;
      const int64_t inter = routed ? s.inter : s.shared_inter;
      const double wt = routed ? h.wts[slot] : 1.0;
      for (int64_t o = 0; o < inter; ++o) {
        const auto [g, sg] = dot(h.x.data() + t * s.d, h.w1[e].host.data() + o * s.d, s.d);
        const auto [u, su] = dot(h.x.data() + t * s.d, h.w3[e].host.data() + o * s.d, s.d);
        const float got = routed ? got_h[slot * inter + o] : got_hs[t * inter + o];
        expect_h(got, g, sg, u, su, wt, lim, s.d, what + " up slot " + std::to_string(slot) + " out " + std::to_string(o));
      }
    }
    // Down, on the h the tiles wrote: y[t, c] against the double sum over the token's experts.
    const dk::ExpertDownK down{dt, dexp, s.k, s.d, s.inter, hexp, shared ? dt + s.E : nullptr, s.shared_inter, hs, y};
    ASSERT_TRUE(fast::launch_chain(dk::GroupedDownChain{down, s.T, s.E, groups, parts})) << what;
    ex.sync();
    const std::vector<float> got_y = dev.down(y, s.T * s.d);
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t c = 0; c < s.d; ++c) {
        double want = 0, abs = 0;
        for (int j = 0; j <= s.k; ++j) {
          if (j == s.k && !shared) break;
          const int64_t e = j < s.k ? h.experts[t * s.k + j] : s.E, inter = j < s.k ? s.inter : s.shared_inter;
          const float* hr = j < s.k ? got_h.data() + (t * s.k + j) * s.inter : got_hs.data() + t * s.shared_inter;
          const auto [v, a] = dot(hr, h.w2[e].host.data() + c * inter, inter);
          want += v;
          abs += a;
        }
        ASSERT_LE(std::fabs(got_y[t * s.d + c] - want),
                  sum_bound(std::max(s.inter, s.shared_inter)) * abs + 1e-6 * std::fabs(want) + 1e-30)
            << what << " down t " << t << " c " << c << ": got " << got_y[t * s.d + c] << " want " << want;
      }
  }
}

// The dense tiles (MmaGemmChain) against float64 sums: rows 16, 17, 64 and 300 (partial and
// several row tiles), outputs 96 and 200 (partial column tiles), `in` 64 and 1280, FP8 32×32 and
// 128×128 blocks, FP4, bf16, strided x and y, and an FP8 row slice starting inside a scale block.
TEST(MmaGemmCuda, DenseMatchesReference) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1915);
  struct Case {
    int64_t rows, in, out;
    QuantFormat f;
    int64_t block_rows;  // FP8 scale blocks (square); 0: bf16
    int64_t first;       // the weight's first row (a row slice)
  };
  for (const Case& c : {Case{16, 64, 96, QuantFormat::kFp8E4M3, 32, 0}, Case{17, 1280, 200, QuantFormat::kFp4E2M1, 1, 0},
                        Case{64, 1280, 96, QuantFormat::kFp8E4M3, 128, 0}, Case{300, 64, 200, QuantFormat::kFp8E4M3, 0, 0},
                        Case{33, 256, 130, QuantFormat::kFp8E4M3, 32, 7}}) {
    const std::string what = "rows " + std::to_string(c.rows) + " in " + std::to_string(c.in) + " out " +
                             std::to_string(c.out) + " block " + std::to_string(c.block_rows) + " first " +
                             std::to_string(c.first);
    dk::DevWeight w;
    std::vector<float> wide;
    if (c.block_rows == 0) {
      TestWeight t = random_weight(dev, rng, Kind::kBf16, c.out, c.in);
      w = t.dev;
      wide = t.host;
    } else {
      const testing::StoredQuant q = kc::random_stored(rng, c.f, c.first + c.out, c.in, c.block_rows);
      w = kc::up_stored(dev, q).offset(c.first * c.in);
      wide = q.widened();
      wide.erase(wide.begin(), wide.begin() + c.first * c.in);
    }
    const int64_t xs = c.in + 4, ys = c.out + 3;
    const auto x = kc::randn(rng, c.rows * xs);
    float* y = dev.template zeros<float>(c.rows * ys);
    const dk::GemmK k{dev.up(x), xs, w, c.in, c.out, y, ys};
    ASSERT_TRUE(fast::mma_gemm_fits(k)) << what;
    ASSERT_TRUE(fast::launch_chain(dk::MmaGemmChain{k, c.rows})) << what;
    ex.sync();
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << what;
    const std::vector<float> got = dev.down(y, c.rows * ys);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) {
        const auto [want, abs] = dot(x.data() + r * xs, wide.data() + o * c.in, c.in);
        ASSERT_LE(std::fabs(got[r * ys + o] - want), sum_bound(c.in) * abs + 1e-6 * std::fabs(want) + 1e-30)
            << what << " at " << r << ", " << o << ": got " << got[r * ys + o] << " want " << want;
      }
  }
}

// The weights the tiles take: float32 weights, a reduced dimension not a multiple of 32 and FP8
// blocks narrower than 32 columns are declined (the backend keeps the warp kernels for them).
TEST(MmaGemmCuda, FitsOnlyExactTiles) {
  dk::DevWeight f32{reinterpret_cast<const float*>(uintptr_t{256}), nullptr};
  EXPECT_FALSE(fast::mma_weight_fits(f32, 64));
  dk::DevWeight bf16{nullptr, reinterpret_cast<const uint16_t*>(uintptr_t{256})};
  EXPECT_TRUE(fast::mma_weight_fits(bf16, 64));
  EXPECT_FALSE(fast::mma_weight_fits(bf16, 48));
  dk::DevWeight fp8;
  fp8.codes = reinterpret_cast<const uint8_t*>(uintptr_t{256});
  fp8.cols_log2 = 5;
  EXPECT_TRUE(fast::mma_weight_fits(fp8, 96));
  fp8.cols_log2 = 4;
  EXPECT_FALSE(fast::mma_weight_fits(fp8, 96));
}

// ---- The backend with the grouped experts on, against the CPU engine -------------------------
std::string model_dir(const std::string& name, const std::string& in_checkout) {
  if (std::filesystem::exists(in_checkout + "/config.json")) return in_checkout;
  return "test-models/" + name;
}

std::unique_ptr<Backend> grouped_backend(const Model& model, bool fast = true) {
  auto b = make_cuda_backend(model);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  if (!b.ok()) return nullptr;
  auto& dev = dynamic_cast<DeviceBackend<CudaExec>&>(**b);
  dev.set_mma_gemm(true, 1);  // every step's experts grouped, decode rows included
  dev.executor().set_fast_kernels(fast);
  return std::move(*b);
}

// dsv41-mini (bf16 experts, d 256, inter 96): prefill chunks and decode rows of three sequences.
// DISABLED: fails on the H200 (session 19's merged call, 2026-12-04 00:25 UTC): with the grouped
// tensor-core experts dsv41-mini's mixed batch differs from the CPU engine by max |dlogit| 0.241,
// 3 argmax differences (the rollback variant and tiny-random pass). set_mma_gemm stays off until
// this is found (docs/CUDA.md); run it with --gtest_also_run_disabled_tests.
TEST(MmaGemmCuda, DISABLED_MiniMixedBatchMatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string dir = model_dir("dsv41-mini", std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ts::check_against_cpu(**model, grouped_backend(**model), ts::mixed_batch((*model)->vocab_size()), 3,
                        dir + " (grouped experts)");
  ts::check_against_cpu(**model, grouped_backend(**model), ts::rollbacks((*model)->vocab_size()), 2,
                        dir + " (grouped experts, rollbacks)");
}

// tiny-random stored FP8 / FP4 (its experts FP4 with 32-column scales).
TEST(MmaGemmCuda, StoredFp8Fp4ModelMatchesCpuBackend) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const std::string config = model_dir("tiny-random", std::string(DSV41_SOURCE_DIR) + "/models/tiny-random") +
                             "/config.json";
  if (!std::filesystem::exists(config)) GTEST_SKIP() << config << " is absent";
  const auto bytes = [](const Backend& b) { return dynamic_cast<const DeviceBackend<CudaExec>&>(b).weight_bytes(); };
  ts::check_stored_model(
      config, [&](const Model& m) { return grouped_backend(m); }, bytes, false, "tiny-random (cuda, grouped experts)");
}

// ---- Kernel-level bench (run with --gtest_also_run_disabled_tests) --------------------------------
// The synthetic real-geometry model's experts (bench/configs/flash-synthetic.json: hidden 5120,
// 32 routed FP4 experts, top-6 + 1 shared, inter 2304) with random stored weights: one layer's
// up + down at 16, 64 and 2048 tokens, the warp kernels (fast kernels on, as the backend runs them
// for these row counts: Batched up, ExpertDownK) against the grouped chains, alternated, 3 rounds.
// Useful FLOPs: 2 · 3 · inter · d per (token, expert); the tensor cores run 3× that (three parts).
TEST(MmaGemmCuda, DISABLED_SyntheticExpertShapes) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(7);
  const int E = 32, k = 6;
  const int64_t d = 5120, inter = 2304;
  std::vector<dk::ExpertW> table;
  for (int e = 0; e <= E; ++e) {
    const auto w = [&](int64_t rows, int64_t in) {
      return kc::up_stored(dev, kc::random_stored(rng, QuantFormat::kFp4E2M1, rows, in, 1));
    };
    table.push_back({w(inter, d), w(inter, d), w(d, inter)});
  }
  const dk::ExpertW* dt = dev.up(table);
  for (int64_t T : {16, 64, 2048}) {
    std::vector<int32_t> experts;
    std::vector<int32_t> all(E);
    std::iota(all.begin(), all.end(), 0);
    for (int64_t t = 0; t < T; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      experts.insert(experts.end(), all.begin(), all.begin() + k);
    }
    const int64_t mk = T * k, slots = mk + T;
    const float* dx = dev.up(kc::randn(rng, T * d));
    const float* dw = dev.up(kc::randn(rng, mk));
    const int32_t* dexp = dev.up(experts);
    float* hexp = dev.template zeros<float>(mk * inter);
    float* hs = dev.template zeros<float>(T * inter);
    float* y = dev.template zeros<float>(T * d);
    int32_t* ws = dev.template zeros<int32_t>(slots + 2 * (E + 2));
    float* parts = dev.template zeros<float>(slots * d);
    const dk::ExpertGroups groups{ws, ws + slots, ws + slots + E + 2};
    const dk::ExpertUpK up{dx, dt, dexp, dw, k, d, inter, 10.0f, hexp}, sup{dx, dt + E, nullptr, nullptr, 1, d, inter, 10.0f, hs};
    const dk::ExpertDownK down{dt, dexp, k, d, inter, hexp, dt + E, inter, hs, y};
    const auto time_ms = [&](const std::function<void()>& f) {
      ex.sync();
      const auto t0 = std::chrono::steady_clock::now();
      f();
      ex.sync();
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    const auto old_up = [&] {
      dk::Batched<dk::ExpertUpK> b;
      b.count[0] = mk * inter, b.body[0] = up, b.count[1] = T * inter, b.body[1] = sup, b.n = 2;
      ex.for_each(mk * inter + T * inter, b);
    };
    const auto old_down = [&] { ex.for_each(T * d, down); };
    const auto new_up = [&] { ex.run_chain(dk::GroupedUpChain{up, sup, T, E, groups}); };
    const auto new_down = [&] { ex.run_chain(dk::GroupedDownChain{down, T, E, groups, parts}); };
    new_up();  // warm-up (and the shared-memory attribute)
    new_down();
    old_up();
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int round = 0; round < 3; ++round) {
      best[0] = std::min(best[0], time_ms(old_up));
      best[1] = std::min(best[1], time_ms(old_down));
      best[2] = std::min(best[2], time_ms(new_up));
      best[3] = std::min(best[3], time_ms(new_down));
    }
    ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
    const double up_flop = 2.0 * slots * 2 * inter * d, down_flop = 2.0 * slots * inter * d;
    std::printf("experts T %lld (%lld slots): up old %.3f ms new %.3f ms (%.1fx, %.1f TFLOP/s useful, %.1f MMA); "
                "down old %.3f ms new %.3f ms (%.1fx, %.1f TFLOP/s useful, %.1f MMA)\n",
                static_cast<long long>(T), static_cast<long long>(slots), best[0], best[2], best[0] / best[2],
                up_flop / best[2] * 1e-9, 3 * up_flop / best[2] * 1e-9, best[1], best[3], best[1] / best[3],
                down_flop / best[3] * 1e-9, 3 * down_flop / best[3] * 1e-9);
  }
}

// The synthetic model's dense GEMMs (wq_b 1280 → 32768 and wo_b 8192 → 5120 FP8 32×32, the head
// 5120 → 129280 bf16) at 64 and 2048 rows: GemmK's fast kernels against MmaGemmChain, alternated.
TEST(MmaGemmCuda, DISABLED_SyntheticDenseShapes) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(8);
  struct Gemm {
    const char* name;
    int64_t in, out;
    dk::DevWeight w;
  };
  std::vector<uint16_t> head(size_t(5120) * 129280);
  const auto pool = kc::randn(rng, 1 << 20, 0.05f);
  for (size_t i = 0; i < head.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &pool[(i * 7919) & ((1 << 20) - 1)], 4);
    head[i] = uint16_t(u >> 16);
  }
  const Gemm gemms[] = {
      {"wq_b fp8 1280->32768", 1280, 32768, kc::up_stored(dev, kc::random_stored(rng, QuantFormat::kFp8E4M3, 32768, 1280, 32))},
      {"wo_b fp8 8192->5120", 8192, 5120, kc::up_stored(dev, kc::random_stored(rng, QuantFormat::kFp8E4M3, 5120, 8192, 32))},
      {"head bf16 5120->129280", 5120, 129280, dk::DevWeight{nullptr, dev.up(head)}}};
  const auto time_ms = [&](const std::function<void()>& f) {
    ex.sync();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ex.sync();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int64_t rows : {64, 2048})
    for (const Gemm& g : gemms) {
      const float* x = dev.up(kc::randn(rng, rows * g.in));
      float* y = dev.template zeros<float>(rows * g.out);
      const dk::GemmK k{x, g.in, g.w, g.in, g.out, y, g.out};
      const auto old_gemm = [&] { ex.for_each(rows * g.out, k); };
      const auto new_gemm = [&] { ex.run_chain(dk::MmaGemmChain{k, rows}); };
      old_gemm();
      new_gemm();
      double best_old = 1e30, best_new = 1e30;
      for (int round = 0; round < 3; ++round) {
        best_old = std::min(best_old, time_ms(old_gemm));
        best_new = std::min(best_new, time_ms(new_gemm));
      }
      ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
      const double flop = 2.0 * rows * g.in * g.out;
      std::printf("dense %s rows %lld: old %.3f ms new %.3f ms (%.1fx, %.1f TFLOP/s useful, %.1f MMA)\n", g.name,
                  static_cast<long long>(rows), best_old, best_new, best_old / best_new, flop / best_new * 1e-9,
                  3 * flop / best_new * 1e-9);
    }
}

}  // namespace
}  // namespace dsv41
