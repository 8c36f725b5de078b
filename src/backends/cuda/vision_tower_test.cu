// The GPU vision tower (vision_tower.h) against the CPU tower (model/vision/vision_tower.h) on
// random weights (bf16 values, as a checkpoint holds them, so both sides use the same numbers)
// and random patches, on grids that are not multiples of 3 or of the kernels' tiles:
//   small width (128, 2 heads of 64, SwiGLU 88, out 72, 3 blocks) against the scalar reference;
//   the release width (1024, 16 heads, SwiGLU 2816) with 2 blocks and with all 32 against the
//   threaded fast path.
// Bound: the GPU rounds every product's input to bf16 (8 significant bits, u = 2⁻⁸): the
// patches, the normed rows, q/k/v, P, the attention output, the SwiGLU product, the unfolded
// features and the GELU output. Each rounding moves a value by ≈ u/√3 in rms (uniform relative
// error up to u), a handful per block, partly damped by the norms; so the tower output's relative
// L2 error is about one u after a few blocks. Checked: relative L2 ≤ 3u ≈ 1.2e-2 (3e-2 after 32
// blocks), largest error ≤ 0.05 of the largest value; and not vacuous: another image is > 10×
// the bound away. Measured on the H200: 3.6e-3 … 6.1e-3 (≤ 3 blocks), 9.3e-3 after 32 blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/vision_tower.h"
#include "base/thread_pool.h"
#include "model/vision/vision_tower.h"
#include "testing/random_vision.h"

namespace dsv41::cuda {
namespace {

struct Errors {
  double rel_l2, max_rel;
};
Errors compare(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return {INFINITY, INFINITY};
  double num = 0, den = 0, err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = double(got[i]) - want[i];
    if (!std::isfinite(got[i])) return {INFINITY, INFINITY};
    num += e * e, den += double(want[i]) * want[i];
    err = std::max(err, std::fabs(e)), scale = std::max(scale, std::fabs(double(want[i])));
  }
  return {std::sqrt(num / den), err / scale};
}

VisionConfig config(int width, int heads, int ffn) {
  VisionConfig c;
  c.hidden_size = width, c.num_attention_heads = heads, c.intermediate_size = ffn;
  return c;  // patch 14, downsample 3, θ 10000: the release's
}

void check_tower(const VisionWeights& w, int n_h, int n_w, bool scalar_ref, double bound, uint64_t seed) {
  const std::vector<float> patches = random_patches(int64_t(n_h) * n_w, w.config.patch_size, seed);
  ThreadPool pool(std::max(1u, std::thread::hardware_concurrency()));
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  const std::vector<float> vit =
      scalar_ref ? vit_forward_reference(w, patches, n_h, n_w) : vit_forward(ex, w, patches, n_h, n_w);
  const std::vector<float> tok =
      scalar_ref ? aligner_forward_reference(w, vit, n_h, n_w) : aligner_forward(ex, w, vit, n_h, n_w);
  auto tower = VisionTowerGpu::create(w);
  ASSERT_TRUE(tower.ok()) << tower.status().to_string();
  auto got = (*tower)->encode(patches, n_h, n_w);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const Errors ev = compare(got->vit, vit), ea = compare(got->aligner, tok);
  std::printf("tower width %d, %zu blocks, %dx%d patches: vit rel L2 %.3g max %.3g; aligner rel L2 %.3g max %.3g\n",
              w.config.hidden_size, w.blocks.size(), n_h, n_w, ev.rel_l2, ev.max_rel, ea.rel_l2, ea.max_rel);
  EXPECT_LE(ev.rel_l2, bound);
  EXPECT_LE(ev.max_rel, 0.05);
  EXPECT_LE(ea.rel_l2, bound);
  EXPECT_LE(ea.max_rel, 0.05);
  // Not vacuous: another image's output is far outside the bound.
  auto other = (*tower)->encode(random_patches(int64_t(n_h) * n_w, w.config.patch_size, seed + 1), n_h, n_w);
  ASSERT_TRUE(other.ok());
  EXPECT_GT(compare(other->vit, vit).rel_l2, 10 * bound);
}

TEST(VisionTowerCuda, SmallWidthMatchesTheScalarReference) {
  DSV41_REQUIRE_CUDA_DEVICE();
  const VisionWeights w = random_vision_weights(config(128, 2, 88), 3, 72, 5);
  check_tower(w, 13, 17, true, 1.2e-2, 1);
  check_tower(w, 7, 4, true, 1.2e-2, 3);
  check_tower(w, 1, 2, true, 1.2e-2, 5);
}

TEST(VisionTowerCuda, ReleaseWidthMatchesTheFastPath) {
  DSV41_REQUIRE_CUDA_DEVICE();
  check_tower(random_vision_weights(config(1024, 16, 2816), 2, 1280, 6), 13, 17, false, 1.2e-2, 7);
  check_tower(random_vision_weights(config(1024, 16, 2816), 32, 1280, 8), 10, 11, false, 3e-2, 9);
}

TEST(VisionTowerCuda, SupportsNamesWhatTheKernelsDoNotTake) {  // no device needed
  EXPECT_TRUE(VisionTowerGpu::supports(VisionConfig{}, 5120).ok());  // the release's
  EXPECT_NE(VisionTowerGpu::supports(config(96, 3, 64), 24).to_string().find("head width 32"), std::string::npos);
  EXPECT_NE(VisionTowerGpu::supports(config(128, 2, 36), 24).to_string().find("multiples of 8"), std::string::npos);
  EXPECT_NE(VisionTowerGpu::supports(config(128, 2, 88), 20).to_string().find("output width 20"), std::string::npos);
}

TEST(VisionTowerCuda, RefusesWhatTheKernelsDoNotTake) {
  DSV41_REQUIRE_CUDA_DEVICE();
  auto t = VisionTowerGpu::create(random_vision_weights(config(96, 3, 64), 1, 24, 1));  // head width 32
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().to_string().find("head width 32"), std::string::npos);
  t = VisionTowerGpu::create(random_vision_weights(config(128, 2, 36), 1, 24, 1));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().to_string().find("multiples of 8"), std::string::npos);
  VisionWeights w = random_vision_weights(config(128, 2, 88), 1, 24, 1);
  w.blocks[0].wo.pop_back();
  t = VisionTowerGpu::create(w);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().to_string().find("wo"), std::string::npos);
  t = VisionTowerGpu::create(random_vision_weights(config(128, 2, 88), 1, 24, 1));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto e = (*t)->encode(std::vector<float>(5, 0.0f), 2, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().to_string().find("patch values"), std::string::npos);
}

}  // namespace
}  // namespace dsv41::cuda
