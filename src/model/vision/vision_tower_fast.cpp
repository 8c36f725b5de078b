#include <algorithm>
#include <cmath>

#include "kernels/cpu/gemm.h"
#include "model/rmsnorm.h"
#include "model/vision/vision_rope.h"
#include "model/vision/vision_tower.h"

namespace dsv41 {
namespace {

constexpr double kVisionEps = 1e-6;

void add_bias(float* y, int64_t rows, int64_t out, const std::vector<float>& b, const CpuExec& ex) {
  ex.parallel_items(rows, out, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] += b[size_t(o)];
  });
}

// Attention of one block on normalised rows h [n, d]; result (before the residual) in `out`.
void attention(const CpuExec& ex, const VisionBlockWeights& k, const VisionConfig& c, const std::vector<float>& h,
               int64_t n, const std::vector<float>& cos_t, const std::vector<float>& sin_t, std::vector<float>& out) {
  const int64_t d = c.hidden_size;
  const int heads = c.num_attention_heads, hd = int(d / heads), half = hd / 2;
  std::vector<float> qkv(size_t(n * 3 * d));
  gemm_f32(ex, h.data(), n, d, k.wqkv.data(), 3 * d, qkv.data());
  add_bias(qkv.data(), n, 3 * d, k.wqkv_bias, ex);
  ex.parallel_items(n, 2 * d, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int hh = 0; hh < heads; ++hh) {
        vision_rope::rotate(&qkv[size_t(i * 3 * d + hh * hd)], &cos_t[size_t(i * half)], &sin_t[size_t(i * half)], hd);
        vision_rope::rotate(&qkv[size_t(i * 3 * d + d + hh * hd)], &cos_t[size_t(i * half)], &sin_t[size_t(i * half)],
                            hd);
      }
  });
  std::vector<float> q(size_t(n * hd)), kk(size_t(n * hd)), vt(size_t(hd * n)), p(size_t(n * n)), o_h(size_t(n * hd));
  std::vector<float> o(size_t(n * d));
  const float scale = float(1.0 / std::sqrt(double(hd)));
  for (int hh = 0; hh < heads; ++hh) {
    for (int64_t i = 0; i < n; ++i)
      for (int t = 0; t < hd; ++t) {
        q[size_t(i * hd + t)] = qkv[size_t(i * 3 * d + hh * hd + t)] * scale;
        kk[size_t(i * hd + t)] = qkv[size_t(i * 3 * d + d + hh * hd + t)];
        vt[size_t(t * n + i)] = qkv[size_t(i * 3 * d + 2 * d + hh * hd + t)];
      }
    gemm_f32(ex, q.data(), n, hd, kk.data(), n, p.data());  // scores [n, n]
    ex.parallel_items(n, n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* row = &p[size_t(i * n)];
        const float mx = *std::max_element(row, row + n);
        double z = 0;
        for (int64_t j = 0; j < n; ++j) z += (row[j] = std::exp(row[j] - mx));
        const float inv = float(1.0 / z);
        for (int64_t j = 0; j < n; ++j) row[j] *= inv;
      }
    });
    gemm_f32(ex, p.data(), n, n, vt.data(), hd, o_h.data());  // [n, hd]
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(&o_h[size_t(i * hd)], hd, &o[size_t(i * d + hh * hd)]);
  }
  out.resize(size_t(n * d));
  gemm_f32(ex, o.data(), n, d, k.wo.data(), d, out.data());
  add_bias(out.data(), n, d, k.wo_bias, ex);
}

void swiglu(const CpuExec& ex, const VisionBlockWeights& k, const VisionConfig& c, const std::vector<float>& h,
            int64_t n, std::vector<float>& out) {
  const int64_t d = c.hidden_size, f = c.intermediate_size;
  std::vector<float> gu(size_t(n * 2 * f)), a(size_t(n * f));
  gemm_f32(ex, h.data(), n, d, k.w1.data(), 2 * f, gu.data());
  ex.parallel_items(n, f, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t t = 0; t < f; ++t) {
        const float g = gu[size_t(i * 2 * f + t)], u = gu[size_t(i * 2 * f + f + t)];
        a[size_t(i * f + t)] = g / (1.0f + std::exp(-g)) * u;
      }
  });
  out.resize(size_t(n * d));
  gemm_f32(ex, a.data(), n, f, k.w2.data(), d, out.data());
}

}  // namespace

std::vector<float> vit_forward(const CpuExec& ex, const VisionWeights& w, const std::vector<float>& patches, int n_h,
                               int n_w) {
  const VisionConfig& c = w.config;
  const int64_t n = int64_t(n_h) * n_w, d = c.hidden_size, in = 3 * int64_t(c.patch_size) * c.patch_size;
  std::vector<float> x(size_t(n * d)), h(size_t(n * d)), delta;
  gemm_f32(ex, patches.data(), n, in, w.patch_w.data(), d, x.data());
  add_bias(x.data(), n, d, w.patch_b, ex);
  std::vector<float> cos_t, sin_t;
  vision_rope::rope_tables(n_h, n_w, int(d / c.num_attention_heads), c.rope_theta, cos_t, sin_t);
  for (const VisionBlockWeights& k : w.blocks) {
    rmsnorm_rows(x.data(), n, d, k.norm1.data(), kVisionEps, h.data());
    attention(ex, k, c, h, n, cos_t, sin_t, delta);
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
    rmsnorm_rows(x.data(), n, d, k.norm2.data(), kVisionEps, h.data());
    swiglu(ex, k, c, h, n, delta);
    for (size_t i = 0; i < x.size(); ++i) x[i] += delta[i];
  }
  rmsnorm_rows(x.data(), n, d, w.norm.data(), kVisionEps, x.data());
  return x;
}

std::vector<float> aligner_forward(const CpuExec& ex, const VisionWeights& w, const std::vector<float>& features,
                                   int n_h, int n_w) {
  const int r = w.config.downsample_ratio;
  const int64_t d = w.config.hidden_size, hdim = w.out_dim, cols = int64_t(r) * r * d;
  const int th = (n_h + r - 1) / r, tw = (n_w + r - 1) / r;
  const int64_t tokens = int64_t(th) * tw;
  std::vector<float> unfolded(size_t(tokens * cols), 0.0f);
  for (int y = 0; y < n_h; ++y)
    for (int x = 0; x < n_w; ++x) {
      const float* f = &features[size_t((int64_t(y) * n_w + x) * d)];
      float* dst = &unfolded[size_t((int64_t(y / r) * tw + x / r) * cols)] + (y % r) * r + (x % r);
      for (int64_t ch = 0; ch < d; ++ch) dst[ch * r * r] = f[ch];
    }
  std::vector<float> hid(size_t(tokens * hdim)), out(size_t(tokens * hdim));
  gemm_f32(ex, unfolded.data(), tokens, cols, w.aligner_w1.data(), hdim, hid.data());
  add_bias(hid.data(), tokens, hdim, w.aligner_b1, ex);
  for (float& v : hid) v = float(0.5 * double(v) * (1.0 + std::erf(double(v) / std::sqrt(2.0))));
  gemm_f32(ex, hid.data(), tokens, hdim, w.aligner_w2.data(), hdim, out.data());
  add_bias(out.data(), tokens, hdim, w.aligner_b2, ex);
  return out;
}

}  // namespace dsv41
