// DSpark through a device backend (issue 15 on the device backend: the target features are taken
// on the device, where the drafter runs too, device_drafter.h).
// Shared by the host emulation's test (device_backend_test.cpp) and the GPU's
// (cuda_backend_test.cu), like backend_compare_check.h.
//
// 1. Drafts: a prompt fed in chunks of 5 (so features come from prefill and from short chunks),
//    then a draft after its last position, on the device backend and on the CPU backend. Under
//    the host emulation the features are the CPU backend's bits and the device drafter sums in
//    another order (double sums against the CPU's float lanes): the ids must be equal and the
//    logits and confidences within draft_tol (small: float rounding). On the GPU the features
//    differ by rounding too: ids that differ are reported (a near tie may flip), not failed.
// 2. Exactness: greedy decoding of two requests in one batch with a fixed K = 3 on the device
//    backend emits exactly what plain greedy decoding on the same backend emits (the target
//    verifies; rejected drafts leave no trace), with drafts rewritten to the true continuation at
//    80 % of the slots so that accepted and rejected blocks alternate whatever the drafter is.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "runtime/scheduler.h"
#include "testing/truth_drafts.h"

namespace dsv41::testing_scenario {

inline Result<std::unique_ptr<Engine>> dspark_engine(std::unique_ptr<Backend> backend, const Model& model) {
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = model.config().dspark_block_size;
  return Engine::create(std::move(backend), model.engram_tables(), eo);
}

inline Result<DraftBlock> draft_after_prompt(std::unique_ptr<Backend> backend, const Model& model,
                                             const std::vector<int32_t>& prompt, int32_t anchor) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, dspark_engine(std::move(backend), model));
  DSV41_ASSIGN_OR_RETURN(SequenceId id, e->add_sequence(int64_t(prompt.size()) + 16));
  for (size_t p = 0; p < prompt.size(); p += 5) {
    const size_t n = std::min<size_t>(5, prompt.size() - p);
    Segment s{id, int64_t(p), std::span<const int32_t>(prompt.data() + p, n), LogitRows::kNone};
    DSV41_RETURN_IF_ERROR(e->forward(std::span<const Segment>(&s, 1)).front().status);
  }
  std::vector<DraftBlock> out;
  const Engine::DraftSpec spec{id, anchor};
  DSV41_RETURN_IF_ERROR(e->draft(std::span<const Engine::DraftSpec>(&spec, 1), out));
  return out.front();
}

struct DsparkDecodeRun {
  std::vector<std::vector<int32_t>> ids;
  DsparkStats stats;
};

inline Result<DsparkDecodeRun> decode_with(std::unique_ptr<Backend> backend, const Model& model,
                                           const std::vector<GenerationRequest>& reqs, DsparkMode mode,
                                           const std::vector<std::vector<int32_t>>* truth) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, dspark_engine(std::move(backend), model));
  SchedulerOptions o;
  o.parallel = int(reqs.size());
  o.max_context = 256;
  o.dspark = mode;
  std::mt19937 coin(5);
  if (truth) o.draft_override = testing::truth_drafts(reqs, *truth, coin, 80);
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> s, Scheduler::create(*e, o));
  std::vector<int64_t> tickets;
  for (const GenerationRequest& r : reqs) tickets.push_back(s->submit(r));
  s->run_to_completion();
  DsparkDecodeRun out;
  for (int64_t t : tickets) {
    auto res = s->take(t);
    if (!res) return internal_error("request " + std::to_string(t) + " has no result");
    DSV41_RETURN_IF_ERROR(res->status);
    out.ids.push_back(res->ids);
  }
  out.stats = s->dspark_stats();
  return out;
}

// make_device() gives a fresh device backend of `model` (three are needed).
inline void check_dspark_against_cpu(const Model& model, const std::function<std::unique_ptr<Backend>()>& make_device,
                                     float draft_tol, const std::string& what) {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  std::mt19937 rng(11);
  const int32_t V = int32_t(model.vocab_size());
  std::vector<int32_t> prompt(37);
  for (int32_t& t : prompt) t = int32_t(rng() % uint32_t(std::min(V, 300)));
  auto cpu = draft_after_prompt(std::make_unique<CpuBackend>(model), model, prompt, 7);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  auto dev = draft_after_prompt(make_device(), model, prompt, 7);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  ASSERT_EQ(cpu->ids.size(), dev->ids.size());
  double conf = 0, logit = 0;
  for (size_t i = 0; i < cpu->confidence.size(); ++i)
    conf = std::max(conf, std::fabs(double(cpu->confidence[i]) - dev->confidence[i]));
  for (size_t i = 0; i < cpu->logits.size(); ++i) logit = std::max(logit, std::fabs(double(cpu->logits[i]) - dev->logits[i]));
  int differ = 0;
  for (size_t i = 0; i < cpu->ids.size(); ++i) differ += cpu->ids[i] != dev->ids[i];
  std::printf("%s, draft after 37 tokens: max |dconfidence| %.3g, max |dlogit| %.3g, %d of %zu ids differ\n",
              what.c_str(), conf, logit, differ, cpu->ids.size());
  EXPECT_LE(conf, draft_tol) << what;
  EXPECT_LE(logit, draft_tol) << what;
  if (draft_tol < 1e-3f) {
    EXPECT_EQ(cpu->ids, dev->ids) << what;
  }

  std::vector<GenerationRequest> reqs(2);
  for (size_t r = 0; r < reqs.size(); ++r) {
    reqs[r].prompt.assign(prompt.begin() + long(r) * 9, prompt.begin() + long(r) * 9 + 20);
    reqs[r].max_tokens = 40;
    reqs[r].ignore_eos = true;
  }
  auto plain = decode_with(make_device(), model, reqs, DsparkMode{DsparkMode::Kind::kOff, 0}, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto spec = decode_with(make_device(), model, reqs, DsparkMode{DsparkMode::Kind::kFixed, 3}, &plain->ids);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  std::printf("%s, K = 3 against plain: %lld drafts verified, %lld accepted\n", what.c_str(),
              static_cast<long long>(spec->stats.verified), static_cast<long long>(spec->stats.accepted));
  EXPECT_EQ(spec->ids, plain->ids) << what;
  EXPECT_GT(spec->stats.accepted, 0) << what;
  EXPECT_LT(spec->stats.accepted, spec->stats.verified) << what;
}

}  // namespace dsv41::testing_scenario
