// Encode time of the GPU vision tower (backends/cuda/vision_tower.h) on the release geometry
// (width 1024, 16 heads, SwiGLU 2816, 32 blocks, aligner 9216 → 5120 → 5120), random weights,
// for the patch grids of a 544² image (39 × 39, min_pixels) and a 1024² image (74 × 74), and
// the two kernels alone at those sizes. docs/VISION.md has the numbers.
//   dsv41_cuda_vision_bench [--iters N] [--sides 39,74]
// Per grid: the median wall time of encode() (patches up, tower + aligner, features and tokens
// down) over N runs after one warm-up, and the achieved TFLOP/s counting 2 flops per
// multiply-add of every product (attention: q·kᵀ and p·v, 4·n²·width per block).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/vision_kernels.h"
#include "backends/cuda/vision_tower.h"
#include "testing/random_vision.h"

namespace {

using namespace dsv41;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_ms(int iters, F&& f) {  // median of iters after one warm-up, device work included
  f();
  cudaDeviceSynchronize();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    cudaDeviceSynchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

double tower_flops(const VisionWeights& w, int side) {
  const double n = double(side) * side, d = w.config.hidden_size, f = w.config.intermediate_size, h = w.out_dim;
  const double tokens = double((side + 2) / 3) * ((side + 2) / 3);
  const double block = 2 * n * d * (3 * d + d + 2 * f + f) + 4 * n * n * d;
  return 2 * n * 588 * d + double(w.blocks.size()) * block + 2 * tokens * (9 * d * h + h * h);
}

void kernels_alone(int side, int iters) {
  const int n = side * side, d = 1024, f = 2816;
  uint16_t *a, *w, *q;
  float* out;
  cudaMalloc(&a, size_t(n) * f * 2);
  cudaMalloc(&w, size_t(2 * f) * d * 2);
  cudaMalloc(&q, size_t(n) * d * 2 * 4);
  cudaMalloc(&out, size_t(n) * 2 * f * 4);
  cudaMemset(a, 0x3c, size_t(n) * f * 2);  // bf16 ≈ 0.0115: finite values, the time does not depend on them
  cudaMemset(w, 0x3c, size_t(2 * f) * d * 2);
  cudaMemset(q, 0x3c, size_t(n) * d * 2 * 4);
  struct Shape {
    const char* name;
    int nn, k;
  } shapes[] = {{"qkv", 3 * d, d}, {"wo", d, d}, {"w1", 2 * f, d}, {"w2", d, f}};
  for (const Shape& s : shapes) {
    cuda::GemmArgs g;
    g.m = n, g.n = s.nn, g.k = s.k, g.a = a, g.lda = s.k, g.w = w, g.ldw = s.k, g.out_f32 = out, g.ldo = s.nn;
    const double ms = time_ms(iters, [&] { (void)cuda::gemm_bf16(g, nullptr); });
    std::printf("  gemm %-4s %5d x %5d x %5d: %8.3f ms  %6.1f TFLOP/s\n", s.name, n, s.nn, s.k, ms,
                2.0 * n * s.nn * s.k / ms / 1e9);
  }
  cuda::AttentionArgs at;
  at.n = n, at.heads = 16, at.head_dim = 64, at.q = q, at.k = q + size_t(n) * d, at.v = q + 2 * size_t(n) * d;
  at.out = q + 3 * size_t(n) * d, at.ldo = d;
  const double ms = time_ms(iters, [&] { (void)cuda::attention_bf16(at, nullptr); });
  std::printf("  attention n %d, 16 heads of 64: %8.3f ms  %6.1f TFLOP/s\n", n, ms, 4.0 * n * n * d / ms / 1e9);
  cudaFree(a), cudaFree(w), cudaFree(q), cudaFree(out);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 5;
  std::vector<int> sides = {39, 74};
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--sides") && i + 1 < argc) {
      sides.clear();
      for (const char* p = argv[++i]; *p;) {
        sides.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--iters N] [--sides 39,74]\n", argv[0]);
      return 2;
    }
  }
  auto dev = cuda::device_summary(0);
  if (!dev.ok()) {
    std::fprintf(stderr, "no CUDA device: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  std::printf("device: %s\n", dev->c_str());
  VisionConfig c;  // the release's: 1024, 16 heads, SwiGLU 2816, patch 14, downsample 3
  const VisionWeights w = random_vision_weights(c, 32, 5120, 42);
  auto tower = cuda::VisionTowerGpu::create(w);
  if (!tower.ok()) {
    std::fprintf(stderr, "%s\n", tower.status().to_string().c_str());
    return 1;
  }
  std::printf("weights on the device: %.1f MiB (bf16 projections)\n", double((*tower)->weight_bytes()) / (1 << 20));
  for (int side : sides) {
    const std::vector<float> patches = random_patches(int64_t(side) * side, 14, uint64_t(side));
    Status st = ok_status();
    const double ms = time_ms(iters, [&] {
      auto r = (*tower)->encode(patches, side, side);
      if (!r.ok()) st = r.status();
    });
    if (!st.ok()) {
      std::fprintf(stderr, "encode: %s\n", st.to_string().c_str());
      return 1;
    }
    const double vit_ms = time_ms(iters, [&] { (void)(*tower)->encode_vit(patches, side, side); });
    std::printf("image %d x %d px (%d x %d = %d patches, 32 blocks + aligner): encode %.2f ms, %.1f TFLOP/s "
                "(tower alone, no aligner: %.2f ms)\n",
                side * 14, side * 14, side, side, side * side, ms, tower_flops(w, side) / ms / 1e9, vit_ms);
    kernels_alone(side, iters);
  }
  return 0;
}
