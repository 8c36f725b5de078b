// Shared by the rank-group tests (loopback and NCCL): a schedule of sequences joining at
// different steps (prefill chunks and decode tokens mixed in each batch, odd sequences asking for
// every row's logits), run on one engine or on a RankGroup, and compared bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "runtime/rank_group.h"

namespace dsv41::testing {

struct Schedule {
  std::vector<std::vector<int32_t>> prompts;
  int chunk = 4;   // prompt tokens per prefill segment
  int steps = 10;  // sequence s joins at step s
};

// What every sequence saw: its logits at every step, in order, and the ids it generated.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<int32_t>> generated;
};

using StepFn = std::function<std::vector<const std::vector<SegmentResult>*>(const std::vector<std::vector<Segment>>&)>;

// Sequence s lives on where[s] = (rank, id). Its segment at a step: its next prompt chunk, or
// (prompt done) the greedy id of its last logits.
inline Trace run_schedule(const Schedule& plan, int64_t vocab, int ranks, const std::vector<std::pair<int, SequenceId>>& where,
                   const StepFn& step) {
  const size_t S = plan.prompts.size();
  Trace out;
  out.logits.resize(S);
  out.generated.resize(S);
  std::vector<size_t> fed(S, 0);
  std::vector<int64_t> length(S, 0);
  std::vector<std::vector<int32_t>> tokens(S);
  std::vector<int32_t> next(S, -1);
  for (int t = 0; t < plan.steps; ++t) {
    std::vector<std::vector<Segment>> batches(static_cast<size_t>(ranks));
    std::vector<std::vector<size_t>> owner(static_cast<size_t>(ranks));
    for (size_t s = 0; s < S && static_cast<int>(s) <= t; ++s) {
      const std::vector<int32_t>& p = plan.prompts[s];
      if (fed[s] < p.size()) {
        const size_t n = std::min<size_t>(static_cast<size_t>(plan.chunk), p.size() - fed[s]);
        tokens[s].assign(p.begin() + static_cast<long>(fed[s]), p.begin() + static_cast<long>(fed[s] + n));
        fed[s] += n;
      } else {
        tokens[s] = {next[s]};
        out.generated[s].push_back(next[s]);
      }
      Segment seg;
      seg.sequence = where[s].second;
      seg.start = length[s];
      seg.tokens = tokens[s];
      seg.logits = s % 2 ? LogitRows::kAll : LogitRows::kLast;
      length[s] += static_cast<int64_t>(tokens[s].size());
      batches[where[s].first].push_back(seg);
      owner[where[s].first].push_back(s);
    }
    const std::vector<const std::vector<SegmentResult>*> results = step(batches);
    for (int r = 0; r < ranks; ++r)
      for (size_t i = 0; i < owner[r].size(); ++i) {
        const size_t s = owner[r][i];
        const SegmentResult& res = (*results[r])[i];
        EXPECT_TRUE(res.status.ok()) << "sequence " << s << " step " << t << ": " << res.status.to_string();
        if (!res.status.ok() || res.logit_rows < 1) continue;
        out.logits[s].insert(out.logits[s].end(), res.logits, res.logits + res.logit_rows * vocab);
        const float* last = res.logits + (res.logit_rows - 1) * vocab;
        next[s] = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
      }
  }
  return out;
}

// A rank's backend (RankGroupOptions::backend); empty: the CPU backend.
using BackendFactory = std::function<Result<std::unique_ptr<Backend>>(const Model&, int rank, Communicator* experts)>;

inline Trace run_one_engine(const Model& model, const Schedule& plan, const EngineOptions& options,
                            const BackendFactory& backend = {}) {
  auto made = backend ? backend(model, 0, nullptr) : Result<std::unique_ptr<Backend>>(std::make_unique<CpuBackend>(model));
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return {};
  auto engine = Engine::create(std::move(*made), model.engram_tables(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  std::vector<std::pair<int, SequenceId>> where;
  for (size_t s = 0; s < plan.prompts.size(); ++s) where.push_back({0, (*engine)->add_sequence(256).value()});
  return run_schedule(plan, model.config().vocab_size, 1, where, [&](const std::vector<std::vector<Segment>>& b) {
    return std::vector<const std::vector<SegmentResult>*>{&(*engine)->forward(b[0])};
  });
}

// collectives: the loopback group's completed calls (null, or with the caller's communicators: not read).
inline Trace run_ranks_group(const Model& model, const Schedule& plan, const EngineOptions& options, int ranks,
                      int64_t* collectives, std::vector<Communicator*> comms = {},
                      std::vector<const Model*> models = {}, const BackendFactory& backend = {}) {
  RankGroupOptions o;
  o.ranks = ranks;
  o.engine = options;
  o.communicators = std::move(comms);
  o.backend = backend;
  auto group = models.empty() ? RankGroup::create(model, o) : RankGroup::create(models, o);
  EXPECT_TRUE(group.ok()) << group.status().to_string();
  std::vector<std::pair<int, SequenceId>> where;
  for (size_t s = 0; s < plan.prompts.size(); ++s) {
    auto placed = (*group)->add_sequence(256).value();
    EXPECT_EQ(placed.rank, static_cast<int>(s) % ranks);  // the least loaded rank: round robin here
    where.push_back({placed.rank, placed.id});
  }
  Trace t = run_schedule(plan, model.config().vocab_size, ranks, where, [&](const std::vector<std::vector<Segment>>& b) {
    std::vector<std::span<const Segment>> spans(b.begin(), b.end());
    std::vector<const std::vector<SegmentResult>*> out;
    EXPECT_TRUE((*group)->forward(spans, out).ok());
    return out;
  });
  if (collectives && (*group)->loopback()) *collectives = (*group)->loopback()->completed_calls();
  return t;
}

inline void expect_same(const Trace& a, const Trace& b, int ranks) {
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t s = 0; s < a.logits.size(); ++s) {
    ASSERT_EQ(a.logits[s].size(), b.logits[s].size()) << ranks << " ranks, sequence " << s;
    EXPECT_EQ(std::memcmp(a.logits[s].data(), b.logits[s].data(), a.logits[s].size() * sizeof(float)), 0)
        << ranks << " ranks, sequence " << s << ": logits differ from one engine";
    EXPECT_EQ(a.generated[s], b.generated[s]) << ranks << " ranks, sequence " << s;
  }
}

inline std::vector<int32_t> random_prompt(int n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// The model in `dir` loaded once per rank, each load holding only that rank's routed experts
// (ModelLoadOptions expert_rank / expert_ranks); empty after a load error (a test failure).
inline std::vector<std::unique_ptr<Model>> load_expert_shards(const std::string& dir, int ranks) {
  std::vector<std::unique_ptr<Model>> shards;
  for (int r = 0; r < ranks; ++r) {
    ModelLoadOptions lo;
    lo.expert_rank = r;
    lo.expert_ranks = ranks;
    auto m = Model::load(dir, lo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    shards.push_back(std::move(*m));
  }
  return shards;
}

inline std::vector<const Model*> pointers(const std::vector<std::unique_ptr<Model>>& models) {
  std::vector<const Model*> out;
  for (const auto& m : models) out.push_back(m.get());
  return out;
}

// The schedule the rank tests of the random engine-test model share: 5 sequences of 9, 4, 13, 6
// and 11 prompt tokens (its vocabulary of 89), 4 prompt tokens a step, 11 steps.
inline Schedule engine_test_schedule() {
  Schedule plan;
  for (int s = 0; s < 5; ++s) plan.prompts.push_back(random_prompt(std::vector<int>{9, 4, 13, 6, 11}[s], 89, 40 + s));
  plan.chunk = 4;
  plan.steps = 11;
  return plan;
}

}  // namespace dsv41::testing
