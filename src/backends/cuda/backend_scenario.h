// A scripted run of the engine over several sequences (prefill chunks and decode rows mixed in
// one batch), used to compare backends on the same inputs: the CPU backend against the device
// backend, on the CPU (HostExec, device_backend_test.cpp) and on a GPU (cuda_backend_test.cu).
// Test support only (header-only).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"

namespace dsv41::testing_scenario {

struct Part {
  int sequence = 0;
  std::vector<int32_t> tokens;
  LogitRows rows = LogitRows::kLast;
};
// Cache-tier operations run before a step's forward, in this order: sequences removed, then new
// ones made (each appended to the scenario's sequence list): fresh (from < 0), a fork of `from`
// (prefix < 0) or a fork of its first `prefix` positions (windows cut there, engine.h); restored:
// a fork of all of `from`'s positions into which its window snapshot is restored (engine.h).
struct NewSequence {
  int from = -1;
  int64_t prefix = -1;
  bool restored = false;
};
struct Rollback {
  int sequence = 0;
  int64_t k = 0;  // newest positions forgotten (Engine::rollback)
};
struct Step {
  std::vector<Part> parts;
  std::vector<int> remove;
  std::vector<NewSequence> add;
  std::vector<Rollback> rollback;  // run first
  Step(std::initializer_list<Part> p) : parts(p) {}
  Step(std::vector<Part> p, std::vector<int> r, std::vector<NewSequence> a, std::vector<Rollback> b = {})
      : parts(std::move(p)), remove(std::move(r)), add(std::move(a)), rollback(std::move(b)) {}
};

// Positions a scenario rolls back by at most (0: none, the engine keeps no rollback state).
inline int64_t max_rollback(const std::vector<Step>& steps) {
  int64_t m = 0;
  for (const Step& s : steps)
    for (const Rollback& r : s.rollback) m = std::max(m, r.k);
  return m;
}

// Called after each step's forward with the engine and the ids of the scenario's sequences so far
// (removed ones included).
using AfterStep = std::function<void(const Engine&, const std::vector<SequenceId>&)>;

// Logits of every part of every step, in order: rows × vocab floats each.
inline Result<std::vector<std::vector<float>>> run(std::unique_ptr<Backend> backend, const EngramHashTables* tables,
                                                   int sequences, const std::vector<Step>& steps,
                                                   int64_t max_context = 1024, const AfterStep& after = {}) {
  const int64_t V = backend->config().vocab_size;
  EngineOptions options;
  options.rollback_tokens = max_rollback(steps);
  auto engine = Engine::create(std::move(backend), tables, options);
  if (!engine.ok()) return engine.status();
  std::vector<SequenceId> ids;
  for (int s = 0; s < sequences; ++s) {
    auto id = (*engine)->add_sequence(max_context);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  std::vector<std::vector<float>> out;
  for (const Step& step : steps) {
    for (const Rollback& b : step.rollback)
      if (Status st = (*engine)->rollback(ids[b.sequence], b.k); !st.ok()) return st;
    for (int r : step.remove)
      if (Status st = (*engine)->remove_sequence(ids[r]); !st.ok()) return st;
    for (const NewSequence& n : step.add) {
      if (n.restored) {
        auto len = (*engine)->length(ids[n.from]);
        auto snap = (*engine)->snapshot(ids[n.from]);
        if (!len.ok() || !snap.ok()) return !len.ok() ? len.status() : snap.status();
        auto id = (*engine)->fork_prefix(ids[n.from], *len);
        if (!id.ok()) return id.status();
        if (Status st = (*engine)->restore(*id, *snap); !st.ok()) return st;
        ids.push_back(*id);
        continue;
      }
      auto id = n.from < 0       ? (*engine)->add_sequence(max_context)
                : n.prefix < 0   ? (*engine)->fork(ids[n.from])
                                 : (*engine)->fork_prefix(ids[n.from], n.prefix);
      if (!id.ok()) return id.status();
      ids.push_back(*id);
    }
    std::vector<Segment> segs;
    for (const Part& p : step.parts) {
      auto len = (*engine)->length(ids[p.sequence]);
      if (!len.ok()) return len.status();
      Segment seg;
      seg.sequence = ids[p.sequence];
      seg.start = *len;
      seg.tokens = p.tokens;
      seg.logits = p.rows;
      segs.push_back(seg);
    }
    const auto& results = (*engine)->forward(segs);
    for (const SegmentResult& r : results) {
      if (!r.status.ok()) return r.status;
      out.emplace_back(r.logits, r.logits + r.logit_rows * V);
    }
    if (after) after(**engine, ids);
  }
  return out;
}

// Deterministic pseudo-random token ids in [3, vocab).
inline std::vector<int32_t> tokens(uint64_t seed, int n, int64_t vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    t.push_back(static_cast<int32_t>(3 + (seed >> 33) % uint64_t(vocab - 3)));
  }
  return t;
}

// Three sequences: two prefills in one batch (one past the window and several compressor groups
// and index blocks), then a prefill chunk of one beside decode rows of the others, then decode
// rows of all three together.
inline std::vector<Step> mixed_batch(int64_t vocab, int decode_steps = 4) {
  std::vector<Step> steps;
  steps.push_back({{0, tokens(1, 40, vocab), LogitRows::kAll}, {1, tokens(2, 30, vocab), LogitRows::kAll}});
  steps.push_back({{1, tokens(3, 70, vocab), LogitRows::kAll}, {0, tokens(4, 1, vocab), LogitRows::kLast},
                   {2, tokens(5, 9, vocab), LogitRows::kAll}});
  for (int i = 0; i < decode_steps; ++i)
    steps.push_back({{0, tokens(10 + i, 1, vocab)}, {1, tokens(20 + i, 1, vocab)}, {2, tokens(30 + i, 1, vocab)}});
  return steps;
}

// `n` sequences prefilled together (6 … 22 tokens each: compressor groups and index keys for
// all), then three decode steps of all of them: more segments than one batched launch takes (16).
inline std::vector<Step> many_sequences(int64_t vocab, int n) {
  std::vector<Part> prefill, decode[3];
  for (int s = 0; s < n; ++s) {
    prefill.push_back({s, tokens(200 + s, 6 + (s * 5) % 17, vocab)});
    for (int i = 0; i < 3; ++i) decode[i].push_back({s, tokens(300 + 3 * s + i, 1, vocab), LogitRows::kLast});
  }
  std::vector<Step> steps;
  steps.emplace_back(std::move(prefill), std::vector<int>{}, std::vector<NewSequence>{});
  for (auto& d : decode) steps.emplace_back(std::move(d), std::vector<int>{}, std::vector<NewSequence>{});
  return steps;
}

// Speculative-decoding shaped steps: verify chunks of a few rows, then the rejected ones rolled
// back (by 1, by 2, by 3) and other tokens decoded at those positions, beside a plain decoder.
inline std::vector<Step> rollbacks(int64_t vocab) {
  std::vector<Step> steps;
  steps.push_back({{0, tokens(81, 50, vocab), LogitRows::kAll}, {1, tokens(82, 20, vocab), LogitRows::kAll}});
  steps.push_back({{0, tokens(83, 4, vocab), LogitRows::kAll}, {1, tokens(84, 1, vocab)}});
  steps.push_back(Step({{0, tokens(85, 1, vocab)}, {1, tokens(86, 3, vocab), LogitRows::kAll}}, {}, {}, {{0, 3}}));
  steps.push_back(Step({{0, tokens(87, 2, vocab), LogitRows::kAll}, {1, tokens(88, 2, vocab), LogitRows::kAll}}, {},
                       {}, {{0, 1}, {1, 2}}));
  for (int i = 0; i < 2; ++i) steps.push_back({{0, tokens(90 + i, 1, vocab)}, {1, tokens(95 + i, 1, vocab)}});
  return steps;
}

// Window snapshots restored into forks of the whole prefix (the rings rebuilt from snapshot bytes,
// the global KV shared), decoded beside their sources; one of them verifies 4 rows and is rolled
// back by 2.
inline std::vector<Step> restores(int64_t vocab) {
  std::vector<Step> steps;
  steps.push_back({{0, tokens(121, 75, vocab), LogitRows::kAll}, {1, tokens(122, 33, vocab), LogitRows::kAll}});
  steps.push_back(Step({{0, tokens(123, 1, vocab)}, {2, tokens(124, 1, vocab)}, {3, tokens(125, 4, vocab), LogitRows::kAll},
                        {1, tokens(126, 1, vocab)}},
                       {}, {{0, -1, true}, {1, -1, true}}));
  steps.push_back(Step({{3, tokens(127, 2, vocab), LogitRows::kAll}, {2, tokens(128, 1, vocab)}, {0, tokens(129, 1, vocab)}},
                       {}, {}, {{3, 2}}));
  for (int i = 0; i < 2; ++i)
    steps.push_back({{0, tokens(130 + i, 1, vocab)}, {1, tokens(135 + i, 1, vocab)}, {2, tokens(140 + i, 1, vocab)},
                     {3, tokens(145 + i, 1, vocab)}});
  return steps;
}

// The cache tiers under the backend: a sequence forked whole and forked at a prefix (pages shared,
// windows cut), decoded beside its source in one batch; then a sequence removed and a fresh one
// made (its cache may reuse the freed memory), prefilled beside decode rows of the others.
inline std::vector<Step> forks_and_removal(int64_t vocab) {
  std::vector<Step> steps;
  steps.push_back({{0, tokens(41, 75, vocab), LogitRows::kAll}});
  steps.push_back(Step({{0, tokens(42, 1, vocab)}, {1, tokens(43, 1, vocab)}, {2, tokens(44, 5, vocab), LogitRows::kAll}},
                       {}, {{0, -1}, {0, 40}}));
  steps.push_back(Step({{3, tokens(145, 30, vocab), LogitRows::kAll}, {0, tokens(46, 1, vocab)}, {2, tokens(47, 1, vocab)}},
                       {1}, {{-1, -1}}));
  for (int i = 0; i < 3; ++i)
    steps.push_back({{0, tokens(50 + i, 1, vocab)}, {2, tokens(60 + i, 1, vocab)}, {3, tokens(70 + i, 1, vocab)}});
  return steps;
}

struct Diff {
  double max_abs = 0;     // over every row
  int64_t rows = 0, argmax_differ = 0;
  int64_t rows_within_2e2 = 0;  // rows whose max |Δ| ≤ 2e-2
  std::string worst;      // where the largest difference is
};

inline Diff compare(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, int64_t V) {
  Diff d;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    for (size_t r = 0; (r + 1) * V <= a[i].size() && (r + 1) * V <= b[i].size(); ++r) {
      const float* x = a[i].data() + r * V;
      const float* y = b[i].data() + r * V;
      int64_t ax = 0, ay = 0;
      double row_max = 0;
      for (int64_t v = 0; v < V; ++v) {
        if (x[v] > x[ax]) ax = v;
        if (y[v] > y[ay]) ay = v;
        const double e = std::abs(double(x[v]) - double(y[v]));
        if (!(e <= row_max)) row_max = e;
        if (!(e <= d.max_abs)) {
          d.max_abs = e;
          d.worst = "part " + std::to_string(i) + " row " + std::to_string(r) + " token " + std::to_string(v);
        }
      }
      d.argmax_differ += ax != ay;
      d.rows_within_2e2 += row_max <= 2e-2;
      ++d.rows;
    }
  }
  return d;
}

}  // namespace dsv41::testing_scenario
