#include "model/vision/vision_tower.h"

#include <algorithm>
#include <cmath>

#include "model/rmsnorm.h"
#include "model/vision/vision_rope.h"

namespace dsv41 {
namespace {

constexpr double kVisionEps = 1e-6;

// y[rows, out] = x[rows, in] · Wᵀ (+ b), W [out, in].
void linear(const float* x, int64_t rows, int64_t in, const std::vector<float>& w, const std::vector<float>* b,
            int64_t out, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? (*b)[size_t(o)] : 0.0;
      const float* wr = w.data() + o * in;
      const float* xr = x + r * in;
      for (int64_t i = 0; i < in; ++i) s += double(xr[i]) * wr[i];
      y[r * out + o] = float(s);
    }
}

void attention(const VisionBlockWeights& k, const VisionConfig& c, const std::vector<float>& h, int64_t n,
               const std::vector<float>& cos_t, const std::vector<float>& sin_t, std::vector<float>& out) {
  const int64_t d = c.hidden_size;
  const int heads = c.num_attention_heads, hd = int(d / heads), half = hd / 2;
  std::vector<float> qkv(size_t(n * 3 * d));
  linear(h.data(), n, d, k.wqkv, &k.wqkv_bias, 3 * d, qkv.data());
  for (int64_t i = 0; i < n; ++i)
    for (int hh = 0; hh < heads; ++hh) {
      vision_rope::rotate(&qkv[size_t(i * 3 * d + hh * hd)], &cos_t[size_t(i * half)], &sin_t[size_t(i * half)], hd);
      vision_rope::rotate(&qkv[size_t(i * 3 * d + d + hh * hd)], &cos_t[size_t(i * half)], &sin_t[size_t(i * half)], hd);
    }
  std::vector<float> o(size_t(n * d));
  std::vector<double> p(static_cast<size_t>(n));
  const double scale = 1.0 / std::sqrt(double(hd));
  for (int hh = 0; hh < heads; ++hh)
    for (int64_t i = 0; i < n; ++i) {
      const float* q = &qkv[size_t(i * 3 * d + hh * hd)];
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const float* kk = &qkv[size_t(j * 3 * d + d + hh * hd)];
        double s = 0;
        for (int t = 0; t < hd; ++t) s += double(q[t]) * kk[t];
        p[size_t(j)] = s * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      double z = 0;
      for (int64_t j = 0; j < n; ++j) z += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
      for (int t = 0; t < hd; ++t) {
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += p[size_t(j)] * qkv[size_t(j * 3 * d + 2 * d + hh * hd + t)];
        o[size_t(i * d + hh * hd + t)] = float(s / z);
      }
    }
  out.resize(size_t(n * d));
  linear(o.data(), n, d, k.wo, &k.wo_bias, d, out.data());
}

void swiglu(const VisionBlockWeights& k, const VisionConfig& c, const std::vector<float>& h, int64_t n,
            std::vector<float>& out) {
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  std::vector<float> gu(size_t(n * 2 * f)), a(size_t(n * f));
  linear(h.data(), n, d, k.w1, nullptr, 2 * f, gu.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < f; ++t) {
      const double g = gu[size_t(i * 2 * f + t)], u = gu[size_t(i * 2 * f + f + t)];
      a[size_t(i * f + t)] = float(g / (1.0 + std::exp(-g)) * u);
    }
  out.resize(size_t(n * d));
  linear(a.data(), n, f, k.w2, nullptr, d, out.data());
}

}  // namespace

std::vector<float> vit_forward_reference(const VisionWeights& w, const std::vector<float>& patches, int n_h, int n_w,
                                         std::vector<float>* after_block0) {
  const VisionConfig& c = w.config;
  const int64_t n = int64_t(n_h) * n_w, d = c.hidden_size, in = 3 * int64_t(c.patch_size) * c.patch_size;
  std::vector<float> x(size_t(n * d)), h(size_t(n * d)), delta;
  linear(patches.data(), n, in, w.patch_w, &w.patch_b, d, x.data());
  std::vector<float> cos_t, sin_t;
  vision_rope::rope_tables(n_h, n_w, int(d / c.num_attention_heads), c.rope_theta, cos_t, sin_t);
  for (size_t b = 0; b < w.blocks.size(); ++b) {
    const VisionBlockWeights& k = w.blocks[b];
    rmsnorm_rows(x.data(), n, d, k.norm1.data(), kVisionEps, h.data());
    attention(k, c, h, n, cos_t, sin_t, delta);
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
    rmsnorm_rows(x.data(), n, d, k.norm2.data(), kVisionEps, h.data());
    swiglu(k, c, h, n, delta);
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
    if (b == 0 && after_block0) *after_block0 = x;
  }
  rmsnorm_rows(x.data(), n, d, w.norm.data(), kVisionEps, x.data());
  return x;
}

std::vector<float> aligner_forward_reference(const VisionWeights& w, const std::vector<float>& features, int n_h,
                                             int n_w) {
  const int r = w.config.downsample_ratio;
  const int64_t d = w.config.hidden_size, hdim = w.out_dim, cols = int64_t(r) * r * d;
  const int th = (n_h + r - 1) / r, tw = (n_w + r - 1) / r;
  const int64_t tokens = int64_t(th) * tw;
  std::vector<float> unfolded(size_t(tokens * cols), 0.0f);  // zero = the right/bottom padding
  for (int ty = 0; ty < th; ++ty)
    for (int tx = 0; tx < tw; ++tx)
      for (int kh = 0; kh < r; ++kh)
        for (int kw = 0; kw < r; ++kw) {
          const int y = ty * r + kh, x = tx * r + kw;
          if (y >= n_h || x >= n_w) continue;
          const float* f = &features[size_t((int64_t(y) * n_w + x) * d)];
          float* dst = &unfolded[size_t((int64_t(ty) * tw + tx) * cols)];
          for (int64_t ch = 0; ch < d; ++ch) dst[ch * r * r + kh * r + kw] = f[ch];
        }
  std::vector<float> hid(size_t(tokens * hdim)), out(size_t(tokens * hdim));
  linear(unfolded.data(), tokens, cols, w.aligner_w1, &w.aligner_b1, hdim, hid.data());
  for (float& v : hid) v = float(0.5 * double(v) * (1.0 + std::erf(double(v) / std::sqrt(2.0))));
  linear(hid.data(), tokens, hdim, w.aligner_w2, &w.aligner_b2, hdim, out.data());
  return out;
}

}  // namespace dsv41
