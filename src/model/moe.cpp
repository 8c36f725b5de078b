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
// biased, order: [E] working rows from the caller's scratch.
void select(const MoeShape& shape, const MoeWeights& w, bool image, float* s, int32_t* experts, float* weights,
            MoeScratch& ws) {
  score(shape, s);
  const float* bias = (image && w.bias_vl) ? w.bias_vl : w.bias;
  const int e = shape.n_experts, k = shape.top_k;
  std::vector<float>& biased = ws.biased;
  biased.resize(static_cast<size_t>(e));
  for (int i = 0; i < e; ++i) biased[i] = s[i] + (bias ? bias[i] : 0.0f);
  std::vector<int32_t>& order = ws.order;
  order.resize(static_cast<size_t>(e));
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
                      float* y, MoeScratch& ws) {
  std::vector<float>& g = ws.g;  // [inter] each
  std::vector<float>& u = ws.u;
  std::vector<float>& h = ws.h;
  g.resize(static_cast<size_t>(inter));
  u.resize(static_cast<size_t>(inter));
  h.resize(static_cast<size_t>(inter));
  for (int64_t o = 0; o < inter; ++o) {
    g[o] = static_cast<float>(dot_reference(ew.w1, o * shape.dim, x, shape.dim));
    u[o] = static_cast<float>(dot_reference(ew.w3, o * shape.dim, x, shape.dim));
  }
  swiglu(shape, g.data(), u.data(), inter, weight, h.data());
  for (int64_t c = 0; c < shape.dim; ++c) y[c] += static_cast<float>(dot_reference(ew.w2, c * inter, h.data(), inter));
}

void route_all(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
               const uint8_t* is_image, int32_t* experts, float* weights, MoeScratch& ws) {
  std::vector<float>& logits = ws.logits;
  logits.resize(static_cast<size_t>(tokens * shape.n_experts));
  gemm_f32(ex, x, tokens, shape.dim, w.gate, shape.n_experts, logits.data());
  for (int64_t t = 0; t < tokens; ++t) {
    float* s = logits.data() + t * shape.n_experts;
    for (int i = 0; i < shape.n_experts; ++i) s[i] /= shape.gate_temp;
    select(shape, w, is_image && is_image[t], s, experts + t * shape.top_k, weights + t * shape.top_k, ws);
  }
}

}  // namespace

void moe_route(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
               const uint8_t* is_image, int32_t* experts, float* weights, MoeScratch* scratch) {
  MoeScratch local;
  route_all(ex, shape, w, x, tokens, is_image, experts, weights, scratch ? *scratch : local);
}

void moe_forward_reference(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
                           const uint8_t* is_image, float* y, int32_t* experts_out, float* weights_out,
                           MoeScratch* scratch) {
  const int k = shape.top_k;
  MoeScratch local;
  MoeScratch& ws = scratch ? *scratch : local;
  std::vector<float>& s = ws.logits;
  std::vector<int32_t>& chosen = ws.chosen;
  std::vector<float>& wts = ws.chosen_weights;
  s.resize(static_cast<size_t>(shape.n_experts));
  chosen.resize(static_cast<size_t>(k));
  wts.resize(static_cast<size_t>(k));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* xt = x + t * shape.dim;
    for (int i = 0; i < shape.n_experts; ++i)
      s[i] = static_cast<float>(dot(w.gate + i * shape.dim, xt, shape.dim)) / shape.gate_temp;
    select(shape, w, is_image && is_image[t], s.data(), chosen.data(), wts.data(), ws);
    float* yt = y + t * shape.dim;
    std::fill(yt, yt + shape.dim, 0.0f);
    for (int j = 0; j < k; ++j) expert_reference(shape, w.experts[chosen[j]], shape.inter, xt, wts[j], yt, ws);
    if (shape.has_shared) expert_reference(shape, w.shared, shape.shared_inter, xt, 1.0f, yt, ws);
    if (experts_out) std::copy(chosen.begin(), chosen.begin() + k, experts_out + t * k);
    if (weights_out) std::copy(wts.begin(), wts.begin() + k, weights_out + t * k);
  }
}

namespace {

// Runs one expert over a gathered batch: rows [n] token indices with per-row weights, writes
// W2 h of each row into out [n, dim] (the caller adds them into y at the rows' tokens).
void expert_rows(const CpuExec& ex, const MoeShape& shape, const ExpertWeights& ew, int64_t inter, const float* x,
                 const int64_t* rows, const float* row_weight, int64_t n, float* out, ExpertScratch& ws) {
  if (n == 0) return;
  ws.xb.resize(static_cast<size_t>(n * shape.dim));
  ws.g.resize(static_cast<size_t>(n * inter));
  ws.u.resize(static_cast<size_t>(n * inter));
  ws.h.resize(static_cast<size_t>(n * inter));
  float *xb = ws.xb.data(), *g = ws.g.data(), *u = ws.u.data(), *h = ws.h.data();
  // The row gather and the SwiGLU threaded over rows (a prefill's experts have hundreds of rows:
  // on the caller alone they were serial phases between the threaded products); row by row the
  // same arithmetic. Inside a pool chunk (experts side by side) they run inline.
  ex.parallel_items(n, shape.dim, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) std::copy_n(x + rows[r] * shape.dim, shape.dim, xb + r * shape.dim);
  });
  matmul(ex, xb, n, shape.dim, ew.w1, inter, g);
  matmul(ex, xb, n, shape.dim, ew.w3, inter, u);
  ex.parallel_items(n, 8 * inter, [&](int64_t b, int64_t e) {  // ≈ 8 units a channel: exp, divide, clamps
    for (int64_t r = b; r < e; ++r) swiglu(shape, g + r * inter, u + r * inter, inter, row_weight[r], h + r * inter);
  });
  matmul(ex, h, n, inter, ew.w2, shape.dim, out);
}

void add_rows(const MoeShape& shape, const int64_t* rows, const float* out, int64_t n, float* y) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < shape.dim; ++c) y[rows[r] * shape.dim + c] += out[r * shape.dim + c];
}

// Below this many tokens the experts' products share two parallel regions (gemm_many): up to
// kGemmManyMaxRows, so the shared expert's product of every row still qualifies. (A batch of 8
// decoders on a few threads ran its ≤ 9 experts one per chunk instead, the shared expert's 8
// rows beside routed experts of 1–3 rows: the chunks unequal and the last one alone.)
// Above kSideBySideMaxTokens (prefill) each expert has rows enough for the products' own
// threading, and one output buffer for every (token, expert) pair would be large.
constexpr int64_t kSideBySideTokens = kGemmManyMaxRows + 1;
constexpr int64_t kSideBySideMaxTokens = 64;

}  // namespace

void moe_expert_rows(const CpuExec& ex, const MoeShape& shape, const ExpertWeights& ew, int64_t inter, const float* x,
                     const int64_t* rows, const float* row_weight, int64_t n, float* out, ExpertScratch& scratch) {
  expert_rows(ex, shape, ew, inter, x, rows, row_weight, n, out, scratch);
}

void moe_forward(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
                 const uint8_t* is_image, float* y, int32_t* experts_out, float* weights_out, MoeScratch* scratch) {
  const int k = shape.top_k, E = shape.n_experts;
  MoeScratch local;
  MoeScratch& ws = scratch ? *scratch : local;
  ws.chosen.resize(static_cast<size_t>(tokens * k));
  ws.chosen_weights.resize(static_cast<size_t>(tokens * k));
  const int32_t* chosen = ws.chosen.data();
  const float* wts = ws.chosen_weights.data();
  // Timed only on the pool's caller: a backend may run moe_forward inside pool chunks.
  StepProfile* const profile = ThreadPool::inside_job() ? nullptr : ex.profile;
  {
    StepScope timed(profile, StepPhase::kMoeRoute);
    route_all(ex, shape, w, x, tokens, is_image, ws.chosen.data(), ws.chosen_weights.data(), ws);
  }
  StepScope timed(profile, StepPhase::kMoeExperts);
  std::fill(y, y + tokens * shape.dim, 0.0f);
  // Group (token, weight) pairs by expert so each expert's weights are read once per call: a
  // counting sort, stable, so each expert sees its tokens in ascending order.
  ws.expert_begin.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < tokens * k; ++i) ++ws.expert_begin[chosen[i] + 1];
  for (int e = 0; e < E; ++e) ws.expert_begin[e + 1] += ws.expert_begin[e];
  ws.expert_rows.resize(static_cast<size_t>(tokens * k));
  ws.expert_row_weights.resize(static_cast<size_t>(tokens * k));
  // Fill with a moving cursor per expert (expert_begin[e] advances to the end of e's rows, then is
  // shifted back below).
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < k; ++j) {
      const int64_t slot = ws.expert_begin[chosen[t * k + j]]++;
      ws.expert_rows[slot] = t;
      ws.expert_row_weights[slot] = wts[t * k + j];
    }
  for (int e = E; e > 0; --e) ws.expert_begin[e] = ws.expert_begin[e - 1];
  ws.expert_begin[0] = 0;
  if (shape.has_shared) {
    ws.all_rows.resize(static_cast<size_t>(tokens));
    std::iota(ws.all_rows.begin(), ws.all_rows.end(), 0);
    ws.ones.assign(static_cast<size_t>(tokens), 1.0f);
  }
  const int experts_run = E + (shape.has_shared ? 1 : 0);
  auto rows_of = [&](int e) { return e < E ? ws.expert_rows.data() + ws.expert_begin[e] : ws.all_rows.data(); };
  auto count_of = [&](int e) { return e < E ? ws.expert_begin[e + 1] - ws.expert_begin[e] : tokens; };
  auto run_expert = [&](int e, float* out, ExpertScratch& es) {  // e = E: the shared expert
    if (e < E) {
      expert_rows(ex, shape, w.experts[e], shape.inter, x, rows_of(e), ws.expert_row_weights.data() + ws.expert_begin[e],
                  count_of(e), out, es);
    } else {
      expert_rows(ex, shape, w.shared, shape.shared_inter, x, rows_of(e), ws.ones.data(), tokens, out, es);
    }
  };
  // An expert gets at most `tokens` rows: room for that in each scratch used, so that a decode
  // step allocates nothing once the batch shape has been seen, whichever experts it picks.
  auto reserve = [&](ExpertScratch& es) {
    const size_t inter = static_cast<size_t>(std::max(shape.inter, shape.has_shared ? shape.shared_inter : 0));
    es.xb.reserve(static_cast<size_t>(tokens * shape.dim));
    for (std::vector<float>* v : {&es.g, &es.u, &es.h}) v->reserve(static_cast<size_t>(tokens) * inter);
  };
  if (tokens < kSideBySideTokens) {
    // A decode step of one sequence (or two, three): every expert with rows in one parallel
    // region (gemm_many_staged): w1 and w3 of all of them, each expert's SwiGLU as soon as its
    // two products are done, then w2 of all — instead of three fork/joins per expert, each too
    // short to keep the pool busy. Then the additions of the one-after-another path below, in
    // its order: the same bits.
    std::vector<int32_t>& active = ws.active;
    active.clear();
    for (int e = 0; e < experts_run; ++e)
      if (count_of(e) > 0) active.push_back(e);
    const size_t na = active.size();
    const int64_t slots = tokens * k + (shape.has_shared ? tokens : 0);
    ws.out.resize(static_cast<size_t>(slots * shape.dim));
    auto slot_of = [&](int e) { return e < E ? ws.expert_begin[e] : tokens * k; };
    auto inter_of = [&](int e) { return e < E ? shape.inter : shape.shared_inter; };
    if (ws.experts.size() < na) ws.experts.resize(na);
    std::vector<GemmJob>& jobs = ws.jobs;
    std::vector<int32_t>& groups = ws.job_groups;
    jobs.clear();
    groups.clear();
    for (size_t a = 0; a < na; ++a) {
      const int e = active[a];
      const ExpertWeights& ew = e < E ? w.experts[e] : w.shared;
      const int64_t inter = inter_of(e), n = count_of(e);
      ExpertScratch& es = ws.experts[a];
      reserve(es);
      es.xb.resize(static_cast<size_t>(n * shape.dim));
      for (std::vector<float>* v : {&es.g, &es.u, &es.h}) v->resize(static_cast<size_t>(n * inter));
      const int64_t* rows = rows_of(e);
      for (int64_t r = 0; r < n; ++r)
        std::copy(x + rows[r] * shape.dim, x + (rows[r] + 1) * shape.dim, es.xb.data() + r * shape.dim);
      jobs.push_back(gemm_job(es.xb.data(), n, shape.dim, ew.w1, inter, es.g.data()));
      jobs.push_back(gemm_job(es.xb.data(), n, shape.dim, ew.w3, inter, es.u.data()));
      groups.insert(groups.end(), 2, static_cast<int32_t>(a));
    }
    for (size_t a = 0; a < na; ++a) {
      const int e = active[a];
      const ExpertWeights& ew = e < E ? w.experts[e] : w.shared;
      ExpertScratch& es = ws.experts[a];
      jobs.push_back(gemm_job(es.h.data(), count_of(e), inter_of(e), ew.w2, shape.dim,
                              ws.out.data() + slot_of(e) * shape.dim));
      groups.push_back(static_cast<int32_t>(a));
    }
    GemmStages stages;
    stages.first = std::span<const GemmJob>(jobs.data(), 2 * na);
    stages.second = std::span<const GemmJob>(jobs.data() + 2 * na, na);
    stages.first_group = std::span<const int32_t>(groups.data(), 2 * na);
    stages.second_group = std::span<const int32_t>(groups.data() + 2 * na, na);
    stages.groups = static_cast<int32_t>(na);
    gemm_many_staged(ex, stages, [&](int32_t a) {  // expert a's g, u → h (its w2's x)
      const int e = active[static_cast<size_t>(a)];
      const int64_t inter = inter_of(e);
      const float* row_weight = e < E ? ws.expert_row_weights.data() + ws.expert_begin[e] : ws.ones.data();
      ExpertScratch& es = ws.experts[static_cast<size_t>(a)];
      for (int64_t r = 0; r < count_of(e); ++r)
        swiglu(shape, es.g.data() + r * inter, es.u.data() + r * inter, inter, row_weight[r], es.h.data() + r * inter);
    });
    for (size_t a = 0; a < na; ++a) {
      const int e = active[a];
      add_rows(shape, rows_of(e), ws.out.data() + slot_of(e) * shape.dim, count_of(e), y);
    }
  } else if (tokens > kSideBySideMaxTokens || ex.threads() < 2) {
    // One expert after another, each added into y as it finishes (ascending, the shared one last).
    if (ws.experts.empty()) ws.experts.resize(1);
    reserve(ws.experts[0]);
    for (int e = 0; e < experts_run; ++e) {
      ws.out.resize(static_cast<size_t>(count_of(e) * shape.dim));
      run_expert(e, ws.out.data(), ws.experts[0]);
      // An expert's rows are distinct tokens: its additions split over rows without races, and
      // each y element still gets the experts' terms in ascending order.
      const int64_t* rows = rows_of(e);
      ex.parallel_items(count_of(e), shape.dim, [&](int64_t b, int64_t end) {
        add_rows(shape, rows + b, ws.out.data() + b * shape.dim, end - b, y);
      });
    }
  } else {
    // Side by side on the pool, one expert per chunk with its own scratch (the products inside a
    // chunk run inline), each writing its rows at its slots of out [tokens·k (+ tokens), dim]; then
    // the same additions in the same order as above, so every token gets the same bits.
    const int64_t slots = tokens * k + (shape.has_shared ? tokens : 0);
    ws.out.resize(static_cast<size_t>(slots * shape.dim));
    auto slot_of = [&](int e) { return e < E ? ws.expert_begin[e] : tokens * k; };
    if (static_cast<int>(ws.experts.size()) < experts_run) ws.experts.resize(static_cast<size_t>(experts_run));
    for (int e = 0; e < experts_run; ++e) reserve(ws.experts[static_cast<size_t>(e)]);
    ex.parallel_for(experts_run, 1, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) {
        const int e = static_cast<int>(i);
        run_expert(e, ws.out.data() + slot_of(e) * shape.dim, ws.experts[static_cast<size_t>(i)]);
      }
    });
    for (int e = 0; e < experts_run; ++e) add_rows(shape, rows_of(e), ws.out.data() + slot_of(e) * shape.dim, count_of(e), y);
  }
  if (experts_out) std::copy(chosen, chosen + tokens * k, experts_out);
  if (weights_out) std::copy(wts, wts + tokens * k, weights_out);
}

}  // namespace dsv41
