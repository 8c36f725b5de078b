#include "testing/random_vision.h"

#include <cmath>
#include <cstring>

#include "base/rng.h"

namespace dsv41 {
namespace {

float bf16_value(float v) {  // round to nearest even, as a BF16 checkpoint stores it
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&v, &u, 4);
  return v;
}

// Uniform with standard deviation `scale` around `mean`.
std::vector<float> draw(Xoshiro256& g, size_t n, double scale, double mean = 0, bool bf16 = false) {
  std::vector<float> v(n);
  const double half_width = scale * std::sqrt(3.0);
  for (float& x : v) {
    x = float(mean + half_width * (2.0 * g.uniform24() - 1.0));
    if (bf16) x = bf16_value(x);
  }
  return v;
}

}  // namespace

VisionWeights random_vision_weights(VisionConfig config, int blocks, int out_dim, uint64_t seed) {
  config.num_hidden_layers = blocks;
  VisionWeights w;
  w.config = config;
  w.out_dim = out_dim;
  Xoshiro256 g(seed);
  const size_t d = size_t(config.hidden_size), f = size_t(config.intermediate_size), h = size_t(out_dim);
  const size_t in = 3 * size_t(config.patch_size) * size_t(config.patch_size);
  const size_t rr = size_t(config.downsample_ratio) * size_t(config.downsample_ratio);
  auto lin = [&](size_t out, size_t fan_in) { return draw(g, out * fan_in, 1.0 / std::sqrt(double(fan_in)), 0, true); };
  w.patch_w = lin(d, in);
  w.patch_b = draw(g, d, 0.02);
  for (int b = 0; b < blocks; ++b) {
    VisionBlockWeights k;
    k.norm1 = draw(g, d, 0.1, 1.0);
    k.wqkv = lin(3 * d, d);
    k.wqkv_bias = draw(g, 3 * d, 0.02);
    k.wo = lin(d, d);
    k.wo_bias = draw(g, d, 0.02);
    k.norm2 = draw(g, d, 0.1, 1.0);
    k.w1 = lin(2 * f, d);
    k.w2 = lin(d, f);
    w.blocks.push_back(std::move(k));
  }
  w.norm = draw(g, d, 0.1, 1.0);
  w.aligner_w1 = lin(h, rr * d);
  w.aligner_b1 = draw(g, h, 0.02);
  w.aligner_w2 = lin(h, h);
  w.aligner_b2 = draw(g, h, 0.02);
  w.image_start = draw(g, h, 1.0);
  w.image_newline = draw(g, h, 1.0);
  w.image_end = draw(g, h, 1.0);
  return w;
}

std::vector<float> random_patches(int64_t n, int patch_size, uint64_t seed) {
  Xoshiro256 g(seed);
  std::vector<float> v(size_t(n) * 3 * size_t(patch_size) * size_t(patch_size));
  for (float& x : v) x = 2.0f * g.uniform24() - 1.0f;
  return v;
}

}  // namespace dsv41
