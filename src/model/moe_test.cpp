#include "model/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Model {
  MoeShape shape;
  std::vector<float> gate, bias, bias_vl;
  std::vector<std::vector<float>> w1, w2, w3;
  MoeWeights weights;
};

Model make(int dim, int inter, int experts, int k, int n_shared, ScoringFunc f, std::mt19937& rng) {
  Model m;
  m.shape.dim = dim;
  m.shape.inter = inter;
  m.shape.shared_inter = inter * n_shared;
  m.shape.has_shared = n_shared > 0;
  m.shape.n_experts = experts;
  m.shape.top_k = k;
  m.shape.scoring = f;
  m.shape.gate_temp = 1.3f;
  m.shape.routed_scaling_factor = 1.5f;
  m.shape.swiglu_limit = 2.0f;  // low so the clamps bite on these inputs
  m.gate = random_vec(experts * dim, rng, 0.5f);
  m.bias = random_vec(experts, rng, 0.3f);
  m.bias_vl = random_vec(experts, rng, 0.3f);
  for (int e = 0; e <= experts; ++e) {
    const int width = e == experts ? m.shape.shared_inter : inter;
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

class MoeShapes : public ::testing::TestWithParam<std::tuple<int, int, int, int, int, ScoringFunc>> {};

TEST_P(MoeShapes, FastMatchesReference) {
  const auto [dim, inter, experts, k, shared, f] = GetParam();
  std::mt19937 rng(dim * 31 + inter);
  Model m = make(dim, inter, experts, k, shared, f, rng);
  const int T = 13;
  auto x = random_vec(T * dim, rng, 1.5f);
  std::vector<uint8_t> image(T, 0);
  image[3] = image[7] = 1;
  std::vector<float> y1(T * dim), y2(T * dim), w1(T * k), w2(T * k);
  std::vector<int32_t> e1(T * k), e2(T * k);
  moe_forward_reference(m.shape, m.weights, x.data(), T, image.data(), y1.data(), e1.data(), w1.data());
  moe_forward(CpuExec::serial(), m.shape, m.weights, x.data(), T, image.data(), y2.data(), e2.data(), w2.data());
  EXPECT_EQ(e1, e2);
  for (int i = 0; i < T * k; ++i) EXPECT_NEAR(w1[i], w2[i], 1e-6);
  for (int i = 0; i < T * dim; ++i) EXPECT_NEAR(y1[i], y2[i], 1e-4 * (1 + std::abs(y1[i])));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeShapes,
    ::testing::Values(std::make_tuple(16, 8, 8, 2, 1, ScoringFunc::kSqrtSoftplus),
                      std::make_tuple(33, 7, 5, 3, 2, ScoringFunc::kSqrtSoftplus),
                      std::make_tuple(9, 5, 4, 1, 1, ScoringFunc::kSoftmax),
                      std::make_tuple(12, 6, 6, 6, 0, ScoringFunc::kSigmoid)));

// One token, one-hot expert logits: checks the formula of §3.7 term by term.
TEST(Moe, RoutingFollowsBiasButWeightsDoNot) {
  MoeShape s;
  s.dim = 4;
  s.inter = 1;
  s.n_experts = 4;
  s.top_k = 2;
  s.has_shared = false;
  s.routed_scaling_factor = 1.5f;
  s.gate_temp = 2.0f;
  // gate rows pick out x channels: logits = x / gate_temp
  std::vector<float> gate = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<float> bias = {0, 0, 10, 0};  // expert 2 forced in despite the lowest score
  MoeWeights w;
  w.gate = gate.data();
  w.bias = bias.data();
  std::vector<float> x = {4, 2, -6, 1};
  int32_t e[2];
  float wt[2];
  moe_route(CpuExec::serial(), s, w, x.data(), 1, nullptr, e, wt);
  auto sp = [](double v) { return std::sqrt(std::log1p(std::exp(v))); };
  EXPECT_EQ(e[0], 2);
  EXPECT_EQ(e[1], 0);
  const double s2 = sp(-3), s0 = sp(2);
  EXPECT_NEAR(wt[0], s2 / (s2 + s0) * 1.5, 1e-6);
  EXPECT_NEAR(wt[1], s0 / (s2 + s0) * 1.5, 1e-6);
}

TEST(Moe, TiesGoToTheLowerExpertIndex) {
  MoeShape s;
  s.dim = 1;
  s.inter = 1;
  s.n_experts = 5;
  s.top_k = 2;
  s.has_shared = false;
  std::vector<float> gate = {1, 1, 1, 1, 1};
  MoeWeights w;
  w.gate = gate.data();
  std::vector<float> bias = {0, 0.5f, 0, 0.5f, 0};
  w.bias = bias.data();
  float x = 1;
  int32_t e[2];
  float wt[2];
  moe_route(CpuExec::serial(), s, w, &x, 1, nullptr, e, wt);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);
}

TEST(Moe, SingleExpertIsNotNormalisedAndClampsApply) {
  MoeShape s;
  s.dim = 1;
  s.inter = 1;
  s.n_experts = 2;
  s.top_k = 1;
  s.has_shared = false;
  s.routed_scaling_factor = 2.0f;
  s.swiglu_limit = 3.0f;
  std::vector<float> gate = {1, -1};
  std::vector<float> w1 = {10}, w3 = {-10}, w2 = {1};
  MoeWeights w;
  w.gate = gate.data();
  w.experts = {{w1.data(), w3.data(), w2.data()}, {w1.data(), w3.data(), w2.data()}};
  float x = 1, y = 0;
  int32_t e;
  float wt;
  moe_forward_reference(s, w, &x, 1, nullptr, &y, &e, &wt);
  const double score = std::sqrt(std::log1p(std::exp(1.0)));
  EXPECT_EQ(e, 0);
  EXPECT_NEAR(wt, 2 * score, 1e-6);  // k = 1: raw score × scale, no normalisation
  // g = 10 → min(g, 3) = 3; u = −10 → −3; h = SiLU(3)·(−3)·weight
  EXPECT_NEAR(y, wt * (3 / (1 + std::exp(-3.0))) * -3, 1e-5);
}

}  // namespace
}  // namespace dsv41
