#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/stored_quant_test_util.h"
#include "model/moe_test_util.h"
#include "model/weight_matrix.h"

namespace dsv41 {
namespace {

using testing_moe::make_random_moe;
using testing_moe::random_vec;
using testing_moe::RandomMoe;


class MoeShapes : public ::testing::TestWithParam<std::tuple<int, int, int, int, int, ScoringFunc>> {};

TEST_P(MoeShapes, FastMatchesReference) {
  const auto [dim, inter, experts, k, shared, f] = GetParam();
  std::mt19937 rng(dim * 31 + inter);
  RandomMoe m = make_random_moe(dim, inter, experts, k, shared, f, rng);
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

// Few tokens (a decode step) run every expert's products in two gemm_many regions: the result
// must be the bits of the plain one-expert-after-another form (matmul per product, each expert's
// rows added into y in ascending expert order, the shared one last), with float and with FP4
// (stored) experts, on a pool and inline.
void one_expert_after_another(const CpuExec& ex, const MoeShape& s, const MoeWeights& w, const float* x, int64_t T,
                              float* y) {
  std::vector<int32_t> chosen(static_cast<size_t>(T * s.top_k));
  std::vector<float> wts(chosen.size());
  moe_route(ex, s, w, x, T, nullptr, chosen.data(), wts.data());
  std::fill(y, y + T * s.dim, 0.0f);
  auto run = [&](const ExpertWeights& ew, int64_t inter, const std::vector<int64_t>& rows,
                 const std::vector<float>& weight) {
    const int64_t n = static_cast<int64_t>(rows.size());
    if (n == 0) return;
    std::vector<float> xb(n * s.dim), g(n * inter), u(n * inter), h(n * inter), out(n * s.dim);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + rows[r] * s.dim, s.dim, xb.data() + r * s.dim);
    matmul(ex, xb.data(), n, s.dim, ew.w1, inter, g.data());
    matmul(ex, xb.data(), n, s.dim, ew.w3, inter, u.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < inter; ++i) {  // moe.cpp's swiglu
        float gi = g[r * inter + i], ui = u[r * inter + i];
        if (s.swiglu_limit > 0) {
          ui = std::clamp(ui, -s.swiglu_limit, s.swiglu_limit);
          gi = std::min(gi, s.swiglu_limit);
        }
        h[r * inter + i] = weight[r] * ((gi / (1.0f + std::exp(-gi))) * ui);
      }
    matmul(ex, h.data(), n, inter, ew.w2, s.dim, out.data());
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < s.dim; ++c) y[rows[r] * s.dim + c] += out[r * s.dim + c];
  };
  for (int e = 0; e < s.n_experts; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> weight;
    for (int64_t t = 0; t < T; ++t)
      for (int j = 0; j < s.top_k; ++j)
        if (chosen[t * s.top_k + j] == e) {
          rows.push_back(t);
          weight.push_back(wts[t * s.top_k + j]);
        }
    run(w.experts[e], s.inter, rows, weight);
  }
  if (s.has_shared) {
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < T; ++t) rows.push_back(t);
    run(w.shared, s.shared_inter, rows, std::vector<float>(T, 1.0f));
  }
}

TEST(Moe, FewTokensSameBitsAsOneExpertAfterAnother) {
  std::mt19937 rng(4242);
  const int dim = 256, inter = 96, experts = 9, k = 3;
  RandomMoe m = make_random_moe(dim, inter, experts, k, 1, ScoringFunc::kSqrtSoftplus, rng);
  // The same shapes with FP4 experts as a checkpoint stores them (per-32 UE8M0 scales).
  std::vector<testing::StoredQuant> stored;
  auto fp4 = [&](int64_t rows, int64_t in) {
    testing::StoredQuant q{QuantFormat::kFp4E2M1, rows, in, 1, 32, {}, {}};
    std::uniform_int_distribution<int> byte(0, 255), near(122, 128);
    q.codes.resize(static_cast<size_t>(rows * in / 2));
    for (uint8_t& c : q.codes) c = static_cast<uint8_t>(byte(rng));
    q.scales.resize(static_cast<size_t>(q.scale_rows() * q.scale_cols()));
    for (uint8_t& c : q.scales) c = static_cast<uint8_t>(near(rng));
    return q;
  };
  stored.reserve(3 * (experts + 1));
  MoeWeights quant = m.weights;
  for (int e = 0; e <= experts; ++e) {
    ExpertWeights& ew = e < experts ? quant.experts[e] : quant.shared;
    stored.push_back(fp4(inter, dim));
    ew.w1 = WeightRef(stored.back().view());
    stored.push_back(fp4(inter, dim));
    ew.w3 = WeightRef(stored.back().view());
    stored.push_back(fp4(dim, inter));
    ew.w2 = WeightRef(stored.back().view());
  }
  ThreadPool pool(2);
  CpuExec pooled = CpuExec::serial();
  pooled.pool = &pool;
  for (const CpuExec& ex : {pooled, CpuExec::serial()})
    for (const MoeWeights* w : {&m.weights, &quant})
      for (int64_t T : {1, 2, 3, 4, 5, 8, 9}) {
        auto x = random_vec(T * dim, rng, 1.5f);
        std::vector<float> got(T * dim), want(T * dim);
        MoeScratch scratch;
        for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the scratch
          moe_forward(ex, m.shape, *w, x.data(), T, nullptr, got.data(), nullptr, nullptr, &scratch);
          one_expert_after_another(ex, m.shape, *w, x.data(), T, want.data());
          ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
              << "T " << T << (w == &quant ? " FP4" : " f32") << (ex.pool ? " pooled" : " serial");
        }
      }
}

// A prefill's MoE (one expert after another, each expert's row gather, SwiGLU and additions
// threaded over its rows) on a 3-thread pool against the serial path, bit for bit.
TEST(Moe, PrefillOnAPoolSameBitsAsSerial) {
  std::mt19937 rng(4243);
  const int dim = 256, inter = 96, experts = 9, k = 3;
  RandomMoe m = make_random_moe(dim, inter, experts, k, 1, ScoringFunc::kSqrtSoftplus, rng);
  ThreadPool pool(3);
  CpuExec pooled = CpuExec::serial();
  pooled.pool = &pool;
  for (int64_t T : {65, 700, 1500}) {
    auto x = random_vec(T * dim, rng, 1.5f);
    std::vector<float> got(T * dim), want(T * dim);
    moe_forward(CpuExec::serial(), m.shape, m.weights, x.data(), T, nullptr, want.data(), nullptr, nullptr, nullptr);
    moe_forward(pooled, m.shape, m.weights, x.data(), T, nullptr, got.data(), nullptr, nullptr, nullptr);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "T " << T;
  }
}

}  // namespace
}  // namespace dsv41
