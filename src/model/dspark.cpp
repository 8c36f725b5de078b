// The DSpark drafter on the CPU (see dspark.h). Spec: model.md §6.1, §3.2–§3.4, §3.7.
#include "model/dspark.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cpu/attention_kernels.h"
#include "model/dspark_weights.h"
#include "model/model.h"
#include "model/rmsnorm.h"
#include "model/weight_matrix.h"
#include "runtime/sampling.h"

namespace dsv41 {

namespace {

template <typename T>
T* row(std::vector<T>& v, int64_t r, int64_t width) {
  return v.data() + r * width;
}

}  // namespace

Status check_draft_requests(std::span<const DraftRequest> requests, int stages, int64_t V) {
  const int64_t n = static_cast<int64_t>(requests.size());
  for (int64_t i = 0; i < n; ++i) {
    const DraftRequest& q = requests[i];
    const std::string who = "draft request " + std::to_string(i);
    if (!q.cache || q.cache->draft_stages() != stages)
      return invalid_argument(who + ": the sequence's cache holds no drafter rings");
    if (q.anchor < 0 || q.anchor >= V)
      return invalid_argument(who + ": anchor token " + std::to_string(q.anchor) + " outside the vocabulary");
    for (int s = 0; s < stages; ++s)
      if (q.cache->draft_ring(s).length() != q.last + 1 || q.cache->draft_ring(s).start() > q.last)
        return invalid_argument(who + ": stage " + std::to_string(s) + "'s ring ends at position " +
                                std::to_string(q.cache->draft_ring(s).length() - 1) + " (restarted at " +
                                std::to_string(q.cache->draft_ring(s).start()) + "), the draft continues " +
                                std::to_string(q.last));
  }
  return ok_status();
}

std::vector<float> markov_head_by_rank(const DrafterWeights& w, int64_t V) {
  const int64_t r = w.shape.markov_rank;
  std::vector<float> t(static_cast<size_t>(r * V));
  for (int64_t v = 0; v < V; ++v)
    for (int64_t u = 0; u < r; ++u) t[u * V + v] = w.markov_head[v * r + u];
  return t;
}

namespace {

// logits[v] += Σ_u head[v, u] · e[u], each v's sum from 0 over u in order.
void add_markov_bias(const DrafterWeights& w, const float* head_by_rank, int64_t V, const float* e, float* logits) {
  const int64_t r = w.shape.markov_rank;
  if (!head_by_rank) {
    for (int64_t v = 0; v < V; ++v) {
      const float* hv = w.markov_head.data() + v * r;
      float acc = 0;
      for (int64_t u = 0; u < r; ++u) acc += hv[u] * e[u];
      logits[v] += acc;
    }
    return;
  }
  constexpr int64_t kLanes = 64;  // a block of v's sums on the stack, the u loop outside
  for (int64_t v0 = 0; v0 < V; v0 += kLanes) {
    const int64_t n = std::min(kLanes, V - v0);
    float acc[kLanes] = {};
    for (int64_t u = 0; u < r; ++u) {
      const float* hu = head_by_rank + u * V + v0;
      const float eu = e[u];
      for (int64_t i = 0; i < n; ++i) acc[i] += hu[i] * eu;
    }
    for (int64_t i = 0; i < n; ++i) logits[v0 + i] += acc[i];
  }
}

}  // namespace

void draft_block_tail(const DrafterWeights& w, int64_t d, int64_t V, int32_t anchor, const float* x, int64_t request,
                      const DraftPicker& pick, DraftBlock& b, const float* head_by_rank) {
  const int64_t r = w.shape.markov_rank, want = static_cast<int64_t>(b.ids.size());
  int32_t prev = anchor;
  for (int64_t j = 0; j < want; ++j) {
    const float* e = w.markov_embed.data() + int64_t(prev) * r;
    float* lj = b.logits.data() + j * V;
    add_markov_bias(w, head_by_rank, V, e, lj);
    const float* xj = x + j * d;
    double conf = 0;
    for (int64_t u = 0; u < d; ++u) conf += double(w.confidence[u]) * xj[u];
    for (int64_t u = 0; u < r; ++u) conf += double(w.confidence[d + u]) * e[u];
    b.confidence[j] = static_cast<float>(conf);
    const std::span<const float> slot(lj, static_cast<size_t>(V));
    prev = pick ? pick(request, static_cast<int>(j), slot) : argmax_logits(slot);
    b.ids[j] = prev;
  }
}

Drafter::Drafter(const Model& model, const CpuExec& exec) : model_(model), w_(*model.drafter()), ex_(exec) {
  for (const LayerWeights& L : w_.stages) moe_.push_back(L.moe());
  markov_head_by_rank_ = markov_head_by_rank(w_, model.config().vocab_size);
  rows_.resize(w_.stages.size());
}

int Drafter::block() const { return w_.shape.block; }
int Drafter::stages() const { return w_.shape.stages; }
int64_t Drafter::feature_width() const {
  return static_cast<int64_t>(w_.shape.targets.size()) * model_.config().hidden_size;
}

void Drafter::ring_rows(const float* features, const int64_t* positions, int64_t n) {
  const ModelConfig& c = model_.config();
  const int64_t d = c.hidden_size, D = c.head_dim;
  main_.resize(static_cast<size_t>(n * d));
  matmul(ex_, features, n, feature_width(), w_.main_proj.ref(), d, main_.data());
  rmsnorm_rows(main_.data(), n, d, w_.main_norm.data(), c.rms_norm_eps, main_.data());
  rope_.compute(model_.rope(), RopeKind::kMain, positions, n);
  for (int s = 0; s < stages(); ++s) {
    rows_[s].resize(static_cast<size_t>(n * D));
    attention_window_kv(ex_, c, w_.stages[s].attn, rope_, main_.data(), n, rows_[s].data());
  }
}

Status Drafter::draft(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick) {
  const ModelConfig& c = model_.config();
  const int64_t B = block(), d = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, H = c.num_attention_heads;
  const int64_t D = c.head_dim, k = w_.shape.moe.top_k;
  const int64_t n = static_cast<int64_t>(requests.size()), R = n * B;
  DSV41_RETURN_IF_ERROR(check_draft_requests(requests, stages(), V));
  // The block's rows: the anchor then noise tokens, at positions s+1 … s+B.
  positions_.resize(static_cast<size_t>(R));
  for (auto* v : {&x_, &x2_}) v->resize(static_cast<size_t>(R * hc * d));
  for (auto* v : {&h_, &a_}) v->resize(static_cast<size_t>(R * d));
  for (auto* v : {&p_, &pre_a_, &post_a_, &pre_b_, &post_b_}) v->resize(static_cast<size_t>(R * hc));
  comb_a_.resize(static_cast<size_t>(R * hc * hc));
  comb_b_.resize(static_cast<size_t>(R * hc * hc));
  c_.resize(static_cast<size_t>(R * c.q_lora_rank));
  q_.resize(static_cast<size_t>(R * H * D));
  o_.resize(static_cast<size_t>(R * H * D));
  kv_.resize(static_cast<size_t>(R * D));
  experts_.resize(static_cast<size_t>(R * k));
  weights_.resize(static_cast<size_t>(R * k));
  const std::vector<float>& embed = model_.embedding();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < B; ++j) {
      const int64_t t = i * B + j;
      positions_[t] = requests[i].last + 1 + j;
      const int64_t id = j == 0 ? requests[i].anchor : w_.shape.noise_id;
      std::copy_n(embed.data() + id * d, d, row(h_, t, d));
    }
  mhc_init_streams(model_.mhc_shape(), h_.data(), R, x_.data());
  mhc_initial_pre(model_.mhc_shape(), R, p_.data());
  rope_.compute(model_.rope(), RopeKind::kMain, positions_.data(), R);
  for (int s = 0; s < stages(); ++s) stage(s, requests);

  // Head: collapse with the last FFN pre (kept un-normalised for the confidence), norm, logits.
  mhc_collapse(ex_, model_.mhc_shape(), x_.data(), p_.data(), R, a_.data());
  rmsnorm_rows(a_.data(), R, d, w_.norm.data(), c.rms_norm_eps, h_.data());
  // Logits only of the slots each request wants (their normed rows gathered, one product).
  std::vector<int64_t>& first = head_rows_;
  first.assign(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want = requests[i].slots > 0 ? std::min<int64_t>(requests[i].slots, B) : B;
    first[i + 1] = first[i] + want;
    for (int64_t j = 0; j < want; ++j)
      std::copy_n(row(h_, i * B + j, d), d, row(h_, first[i] + j, d));  // compacting: first[i] + j ≤ i·B + j
  }
  logits_.resize(static_cast<size_t>(first[n] * V));
  matmul(ex_, h_.data(), first[n], d, model_.head().ref(), V, logits_.data());
  out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    DraftBlock& b = out[i];
    const int64_t want = first[i + 1] - first[i];
    b.ids.resize(static_cast<size_t>(want));
    b.logits.assign(logits_.begin() + first[i] * V, logits_.begin() + first[i + 1] * V);
    b.confidence.resize(static_cast<size_t>(want));
    draft_block_tail(w_, d, V, requests[i].anchor, row(a_, i * B, d), i, pick, b, markov_head_by_rank_.data());
  }
  return ok_status();
}

void Drafter::stage(int s, std::span<const DraftRequest> requests) {
  const ModelConfig& c = model_.config();
  const int64_t B = block(), R = static_cast<int64_t>(requests.size()) * B;
  const MhcShape& mhc = model_.mhc_shape();
  const LayerWeights& L = w_.stages[s];
  // Attention site: the backbone block's order (model.h), over every block row of every request.
  mhc_coefficients(ex_, mhc, L.mhc_attn(), x_.data(), R, pre_a_.data(), post_a_.data(), comb_a_.data(),
                   &mhc_scratch_);
  mhc_collapse(ex_, mhc, x_.data(), p_.data(), R, h_.data());
  rmsnorm_rows(h_.data(), R, c.hidden_size, L.attn_norm.data(), c.rms_norm_eps, h_.data());
  attention_query(ex_, c, L.attn, rope_, h_.data(), R, c_.data(), q_.data());
  attention_window_kv(ex_, c, L.attn, rope_, h_.data(), R, kv_.data());
  for (size_t i = 0; i < requests.size(); ++i) attend(s, requests[i], static_cast<int64_t>(i) * B);
  attention_output(ex_, c, L.attn, o_.data(), R, a_.data(), &attention_scratch_);
  mhc_expand(ex_, mhc, a_.data(), x_.data(), post_a_.data(), comb_a_.data(), R, x2_.data());
  // FFN site: the stage's MoE, text routing (never bias_vl).
  mhc_coefficients(ex_, mhc, L.mhc_ffn(), x2_.data(), R, pre_b_.data(), post_b_.data(), comb_b_.data(),
                   &mhc_scratch_);
  mhc_collapse(ex_, mhc, x2_.data(), pre_a_.data(), R, h_.data());
  rmsnorm_rows(h_.data(), R, c.hidden_size, L.ffn_norm.data(), c.rms_norm_eps, h_.data());
  moe_forward(ex_, w_.shape.moe, moe_[s], h_.data(), R, nullptr, a_.data(), experts_.data(), weights_.data(),
              &moe_scratch_);
  mhc_expand(ex_, mhc, a_.data(), x2_.data(), post_b_.data(), comb_b_.data(), R, x_.data());
  std::copy(pre_b_.begin(), pre_b_.end(), p_.begin());
}

// Sink attention of one request's B block rows over its stage ring (positions ≤ last) and the B
// block rows' own keys, bidirectionally; output inverse-rotated at each row's position.
void Drafter::attend(int s, const DraftRequest& r, int64_t row0) {
  const ModelConfig& c = model_.config();
  const int64_t B = block(), H = c.num_attention_heads, D = c.head_dim, W = c.sliding_window;
  const int rd = static_cast<int>(rope_.half * 2);
  const WindowRing& ring = r.cache->draft_ring(s);
  const int64_t lo = std::max({ring.start(), ring.first_held(), r.last - W + 1});
  const int64_t nring = r.last + 1 - lo, K = nring + B;
  keys_.resize(static_cast<size_t>((K + K) * D));  // keys, then one logit row at the end
  for (int64_t p = lo; p <= r.last; ++p) ring.read(p, keys_.data() + (p - lo) * D);
  std::copy_n(kv_.data() + row0 * D, B * D, keys_.data() + nring * D);
  float* logits = keys_.data() + K * D;
  const float scaling = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  const std::vector<float>& sinks = model_.drafter()->stages[s].attn.attn_sink;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q_.data() + ((row0 + i) * H + h) * D;
      dot_rows(qh, keys_.data(), K, D, logits);
      float m = sinks[h];  // the sink joins the max and the denominator, never the values
      for (int64_t j = 0; j < K; ++j) {
        logits[j] *= scaling;
        m = std::max(m, logits[j]);
      }
      double denom = std::exp(static_cast<double>(sinks[h] - m));
      for (int64_t j = 0; j < K; ++j) {
        logits[j] = std::exp(logits[j] - m);
        denom += logits[j];
      }
      for (int64_t j = 0; j < K; ++j) logits[j] = static_cast<float>(logits[j] / denom);
      float* oh = o_.data() + ((row0 + i) * H + h) * D;
      std::fill(oh, oh + D, 0.0f);
      weighted_sum_rows(logits, keys_.data(), K, D, oh);
      rope_rotate(oh, D, rd, rope_.cos_row(row0 + i), rope_.sin_row(row0 + i), true);
    }
  }
}

}  // namespace dsv41
