// The device drafter (device_drafter.h) against the host drafter (model/dspark.h) on the same
// device backend, so both see the same target features: shared by the host emulation's test
// (device_backend_test.cpp) and the GPU's (cuda_backend_test.cu), like backend_dspark_check.h.
//
// Three sequences of different lengths are prefilled in chunks (so the rings come from prefill
// and from short chunks), then drafted together (slots 5, 3 and all) by each drafter; then a
// verify-like step feeds 4 rows to every sequence, 3 are rolled back (the device ring copies no
// longer match the rings and must be rebuilt), one decode row follows and both draft again.
// The draft ids must be equal and the logits and confidences within `tol` of each other: the
// two compute the same function in different summation orders (the device's double sums, the
// CPU's float lanes), so they differ by float rounding as amplified by an FP8 ring code that a
// last-bit difference flips.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/sequence_cache.h"
#include "engine/engine.h"
#include "model/model.h"

namespace dsv41::testing_scenario {

struct DraftDiff {
  double logit = 0, confidence = 0, logit_scale = 0;
  int ids_differ = 0, ids = 0;
};

inline void add_diff(const std::vector<DraftBlock>& a, const std::vector<DraftBlock>& b, DraftDiff& d) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].ids.size(), b[r].ids.size());
    ASSERT_EQ(a[r].logits.size(), b[r].logits.size());
    for (size_t i = 0; i < a[r].ids.size(); ++i) {
      d.ids_differ += a[r].ids[i] != b[r].ids[i];
      ++d.ids;
      d.confidence = std::max(d.confidence, std::fabs(double(a[r].confidence[i]) - b[r].confidence[i]));
    }
    for (size_t i = 0; i < a[r].logits.size(); ++i) {
      d.logit = std::max(d.logit, std::fabs(double(a[r].logits[i]) - b[r].logits[i]));
      d.logit_scale = std::max(d.logit_scale, std::fabs(double(a[r].logits[i])));
    }
  }
}

// Three drafts of three sequences on a fresh engine over `backend`: after a prefill in chunks of 7
// (slots 5, 3, all), after a 4-row verify-like step, a rollback of 3 and a decode row (rings longer,
// copies rebuilt; slots all, 2, all), and after each of two more decode rows with the same slots
// (the second draft's shape again, with other tables and longer rings: a graph's capture at the
// shape's second draft, then its replay at the third).
struct DraftRuns {
  std::vector<DraftBlock> first, second, third, fourth;
  std::vector<std::vector<uint8_t>> rings;  // after the last draft: each sequence's stages' ring bytes
};

// inspect (if given) sees the backend after the last draft. lengths: the three prompts'. logits:
// whether the drafts ask for their logits (DraftSpec::logits). around (if given) sees the backend
// just before (false) and just after (true) each draft.
inline Result<DraftRuns> run_draft_scenario(const Model& model, std::unique_ptr<Backend> backend,
                                            const std::function<void(const Backend&)>& inspect = {},
                                            const std::vector<int64_t>& lengths = {37, 12, 70}, bool logits = true,
                                            const std::function<void(const Backend&, bool)>& around = {}) {
  const int32_t V = int32_t(model.vocab_size());
  const int B = model.config().dspark_block_size;
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t n : lengths) {
    prompts.emplace_back(size_t(n));
    for (int32_t& t : prompts.back()) t = int32_t(rng() % uint32_t(std::min(V, 300)));
  }
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = B;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(std::move(backend), model.engram_tables(), eo));
  std::vector<SequenceId> ids;
  for (const auto& p : prompts) {
    DSV41_ASSIGN_OR_RETURN(SequenceId id, e->add_sequence(int64_t(p.size()) + 16));
    ids.push_back(id);
  }
  // Prefill in chunks of 7, all sequences in each forward.
  for (size_t at = 0;; at += 7) {
    std::vector<Segment> segs;
    for (size_t s = 0; s < prompts.size(); ++s)
      if (at < prompts[s].size())
        segs.push_back({ids[s], int64_t(at),
                        std::span<const int32_t>(prompts[s].data() + at, std::min<size_t>(7, prompts[s].size() - at)),
                        LogitRows::kNone});
    if (segs.empty()) break;
    for (const SegmentResult& r : e->forward(segs)) DSV41_RETURN_IF_ERROR(r.status);
  }
  DraftRuns out;
  const auto draft = [&](std::span<const Engine::DraftSpec> specs, std::vector<DraftBlock>& blocks) {
    if (around) around(e->backend(), false);
    const Status st = e->draft(specs, blocks);
    if (around) around(e->backend(), true);
    return st;
  };
  const std::vector<Engine::DraftSpec> specs = {{ids[0], 7, 5, logits}, {ids[1], 11, 3, logits}, {ids[2], 13, 0, logits}};
  DSV41_RETURN_IF_ERROR(draft(specs, out.first));
  // A verify-like step of 4 rows each, 3 rolled back, then one decode row.
  const std::vector<int32_t> rows = {5, 9, 2, 4};
  std::vector<Segment> segs;
  for (size_t s = 0; s < prompts.size(); ++s)
    segs.push_back({ids[s], int64_t(prompts[s].size()), std::span<const int32_t>(rows), LogitRows::kNone});
  for (const SegmentResult& r : e->forward(segs)) DSV41_RETURN_IF_ERROR(r.status);
  for (SequenceId id : ids) DSV41_RETURN_IF_ERROR(e->rollback(id, 3));
  const int32_t next[3] = {17, 23, 29};
  for (int64_t step = 0; step < 3; ++step) {
    segs.clear();
    for (size_t s = 0; s < prompts.size(); ++s)
      segs.push_back(
          {ids[s], int64_t(prompts[s].size()) + 1 + step, std::span<const int32_t>(&next[step], 1), LogitRows::kNone});
    for (const SegmentResult& r : e->forward(segs)) DSV41_RETURN_IF_ERROR(r.status);
    const std::vector<Engine::DraftSpec> again = {
        {ids[0], int32_t(3 + step), 0, logits}, {ids[1], int32_t(4 + step), 2, logits}, {ids[2], int32_t(6 + step), 0, logits}};
    DSV41_RETURN_IF_ERROR(draft(again, step == 0 ? out.second : step == 1 ? out.third : out.fourth));
  }
  for (SequenceId id : ids)
    for (int stage = 0; stage < model.drafter()->shape.stages; ++stage)
      out.rings.push_back(e->cache(id)->draft_ring(stage).raw());
  if (inspect) inspect(e->backend());
  return out;
}

// Values of two runs' drafts that differ bit for bit (ids, logits, confidences); `values` counts
// the logits and confidences compared.
inline int bits_differ(const DraftRuns& x, const DraftRuns& y, int& values, const std::string& what) {
  int differ = 0;
  const auto same = [&](const std::vector<DraftBlock>& a, const std::vector<DraftBlock>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
      EXPECT_EQ(a[r].ids, b[r].ids) << what;
      ASSERT_EQ(a[r].logits.size(), b[r].logits.size());
      ASSERT_EQ(a[r].confidence.size(), b[r].confidence.size());
      for (size_t i = 0; i < a[r].logits.size(); ++i, ++values)
        differ += std::memcmp(&a[r].logits[i], &b[r].logits[i], sizeof(float)) != 0;
      for (size_t i = 0; i < a[r].confidence.size(); ++i, ++values)
        differ += std::memcmp(&a[r].confidence[i], &b[r].confidence[i], sizeof(float)) != 0;
    }
  };
  same(x.first, y.first);
  same(x.second, y.second);
  same(x.third, y.third);
  same(x.fourth, y.fourth);
  return differ;
}

// make_device(device_drafter) gives a fresh device backend of `model` with the device drafter on
// or off. tol: the largest |difference| allowed in logits and confidences; ring_flips: the most
// ring codes allowed one step apart (each moves its sequence's later drafts a little: on
// dsv41-mini one such code of the scenario's 81,972 ring bytes moved the logits by 7.9e-4).
inline void check_device_drafter(const Model& model, const std::function<std::unique_ptr<Backend>(bool)>& make_device,
                                 double tol, const std::string& what, int ring_flips = 4) {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  auto host = run_draft_scenario(model, make_device(false));
  ASSERT_TRUE(host.ok()) << what << ": " << host.status().to_string();
  auto dev = run_draft_scenario(model, make_device(true));
  ASSERT_TRUE(dev.ok()) << what << ": " << dev.status().to_string();
  DraftDiff d;
  add_diff(host->first, dev->first, d);
  add_diff(host->second, dev->second, d);
  add_diff(host->third, dev->third, d);
  add_diff(host->fourth, dev->fourth, d);
  // The rings' packed FP8 records: the same bytes but where the two paths' float sums fall on
  // either side of a rounding boundary — then one code one step apart (same sign).
  int ring_bytes = 0, flips = 0, far = 0;
  ASSERT_EQ(host->rings.size(), dev->rings.size()) << what;
  for (size_t r = 0; r < host->rings.size(); ++r) {
    ASSERT_EQ(host->rings[r].size(), dev->rings[r].size()) << what;
    for (size_t i = 0; i < host->rings[r].size(); ++i, ++ring_bytes) {
      const uint8_t a = host->rings[r][i], b = dev->rings[r][i];
      if (a == b) continue;
      ++flips;
      far += (a & 0x80) != (b & 0x80) || std::abs(int(a & 0x7F) - int(b & 0x7F)) != 1;
    }
  }
  std::printf("%s, device drafter vs host drafter (4 drafts of 3 sequences, after prefill and after a rollback): "
              "max |dlogit| %.3g (logits up to %.3g), max |dconfidence| %.3g, %d of %d ids differ; ring bytes: "
              "%d of %d differ (%d by more than one code step)\n",
              what.c_str(), d.logit, d.logit_scale, d.confidence, d.ids_differ, d.ids, flips, ring_bytes, far);
  EXPECT_EQ(far, 0) << what;
  EXPECT_LE(flips, ring_flips) << what;
  EXPECT_EQ(d.ids_differ, 0) << what;
  EXPECT_LE(d.logit, tol) << what;
  EXPECT_LE(d.confidence, tol) << what;
  EXPECT_GT(d.logit_scale, 0.0) << what;
}

// The device drafter's drafts as the executor's graphs (device_drafter_impl.h draft_on_device)
// against its launches: the same ids, logits and confidences bit for bit over the scenario's four
// drafts (rings growing between them). make_device(graphs, draft_graphs) gives a fresh device
// backend with the device drafter on, the executor's graphs on or off and the drafter's use of
// them on or off; graph_launches(backend) its executor's graph launches so far: none without
// graphs, and more with the drafter's than with the decode steps' alone (so the drafts ran as
// graphs).
inline void check_draft_graph(const Model& model,
                              const std::function<std::unique_ptr<Backend>(bool, bool)>& make_device,
                              const std::function<int64_t(const Backend&)>& graph_launches, const std::string& what) {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  DraftRuns runs[3];
  int64_t counts[3] = {-1, -1, -1};
  // Prompts no longer than 50: on dsv41-mini (W = 64) every ring is shorter than the window and
  // grows between drafts.
  for (int mode = 0; mode < 3; ++mode) {
    auto r = run_draft_scenario(
        model, make_device(mode > 0, mode > 1), [&](const Backend& b) { counts[mode] = graph_launches(b); },
        {37, 12, 50});
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    runs[mode] = std::move(*r);
  }
  EXPECT_EQ(counts[0], 0) << what << ": graph launches without graphs";
  EXPECT_GT(counts[2], counts[1]) << what << ": the drafts added no graph launches";
  int values = 0;
  const int differ = bits_differ(runs[0], runs[2], values, what);
  std::printf("%s, draft graph vs launches (4 drafts of 3 sequences): %d of %d logits and confidences differ\n",
              what.c_str(), differ, values);
  EXPECT_EQ(differ, 0) << what;
}

// The device drafter's drafts replayed from kept graphs (DeviceBackend::set_draft_replay: each
// draft shape's launches captured once, then replayed as they are, Exec::run_kept) against the
// same drafts launch by launch and recorded into the executor's graphs at every draft: the same
// ids, logits and confidences bit for bit over the scenario's four drafts. The rings grow between
// the drafts (prompts of 37, 12 and 50 tokens, W = 64 on dsv41-mini) and the tables change, so a
// replay that read a value baked into its capture would differ. make_device(graphs, replay) gives
// a fresh device backend with the device drafter on, the executor's graphs on or off and replay
// on or off; kept(backend) its executor's {kept captures, kept replays} so far.
inline void check_draft_replay(const Model& model, const std::function<std::unique_ptr<Backend>(bool, bool)>& make_device,
                               const std::function<std::pair<int64_t, int64_t>(const Backend&)>& kept,
                               const std::string& what) {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  DraftRuns runs[3];
  std::pair<int64_t, int64_t> counts[3];
  for (int mode = 0; mode < 3; ++mode) {
    auto r = run_draft_scenario(
        model, make_device(mode > 0, mode > 1), [&](const Backend& b) { counts[mode] = kept(b); }, {37, 12, 50});
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    runs[mode] = std::move(*r);
  }
  int values = 0, recorded_values = 0;
  const int differ = bits_differ(runs[0], runs[2], values, what);
  const int differ_recorded = bits_differ(runs[1], runs[2], recorded_values, what);
  std::printf("%s, kept draft graphs vs launches (4 drafts of 3 sequences, rings growing): %d of %d logits and "
              "confidences differ (%d against recorded graphs); %lld captures, %lld replays\n",
              what.c_str(), differ, values, differ_recorded, static_cast<long long>(counts[2].first),
              static_cast<long long>(counts[2].second));
  EXPECT_EQ(differ, 0) << what;
  EXPECT_EQ(differ_recorded, 0) << what;
  EXPECT_GT(values, 0) << what;
  EXPECT_EQ(counts[0].first + counts[0].second + counts[1].first + counts[1].second, 0) << what << ": kept graphs unasked";
  // Drafts 2–4 share a shape; the stages swap two buffers, so drafts 2 and 3 each capture and
  // draft 4 replays draft 2's graph.
  EXPECT_GE(counts[2].second, 1) << what << ": no draft was replayed";
}

// A sequence cache's whole state as bytes: every ring's (backbone and drafter) positions and
// records, every kv source's compressed records and open group.
inline std::vector<uint8_t> cache_state_bytes(const SequenceCache& c) {
  std::vector<uint8_t> out;
  const auto add = [&out](const void* p, size_t n) {
    out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const auto ring = [&](const WindowRing& r) {
    const int64_t pos[2] = {r.start(), r.length()};
    add(pos, sizeof pos);
    add(r.raw().data(), r.raw().size());
  };
  for (int l = 0; l < c.num_layers(); ++l) {
    ring(c.window(l));
    if (const KvSourceCache* kv = c.kv_source(l)) {
      for (const PagedRows* rows : {&kv->main, &kv->index})
        for (int64_t g = 0; g < rows->size(); ++g) add(rows->row(g), size_t(rows->record_bytes()));
      add(kv->pending_kv.data(), kv->pending_kv.size() * sizeof(float));
    }
  }
  for (int s = 0; s < c.draft_stages(); ++s) ring(c.draft_ring(s));
  return out;
}

// DeviceBackend::set_publish_with_feeding (a forward's cache rows downloaded with the drafter's
// ring rows) against the default: after every forward — prefill chunks without logits, 5-row
// verify steps after a draft, each rolled back by 2, plain steps, and plain steps with the
// feeding paused — both sequences' caches byte for byte, the logits and the drafts bit for bit.
// With the device drafter and with the host drafter (whose feeding downloads nothing of its own).
// make_device(publish, device_drafter): a fresh device backend.
inline void check_publish_with_feeding(const Model& model,
                                       const std::function<std::unique_ptr<Backend>(bool, bool)>& make_device,
                                       const std::string& what) {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  const int32_t V = int32_t(model.vocab_size());
  const int B = model.config().dspark_block_size;
  struct Trace {
    std::vector<std::vector<uint8_t>> caches;
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> drafts;
  };
  const auto run = [&](bool publish, bool device_drafter) -> Result<Trace> {
    EngineOptions eo;
    eo.dspark = true;
    eo.rollback_tokens = B;
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e,
                           Engine::create(make_device(publish, device_drafter), model.engram_tables(), eo));
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(30), std::vector<int32_t>(17)};
    std::vector<SequenceId> ids;
    for (auto& p : prompts) {
      for (int32_t& t : p) t = int32_t(rng() % uint32_t(std::min(V, 300)));
      DSV41_ASSIGN_OR_RETURN(SequenceId id, e->add_sequence(int64_t(p.size()) + 64));
      ids.push_back(id);
    }
    Trace t;
    const auto forward = [&](const std::vector<Segment>& segs) -> Status {
      const std::vector<SegmentResult>& res = e->forward(segs);
      for (const SegmentResult& r : res) {
        DSV41_RETURN_IF_ERROR(r.status);
        if (r.logit_rows > 0) t.logits.emplace_back(r.logits, r.logits + r.logit_rows * V);
      }
      for (SequenceId id : ids) t.caches.push_back(cache_state_bytes(*e->cache(id)));  // before any other call
      return ok_status();
    };
    for (size_t at = 0; at < prompts[0].size(); at += 7) {  // prefill chunks, the last with logits
      std::vector<Segment> segs;
      for (size_t s = 0; s < prompts.size(); ++s)
        if (at < prompts[s].size()) {
          const size_t n = std::min<size_t>(7, prompts[s].size() - at);
          segs.push_back({ids[s], int64_t(at), std::span<const int32_t>(prompts[s].data() + at, n),
                          at + n == prompts[s].size() ? LogitRows::kLast : LogitRows::kNone});
        }
      DSV41_RETURN_IF_ERROR(forward(segs));
    }
    std::vector<int32_t> next = {7, 9};
    std::vector<std::vector<int32_t>> rows(ids.size());
    std::vector<DraftBlock> blocks;
    for (int round = 0; round < 6; ++round) {
      e->set_draft_feeding(round < 4);  // rounds 4, 5: plain steps without feeding
      const bool verify = round % 2 == 0 && round < 4;
      std::vector<Segment> segs;
      if (verify) {
        std::vector<Engine::DraftSpec> specs;
        for (size_t s = 0; s < ids.size(); ++s) specs.push_back({ids[s], next[s], B, false});
        DSV41_RETURN_IF_ERROR(e->draft(specs, blocks));
        for (size_t s = 0; s < ids.size(); ++s) {
          t.drafts.push_back(blocks[s].ids);
          rows[s] = {next[s]};
          rows[s].insert(rows[s].end(), blocks[s].ids.begin(), blocks[s].ids.begin() + 4);
        }
      } else {
        for (size_t s = 0; s < ids.size(); ++s) rows[s] = {next[s]};
      }
      for (size_t s = 0; s < ids.size(); ++s)
        segs.push_back({ids[s], *e->length(ids[s]), rows[s], verify ? LogitRows::kAll : LogitRows::kLast});
      DSV41_RETURN_IF_ERROR(forward(segs));
      for (size_t s = 0; s < ids.size(); ++s) {
        next[s] = int32_t((next[s] * 31 + round) % std::min(V, 300));
        if (verify) DSV41_RETURN_IF_ERROR(e->rollback(ids[s], 2));
      }
      if (verify)
        for (SequenceId id : ids) t.caches.push_back(cache_state_bytes(*e->cache(id)));  // after the rollback
    }
    return t;
  };
  for (bool device_drafter : {true, false}) {
    const std::string name = what + (device_drafter ? ", device drafter" : ", host drafter");
    auto off = run(false, device_drafter);
    ASSERT_TRUE(off.ok()) << name << ": " << off.status().to_string();
    auto on = run(true, device_drafter);
    ASSERT_TRUE(on.ok()) << name << ": " << on.status().to_string();
    ASSERT_EQ(off->caches.size(), on->caches.size()) << name;
    int caches_differ = 0, logits_differ = 0;
    for (size_t i = 0; i < off->caches.size(); ++i) caches_differ += off->caches[i] != on->caches[i];
    ASSERT_EQ(off->logits.size(), on->logits.size()) << name;
    for (size_t i = 0; i < off->logits.size(); ++i)
      logits_differ += std::memcmp(off->logits[i].data(), on->logits[i].data(), off->logits[i].size() * sizeof(float)) != 0;
    std::printf("%s, cache rows published with the feeding's vs at end_batch: %d of %zu cache states and %d of %zu "
                "logit blocks differ; drafts %s\n",
                name.c_str(), caches_differ, off->caches.size(), logits_differ, off->logits.size(),
                off->drafts == on->drafts ? "equal" : "differ");
    EXPECT_EQ(caches_differ, 0) << name;
    EXPECT_EQ(logits_differ, 0) << name;
    EXPECT_EQ(off->drafts, on->drafts) << name;
    EXPECT_FALSE(off->drafts.empty()) << name;
  }
}

// The device drafter with fused launches (DeviceBackend::set_fused: the backbone's chains and
// batched launches in its stages and ring feeding, device_drafter_impl.h) against the same drafter
// launching each body on its own: the same ids, logits and confidences bit for bit over the
// scenario's four drafts, and fewer launches in the drafts. make_device(fused) gives a fresh
// device backend with the device drafter on and fused launches on or off; launches(backend) its
// executor's launches so far. `change`: what make_device(true) changes (for the printed line; other
// launch-saving switches use the same check).
inline void check_draft_fused(const Model& model, const std::function<std::unique_ptr<Backend>(bool)>& make_device,
                              const std::function<int64_t(const Backend&)>& launches, const std::string& what,
                              const std::string& change = "fused launches") {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  DraftRuns runs[2];
  int64_t in_drafts[2] = {0, 0};
  for (int fused = 0; fused < 2; ++fused) {
    int64_t before = 0;
    const auto around = [&](const Backend& b, bool after) {
      if (after) in_drafts[fused] += launches(b) - before;
      else before = launches(b);
    };
    auto r = run_draft_scenario(model, make_device(fused == 1), {}, {37, 12, 70}, true, around);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    runs[fused] = std::move(*r);
  }
  int values = 0;
  const int differ = bits_differ(runs[0], runs[1], values, what);
  std::printf("%s, drafts with %s vs without (4 drafts of 3 sequences): %d of %d logits and confidences "
              "differ; %lld launches in the drafts with, %lld without\n",
              what.c_str(), change.c_str(), differ, values, static_cast<long long>(in_drafts[1]),
              static_cast<long long>(in_drafts[0]));
  EXPECT_EQ(differ, 0) << what;
  EXPECT_GT(values, 0) << what;
  EXPECT_LT(in_drafts[1], in_drafts[0]) << what << ": " << change << " saved nothing in the drafts";
}

// The greedy tail on the device (Markov bias, argmax picks slot after slot, confidences:
// device_drafter_impl.h draft_tail_kernels) against the host's draft_block_tail over the same
// device-computed logits and rows: the same ids, logits and confidences bit for bit (the bias in
// float as two rounded operations, the confidence in double in the host's order).
// make_device(tail_on_device) gives a fresh device backend with the device drafter on.
inline void check_draft_tail(const Model& model, const std::function<std::unique_ptr<Backend>(bool)>& make_device,
                             const std::string& what) {
  ASSERT_NE(model.drafter(), nullptr) << what << ": the model has no drafter";
  auto host = run_draft_scenario(model, make_device(false));
  ASSERT_TRUE(host.ok()) << what << ": " << host.status().to_string();
  auto dev = run_draft_scenario(model, make_device(true));
  ASSERT_TRUE(dev.ok()) << what << ": " << dev.status().to_string();
  int values = 0;
  const int differ = bits_differ(*host, *dev, values, what);
  std::printf("%s, draft tail on the device vs on the host (4 drafts of 3 sequences): %d of %d logits and "
              "confidences differ\n",
              what.c_str(), differ, values);
  EXPECT_EQ(differ, 0) << what;
  EXPECT_GT(values, 0) << what;
  // Without logits (a greedy caller): the same picks and confidences, no logits downloaded.
  auto lean = run_draft_scenario(model, make_device(true), {}, {37, 12, 70}, false);
  ASSERT_TRUE(lean.ok()) << what << ": " << lean.status().to_string();
  const auto same_picks = [&](const std::vector<DraftBlock>& a, const std::vector<DraftBlock>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
      EXPECT_EQ(a[r].ids, b[r].ids) << what;
      EXPECT_TRUE(b[r].logits.empty()) << what;
      ASSERT_EQ(a[r].confidence.size(), b[r].confidence.size());
      EXPECT_EQ(0, std::memcmp(a[r].confidence.data(), b[r].confidence.data(), a[r].confidence.size() * sizeof(float)))
          << what;
    }
  };
  same_picks(dev->first, lean->first);
  same_picks(dev->second, lean->second);
  same_picks(dev->third, lean->third);
  same_picks(dev->fourth, lean->fourth);
}

}  // namespace dsv41::testing_scenario
