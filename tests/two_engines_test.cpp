// Two engines in one process (issue 9: no process globals in the library). Models built with
// different options (scalar-forced on 1 thread, fast on 2, float32-held weights) run forwards at
// the same time from two threads, and each gives exactly the logits it gives alone: nothing one
// engine chooses (its pool, its path, its weight holding) leaks into the other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_exec.h"
#include "model/model.h"
#include "runtime/session.h"
#include "tests/odd_config.h"

namespace dsv41 {
namespace {

// A prefill of the first `prefill` ids (long enough that the blocks' token loops and the GEMMs
// split over a pool), then token-by-token decode of the rest; every position's logits, in order.
Result<std::vector<float>> run_prompt(const Model& model, const std::vector<int32_t>& ids, int64_t prefill) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::create(model, static_cast<int64_t>(ids.size())));
  std::vector<float> logits;
  DSV41_RETURN_IF_ERROR(s->prefill(std::span<const int32_t>(ids.data(), prefill), 0, &logits).status());
  for (size_t t = static_cast<size_t>(prefill); t < ids.size(); ++t) {
    DSV41_ASSIGN_OR_RETURN(std::vector<float> l, s->decode(ids[t]));
    logits.insert(logits.end(), l.begin(), l.end());
  }
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// Runs `rounds` prompts on each model at once, one std::thread per model, and checks every
// round's logits against the model's solo run bit for bit.
void expect_concurrent_runs_match_solo(const Model& a, const std::vector<float>& solo_a, const Model& b,
                                       const std::vector<float>& solo_b, const std::vector<int32_t>& ids,
                                       int64_t prefill) {
  constexpr int kRounds = 2;
  std::vector<Result<std::vector<float>>> got_a, got_b;
  std::thread ta([&] {
    for (int r = 0; r < kRounds; ++r) got_a.push_back(run_prompt(a, ids, prefill));
  });
  std::thread tb([&] {
    for (int r = 0; r < kRounds; ++r) got_b.push_back(run_prompt(b, ids, prefill));
  });
  ta.join();
  tb.join();
  for (int r = 0; r < kRounds; ++r) {
    ASSERT_TRUE(got_a[r].ok()) << got_a[r].status().to_string();
    ASSERT_TRUE(got_b[r].ok()) << got_b[r].status().to_string();
    EXPECT_TRUE(same_bits(*got_a[r], solo_a)) << "first engine, round " << r;
    EXPECT_TRUE(same_bits(*got_b[r], solo_b)) << "second engine, round " << r;
  }
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = static_cast<int32_t>(rng() % vocab);
  return ids;
}

// Random weights on random_model_test's odd shapes: a scalar-forced engine on 1 thread and a fast
// one on 2. The fast engine's bits equal those of a fast engine on 1 thread; the scalar engine
// agrees with them to the scalar-vs-fast bound of random_model_test (1e-4).
TEST(TwoEngines, ScalarOneThreadAndFastTwoThreadsRunSideBySide) {
  ModelConfig config = odd_config();
  config.hidden_size = 43;  // as in random_model_test: the vector loops' tails run
  ModelLoadOptions scalar_options;
  scalar_options.force_scalar = true;
  scalar_options.threads = 1;
  ModelLoadOptions fast2_options;
  fast2_options.threads = 2;
  ModelLoadOptions fast1_options;
  fast1_options.threads = 1;
  auto scalar = Model::create_random(config, 11, scalar_options);
  auto fast2 = Model::create_random(config, 11, fast2_options);
  auto fast1 = Model::create_random(config, 11, fast1_options);
  ASSERT_TRUE(scalar.ok()) << scalar.status().to_string();
  ASSERT_TRUE(fast2.ok()) << fast2.status().to_string();
  ASSERT_TRUE(fast1.ok()) << fast1.status().to_string();
  EXPECT_EQ((*scalar)->exec().pool, nullptr);
  EXPECT_EQ((*scalar)->exec().threads(), 1);
  EXPECT_FALSE((*scalar)->exec().use_fast());
  EXPECT_EQ((*fast2)->exec().threads(), 2);
  EXPECT_EQ((*fast2)->exec().use_fast(), cpu_has_avx2_fma());

  const std::vector<int32_t> ids = random_ids(300, (*fast2)->vocab_size(), 4);
  const int64_t prefill = 296;
  auto solo_scalar = run_prompt(**scalar, ids, prefill);
  auto solo_fast2 = run_prompt(**fast2, ids, prefill);
  auto solo_fast1 = run_prompt(**fast1, ids, prefill);
  ASSERT_TRUE(solo_scalar.ok()) << solo_scalar.status().to_string();
  ASSERT_TRUE(solo_fast2.ok()) << solo_fast2.status().to_string();
  ASSERT_TRUE(solo_fast1.ok()) << solo_fast1.status().to_string();
  ASSERT_EQ(solo_scalar->size(), ids.size() * (*fast2)->vocab_size());
  EXPECT_TRUE(same_bits(*solo_fast2, *solo_fast1)) << "the fast path depends on the thread count";
  if (cpu_has_avx2_fma()) {
    EXPECT_FALSE(same_bits(*solo_scalar, *solo_fast2)) << "the scalar engine ran the fast path";
    // Over the first 29 positions, as random_model_test compares them. Further on, a near-tie in a
    // discrete selection (router or indexer top-k) may fall the other way on float rounding
    // (here after ~100 positions, moving logits by ~1e-3): a property of the two paths, not of
    // sharing a process, which the bit-for-bit checks below cover over every position.
    const size_t n = 29 * static_cast<size_t>((*fast2)->vocab_size());
    const std::vector<float> head_scalar(solo_scalar->begin(), solo_scalar->begin() + n);
    const std::vector<float> head_fast(solo_fast2->begin(), solo_fast2->begin() + n);
    EXPECT_LE(max_abs_diff(head_scalar, head_fast), 1e-4);
  }
  expect_concurrent_runs_match_solo(**scalar, *solo_scalar, **fast2, *solo_fast2, ids, prefill);
}

// The bf16 fixture: one engine holds its bf16-exact matrices as bf16 (fast, 2 threads), the other
// everything as float32 (f32_weights, 1 thread). Same bits alone (weight_matrix.h) and together.
TEST(TwoEngines, Bf16HeldAndFloat32WeightsRunSideBySide) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-bf16";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  ModelLoadOptions held_options;
  held_options.threads = 2;
  ModelLoadOptions f32_options;
  f32_options.f32_weights = true;
  f32_options.threads = 1;
  auto held = Model::load(dir, held_options);
  auto f32 = Model::load(dir, f32_options);
  ASSERT_TRUE(held.ok()) << held.status().to_string();
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  EXPECT_GT((*held)->matrix_bytes().bf16, 0);
  EXPECT_EQ((*f32)->matrix_bytes().bf16, 0);

  const std::vector<int32_t> ids = random_ids(200, (*held)->vocab_size(), 5);
  const int64_t prefill = 196;
  auto solo_held = run_prompt(**held, ids, prefill);
  auto solo_f32 = run_prompt(**f32, ids, prefill);
  ASSERT_TRUE(solo_held.ok()) << solo_held.status().to_string();
  ASSERT_TRUE(solo_f32.ok()) << solo_f32.status().to_string();
  EXPECT_TRUE(same_bits(*solo_held, *solo_f32));
  expect_concurrent_runs_match_solo(**held, *solo_held, **f32, *solo_f32, ids, prefill);
}

// The GEMM's ISA cap (ModelLoadOptions::isa): an engine on the CPU's best ISA (AVX-512 here) and
// one capped at AVX2 give the same bits (one summation order on every ISA, gemm.h), alone and
// side by side. Without AVX-512 both run AVX2 and the check is trivial.
TEST(TwoEngines, Avx512AndAvx2CappedGemmsGiveTheSameBits) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-bf16";
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << dir << " is absent";
  ModelLoadOptions best_options;
  best_options.threads = 2;
  ModelLoadOptions avx2_options;
  avx2_options.threads = 1;
  avx2_options.isa = CpuIsa::kAvx2;
  auto best = Model::load(dir, best_options);
  auto avx2 = Model::load(dir, avx2_options);
  ASSERT_TRUE(best.ok()) << best.status().to_string();
  ASSERT_TRUE(avx2.ok()) << avx2.status().to_string();
  EXPECT_EQ((*best)->exec().gemm_isa(), cpu_best_isa());
  EXPECT_EQ((*avx2)->exec().gemm_isa(), std::min(CpuIsa::kAvx2, cpu_best_isa()));

  const std::vector<int32_t> ids = random_ids(120, (*best)->vocab_size(), 6);
  const int64_t prefill = 100;
  auto solo_best = run_prompt(**best, ids, prefill);
  auto solo_avx2 = run_prompt(**avx2, ids, prefill);
  ASSERT_TRUE(solo_best.ok()) << solo_best.status().to_string();
  ASSERT_TRUE(solo_avx2.ok()) << solo_avx2.status().to_string();
  EXPECT_TRUE(same_bits(*solo_best, *solo_avx2)) << "the GEMM's bits depend on the ISA";
  expect_concurrent_runs_match_solo(**best, *solo_best, **avx2, *solo_avx2, ids, prefill);
}

}  // namespace
}  // namespace dsv41
