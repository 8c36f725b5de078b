// Router, SwiGLU experts and shared expert (model.md §3.7). See moe.h.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/gemm.h"

namespace dsv41 {

Result<MoeShape> MoeShape::from_config(const ModelConfig& config) {
  MoeShape s;
  s.dim = config.hidden_size;
  s.inter = config.moe_intermediate_size;
  s.shared_inter = int64_t(config.n_shared_experts) * config.moe_intermediate_size;
  s.has_shared = config.n_shared_experts > 0;
  s.n_experts = config.n_routed_experts;
  s.top_k = config.num_experts_per_tok;
  if (config.scoring_func == "sqrtsoftplus") {
    s.scoring = ScoringFunc::kSqrtSoftplus;
  } else if (config.scoring_func == "softmax") {
    s.scoring = ScoringFunc::kSoftmax;
  } else if (config.scoring_func == "sigmoid") {
    s.scoring = ScoringFunc::kSigmoid;
  } else {
    return unsupported(config.source + ": scoring_func '" + config.scoring_func +
                       "' (expected sqrtsoftplus, softmax or sigmoid)");
  }
  if (s.top_k <= 0 || s.top_k > s.n_experts)
    return invalid_argument(config.source + ": num_experts_per_tok " + std::to_string(s.top_k) +
                            " outside 1.." + std::to_string(s.n_experts) + " (n_routed_experts)");
  if (!(config.gate_temp > 0)) return invalid_argument(config.source + ": gate_temp must be > 0");
  s.gate_temp = static_cast<float>(config.gate_temp);
  s.norm_topk_prob = config.norm_topk_prob;
  s.routed_scaling_factor = static_cast<float>(config.routed_scaling_factor);
  s.swiglu_limit = static_cast<float>(config.swiglu_limit);
  return s;
}

namespace {

// torch.nn.functional.softplus (beta 1, threshold 20): linear above the threshold.
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }
float silu(float v) { return v / (1.0f + std::exp(-v)); }

// Scores s [E] from the raw logits (already divided by gate_temp).
void score(const MoeShape& shape, float* s) {
  const int e = shape.n_experts;
  switch (shape.scoring) {
    case ScoringFunc::kSqrtSoftplus:
      for (int i = 0; i < e; ++i) s[i] = std::sqrt(softplus(s[i]));
      break;
    case ScoringFunc::kSigmoid:
      for (int i = 0; i < e; ++i) s[i] = 1.0f / (1.0f + std::exp(-s[i]));
      break;
    case ScoringFunc::kSoftmax: {
      float mx = *std::max_element(s, s + e);
      double sum = 0;
      for (int i = 0; i < e; ++i) sum += std::exp(double(s[i]) - mx);
      for (int i = 0; i < e; ++i) s[i] = static_cast<float>(std::exp(double(s[i]) - mx) / sum);
      break;
    }
  }
}

// Selection + weights for one token from its logits row (overwritten with scores).
void select(const MoeShape& shape, const MoeWeights& w, bool image, float* s, int32_t* experts, float* weights) {
  score(shape, s);
  const float* bias = (image && w.bias_vl) ? w.bias_vl : w.bias;
  const int e = shape.n_experts, k = shape.top_k;
  std::vector<float> biased(e);
  for (int i = 0; i < e; ++i) biased[i] = s[i] + (bias ? bias[i] : 0.0f);
  std::vector<int32_t> order(e);
  std::iota(order.begin(), order.end(), 0);
  // (value desc, index asc); NaN last.
  auto better = [&](int32_t a, int32_t b) {
    const float va = biased[a], vb = biased[b];
    if (std::isnan(va) != std::isnan(vb)) return std::isnan(vb);
    if (va != vb) return va > vb;
    return a < b;
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  float sum = 0;
  for (int j = 0; j < k; ++j) {
    experts[j] = order[j];
    weights[j] = s[order[j]];
    sum += weights[j];
  }
  if (shape.norm_topk_prob && k > 1)
    for (int j = 0; j < k; ++j) weights[j] /= (sum + 1e-20f);
  for (int j = 0; j < k; ++j) weights[j] *= shape.routed_scaling_factor;
}

// h = SiLU(min(g, L)) ⊙ clamp(u, ±L) · weight, elementwise over n values.
void swiglu(const MoeShape& shape, const float* g, const float* u, int64_t n, float weight, float* h) {
  const float lim = shape.swiglu_limit;
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i], ui = u[i];
    if (lim > 0) {
      ui = std::clamp(ui, -lim, lim);
      gi = std::min(gi, lim);
    }
    h[i] = weight * (silu(gi) * ui);
  }
}

double dot(const float* a, const float* b, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += double(a[i]) * b[i];
  return acc;
}

// One expert on one token (scalar): y += W2 (weight · SwiGLU(W1 x, W3 x)).
void expert_reference(const MoeShape& shape, const ExpertWeights& ew, int64_t inter, const float* x, float weight,
                      float* y) {
  std::vector<float> g(inter), u(inter), h(inter);
  for (int64_t o = 0; o < inter; ++o) {
    g[o] = static_cast<float>(dot_reference(ew.w1, o * shape.dim, x, shape.dim));
    u[o] = static_cast<float>(dot_reference(ew.w3, o * shape.dim, x, shape.dim));
  }
  swiglu(shape, g.data(), u.data(), inter, weight, h.data());
  for (int64_t c = 0; c < shape.dim; ++c) y[c] += static_cast<float>(dot_reference(ew.w2, c * inter, h.data(), inter));
}

void route_all(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
               const uint8_t* is_image, int32_t* experts, float* weights) {
  std::vector<float> logits(tokens * shape.n_experts);
  gemm_f32(ex, x, tokens, shape.dim, w.gate, shape.n_experts, logits.data());
  for (int64_t t = 0; t < tokens; ++t) {
    float* s = logits.data() + t * shape.n_experts;
    for (int i = 0; i < shape.n_experts; ++i) s[i] /= shape.gate_temp;
    select(shape, w, is_image && is_image[t], s, experts + t * shape.top_k, weights + t * shape.top_k);
  }
}

}  // namespace

void moe_route(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
               const uint8_t* is_image, int32_t* experts, float* weights) {
  route_all(ex, shape, w, x, tokens, is_image, experts, weights);
}

void moe_forward_reference(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
                           const uint8_t* is_image, float* y, int32_t* experts_out, float* weights_out) {
  const int k = shape.top_k;
  std::vector<float> s(shape.n_experts);
  std::vector<int32_t> chosen(k);
  std::vector<float> wts(k);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * shape.dim;
    for (int i = 0; i < shape.n_experts; ++i)
      s[i] = static_cast<float>(dot(w.gate + i * shape.dim, xt, shape.dim)) / shape.gate_temp;
    select(shape, w, is_image && is_image[t], s.data(), chosen.data(), wts.data());
    float* yt = y + t * shape.dim;
    std::fill(yt, yt + shape.dim, 0.0f);
    for (int j = 0; j < k; ++j) expert_reference(shape, w.experts[chosen[j]], shape.inter, xt, wts[j], yt);
    if (shape.has_shared) expert_reference(shape, w.shared, shape.shared_inter, xt, 1.0f, yt);
    if (experts_out) std::copy(chosen.begin(), chosen.end(), experts_out + t * k);
    if (weights_out) std::copy(wts.begin(), wts.end(), weights_out + t * k);
  }
}

namespace {

// Runs one expert over a gathered batch: rows [n, dim] with per-row weights, adds W2 h into
// y at the rows' token indices.
void expert_batch(const CpuExec& ex, const MoeShape& shape, const ExpertWeights& ew, int64_t inter, const float* x,
                  const std::vector<int64_t>& rows, const std::vector<float>& row_weight, float* y) {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return;
  std::vector<float> xb(n * shape.dim), g(n * inter), u(n * inter), h(n * inter), out(n * shape.dim);
  for (int64_t r = 0; r < n; ++r)
    std::copy(x + rows[r] * shape.dim, x + (rows[r] + 1) * shape.dim, xb.begin() + r * shape.dim);
  matmul(ex, xb.data(), n, shape.dim, ew.w1, inter, g.data());
  matmul(ex, xb.data(), n, shape.dim, ew.w3, inter, u.data());
  for (int64_t r = 0; r < n; ++r)
    swiglu(shape, g.data() + r * inter, u.data() + r * inter, inter, row_weight[r], h.data() + r * inter);
  matmul(ex, h.data(), n, inter, ew.w2, shape.dim, out.data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < shape.dim; ++c) y[rows[r] * shape.dim + c] += out[r * shape.dim + c];
}

}  // namespace

void moe_forward(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
                 const uint8_t* is_image, float* y, int32_t* experts_out, float* weights_out) {
  const int k = shape.top_k;
  std::vector<int32_t> chosen(tokens * k);
  std::vector<float> wts(tokens * k);
  route_all(ex, shape, w, x, tokens, is_image, chosen.data(), wts.data());
  std::fill(y, y + tokens * shape.dim, 0.0f);
  // Group (token, weight) pairs by expert so each expert's weights are read once per call.
  std::vector<std::vector<int64_t>> rows(shape.n_experts);
  std::vector<std::vector<float>> row_w(shape.n_experts);
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) {
      rows[chosen[t * k + j]].push_back(t);
      row_w[chosen[t * k + j]].push_back(wts[t * k + j]);
    }
  for (int e = 0; e < shape.n_experts; ++e) expert_batch(ex, shape, w.experts[e], shape.inter, x, rows[e], row_w[e], y);
  if (shape.has_shared) {
    std::vector<int64_t> all(tokens);
    std::iota(all.begin(), all.end(), 0);
    expert_batch(ex, shape, w.shared, shape.shared_inter, x, all, std::vector<float>(tokens, 1.0f), y);
  }
  if (experts_out) std::copy(chosen.begin(), chosen.end(), experts_out);
  if (weights_out) std::copy(wts.begin(), wts.end(), weights_out);
}

}  // namespace dsv41
