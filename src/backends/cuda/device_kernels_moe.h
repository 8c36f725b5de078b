// Device kernel bodies of the MoE: router (scores, biased top-k, weights) and the routed and
// shared SwiGLU experts (moe.cpp's reference). See device_kernels_common.h.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"
#include "backends/cuda/device_kernels_stream.h"

namespace dsv41::dk {

// ---- MoE (moe.cpp reference) ------------------------------------------------------------------
enum class Scoring : int { kSqrtSoftplus = 0, kSoftmax = 1, kSigmoid = 2 };

// Scores, biased top-k and weights of one token (moe.cpp select()). s: [T, E] logits / gate_temp,
// turned into scores in place.
struct RouteK {
  float* s;
  const float* bias;
  int E, k;
  Scoring scoring;
  bool norm;
  float scaling;
  int32_t* experts;
  float* weights;
  // Image-span rows (is_image[t] ≠ 0) select with bias_vl when the model has one (moe.h).
  const float* bias_vl = nullptr;
  const uint8_t* is_image = nullptr;
  DSV41_HD void operator()(int64_t t) const {
    float* st = s + t * E;
    const float* bias = (is_image && is_image[t] && bias_vl) ? bias_vl : this->bias;
    if (scoring == Scoring::kSqrtSoftplus) {
      for (int i = 0; i < E; ++i) st[i] = sqrtf(st[i] > 20.0f ? st[i] : log1pf(expf(st[i])));
    } else if (scoring == Scoring::kSigmoid) {
      for (int i = 0; i < E; ++i) st[i] = 1.0f / (1.0f + expf(-st[i]));
    } else {
      float mx = st[0];
      for (int i = 1; i < E; ++i) mx = st[i] > mx ? st[i] : mx;
      double sum = 0;
      for (int i = 0; i < E; ++i) sum += exp(double(st[i]) - mx);
      for (int i = 0; i < E; ++i) st[i] = float(exp(double(st[i]) - mx) / sum);
    }
    int32_t* ex = experts + t * k;
    float* wt = weights + t * k;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      float bv = 0;
      for (int i = 0; i < E; ++i) {
        bool taken = false;
        for (int q = 0; q < j; ++q) taken = taken || ex[q] == i;
        if (taken) continue;
        const float v = st[i] + (bias ? bias[i] : 0.0f);
        // larger first, NaN last, ties → lower index (i ascending: the first seen stays)
        const bool better = best < 0 || (is_nan(bv) && !is_nan(v)) || (!is_nan(v) && !is_nan(bv) && v > bv);
        if (better) {
          best = i;
          bv = v;
        }
      }
      ex[j] = best;
      wt[j] = st[best];
      sum += wt[j];
    }
    if (norm && k > 1)
      for (int j = 0; j < k; ++j) wt[j] /= (sum + 1e-20f);
    for (int j = 0; j < k; ++j) wt[j] *= scaling;
  }
};

// The router of m tokens: logits (gate · h), divided by the temperature in place, then RouteK.
// Simple path: the three launches; a fast executor runs one block per token (fast_kernels.h).
// scale.x = route.s = gate.y, gate rows m × E.
struct RouterChain {
  GemmK gate;
  ScaleK scale;
  RouteK route;
  int64_t m;
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(m * gate.out, gate);
    ex.for_each(m * gate.out, scale);
    ex.for_each(m, route);
  }
};

struct ExpertW {
  DevWeight w1, w3, w2;
};

// h[t, j, o] = weight · SiLU(min(g, lim)) · clamp(u, ±lim) for expert experts[t, j] (j < k), or
// the shared expert (experts null, weight 1).
struct ExpertUpK {
  const float* x;
  const ExpertW* table;  // [E] routed, or [1] shared
  const int32_t* experts;
  const float* weights;
  int k;
  int64_t d, inter;
  float lim;
  float* h;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t o = id % inter, tj = id / inter, t = tj / k;
    const ExpertW& e = table[experts ? experts[tj] : 0];
    const float* xt = x + t * d;
    double ga = 0, ua = 0;
    for (int64_t c = 0; c < d; ++c) {
      ga += double(e.w1.at(o * d + c)) * xt[c];
      ua += double(e.w3.at(o * d + c)) * xt[c];
    }
    float g = float(ga), u = float(ua);
    if (lim > 0) {
      u = fminf(fmaxf(u, -lim), lim);
      g = fminf(g, lim);
    }
    const float w = experts ? weights[tj] : 1.0f;
    h[id] = w * ((g / (1.0f + expf(-g))) * u);
  }
};

// One expert's down projection of output c: W2[c] · h in double, rounded to float.
DSV41_HD inline float down_sum(const ExpertW& e, int64_t inter, const float* h, int64_t c) {
  double s = 0;
  for (int64_t o = 0; o < inter; ++o) s += double(e.w2.at(c * inter + o)) * h[o];
  return float(s);
}

// y[t, c] = Σ_j W2_{e_j}[c] · h[t, j] then + W2_shared[c] · hs[t] (each sum rounded to float
// before it is added, as expert_reference does).
struct ExpertDownK {
  const ExpertW* table;
  const int32_t* experts;
  int k;
  int64_t d, inter;
  const float* h;
  const ExpertW* shared;  // or null
  int64_t shared_inter;
  const float* hs;
  float* y;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t t = id / d, c = id % d;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc += down_sum(table[experts[t * k + j]], inter, h + (t * k + j) * inter, c);
    if (shared) acc += down_sum(*shared, shared_inter, hs + t * shared_inter, c);
    y[id] = acc;
  }
};

// Expert parallelism (parallel/expert_parallel.h): token t's routed experts ran on their ranks,
// each returning its output row (ExpertDownK with k = 1: that expert's float sum, weight applied)
// at parts[pair_row[t · k + j]]; y[t, c] adds them in the token's choice order, then the shared
// expert's row (ExpertDownK with k = 0: its float sum) — ExpertDownK's additions in its order, of
// the sums its simple and warp kernels form, so the same bits as one rank.
struct ExpertCombineK {
  const float* parts;
  const int64_t* pair_row;  // [T, k]
  int k;
  int64_t d;
  const float* shared;  // [T, d], or null
  float* y;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t t = id / d, c = id % d;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc += parts[pair_row[t * k + j] * d + c];
    if (shared) acc += shared[id];
    y[id] = acc;
  }
};

// The experts' down projection and the mHC expand that reads it (ffn's last two launches):
// simple, the two launches; fused (fast_kernels.cu), the routed and shared experts of an output
// group summed by warps of one block in parallel (each expert's float sum as ExpertDownK's, added
// in its order) and the expand of those columns by the thread that wrote them.
struct DownExpandChain {
  ExpertDownK down;
  MhcExpandK expand;  // expand.a == down.y
  int64_t m;          // tokens
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(m * down.d, down);
    ex.for_each(m * expand.hc * expand.d, expand);
  }
};

}  // namespace dsv41::dk
