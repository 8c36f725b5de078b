// Mixture of experts: router, routed SwiGLU experts, shared expert(s). Spec: model.md §3.7,
// §9.1 (gate_temp), golden README (router_experts / router_weights).
//
//   logits = x · W_gateᵀ / gate_temp                       (fp32, [E])
//   s      = score(logits)       sqrtsoftplus | softmax | sigmoid (config scoring_func)
//   chosen = top-k of s + bias   (bias_vl for image-span tokens)   — selection only
//   weight = s[chosen] / (Σ s[chosen] + 1e-20) · routed_scaling_factor
//            (normalised only when norm_topk_prob and k > 1, as the reference does)
//   expert: g = W1 x, u = W3 x; u ← clamp(u, ±limit); g ← min(g, limit); h = SiLU(g) ⊙ u;
//           routed: h ← weight · h;  y = W2 h
//   out    = Σ_routed y + Σ_shared y                        (fp32)
//
// Top-k tie rule: candidates are ordered by (value descending, expert index ascending); the
// chosen experts are reported in that order (the golden `router_experts` order is torch.topk's
// descending order). NaN scores sort last.
// Weights are float32 [out, in] (dequantised by the registry) and borrowed for each call.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "model/weight_matrix.h"

namespace dsv41 {

enum class ScoringFunc { kSqrtSoftplus, kSoftmax, kSigmoid };

struct MoeShape {
  int64_t dim = 0;           // hidden_size
  int64_t inter = 0;         // routed expert width (moe_intermediate_size)
  int64_t shared_inter = 0;  // shared expert width (n_shared_experts · moe_intermediate_size)
  int n_experts = 0;         // n_routed_experts
  int top_k = 0;             // num_experts_per_tok
  bool has_shared = true;    // n_shared_experts > 0
  ScoringFunc scoring = ScoringFunc::kSqrtSoftplus;
  float gate_temp = 1.0f;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  float swiglu_limit = 0.0f;  // ≤ 0: no clamps

  static Result<MoeShape> from_config(const ModelConfig& config);
};

// Each projection is float32 or bf16 (weight_matrix.h); the products are the same bits either way.
struct ExpertWeights {
  WeightRef w1;  // [inter, dim]  gate projection
  WeightRef w3;  // [inter, dim]  up projection
  WeightRef w2;  // [dim, inter]  down projection
};

struct MoeWeights {
  const float* gate = nullptr;     // [E, dim]
  const float* bias = nullptr;     // [E] text-token selection bias
  const float* bias_vl = nullptr;  // [E] image-span selection bias (may be null: text only)
  std::vector<ExpertWeights> experts;  // E routed experts
  ExpertWeights shared;                // the shared expert (width shared_inter), if has_shared
};

// Working memory of the router and the experts, owned by the caller and reused between calls
// (resized to the call's shape: no allocation once a shape has been seen). Null: a local one.
// One expert's gathered rows and activations (moe_forward: one per expert running side by side).
struct ExpertScratch {
  std::vector<float> xb, g, u, h;
};

struct MoeScratch {
  std::vector<float> logits;                 // [T, E] router logits, then scores
  std::vector<float> biased;                 // [E] selection scores of one token
  std::vector<int32_t> order;                // [E] experts sorted for the top-k
  std::vector<int32_t> chosen;               // [T, k]
  std::vector<float> chosen_weights;         // [T, k]
  std::vector<int64_t> expert_begin;         // [E + 1] start of each expert's rows below
  std::vector<int64_t> expert_rows;          // [T·k] token of each (token, expert) pair, by expert
  std::vector<float> expert_row_weights;     // [T·k] its routing weight
  std::vector<int64_t> all_rows;             // [T] 0 … T−1 (the shared expert)
  std::vector<float> ones;                   // [T] 1.0 (the shared expert's weights)
  std::vector<float> g, u, h;                // the reference's activations of one token
  std::vector<float> out;                    // [T·k (+ T), dim] every expert's output rows, by slot
  std::vector<ExpertScratch> experts;        // per expert (side by side / few tokens), or one
  std::vector<int32_t> active;               // few tokens: the experts with rows (E = shared), ascending
  std::vector<GemmJob> jobs;                 // few tokens: w1 / w3 of every active expert, then w2
  std::vector<int32_t> job_groups;           // few tokens: jobs' index into active
};

// Router only.  x [T, dim]; is_image [T] (null = all text) → experts [T, k] i32, weights [T, k].
void moe_route(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
               const uint8_t* is_image, int32_t* experts, float* weights, MoeScratch* scratch = nullptr);

// Full MoE.  x [T, dim] → y [T, dim]; experts/weights (optional, [T, k]) receive the routing.
// The reference runs token by token with scalar dot products; the fast path batches the
// tokens of each expert through gemm_f32 / gemm_bf16w (matmul, threaded on ex.pool), and with
// 4–64 tokens (batched decode) runs the experts side by side on ex.pool instead, adding their
// outputs in the same order (the same bits either way). Same routing, outputs equal to float
// rounding.
void moe_forward_reference(const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
                           const uint8_t* is_image, float* y, int32_t* experts = nullptr,
                           float* weights = nullptr, MoeScratch* scratch = nullptr);
void moe_forward(const CpuExec& ex, const MoeShape& shape, const MoeWeights& w, const float* x, int64_t tokens,
                 const uint8_t* is_image, float* y, int32_t* experts = nullptr, float* weights = nullptr,
                 MoeScratch* scratch = nullptr);

// One expert of moe_forward's fast path over gathered rows: out [n, dim] = W2 (row_weight[r] ·
// SwiGLU(W1 x_r, W3 x_r)), x_r = x[rows[r]] ([·, dim]), inter = the expert's width. moe_forward
// adds these rows into y (routed experts by ascending index, the shared one last); expert
// parallelism (parallel/expert_parallel.h) runs the same unit on the rank that holds the expert.
void moe_expert_rows(const CpuExec& ex, const MoeShape& shape, const ExpertWeights& ew, int64_t inter, const float* x,
                     const int64_t* rows, const float* row_weight, int64_t n, float* out, ExpertScratch& scratch);

}  // namespace dsv41
