// Tests for bf16-held weights: gemm_bf16w gives the same bits as gemm_f32 on the widened
// weights (random inputs, T = 1 and T > 1, odd sizes), the bf16-exactness check, and whole models
// (the BF16 golden fixture, an FP8/FP4 init-random model) giving bit-identical logits with
// bf16-held matrices and with ModelLoadOptions::f32_weights.
#include "model/weight_matrix.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "app/load_options.h"
#include "base/numerics.h"
#include "kernels/cpu/gemm.h"
#include "model/model.h"
#include "runtime/session.h"
#include "testing/random_init.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

namespace fs = std::filesystem;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(WeightMatrix, Bf16GemmMatchesF32GemmBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Shape {
    int64_t rows, in, out;
  };
  // rows 1 (decode) and more (prefill, several row blocks); in / out not multiples of 8 or 12.
  const Shape shapes[] = {{1, 1, 1},   {1, 7, 5},    {1, 64, 33},  {1, 513, 97}, {3, 29, 13},
                          {5, 130, 41}, {17, 257, 100}, {70, 95, 250}, {1, 2048, 700}};
  for (const Shape& s : shapes) {
    std::vector<float> x(s.rows * s.in), wf(s.out * s.in);
    std::vector<uint16_t> wb(wf.size());
    for (float& v : x) v = dist(rng);
    for (size_t i = 0; i < wf.size(); ++i) {
      wb[i] = f32_to_bf16(dist(rng));
      wf[i] = bf16_to_f32(wb[i]);
    }
    std::vector<float> yf(s.rows * s.out), yb(s.rows * s.out, -1.0f);
    gemm_f32(CpuExec::serial(), x.data(), s.rows, s.in, wf.data(), s.out, yf.data());
    gemm_bf16w(CpuExec::serial(), x.data(), s.rows, s.in, wb.data(), s.out, yb.data());
    EXPECT_TRUE(same_bits(yf, yb)) << s.rows << "x" << s.in << " -> " << s.out;
    // And through WeightMatrix / matmul, which picks the kernel by how the matrix is held.
    WeightMatrix m = make_weight_matrix(wf, true);
    ASSERT_TRUE(m.is_bf16());
    EXPECT_EQ(m.bytes(), int64_t(wf.size() * sizeof(uint16_t)));
    std::vector<float> ym(s.rows * s.out);
    matmul(CpuExec::serial(), x.data(), s.rows, s.in, m.ref(), s.out, ym.data());
    EXPECT_TRUE(same_bits(yf, ym)) << s.rows << "x" << s.in << " -> " << s.out;
    // The scalar reference dot agrees for both holdings.
    WeightMatrix f = make_weight_matrix(wf, false);
    ASSERT_FALSE(f.is_bf16());
    EXPECT_EQ(dot_reference(m.ref(), 0, x.data(), s.in), dot_reference(f.ref(), 0, x.data(), s.in));
  }
}

TEST(WeightMatrix, KeepsFloat32UnlessEveryValueIsBf16Exact) {
  std::vector<float> v = {1.0f, -0.5f, 3.0f * 1024.0f, 0.0f, -0.0f, std::ldexp(1.5f, -130)};  // a subnormal too
  EXPECT_TRUE(bf16_exact(v));
  WeightMatrix m = make_weight_matrix(v, true);
  ASSERT_TRUE(m.is_bf16());
  for (size_t i = 0; i < v.size(); ++i) {
    const float back = m.ref().at(int64_t(i));
    EXPECT_EQ(std::memcmp(&back, &v[i], sizeof(float)), 0) << i;
  }
  EXPECT_FALSE(make_weight_matrix(v, false).is_bf16());
  std::vector<float> w = v;
  w.push_back(1.0f + std::ldexp(1.0f, -8));  // 9 significant bits: not a bf16
  EXPECT_FALSE(bf16_exact(w));
  EXPECT_FALSE(make_weight_matrix(w, true).is_bf16());
  EXPECT_EQ(make_weight_matrix(w, true).f32.size(), w.size());
  EXPECT_FALSE(bf16_exact({std::numeric_limits<float>::quiet_NaN()}));
  EXPECT_TRUE(bf16_exact({std::numeric_limits<float>::infinity()}));
}

// Prefill of 6 tokens (all logits) then 3 decode steps; every logit, concatenated.
std::vector<float> run_logits(const Model& m) {
  auto session = Session::create(m, 64);
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  if (!session.ok()) return {};
  const int64_t V = m.vocab_size();
  std::vector<int32_t> prompt = {1, 7, 42, 3, 99, 5};
  for (int32_t& t : prompt) t = static_cast<int32_t>(t % V);
  std::vector<float> all;
  auto first = (*session)->prefill(prompt, 0, &all);
  EXPECT_TRUE(first.ok()) << first.status().to_string();
  for (int32_t tok : {11, 2, 64}) {
    auto logits = (*session)->decode(static_cast<int32_t>(tok % V));
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (logits.ok()) all.insert(all.end(), logits->begin(), logits->end());
  }
  return all;
}

// Loads `dir` with bf16-held and with float32 matrices; the logits must be the same bits.
// Returns the bf16 load's matrix bytes.
Model::MatrixBytes expect_same_logits(const std::string& dir) {
  auto held = Model::load(dir);
  EXPECT_TRUE(held.ok()) << held.status().to_string();
  ModelLoadOptions f32;
  f32.f32_weights = true;
  auto wide = Model::load(dir, f32);
  EXPECT_TRUE(wide.ok()) << wide.status().to_string();
  if (!held.ok() || !wide.ok()) return {};
  EXPECT_EQ((*wide)->matrix_bytes().bf16, 0);
  EXPECT_EQ(2 * (*held)->matrix_bytes().bf16 + (*held)->matrix_bytes().f32, (*wide)->matrix_bytes().f32);
  const std::vector<float> a = run_logits(**held), b = run_logits(**wide);
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(same_bits(a, b)) << dir;
  return (*held)->matrix_bytes();
}

TEST(WeightMatrixModel, Bf16GoldenModelGivesTheSameLogitsWithBf16HeldWeights) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const Model::MatrixBytes b = expect_same_logits(std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-bf16");
  EXPECT_GT(b.bf16, 0);
  EXPECT_EQ(b.f32, 0);  // every expert and the head are stored BF16
}

TEST(WeightMatrixModel, F32GoldenModelStaysFloat32) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto m = Model::load(std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->matrix_bytes().bf16, 0);
  EXPECT_GT((*m)->matrix_bytes().f32, 0);
}

TEST(WeightMatrixModel, Fp8RandomModelGivesTheSameLogitsWithBf16HeldWeights) {
  std::string tmpl = (fs::temp_directory_path() / "dsv41_wm_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  RandomInitOptions opt;
  opt.seed = 3;
  opt.force = true;
  auto r = write_random_model(std::string(DSV41_SOURCE_DIR) + "/models/tiny-random/config.json", dir, opt);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const Model::MatrixBytes b = expect_same_logits(dir);
  EXPECT_GT(b.bf16, 0);  // FP8 shared experts, FP4 routed experts, BF16 head
  fs::remove_all(dir);
}

// DSV41_F32_WEIGHTS reaches a model only through the options the app builds from it: the library
// never reads the environment.
TEST(WeightMatrixModel, EnvironmentForcesFloat32OnlyThroughTheAppOptions) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-bf16";
  DSV41_SKIP_WITHOUT_GOLDEN();
  ASSERT_EQ(::setenv("DSV41_F32_WEIGHTS", "1", 1), 0);
  const ModelLoadOptions from_env = app::load_options_from_env();
  auto plain = Model::load(dir);
  auto forced = Model::load(dir, from_env);
  ::unsetenv("DSV41_F32_WEIGHTS");
  EXPECT_TRUE(from_env.f32_weights);
  EXPECT_FALSE(app::load_options_from_env().f32_weights);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  ASSERT_TRUE(forced.ok()) << forced.status().to_string();
  EXPECT_GT((*plain)->matrix_bytes().bf16, 0);
  EXPECT_EQ((*forced)->matrix_bytes().bf16, 0);
}

}  // namespace
}  // namespace dsv41
