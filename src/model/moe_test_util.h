// Test helper: a random MoE block (router, routed and shared experts as float matrices) with its
// MoeWeights view, for tests of the MoE and of expert parallelism. Header-only, tests only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "model/moe.h"

namespace dsv41::testing_moe {

inline std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct RandomMoe {
  MoeShape shape;
  std::vector<float> gate, bias, bias_vl;
  std::vector<std::vector<float>> w1, w2, w3;  // routed experts, then the shared one
  MoeWeights weights;
};

// gate_temp, the routed scaling and a low SwiGLU limit (so the clamps bite) are not 1; without a
// shared expert its matrices are one row wide and unused.
inline RandomMoe make_random_moe(int dim, int inter, int experts, int k, int n_shared, ScoringFunc scoring,
                                 std::mt19937& rng) {
  RandomMoe m;
  m.shape.dim = dim;
  m.shape.inter = inter;
  m.shape.shared_inter = inter * n_shared;
  m.shape.has_shared = n_shared > 0;
  m.shape.n_experts = experts;
  m.shape.top_k = k;
  m.shape.scoring = scoring;
  m.shape.gate_temp = 1.3f;
  m.shape.routed_scaling_factor = 1.5f;
  m.shape.swiglu_limit = 2.0f;
  m.gate = random_vec(experts * dim, rng, 0.5f);
  m.bias = random_vec(experts, rng, 0.3f);
  m.bias_vl = random_vec(experts, rng, 0.3f);
  for (int e = 0; e <= experts; ++e) {
    const int width = e == experts ? static_cast<int>(std::max<int64_t>(1, m.shape.shared_inter)) : inter;
    m.w1.push_back(random_vec(width * dim, rng, 0.6f));
    m.w3.push_back(random_vec(width * dim, rng, 0.6f));
    m.w2.push_back(random_vec(dim * width, rng, 0.3f));
  }
  m.weights.gate = m.gate.data();
  m.weights.bias = m.bias.data();
  m.weights.bias_vl = m.bias_vl.data();
  for (int e = 0; e < experts; ++e) m.weights.experts.push_back({m.w1[e].data(), m.w3[e].data(), m.w2[e].data()});
  m.weights.shared = {m.w1[experts].data(), m.w3[experts].data(), m.w2[experts].data()};
  return m;
}

}  // namespace dsv41::testing_moe
