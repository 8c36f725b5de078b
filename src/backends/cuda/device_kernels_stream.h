// Device kernel bodies of the residual streams: mHC (stream init, coefficients with Sinkhorn,
// collapse, expand; mhc.cpp's references) and Engram's gate and write (engram.cpp). See
// device_kernels_common.h for how kernel bodies run.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"

namespace dsv41::dk {

// ---- mHC (mhc.cpp reference) -------------------------------------------------------------
struct MhcInitK {  // x [T, hc, d] = hc copies of e [T, d]; pre [T, hc] one-hot on stream 0
  const float* e;
  int hc;
  int64_t d;
  float* x;
  float* pre;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t c = id % d, tj = id / d, t = tj / hc, j = tj % hc;
    x[id] = e[t * d + c];
    if (c == 0) pre[tj] = j == 0 ? 1.0f : 0.0f;
  }
};

struct MhcRsqrtK {  // r[t] = 1/sqrt(mean(f²) + eps) over the flattened streams of token t
  const float* x;
  int64_t flat;
  float eps;
  float* r;
  DSV41_HD void operator()(int64_t t) const {
    const float* f = x + t * flat;
    double ss = 0;
    for (int64_t i = 0; i < flat; ++i) ss += double(f[i]) * f[i];
    r[t] = float(1.0 / sqrt(double(float(ss / double(flat))) + double(eps)));
  }
};

struct MhcMixK {  // m[t, o] = Σ_i (f_i · r_t) · fn[o, i]
  const float* x;
  const float* r;
  const float* fn;
  int64_t flat, mix;
  float* m;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t t = id / mix, o = id % mix;
    const float* f = x + t * flat;
    const float* wo = fn + o * flat;
    const float rt = r[t];
    double acc = 0;
    for (int64_t i = 0; i < flat; ++i) acc += double(f[i] * rt) * wo[i];
    m[id] = float(acc);
  }
};

// Gates + Sinkhorn of one token (mhc_finish_reference in mhc_sinkhorn.cpp). hc ≤ 8.
struct MhcFinishK {
  const float* m;
  const float* base;
  const float* scale;
  int hc, iters;
  float eps;
  float* pre;
  float* post;
  float* comb;
  DSV41_HD void operator()(int64_t t) const {
    const float* mt = m + t * (2 + hc) * hc;
    float* pr = pre + t * hc;
    float* po = post + t * hc;
    float* cb = comb + t * hc * hc;
    for (int i = 0; i < hc; ++i) {
      pr[i] = sigmoidf_(mt[i] * scale[0] + base[i]) + eps;
      po[i] = 2.0f * sigmoidf_(mt[hc + i] * scale[1] + base[hc + i]);
    }
    const float* mc = mt + 2 * hc;
    const float* bc = base + 2 * hc;
    for (int j = 0; j < hc; ++j) {
      float* row = cb + j * hc;
      float mx = -INFINITY;
      for (int i = 0; i < hc; ++i) {
        row[i] = mc[j * hc + i] * scale[2] + bc[j * hc + i];
        mx = fmaxf(mx, row[i]);
      }
      float sum = 0;
      for (int i = 0; i < hc; ++i) {
        row[i] = expf(row[i] - mx);
        sum += row[i];
      }
      for (int i = 0; i < hc; ++i) row[i] = row[i] / sum + eps;
    }
    for (int it = 0; it < iters; ++it) {
      if (it > 0) {  // rows, then columns (the first round is columns only)
        for (int j = 0; j < hc; ++j) {
          float s = 0;
          for (int i = 0; i < hc; ++i) s += cb[j * hc + i];
          for (int i = 0; i < hc; ++i) cb[j * hc + i] /= (s + eps);
        }
      }
      for (int i = 0; i < hc; ++i) {
        float s = 0;
        for (int j = 0; j < hc; ++j) s += cb[j * hc + i];
        for (int j = 0; j < hc; ++j) cb[j * hc + i] /= (s + eps);
      }
    }
  }
};

// The three steps of the coefficients as one unit of work for an executor (run_chain): the
// simple path is the three launches above in order (n tokens); a fast executor may run them as
// one kernel per token (fast_kernels.h) — the same function, sums in another order.
struct MhcCoeffChain {
  MhcRsqrtK rsqrt;
  MhcMixK mix;
  MhcFinishK finish;
  int64_t n;
  // Scratch for a fast kernel that splits the mix over blocks (fast_kernels.cu): kMhcPartials
  // doubles per token, for chains of up to partial_tokens tokens (null: not split). The simple
  // launches do not use it.
  double* partials = nullptr;
  int64_t partial_tokens = 0;
  static constexpr int64_t kMhcPartials = 64 * 24;
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(n, rsqrt);
    ex.for_each(n * mix.mix, mix);
    ex.for_each(n, finish);
  }
};

struct MhcCollapseK {  // y[t, c] = Σ_j pre[t, j] · x[t, j, c]; rows picks the tokens (null = t)
  const float* x;
  const float* pre;
  const int64_t* rows;
  int hc;
  int64_t d;
  float* y;
  DSV41_HD float value(int64_t id) const {
    const int64_t i = id / d, c = id % d;
    const int64_t t = rows ? rows[i] : i;
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc += pre[t * hc + j] * x[(t * hc + j) * d + c];
    return acc;
  }
  DSV41_HD void operator()(int64_t id) const { y[id] = value(id); }
};

// mHC collapse then RMSNorm of its output in place (attention_input, ffn): the simple path is the
// two launches; a fast executor runs one block per row (fast_kernels.h). norm.x = norm.y =
// collapse.y, rows n.
struct CollapseNormChain {
  MhcCollapseK collapse;
  RmsNormK norm;
  int64_t n;
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(n * collapse.d, collapse);
    ex.for_each(n, norm);
  }
};

struct MhcExpandK {  // out[t, i, c] = post[t, i] · a[t, c] + Σ_j comb[t, j, i] · x[t, j, c]
  const float* a;
  const float* x;
  const float* post;
  const float* comb;
  int hc;
  int64_t d;
  float* out;
  DSV41_HD float value(int64_t id) const {
    const int64_t c = id % d, ti = id / d, t = ti / hc, i = ti % hc;
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc += comb[(t * hc + j) * hc + i] * x[(t * hc + j) * d + c];
    return post[ti] * a[t * d + c] + acc;
  }
  DSV41_HD void operator()(int64_t id) const { out[id] = value(id); }
};

// The mHC expand and the coefficients of the streams it writes (attention_output's last launch and
// ffn's first chain): simple, the expand then the coefficient chain; fused (fast_kernels.cu, the
// split mix of few tokens), every block forms its token's expanded streams itself (MhcExpandK's
// value, so the same bits), writes its slice of them and reads the rest from shared memory.
struct ExpandCoeffChain {
  MhcExpandK expand;
  MhcCoeffChain coeff;  // coeff.rsqrt.x == expand.out, coeff.n tokens
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(coeff.n * expand.hc * expand.d, expand);
    ex.run_chain(coeff);  // its own fast kernel where the fused one declined
  }
};

// ---- Engram (engram.cpp reference) -------------------------------------------------------
struct EngramGateK {  // gate[t, i] from stream i of x and key i of kv [(hc+1)·d]
  const float* x;
  const float* kv;
  const float* qw;
  const float* kw;
  int hc;
  int64_t d;
  float eps;
  float* gate;
  DSV41_HD void operator()(int64_t ti) const {
    const int64_t t = ti / hc, i = ti % hc;
    const float* xi = x + ti * d;
    const float* ki = kv + t * (hc + 1) * d + i * d;
    double xx = 0, kk = 0, dot = 0;
    for (int64_t c = 0; c < d; ++c) {
      xx += double(xi[c]) * xi[c];
      kk += double(ki[c]) * ki[c];
      dot += double(xi[c]) * (double(qw[i * d + c]) * kw[i * d + c]) * ki[c];
    }
    const double rstd = (1.0 / sqrt(double(float(xx / d)) + double(eps))) * (1.0 / sqrt(double(float(kk / d)) + double(eps)));
    const double g = dot * rstd / sqrt(double(d));
    const double mag = sqrt(fmax(fabs(g), 1e-6));
    gate[ti] = float(1.0 / (1.0 + exp(-copysign(mag, g))));
  }
};

struct EngramWriteK {  // x[t, i, c] += gate[t, i] · v[t, c]
  float* x;
  const float* kv;
  const float* gate;
  int hc;
  int64_t d;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t c = id % d, ti = id / d, t = ti / hc;
    x[id] += gate[ti] * kv[t * (hc + 1) * d + hc * d + c];
  }
};

}  // namespace dsv41::dk
