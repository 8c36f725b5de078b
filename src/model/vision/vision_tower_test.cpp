// The tower's fast path (GEMMs, threaded) against its scalar reference on fresh random weights
// and patches, at sizes that exercise ragged GEMM tails (width 40, 5 heads of 8, SwiGLU 36, a
// 7 × 4 grid padded by the aligner on both axes), serial and on a pool of 3.
// Bound: both compute the same float32 function, the reference summing in double; float
// rounding over 3 blocks is ~1e-6 of the output scale; 1e-4 is 100× that.
#include <gtest/gtest.h>

#include <cmath>

#include "base/rng.h"
#include "base/thread_pool.h"
#include "model/vision/vision_tower.h"
#include "testing/random_vision.h"

namespace dsv41 {
namespace {

std::vector<float> randn(Xoshiro256& g, size_t n, float scale, float mean = 0) {
  std::vector<float> v(n);
  for (float& x : v) {
    double s = 0;
    for (int k = 0; k < 4; ++k) s += g.uniform() - 0.5;
    x = mean + scale * float(s * std::sqrt(3.0));  // Irwin–Hall, unit variance
  }
  return v;
}

// A small tower (width 40, 5 heads, SwiGLU 36, 2-pixel patches, 3 blocks) into a 24-wide model.
VisionWeights random_weights(uint64_t seed) {
  VisionConfig c;
  c.hidden_size = 40;
  c.num_attention_heads = 5;
  c.intermediate_size = 36;
  c.patch_size = 2;
  return random_vision_weights(c, /*blocks=*/3, /*out_dim=*/24, seed);
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return err / scale;
}

TEST(VisionTower, FastPathMatchesTheReference) {
  ThreadPool pool(3);
  for (uint64_t seed : {1, 2}) {
    const VisionWeights w = random_weights(seed);
    Xoshiro256 g(seed + 100);
    const int n_h = 7, n_w = 4;
    const std::vector<float> patches = randn(g, size_t(n_h * n_w * 12), 1.0f);
    const std::vector<float> ref = vit_forward_reference(w, patches, n_h, n_w);
    const std::vector<float> ref_tok = aligner_forward_reference(w, ref, n_h, n_w);
    ASSERT_EQ(ref_tok.size(), size_t(3 * 2 * 24));
    CpuExec serial = CpuExec::serial();
    CpuExec threaded = serial;
    threaded.pool = &pool;
    for (const CpuExec& ex : {serial, threaded}) {
      const std::vector<float> fast = vit_forward(ex, w, patches, n_h, n_w);
      EXPECT_LE(rel_error(fast, ref), 1e-4) << seed;
      EXPECT_LE(rel_error(aligner_forward(ex, w, ref, n_h, n_w), ref_tok), 1e-4) << seed;
    }
    // Not vacuous: the output depends on every patch (bidirectional attention), past the bound.
    std::vector<float> moved = patches;
    moved.back() += 0.5f;
    const std::vector<float> other = vit_forward(serial, w, moved, n_h, n_w);
    std::vector<float> first_ref(ref.begin(), ref.begin() + 40), first_other(other.begin(), other.begin() + 40);
    EXPECT_GT(rel_error(first_other, first_ref), 1e-3);
  }
}

}  // namespace
}  // namespace dsv41
