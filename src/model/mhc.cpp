// mHC coefficient function, collapse and expand (model.md §3.2, §3.3). See mhc.h.
#include "model/mhc.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/block_kernels.h"
#include "kernels/cpu/gemm.h"
#include "model/mhc_sinkhorn.h"

namespace dsv41 {

MhcShape MhcShape::from_config(const ModelConfig& config) {
  MhcShape s;
  s.hc = config.hc_mult;
  s.dim = config.hidden_size;
  s.sinkhorn_iters = config.hc_sinkhorn_iters;
  s.hc_eps = static_cast<float>(config.hc_eps);
  s.norm_eps = static_cast<float>(config.rms_norm_eps);
  return s;
}

namespace {

// 1 / sqrt(mean(f²) + eps) over the flattened hc·d streams of one token (fp32 result).
float flat_rsqrt(const float* f, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(f[i]) * f[i];
  return static_cast<float>(1.0 / std::sqrt(float(ss / double(n)) + double(eps)));
}

}  // namespace

void mhc_coefficients_reference(const MhcShape& shape, const MhcWeights& w, const float* x, int64_t tokens,
                                float* pre, float* post, float* comb, MhcScratch* scratch) {
  const int64_t flat = shape.hc * shape.dim;
  const int64_t mix = shape.mix_width();
  MhcScratch local;
  std::vector<float>& m = (scratch ? *scratch : local).mix;
  m.resize(static_cast<size_t>(mix));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* f = x + t * flat;
    const float r = flat_rsqrt(f, flat, shape.norm_eps);
    for (int64_t o = 0; o < mix; ++o) {  // m = W_fn (r · f): normalise first, as the reference does
      const float* wo = w.fn + o * flat;
      double acc = 0;
      for (int64_t i = 0; i < flat; ++i) acc += double(f[i] * r) * wo[i];
      m[o] = static_cast<float>(acc);
    }
    mhc_finish_reference(shape, w, m.data(), pre + t * shape.hc, post + t * shape.hc,
                         comb + t * shape.hc * shape.hc);
  }
}

void mhc_coefficients_fast(const CpuExec& ex, const MhcShape& shape, const MhcWeights& w, const float* x,
                           int64_t tokens, float* pre, float* post, float* comb, MhcScratch* scratch) {
  const int64_t flat = shape.hc * shape.dim;
  const int64_t mix = shape.mix_width();
  const int hc = shape.hc;
  MhcScratch local;
  MhcScratch& ws = scratch ? *scratch : local;
  std::vector<float>& normed = ws.normed;  // [T, hc·d]
  normed.resize(static_cast<size_t>(tokens * flat));
  ex.parallel_items(tokens, flat, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* f = x + t * flat;
      const double ss = sum_squares_avx2(f, flat);
      const float r = static_cast<float>(1.0 / std::sqrt(float(ss / double(flat)) + double(shape.norm_eps)));
      scale_avx2(f, r, flat, normed.data() + t * flat);
    }
  });
  std::vector<float>& m = ws.mix;  // [T, (2+hc)·hc]
  m.resize(static_cast<size_t>(tokens * mix));
  gemm_f32(ex, normed.data(), tokens, flat, w.fn, mix, m.data());
  // Gates + Sinkhorn: ≈ 4·iters·hc² operations per token.
  ex.parallel_items(tokens, 4 * int64_t(shape.sinkhorn_iters) * hc * hc, [&](int64_t t0, int64_t t1) {
    mhc_finish_rows(shape, w, m.data() + t0 * mix, t1 - t0, pre + t0 * hc, post + t0 * hc, comb + t0 * hc * hc);
  });
}

void mhc_coefficients(const CpuExec& ex, const MhcShape& shape, const MhcWeights& w, const float* x, int64_t tokens,
                      float* pre, float* post, float* comb, MhcScratch* scratch) {
  if (ex.use_fast()) return mhc_coefficients_fast(ex, shape, w, x, tokens, pre, post, comb, scratch);
  mhc_coefficients_reference(shape, w, x, tokens, pre, post, comb, scratch);
}

void mhc_collapse_reference(const MhcShape& shape, const float* x, const float* pre, int64_t tokens, float* y) {
  const int hc = shape.hc;
  const int64_t d = shape.dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * hc * d;
    const float* p = pre + t * hc;
    float* yt = y + t * d;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0;
      for (int j = 0; j < hc; ++j) acc += p[j] * xt[j * d + c];
      yt[c] = acc;
    }
  }
}

void mhc_collapse_fast(const CpuExec& ex, const MhcShape& shape, const float* x, const float* pre, int64_t tokens,
                       float* y) {
  const int hc = shape.hc;
  const int64_t d = shape.dim;
  ex.parallel_items(tokens, hc * d, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) mhc_collapse_avx2(x + t * hc * d, pre + t * hc, hc, d, y + t * d);
  });
}

void mhc_collapse(const CpuExec& ex, const MhcShape& shape, const float* x, const float* pre, int64_t tokens,
                  float* y) {
  if (ex.use_fast()) return mhc_collapse_fast(ex, shape, x, pre, tokens, y);
  mhc_collapse_reference(shape, x, pre, tokens, y);
}

void mhc_expand_reference(const MhcShape& shape, const float* a, const float* x, const float* post,
                          const float* comb, int64_t tokens, float* out) {
  const int hc = shape.hc;
  const int64_t d = shape.dim;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * hc * d;
    const float* at = a + t * d;
    const float* pt = post + t * hc;
    const float* ct = comb + t * hc * hc;
    float* ot = out + t * hc * d;
    for (int i = 0; i < hc; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        float acc = 0;
        for (int j = 0; j < hc; ++j) acc += ct[j * hc + i] * xt[j * d + c];
        ot[i * d + c] = pt[i] * at[c] + acc;
      }
    }
  }
}

void mhc_expand_fast(const CpuExec& ex, const MhcShape& shape, const float* a, const float* x, const float* post,
                     const float* comb, int64_t tokens, float* out) {
  const int hc = shape.hc;
  const int64_t d = shape.dim;
  ex.parallel_items(tokens, hc * hc * d, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      mhc_expand_avx2(a + t * d, x + t * hc * d, post + t * hc, comb + t * hc * hc, hc, d, out + t * hc * d);
  });
}

void mhc_expand(const CpuExec& ex, const MhcShape& shape, const float* a, const float* x, const float* post,
                const float* comb, int64_t tokens, float* out) {
  if (ex.use_fast()) return mhc_expand_fast(ex, shape, a, x, post, comb, tokens, out);
  mhc_expand_reference(shape, a, x, post, comb, tokens, out);
}

void mhc_init_streams(const MhcShape& shape, const float* e, int64_t tokens, float* x) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < shape.hc; ++j)
      for (int64_t c = 0; c < shape.dim; ++c) x[(t * shape.hc + j) * shape.dim + c] = e[t * shape.dim + c];
}

void mhc_initial_pre(const MhcShape& shape, int64_t tokens, float* pre) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < shape.hc; ++j) pre[t * shape.hc + j] = (j == 0) ? 1.0f : 0.0f;
}

}  // namespace dsv41
