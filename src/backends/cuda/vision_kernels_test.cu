// The vision tower's GEMM and attention kernels (vision_kernels.h) against float64 references on
// fresh random inputs, ragged sizes (m, n not multiples of the 128 tile, k not of 32, n keys not
// of 64). Inputs are drawn as bf16 values, so the only differences are the kernels' own
// roundings, and each bound is derived from them per element (bf16 keeps 8 significant bits:
// one rounding moves a value by at most u = 2⁻⁸ of itself):
//   GEMM: fp32 accumulation, |err| ≤ k·2⁻²⁴·Σ|a·w| (taken as 1e-5·Σ|a·w| for k ≤ 9216), plus
//         u·|y| for a bf16 output, checked with 2u;
//   attention: P rounded to bf16 (≤ u of each term of Σ p·v) and the output rounded to bf16
//         (≤ u |o|): |err| ≤ u (|o| + Σ p|v| / Σ p), checked with 2u.
// Measured on the H200 (docs/CUDA.md): the bf16 GEMM output reaches 0.97 of u·|y|, attention
// 0.76 of u (|o| + Σ p|v| / Σ p), fp32 outputs ≤ 0.07 of their bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/vision_kernels.h"
#include "model/vision/vision_rope.h"

namespace dsv41::cuda {
namespace {

using test::DeviceBuffer;

uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
float bf16_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}
std::vector<uint16_t> random_bf16(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = bf16_bits(normal(rng));
  return v;
}

struct GemmCase {
  int m, n, k, lda, ldo;
  bool bias, accumulate, bf16_out;
};

void check_gemm(const GemmCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<uint16_t> a = random_bf16(rng, size_t(c.m) * c.lda, 1.0f);
  const std::vector<uint16_t> w = random_bf16(rng, size_t(c.n) * c.k, 1.0f / std::sqrt(float(c.k)));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> bias(c.n), init(size_t(c.m) * c.ldo);
  for (auto& x : bias) x = normal(rng);
  for (auto& x : init) x = normal(rng);
  DeviceBuffer<uint16_t> da(a), dw(w), dout16(size_t(c.m) * c.ldo);
  DeviceBuffer<float> dbias(bias), dout32(init);
  GemmArgs g;
  g.m = c.m, g.n = c.n, g.k = c.k, g.a = da.get(), g.lda = c.lda, g.w = dw.get(), g.ldw = c.k;
  g.bias = c.bias ? dbias.get() : nullptr;
  g.ldo = c.ldo;
  if (c.bf16_out)
    g.out_bf16 = dout16.get();
  else
    g.out_f32 = dout32.get(), g.accumulate = c.accumulate;
  DSV41_STATUS_OK(gemm_bf16(g, nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got32 = dout32.to_host();
  const std::vector<uint16_t> got16 = dout16.to_host();
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      double y = c.bias ? bias[j] : 0.0, mag = std::fabs(y);
      for (int t = 0; t < c.k; ++t) {
        const double p = double(bf16_float(a[size_t(i) * c.lda + t])) * bf16_float(w[size_t(j) * c.k + t]);
        y += p;
        mag += std::fabs(p);
      }
      const size_t at = size_t(i) * c.ldo + j;
      if (c.accumulate && !c.bf16_out) y += init[at], mag += std::fabs(init[at]);
      const double got = c.bf16_out ? bf16_float(got16[at]) : got32[at];
      const double bound = 1e-5 * mag + (c.bf16_out ? std::ldexp(std::fabs(y), -7) : 0.0) + 1e-30;
      const double err = std::fabs(got - y);
      worst = std::max(worst, err / bound);
      if (!(err <= bound) && ++bad <= 3) ADD_FAILURE() << "(" << i << "," << j << ") got " << got << " want " << y;
    }
  // Columns past n (ldo > n) are untouched.
  for (int i = 0; i < c.m && !c.bf16_out; ++i)
    for (int j = c.n; j < c.ldo; ++j) ASSERT_EQ(got32[size_t(i) * c.ldo + j], init[size_t(i) * c.ldo + j]);
  EXPECT_EQ(bad, 0) << c.m << "x" << c.n << "x" << c.k << ": " << bad << " elements past the bound";
  std::printf("gemm %dx%dx%d bias %d acc %d bf16 %d: worst err / bound %.3g\n", c.m, c.n, c.k, c.bias, c.accumulate,
              c.bf16_out, worst);
}

TEST(VisionGemmCuda, MatchesFloat64OnRaggedSizes) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const GemmCase cases[] = {
      {1, 8, 8, 8, 8, false, false, false},          {37, 45, 24, 24, 45, true, false, false},
      {130, 129, 72, 80, 136, true, true, false},     {257, 300, 1032, 1032, 300, true, false, true},
      {600, 256, 592, 592, 256, false, true, false},  {5, 1000, 9216, 9216, 1000, true, false, false},
  };
  uint32_t seed = 11;
  for (const GemmCase& c : cases) check_gemm(c, seed++);
}

// SwiGLU pairs: columns (2t, 2t+1) = (gate, up) → silu(gate)·up in bf16. Bound: the gate's and
// up's fp32 errors (1e-5 of their Σ|a·w|) through silu (slope ≤ 1.1) and the product, plus 2u of
// the output for its bf16 rounding.
TEST(VisionGemmCuda, SwigluPairsMatchFloat64) {
  DSV41_REQUIRE_CUDA_DEVICE();
  for (auto [m, n, k] : {std::tuple{37, 88, 24}, std::tuple{300, 5632 / 8, 1024}, std::tuple{129, 2, 8}}) {
    std::mt19937 rng(m + n);
    const std::vector<uint16_t> a = random_bf16(rng, size_t(m) * k, 1.0f), w = random_bf16(rng, size_t(n) * k, 1.0f / std::sqrt(float(k)));
    DeviceBuffer<uint16_t> da(a), dw(w), dout(size_t(m) * n / 2);
    GemmArgs g;
    g.m = m, g.n = n, g.k = k, g.a = da.get(), g.lda = k, g.w = dw.get(), g.ldw = k;
    g.out_bf16 = dout.get(), g.ldo = n / 2, g.swiglu_pairs = true;
    DSV41_STATUS_OK(gemm_bf16(g, nullptr));
    DSV41_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = dout.to_host();
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < m; ++i)
      for (int t = 0; t < n / 2; ++t) {
        double y[2] = {0, 0}, mag[2] = {0, 0};
        for (int e = 0; e < 2; ++e)
          for (int c = 0; c < k; ++c) {
            const double p = double(bf16_float(a[size_t(i) * k + c])) * bf16_float(w[size_t(2 * t + e) * k + c]);
            y[e] += p, mag[e] += std::fabs(p);
          }
        const double silu = y[0] / (1.0 + std::exp(-y[0])), want = silu * y[1];
        const double bound = 1.1 * 1e-5 * mag[0] * std::fabs(y[1]) + std::fabs(silu) * 1e-5 * mag[1] +
                             std::ldexp(std::fabs(want), -7) + 1e-30;
        const double err = std::fabs(bf16_float(got[size_t(i) * (n / 2) + t]) - want);
        worst = std::max(worst, err / bound);
        if (!(err <= bound) && ++bad <= 3) ADD_FAILURE() << m << "x" << n << " (" << i << "," << t << ")";
      }
    EXPECT_EQ(bad, 0);
    std::printf("gemm swiglu pairs %dx%dx%d: worst err / bound %.3g\n", m, n, k, worst);
  }
}

// The device RoPE tables against vision_rope::rope_tables: the same float32 angle, cosf / sinf
// against std::cos / std::sin of a float (each within 2 ulp): |Δ| ≤ 5e-7.
TEST(VisionRopeCuda, TablesMatchTheHost) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const int n_h = 74, n_w = 13, hd = 64;
  std::vector<float> cos_t, sin_t, inv(hd / 4);
  vision_rope::rope_tables(n_h, n_w, hd, 10000.0, cos_t, sin_t);
  for (int k = 0; k < hd / 4; ++k) inv[size_t(k)] = vision_rope::inv_freq(k, hd, 10000.0);
  DeviceBuffer<float> dinv(inv), dcos(cos_t.size()), dsin(sin_t.size());
  DSV41_STATUS_OK(rope_tables_device(n_h, n_w, hd, dinv.get(), dcos.get(), dsin.get(), nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> gc = dcos.to_host(), gs = dsin.to_host();
  double worst = 0;
  for (size_t i = 0; i < cos_t.size(); ++i)
    worst = std::max({worst, std::fabs(double(gc[i]) - cos_t[i]), std::fabs(double(gs[i]) - sin_t[i])});
  std::printf("rope tables %dx%d: max |device - host| %.3g\n", n_h, n_w, worst);
  EXPECT_LE(worst, 5e-7);
}

TEST(VisionGemmCuda, RefusesBadArguments) {
  GemmArgs g;
  g.m = 4, g.n = 4, g.k = 12, g.lda = 12, g.ldw = 12, g.ldo = 4;
  alignas(16) static uint16_t buf[64];
  static float out[16];
  g.a = buf, g.w = buf, g.out_f32 = out;
  EXPECT_NE(gemm_bf16(g, nullptr).to_string().find("multiples of 8"), std::string::npos);
  g.k = g.lda = g.ldw = 8;
  g.out_bf16 = buf;
  EXPECT_NE(gemm_bf16(g, nullptr).to_string().find("exactly one"), std::string::npos);
  g.out_bf16 = nullptr;
  g.m = 0;
  EXPECT_FALSE(gemm_bf16(g, nullptr).ok());
}

void check_attention(int n, int heads, float q_scale, uint32_t seed) {
  const int hd = 64, d = heads * hd;
  std::mt19937 rng(seed);
  const std::vector<uint16_t> q = random_bf16(rng, size_t(heads) * n * hd, q_scale);
  const std::vector<uint16_t> k = random_bf16(rng, size_t(heads) * n * hd, 1.0f);
  const std::vector<uint16_t> v = random_bf16(rng, size_t(heads) * n * hd, 1.0f);
  DeviceBuffer<uint16_t> dq(q), dk(k), dv(v), dout(size_t(n) * (d + 2));
  AttentionArgs a;
  a.n = n, a.heads = heads, a.head_dim = hd, a.q = dq.get(), a.k = dk.get(), a.v = dv.get();
  a.out = dout.get(), a.ldo = d + 2;  // a padded row: the kernel must honour ldo
  DSV41_STATUS_OK(attention_bf16(a, nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = dout.to_host();
  std::vector<double> p(n);
  int bad = 0;
  double worst = 0;
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < n; ++i) {
      const size_t qi = (size_t(h) * n + i) * hd;
      double mx = -INFINITY;
      for (int j = 0; j < n; ++j) {
        const size_t kj = (size_t(h) * n + j) * hd;
        double s = 0;
        for (int t = 0; t < hd; ++t) s += double(bf16_float(q[qi + t])) * bf16_float(k[kj + t]);
        p[j] = s / 8.0;
        mx = std::max(mx, p[j]);
      }
      double z = 0;
      for (int j = 0; j < n; ++j) z += (p[j] = std::exp(p[j] - mx));
      for (int t = 0; t < hd; ++t) {
        double o = 0, mag = 0;
        for (int j = 0; j < n; ++j) {
          const double vj = bf16_float(v[(size_t(h) * n + j) * hd + t]);
          o += p[j] * vj;
          mag += p[j] * std::fabs(vj);
        }
        o /= z, mag /= z;
        const double g = bf16_float(got[size_t(i) * (d + 2) + h * hd + t]);
        const double bound = std::ldexp(std::fabs(o) + mag, -7) + 1e-6;
        worst = std::max(worst, std::fabs(g - o) / bound);
        if (!(std::fabs(g - o) <= bound) && ++bad <= 3)
          ADD_FAILURE() << "n " << n << " head " << h << " row " << i << " ch " << t << ": got " << g << " want " << o;
      }
    }
  EXPECT_EQ(bad, 0) << "n " << n << ": " << bad << " elements past the bound";
  std::printf("attention n %d heads %d q scale %.1f: worst err / bound %.3g\n", n, heads, q_scale, worst);
}

TEST(VisionAttentionCuda, MatchesFloat64OnRaggedSizes) {
  DSV41_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 100;
  for (int n : {1, 17, 64, 65, 200, 777}) check_attention(n, 3, 1.0f, seed++);
  check_attention(300, 2, 4.0f, seed++);  // sharp softmax: the running max moves between tiles
  check_attention(1500, 1, 2.0f, seed++);
}

TEST(VisionAttentionCuda, RefusesOtherHeadWidths) {
  AttentionArgs a;
  a.n = 4, a.heads = 2, a.head_dim = 32;
  EXPECT_NE(attention_bf16(a, nullptr).to_string().find("head_dim 32"), std::string::npos);
}

}  // namespace
}  // namespace dsv41::cuda
