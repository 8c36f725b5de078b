// Image prompts through a device backend against the CPU backend (issue 16 in the device
// backend: span rows take their image embeddings, image rows route with bias_vl, the Engram step
// skips them; model.md §3.1, §3.7, §3.8, §3.10). Shared by the host emulation's test
// (device_backend_test.cpp) and the GPU's (cuda_backend_test.cu), like backend_compare_check.h.
//
// A prompt with two images (2 × 2 and 1 × 3 token grids, text between and after) and random span
// rows, prefilled with every row's logits, then two greedy decode steps. Bound: that of
// backend_compare_check.h (max |Δlogit| ≤ 0.1, argmax equal). Not vacuous: other span rows move
// the CPU's logits by more than 10× the bound, so rows dropped or mis-placed would show.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "base/rng.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/vision/image_span.h"

namespace dsv41::testing_scenario {

struct ImagePromptRun {
  std::vector<float> logits;  // prefill rows, then one row per decode step
};

inline std::vector<float> random_span_rows(const ExpandedPrompt& p, int64_t hidden, uint64_t seed) {
  Xoshiro256 g(seed);
  const int64_t rows = std::count_if(p.types.begin(), p.types.end(), [](int8_t t) { return t >= 0; });
  std::vector<float> v(size_t(rows * hidden));
  for (float& x : v) x = float(2.0 * g.uniform() - 1.0);
  return v;
}

inline Result<ImagePromptRun> run_image_prompt(std::unique_ptr<Backend> backend, const Model& model,
                                               const ExpandedPrompt& p, const std::vector<float>& rows) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(std::move(backend), model.engram_tables()));
  DSV41_ASSIGN_OR_RETURN(SequenceId id, e->add_sequence(int64_t(p.ids.size()) + 8));
  const int64_t V = model.vocab_size();
  Segment s;
  s.sequence = id;
  s.tokens = p.ids;
  s.logits = LogitRows::kAll;
  s.token_types = p.types;
  s.image_embeddings = rows;
  ImagePromptRun out;
  const SegmentResult& r = e->forward(std::span<const Segment>(&s, 1)).front();
  DSV41_RETURN_IF_ERROR(r.status);
  out.logits.assign(r.logits, r.logits + r.logit_rows * V);
  for (int step = 0; step < 2; ++step) {
    const float* last = out.logits.data() + out.logits.size() - V;
    const int32_t tok = int32_t(std::max_element(last, last + V) - last);
    Segment d{id, int64_t(p.ids.size()) + step, std::span<const int32_t>(&tok, 1), LogitRows::kLast};
    const SegmentResult& rd = e->forward(std::span<const Segment>(&d, 1)).front();
    DSV41_RETURN_IF_ERROR(rd.status);
    out.logits.insert(out.logits.end(), rd.logits, rd.logits + V);
  }
  return out;
}

inline void check_image_prompt_against_cpu(const Model& model, std::unique_ptr<Backend> device, const std::string& what) {
  const int32_t image = int32_t(model.config().image_token_id);
  const std::vector<int32_t> ids = {0, image, 10, 11, image, 12, 13};
  ImageGrid a, b;
  a.n_llm_h = 2, a.n_llm_w = 2, b.n_llm_h = 1, b.n_llm_w = 3;
  const std::vector<ImageGrid> grids = {a, b};
  auto p = expand_image_placeholders(ids, image, grids);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const int64_t hidden = model.config().hidden_size, V = model.vocab_size();
  const std::vector<float> rows = random_span_rows(*p, hidden, 3), other = random_span_rows(*p, hidden, 4);
  auto cpu = run_image_prompt(std::make_unique<CpuBackend>(model), model, *p, rows);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto dev = run_image_prompt(std::move(device), model, *p, rows);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto cpu_other = run_image_prompt(std::make_unique<CpuBackend>(model), model, *p, other);
  ASSERT_TRUE(cpu_other.ok()) << cpu_other.status().to_string();
  ASSERT_EQ(cpu->logits.size(), dev->logits.size());
  double diff = 0, moved = 0;
  int64_t argmax_differ = 0;
  const int64_t n = int64_t(cpu->logits.size()) / V;
  for (int64_t r = 0; r < n; ++r) {
    const float* x = cpu->logits.data() + r * V;
    const float* y = dev->logits.data() + r * V;
    const float* z = cpu_other->logits.data() + r * V;
    for (int64_t v = 0; v < V; ++v) {
      diff = std::isnan(y[v]) ? INFINITY : std::max(diff, std::fabs(double(x[v]) - y[v]));
      moved = std::max(moved, std::fabs(double(x[v]) - z[v]));
      if (std::isinf(diff)) break;
    }
    argmax_differ += (std::max_element(x, x + V) - x) != (std::max_element(y, y + V) - y);
  }
  std::printf("%s, image prompt (%lld rows): device vs cpu max |dlogit| %.3g, argmax differ %lld; other span rows "
              "move the cpu's logits by %.3g\n",
              what.c_str(), static_cast<long long>(n), diff, static_cast<long long>(argmax_differ), moved);
  EXPECT_LE(diff, 0.1) << what;
  EXPECT_EQ(argmax_differ, 0) << what;
  EXPECT_GT(moved, 1.0) << what;
}

}  // namespace dsv41::testing_scenario
