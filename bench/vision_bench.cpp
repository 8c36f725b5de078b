// The vision tower's fast path at the release's width (1024, 16 heads, SwiGLU 2816), ONE block
// (plus patch embedding and final norm), on the patch grids of a 544² image (39 × 39, the
// min_pixels size) and a 1024² image (74 × 74). The whole tower is 32 such blocks: multiply.
// Weights random (values do not change the time). docs/VISION.md has the numbers.
// BM_VisionBlockThreads: the 1024² block on pools of 1..16 threads (`serve --vision-threads`).
#include <benchmark/benchmark.h>

#include "base/rng.h"
#include "bench/bench_exec.h"
#include "model/vision/vision_tower.h"

namespace dsv41 {
namespace {

std::vector<float> uniform(Xoshiro256& g, size_t n, float scale) {
  std::vector<float> v(n);
  for (float& x : v) x = scale * (g.uniform24() - 0.5f);
  return v;
}

VisionWeights release_width_one_block() {
  VisionWeights w;
  w.out_dim = 5120;
  const size_t d = 1024, f = 2816;
  Xoshiro256 g(7);
  w.config.num_hidden_layers = 1;
  w.patch_w = uniform(g, d * 588, 0.05f);
  w.patch_b = uniform(g, d, 0.01f);
  VisionBlockWeights k;
  k.norm1 = k.norm2 = std::vector<float>(d, 1.0f);
  k.wqkv = uniform(g, 3 * d * d, 0.05f);
  k.wqkv_bias = uniform(g, 3 * d, 0.01f);
  k.wo = uniform(g, d * d, 0.05f);
  k.wo_bias = uniform(g, d, 0.01f);
  k.w1 = uniform(g, 2 * f * d, 0.05f);
  k.w2 = uniform(g, d * f, 0.05f);
  w.blocks.push_back(std::move(k));
  w.norm = std::vector<float>(d, 1.0f);
  return w;
}

void BM_VisionBlock(benchmark::State& state) {
  static const VisionWeights w = release_width_one_block();
  const int side = int(state.range(0));
  Xoshiro256 g(1);
  const std::vector<float> patches = uniform(g, size_t(side) * side * 588, 2.0f);
  for (auto _ : state) benchmark::DoNotOptimize(vit_forward(bench_exec(), w, patches, side, side));
  state.counters["patches"] = double(side) * side;
}
BENCHMARK(BM_VisionBlock)->Arg(39)->Arg(74)->ArgName("grid_side")->Unit(benchmark::kMillisecond)->Iterations(1);

// The same block of the 1024² image on a pool of N threads: what `dsv41 serve --vision-threads N`
// gives one image (the server encoded on one thread before it had a vision encoder).
void BM_VisionBlockThreads(benchmark::State& state) {
  static const VisionWeights w = release_width_one_block();
  const int side = int(state.range(0)), threads = int(state.range(1));
  ThreadPool pool(threads);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  Xoshiro256 g(1);
  const std::vector<float> patches = uniform(g, size_t(side) * side * 588, 2.0f);
  for (auto _ : state) benchmark::DoNotOptimize(vit_forward(ex, w, patches, side, side));
  state.counters["threads"] = threads;
}
BENCHMARK(BM_VisionBlockThreads)
    ->ArgsProduct({{74}, {1, 2, 4, 8, 16}})
    ->ArgNames({"grid_side", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace dsv41
