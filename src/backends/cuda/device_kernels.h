// The device backend's kernels, written once as per-element bodies (functors with a
// `DSV41_HD` call operator) that an executor runs for every index of a range: CudaExec launches
// one GPU thread per index (cuda_exec.cuh), HostExec loops over them on the CPU (host_exec.h).
// So the same arithmetic runs on the GPU and, in the CPU build, in the tests that compare the
// whole backend with the CPU engine on machines without a GPU.
// Simple and clearly correct first (one thread per output, sequential sums in the order of the
// CPU scalar references, double accumulation where they use it); fast kernels come later and are
// checked against these. Spec: model.md §3.1–§3.8.
// Owns nothing: every pointer is a device pointer (host pointers under HostExec) borrowed for the
// launch.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV41_HD __host__ __device__
#else
#define DSV41_HD
#endif

namespace dsv41::dk {

DSV41_HD inline float bf16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(uint32_t(h) << 16);
#else
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// A [out, in] row-major weight on the device, float32 or bf16 bits (exactly one set).
struct DevWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  DSV41_HD float at(int64_t i) const { return bf16 ? bf16_to_f32(bf16[i]) : f32[i]; }
  DevWeight offset(int64_t n) const { return bf16 ? DevWeight{nullptr, bf16 + n} : DevWeight{f32 + n, nullptr}; }
};

DSV41_HD inline float sigmoidf_(float v) { return 1.0f / (1.0f + expf(-v)); }
DSV41_HD inline bool is_nan(float v) { return v != v; }

// y[r, o] = Σ_i x[r, i] · W[o, i]  (double accumulation, as gemm_f32_reference). Strided rows.
struct GemmK {
  const float* x;
  int64_t x_stride;
  DevWeight w;
  int64_t in, out;
  float* y;
  int64_t y_stride;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / out, o = id % out;
    const float* xr = x + r * x_stride;
    double acc = 0;
    for (int64_t i = 0; i < in; ++i) acc += double(xr[i]) * double(w.at(o * in + i));
    y[r * y_stride + o] = float(acc);
  }
};

// RMSNorm of one row per index (rmsnorm_row's operations); y may alias x; weight may be null.
struct RmsNormK {
  const float* x;
  int64_t n;
  const float* weight;
  float eps;
  float* y;
  DSV41_HD void operator()(int64_t r) const {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float mean_sq = float(ss / double(n));
    const float s = float(1.0 / sqrt(double(mean_sq + eps)));
    for (int64_t i = 0; i < n; ++i) {
      const float v = xr[i] * s;
      yr[i] = weight ? weight[i] * v : v;
    }
  }
};

// Rotation of the last rope_dim channels of each head: index = (row, head, pair). cos/sin rows
// [*, rope_dim/2] at table row (row0 + row); inverse = conjugate (rope_rotate).
struct RopeK {
  float* x;
  int64_t heads, dim;
  int rope_dim;
  const float* cos;
  const float* sin;
  int64_t row0;
  bool inverse;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t half = rope_dim / 2;
    const int64_t p = id % half, rh = id / half;
    const int64_t r = rh / heads;
    float* tail = x + rh * dim + (dim - rope_dim);
    const float c = cos[(row0 + r) * half + p], s0 = sin[(row0 + r) * half + p];
    const float s = inverse ? -s0 : s0;
    const float even = tail[2 * p], odd = tail[2 * p + 1];
    tail[2 * p] = even * c - odd * s;
    tail[2 * p + 1] = even * s + odd * c;
  }
};

struct GatherRowsK {  // y[t, :] = table[ids[t], :]
  const float* table;
  const int32_t* ids;
  int64_t d;
  float* y;
  DSV41_HD void operator()(int64_t id) const { y[id] = table[int64_t(ids[id / d]) * d + id % d]; }
};

struct ScaleK {  // x[i] = divide ? x[i] / s : x[i] · s
  float* x;
  float s;
  bool divide;
  DSV41_HD void operator()(int64_t i) const { x[i] = divide ? x[i] / s : x[i] * s; }
};

template <typename T>
struct FillK {
  T* x;
  T v;
  DSV41_HD void operator()(int64_t i) const { x[i] = v; }
};

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

// Gates + Sinkhorn of one token (finish_coefficients in mhc.cpp). hc ≤ 8.
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

struct MhcCollapseK {  // y[t, c] = Σ_j pre[t, j] · x[t, j, c]; rows picks the tokens (null = t)
  const float* x;
  const float* pre;
  const int64_t* rows;
  int hc;
  int64_t d;
  float* y;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t i = id / d, c = id % d;
    const int64_t t = rows ? rows[i] : i;
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc += pre[t * hc + j] * x[(t * hc + j) * d + c];
    y[id] = acc;
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
  DSV41_HD void operator()(int64_t id) const {
    const int64_t c = id % d, ti = id / d, t = ti / hc, i = ti % hc;
    float acc = 0;
    for (int j = 0; j < hc; ++j) acc += comb[(t * hc + j) * hc + i] * x[(t * hc + j) * d + c];
    out[id] = post[ti] * a[t * d + c] + acc;
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

// ---- Compressor (compressor.cpp reference) ----------------------------------------------
struct PoolK {  // out[g, c] = Σ_j a[g·r+j, c] · softmax_j(b[g·r+j, c])
  const float* a;
  const float* b;
  int r;
  int64_t D;
  float* out;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t g = id / D, c = id % D;
    float m = -INFINITY;
    for (int j = 0; j < r; ++j) m = fmaxf(m, b[(g * r + j) * D + c]);
    float denom = 0.0f;
    for (int j = 0; j < r; ++j) denom += expf(b[(g * r + j) * D + c] - m);
    float acc = 0.0f;
    for (int j = 0; j < r; ++j) acc += a[(g * r + j) * D + c] * (expf(b[(g * r + j) * D + c] - m) / denom);
    out[id] = acc;
  }
};

// ---- Indexer (indexer.cpp) -----------------------------------------------------------------
// score[r, g] = Σ_h w_h · ReLU(q_h · I_g) · dh^-1/2 for visible g < ⌊(t+1)/ratio⌋ (t = start + r),
// else −inf. With a pool (kept [rows, nb] block ids, −1 padded): −inf outside it as well.
struct IndexScoreK {
  const float* q;   // [rows, nh·dh]
  const float* hw;  // [rows, nh]
  const float* keys;  // [G, dh]
  int64_t G, nh, dh, start;
  int ratio;
  float scale;
  const int32_t* kept;
  int nb, bs;
  float* scores;  // [rows, G]
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / G, g = id % G, t = start + r;
    bool in = g < (t + 1) / ratio;
    if (in && kept) {
      in = false;
      for (int j = 0; j < nb && kept[r * nb + j] >= 0; ++j) in = in || kept[r * nb + j] == g / bs;
    }
    if (!in) {
      scores[id] = -INFINITY;
      return;
    }
    float total = 0.0f;
    for (int64_t h = 0; h < nh; ++h) {
      const float* qh = q + (r * nh + h) * dh;
      double acc = 0;
      for (int64_t c = 0; c < dh; ++c) acc += double(keys[g * dh + c]) * qh[c];
      const float relu = fmaxf(float(acc), 0.0f) * scale;
      total += relu * hw[r * nh + h];
    }
    scores[id] = total;
  }
};

struct BlockMaxK {  // bmax[r, b] = max of scores[r, b·bs …], the newest visible block +inf
  const float* scores;
  int64_t G, blocks, start;
  int bs, ratio;
  float* bmax;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / blocks, b = id % blocks;
    const int64_t visible = (start + r + 1) / ratio;
    if (visible >= 1 && (visible - 1) / bs == b) {
      bmax[id] = INFINITY;
      return;
    }
    float m = -INFINITY;
    for (int64_t g = b * bs; g < G && g < (b + 1) * bs; ++g) m = fmaxf(m, scores[r * G + g]);
    bmax[id] = m;
  }
};

// Selection of the n largest of each row (larger first, ties → lower index; −inf never kept),
// in two passes of plain counting: mark[r, a] = 1 when a is one of the n best and > −inf; then
// each marked a goes to out[r, #marked before a] (ascending ids; out pre-filled with −1).
struct RankMarkK {
  const float* v;
  int64_t size, n;
  uint8_t* mark;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / size, a = id % size;
    const float* row = v + r * size;
    const float va = row[a];
    int64_t better = 0;
    for (int64_t b = 0; b < size; ++b) {
      const float vb = row[b];
      better += (vb > va || (vb == va && b < a)) ? 1 : 0;
    }
    mark[id] = (better < n && va > -INFINITY) ? 1 : 0;
  }
};

struct RankPlaceK {
  const uint8_t* mark;
  int64_t size;
  int width;
  int32_t* out;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / size, a = id % size;
    if (!mark[id]) return;
    int64_t before = 0;
    for (int64_t b = 0; b < a; ++b) before += mark[r * size + b];
    if (before < width) out[r * width + before] = int32_t(a);
  }
};

// ---- Sink attention (attention_steps.cpp) ---------------------------------------------------
// Work item (i, h, j) of T query rows × H heads × L = window + k key slots. Slot j < nwin(i) is the
// window key of position lo(i) + j (keys [*, D] start at position `first`); slot nwin + s is the
// s-th entry of topk row i (−1 = absent; main rows [G, D]); the rest are absent.
struct AttnGeom {
  int64_t T, H, D, L, start, window, floor, first, k;
  const float* keys;
  const float* main;
  const int32_t* topk;  // [T, k] or null
  DSV41_HD int64_t lo(int64_t i) const {
    const int64_t t = start + i;
    return t - window + 1 > floor ? t - window + 1 : floor;
  }
  // The key row of slot j of row i, or null when absent.
  DSV41_HD const float* key(int64_t i, int64_t j) const {
    const int64_t nwin = start + i - lo(i) + 1;
    if (j < nwin) return keys + (lo(i) + j - first) * D;
    const int64_t s = j - nwin;
    if (!topk || s >= k) return nullptr;
    const int32_t e = topk[i * k + s];
    return e >= 0 ? main + int64_t(e) * D : nullptr;
  }
};

struct AttnLogitsK {
  AttnGeom g;
  const float* q;  // [T, H, D]
  float scaling;
  float* logits;  // [T, H, L]
  DSV41_HD void operator()(int64_t id) const {
    const int64_t j = id % g.L, ih = id / g.L, i = ih / g.H;
    const float* key = g.key(i, j);
    if (!key) {
      logits[id] = -INFINITY;
      return;
    }
    const float* qh = q + ih * g.D;
    double acc = 0;
    for (int64_t c = 0; c < g.D; ++c) acc += double(qh[c]) * key[c];
    logits[id] = float(acc) * scaling;
  }
};

struct AttnSoftmaxK {  // per (i, h): probabilities in place; the sink joins max and denominator
  AttnGeom g;
  const float* sink;  // [H]
  float* logits;
  DSV41_HD void operator()(int64_t ih) const {
    const int64_t i = ih / g.H, h = ih % g.H;
    float* l = logits + ih * g.L;
    float m = sink[h];
    for (int64_t j = 0; j < g.L; ++j)
      if (g.key(i, j)) m = fmaxf(m, l[j]);
    double denom = exp(double(sink[h] - m));
    for (int64_t j = 0; j < g.L; ++j)
      if (g.key(i, j)) {
        l[j] = expf(l[j] - m);
        denom += l[j];
      }
    for (int64_t j = 0; j < g.L; ++j) l[j] = g.key(i, j) ? float(l[j] / denom) : 0.0f;
  }
};

struct AttnValuesK {  // o[i, h, c] = Σ_window p·v + Σ_selected p·v (two partial sums, as the CPU)
  AttnGeom g;
  const float* p;
  float* o;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t c = id % g.D, ih = id / g.D, i = ih / g.H;
    const int64_t nwin = g.start + i - g.lo(i) + 1;
    const float* pr = p + ih * g.L;
    double win = 0, sel = 0;
    for (int64_t j = 0; j < g.L; ++j) {
      const float* key = g.key(i, j);
      if (!key) continue;
      if (j < nwin) {
        win += double(pr[j]) * key[c];
      } else {
        sel += double(pr[j]) * key[c];
      }
    }
    float out = 0.0f;
    out += float(win);
    out += float(sel);
    o[id] = out;
  }
};

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
  DSV41_HD void operator()(int64_t t) const {
    float* st = s + t * E;
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
    for (int j = 0; j < k; ++j) {
      const ExpertW& e = table[experts[t * k + j]];
      const float* hj = h + (t * k + j) * inter;
      double s = 0;
      for (int64_t o = 0; o < inter; ++o) s += double(e.w2.at(c * inter + o)) * hj[o];
      acc += float(s);
    }
    if (shared) {
      double s = 0;
      for (int64_t o = 0; o < shared_inter; ++o) s += double(shared->w2.at(c * shared_inter + o)) * hs[t * shared_inter + o];
      acc += float(s);
    }
    y[id] = acc;
  }
};

}  // namespace dsv41::dk
