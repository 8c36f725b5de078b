// DSpark (issue 15): the drafter's rings follow the sequence (chunking, batching, rollback,
// snapshot restore), and speculative decoding emits exactly what plain decoding emits — greedy and
// seeded sampling, batch 1 and 8, mixed acceptance, after a restore and after a bounded replay.
// Model: tests/fixtures/dspark-micro (a random drafter in the release formats; its drafts are
// checked against the PyTorch reference by reference/tests/test_dspark.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/host_device_backend.h"
#include "engine/engine.h"
#include "model/dspark_weights.h"
#include "model/model.h"
#include "runtime/scheduler.h"
#include "runtime/serve_turn.h"
#include "store/store_test_util.h"
#include "format/safetensors.h"
#include "testing/truth_drafts.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kModel = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/dspark-micro";

const Model& micro() {
  static std::unique_ptr<Model> m = [] {
    ModelLoadOptions o;
    o.threads = 1;
    auto r = Model::load(kModel, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(*r);
  }();
  return *m;
}

std::unique_ptr<Engine> dspark_engine() {
  const Model& m = micro();
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = m.config().dspark_block_size;
  auto e = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), eo);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return std::move(*e);
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 300);
  return t;
}

// Feeds `ids` in chunks of `chunk` and drafts after the last position with anchor `anchor`.
DraftBlock draft_after(Engine& e, SequenceId seq, std::span<const int32_t> ids, int64_t chunk, int32_t anchor) {
  const int64_t have = *e.length(seq);
  for (int64_t p = 0; p < static_cast<int64_t>(ids.size()); p += chunk) {
    Segment s;
    s.sequence = seq;
    s.start = have + p;
    s.tokens = ids.subspan(static_cast<size_t>(p), static_cast<size_t>(std::min<int64_t>(chunk, ids.size() - p)));
    s.logits = LogitRows::kNone;
    EXPECT_TRUE(e.forward(std::span<const Segment>(&s, 1)).front().status.ok());
  }
  std::vector<DraftBlock> out;
  const Engine::DraftSpec spec{seq, anchor};
  EXPECT_TRUE(e.draft(std::span<const Engine::DraftSpec>(&spec, 1), out).ok());
  return out.empty() ? DraftBlock{} : out.front();
}

void expect_same(const DraftBlock& a, const DraftBlock& b, float tol = 0) {
  ASSERT_EQ(a.ids, b.ids);
  ASSERT_EQ(a.logits.size(), b.logits.size());
  for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_NEAR(a.logits[i], b.logits[i], tol) << i;
  for (size_t i = 0; i < a.confidence.size(); ++i) ASSERT_NEAR(a.confidence[i], b.confidence[i], tol) << i;
}

TEST(DsparkShape, ConfigErrorsNameTheKey) {
  ModelConfig c = micro().config();
  c.dspark_noise_token_id = c.vocab_size;
  EXPECT_NE(DrafterShape::from_config(c).status().message().find("dspark_noise_token_id"), std::string::npos);
  c = micro().config();
  c.dspark_target_layer_ids = {99};
  EXPECT_NE(DrafterShape::from_config(c).status().message().find("dspark_target_layer_ids"), std::string::npos);
  c = micro().config();
  c.dspark_num_experts_per_tok = 9;
  EXPECT_FALSE(DrafterShape::from_config(c).ok());
}


TEST(DsparkShape, DrafterShapesThatDisagreeWithTheConfigNameTheTensor) {
  // The fixture's drafter with a config claiming another Markov rank.
  const std::string dir = ::testing::TempDir() + "dspark-bad-rank";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* f : {"model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(kModel + "/" + f, dir + "/" + f);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kModel + "/config.json"));
  config["dspark_markov_rank"] = 9;
  std::ofstream(dir + "/config.json") << config.dump();
  auto m = Model::load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("markov_head"), std::string::npos) << m.status().message();
  // The right rank loads; the backbone alone (v41-micro's checkpoint, no mtp.* tensors) under a
  // config that describes a drafter loads without one, with a note saying why (logged once).
  config["dspark_markov_rank"] = 8;
  std::ofstream(dir + "/config.json") << config.dump();
  auto ok = Model::load(dir);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_NE((*ok)->drafter(), nullptr);
  const std::string micro_dir = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro";
  std::filesystem::remove(dir + "/model.safetensors");
  std::filesystem::copy_file(micro_dir + "/model.safetensors", dir + "/model.safetensors");
  auto bare = Model::load(dir);
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  EXPECT_EQ((*bare)->drafter(), nullptr);
  EXPECT_NE((*bare)->drafter_note().find("no mtp.* tensors"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The Markov bias over the rank-major copy of the head (the CPU drafter's) gives the plain loop's
// ids, logits and confidences bit for bit: the micro model's whole vocabulary and a prefix of it
// that ends inside a block of lanes.
TEST(DsparkTail, TheRankMajorMarkovBiasGivesThePlainLoopsBits) {
  const DrafterWeights& w = *micro().drafter();
  const int64_t d = micro().config().hidden_size, n = micro().config().dspark_block_size;
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0, 1);
  for (const int64_t V : {micro().config().vocab_size, micro().config().vocab_size - 37}) {
    std::vector<float> x(static_cast<size_t>(n * d)), logits(static_cast<size_t>(n * V));
    for (float& v : x) v = nd(rng);
    for (float& v : logits) v = nd(rng);
    auto run = [&](const float* head_by_rank) {
      DraftBlock b;
      b.ids.resize(static_cast<size_t>(n));
      b.confidence.resize(static_cast<size_t>(n));
      b.logits = logits;
      draft_block_tail(w, d, V, 3, x.data(), 0, nullptr, b, head_by_rank);
      return b;
    };
    const std::vector<float> by_rank = markov_head_by_rank(w, V);
    const DraftBlock plain = run(nullptr), fast = run(by_rank.data());
    EXPECT_EQ(fast.ids, plain.ids) << "V " << V;
    EXPECT_EQ(std::memcmp(fast.logits.data(), plain.logits.data(), plain.logits.size() * sizeof(float)), 0) << "V " << V;
    EXPECT_EQ(fast.confidence, plain.confidence) << "V " << V;
  }
}

TEST(DsparkEngine, EngineRefusesDsparkWithoutRollbackRoom) {
  const Model& m = micro();
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = 1;
  EXPECT_FALSE(Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), eo).ok());
}

TEST(DsparkEngine, DraftDoesNotDependOnChunking) {
  const auto ids = tokens(29, 1);
  auto e1 = dspark_engine(), e2 = dspark_engine();
  const DraftBlock one = draft_after(*e1, *e1->add_sequence(64), ids, 29, 7);
  const DraftBlock chunked = draft_after(*e2, *e2->add_sequence(64), ids, 4, 7);
  expect_same(one, chunked);
}

TEST(DsparkEngine, BatchedDraftsEqualSingleOnes) {
  auto e = dspark_engine();
  const SequenceId a = *e->add_sequence(64), b = *e->add_sequence(64);
  const DraftBlock da = draft_after(*e, a, tokens(11, 2), 11, 5);
  const DraftBlock db = draft_after(*e, b, tokens(17, 3), 17, 9);
  std::vector<DraftBlock> both;
  const Engine::DraftSpec specs[] = {{a, 5}, {b, 9}};
  ASSERT_TRUE(e->draft(specs, both).ok());
  expect_same(both[0], da);
  expect_same(both[1], db);
}


TEST(DsparkEngine, FewerSlotsGiveTheFullDraftsFirstSlots) {
  auto e = dspark_engine();
  const SequenceId s = *e->add_sequence(64);
  const DraftBlock full = draft_after(*e, s, tokens(15, 8), 15, 4);
  const int64_t V = micro().vocab_size();
  for (int slots = 1; slots <= 5; ++slots) {
    std::vector<DraftBlock> out;
    const Engine::DraftSpec spec{s, 4, slots};
    ASSERT_TRUE(e->draft(std::span<const Engine::DraftSpec>(&spec, 1), out).ok());
    const DraftBlock& b = out.front();
    ASSERT_EQ(static_cast<int>(b.ids.size()), slots);
    for (int j = 0; j < slots; ++j) {
      EXPECT_EQ(b.ids[j], full.ids[j]);
      EXPECT_EQ(b.confidence[j], full.confidence[j]);
      for (int64_t v = 0; v < V; ++v) ASSERT_EQ(b.logits[j * V + v], full.logits[j * V + v]);
    }
  }
}

TEST(DsparkEngine, RollbackLeavesNoTraceInTheRings) {
  auto e = dspark_engine();
  const SequenceId s = *e->add_sequence(64);
  const auto ids = tokens(20, 4);
  const DraftBlock before = draft_after(*e, s, ids, 20, 3);
  const auto extra = tokens(4, 5);
  draft_after(*e, s, extra, 4, 3);  // four more positions
  ASSERT_TRUE(e->rollback(s, 4).ok());
  std::vector<DraftBlock> after;
  const Engine::DraftSpec spec{s, 3};
  ASSERT_TRUE(e->draft(std::span<const Engine::DraftSpec>(&spec, 1), after).ok());
  expect_same(after.front(), before);
}

TEST(DsparkEngine, SnapshotRestoresTheRings) {
  auto e = dspark_engine();
  const SequenceId s = *e->add_sequence(64);
  const DraftBlock cold = draft_after(*e, s, tokens(25, 6), 25, 11);
  auto snap = e->snapshot(s);
  ASSERT_TRUE(snap.ok());
  const SequenceId f = *e->fork_prefix(s, 25);
  ASSERT_TRUE(e->restore(f, *snap).ok());
  std::vector<DraftBlock> warm;
  const Engine::DraftSpec spec{f, 11};
  ASSERT_TRUE(e->draft(std::span<const Engine::DraftSpec>(&spec, 1), warm).ok());
  expect_same(warm.front(), cold);
}

TEST(DsparkEngine, DraftNeedsRingsAtTheLastPosition) {
  auto e = dspark_engine();
  const SequenceId s = *e->add_sequence(64);
  draft_after(*e, s, tokens(9, 7), 9, 1);
  const SequenceId f = *e->fork_prefix(s, 9);  // rings restarted: nothing fed since
  std::vector<DraftBlock> out;
  const Engine::DraftSpec spec{f, 1};
  const Status st = e->draft(std::span<const Engine::DraftSpec>(&spec, 1), out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ring"), std::string::npos) << st.message();
}

// `--dspark auto` pauses the rings' feeding (and the target features' capture) while it decodes
// plainly and resumes it a window before it drafts again: a sequence whose feeding paused mid-decode
// drafts, once a window's worth of positions has been fed since, exactly what a sequence fed all
// along drafts (the rings restart at the first fed position and refill); while paused it cannot
// draft. On the CPU backend and on the device backend's emulation (its ring copies rebuilt).
void check_pause_resume(const std::function<std::unique_ptr<Backend>()>& make_backend, const std::string& what) {
  const Model& m = micro();
  const int64_t W = m.config().sliding_window;
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = m.config().dspark_block_size;
  auto fed = Engine::create(make_backend(), m.engram_tables(), eo);
  auto paused = Engine::create(make_backend(), m.engram_tables(), eo);
  ASSERT_TRUE(fed.ok() && paused.ok()) << what;
  const auto prompt = tokens(20, 31), steps = tokens(int(12 + 2 * W), 32);
  Engine* engines[2] = {fed->get(), paused->get()};
  SequenceId seqs[2];
  for (int k = 0; k < 2; ++k) {
    seqs[k] = *engines[k]->add_sequence(128);
    draft_after(*engines[k], seqs[k], prompt, 7, 3);
  }
  const int64_t pause_at = 2, resume_at = 10;  // decode steps [pause_at, resume_at) unfed
  for (int64_t t = 0; t < int64_t(steps.size()); ++t) {
    paused->get()->set_draft_feeding(t < pause_at || t >= resume_at);
    for (int k = 0; k < 2; ++k) {
      Segment s;
      s.sequence = seqs[k];
      s.start = *engines[k]->length(seqs[k]);
      s.tokens = std::span<const int32_t>(&steps[size_t(t)], 1);
      s.logits = LogitRows::kLast;
      ASSERT_TRUE(engines[k]->forward(std::span<const Segment>(&s, 1)).front().status.ok()) << what;
    }
    const bool fed_now = t < pause_at || t >= resume_at;
    EXPECT_EQ(paused->get()->can_draft(seqs[1]), fed_now) << what << " step " << t;
    if (t < pause_at || t >= resume_at + W - 1) {  // a full window fed since the resume (or never paused)
      std::vector<DraftBlock> a, b;
      const int32_t anchor = int32_t(t % 250);
      const Engine::DraftSpec sa{seqs[0], anchor}, sb{seqs[1], anchor};
      ASSERT_TRUE(fed->get()->draft(std::span<const Engine::DraftSpec>(&sa, 1), a).ok()) << what;
      ASSERT_TRUE(paused->get()->draft(std::span<const Engine::DraftSpec>(&sb, 1), b).ok()) << what << " step " << t;
      expect_same(a.front(), b.front());
      if (::testing::Test::HasFatalFailure()) {
        ADD_FAILURE() << what << ": drafts differ at decode step " << t;
        return;
      }
    }
  }
}

TEST(DsparkEngine, PausedFeedingRefillsTheWindowOnResume) {
  check_pause_resume([] { return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(micro())); }, "cpu");
  check_pause_resume([] { return make_host_device_backend(micro()); }, "device emulation");
}

// ---- Speculative decoding through the scheduler ------------------------------------------------

std::vector<GenerationRequest> requests(int n, bool sampled) {
  std::mt19937 rng(11);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    r.prompt = tokens(3 + static_cast<int>(rng() % 40), 100 + i);
    r.max_tokens = 60 + static_cast<int>(rng() % 80);
    r.ignore_eos = i % 2 == 0;
    if (sampled) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 7 + i;
    }
    out.push_back(r);
  }
  return out;
}

struct Decoded {
  std::vector<std::vector<int32_t>> ids;
  DsparkStats stats;
};

// The scheduler options of these tests' decoding runs, on top of `base`.
SchedulerOptions decode_options(int parallel, DsparkMode mode, const SchedulerOptions& base = {}) {
  SchedulerOptions o = base;
  o.parallel = parallel;
  o.prefill_chunk = 16;
  o.max_prefill_tokens = 32;
  o.max_context = 256;
  o.eos_token_id = 1;
  o.dspark = mode;
  return o;
}

// Plain (mode off) or speculative decoding of `reqs`. With `truth` (a plain run's outputs) the
// drafts are rewritten to the true continuation at some slots, so acceptance is mixed.
Decoded run(const std::vector<GenerationRequest>& reqs, int parallel, DsparkMode mode,
        const std::vector<std::vector<int32_t>>* truth = nullptr, bool rejection = false, bool step_trace = false,
        const SchedulerOptions& base = {}) {
  auto e = dspark_engine();
  SchedulerOptions o = decode_options(parallel, mode, base);
  o.sampled_rejection = rejection;
  o.dspark_step_trace = step_trace;
  std::mt19937 coin(5);
  if (truth) o.draft_override = testing::truth_drafts(reqs, *truth, coin, 80);  // right 80 % of the time
  auto s = Scheduler::create(*e, o);
  EXPECT_TRUE(s.ok());
  std::vector<int64_t> tickets;
  for (const auto& r : reqs) tickets.push_back((*s)->submit(r));
  (*s)->run_to_completion();
  Decoded out;
  for (int64_t t : tickets) {
    auto res = (*s)->take(t);
    EXPECT_TRUE(res && res->status.ok());
    out.ids.push_back(res ? res->ids : std::vector<int32_t>{});
  }
  out.stats = (*s)->dspark_stats();
  return out;
}

int64_t total(const Decoded& r) {
  int64_t n = 0;
  for (const auto& v : r.ids) n += static_cast<int64_t>(v.size());
  return n;
}

const DsparkMode kOff{DsparkMode::Kind::kOff, 0};

TEST(DsparkDecode, GreedyEqualsPlainAtBatchOneAndEight) {
  const auto reqs = requests(12, false);
  const Decoded plain = run(reqs, 8, kOff);
  ASSERT_GE(total(plain), 1000);
  for (int parallel : {1, 8}) {
    for (DsparkMode mode : {DsparkMode{DsparkMode::Kind::kFixed, 1}, DsparkMode{DsparkMode::Kind::kFixed, 3},
                            DsparkMode{DsparkMode::Kind::kFixed, 5}, DsparkMode{DsparkMode::Kind::kAuto, 0}}) {
      const Decoded spec = run(reqs, parallel, mode, &plain.ids);
      EXPECT_EQ(spec.ids, plain.ids) << "parallel " << parallel << " k " << mode.k;
      EXPECT_GT(spec.stats.verified, 0) << "auto measures drafting at least";
      // Mixed acceptance: some drafts kept, some rolled back. (Auto drafts for as long as its
      // timing says it pays, which may be only its first measurement.)
      if (mode.kind == DsparkMode::Kind::kFixed) {
        EXPECT_GT(spec.stats.accepted, 0);
        EXPECT_LT(spec.stats.accepted, spec.stats.verified);
      }
    }
  }
}

// auto with session 16's rules (one draft cap a batch, first touches charged, a plain side of
// four samples, drafts weighed by remaining tokens; off by default) decodes exactly what plain
// decoding does, at batch 1 and 8.
TEST(DsparkDecode, GreedyEqualsPlainUnderSession16AutoRules) {
  const auto reqs = requests(12, false);
  const Decoded plain = run(reqs, 8, kOff);
  SchedulerOptions rules;
  rules.dspark_auto_plan = {.uniform_cap = true, .charge_first_touch = true};
  rules.dspark_auto_plain_samples = 4;
  rules.dspark_auto_weigh_laggards = true;
  for (int parallel : {1, 8}) {
    // auto decides from measured step times whether drafting is worth measuring; on a loaded
    // machine one run may verify no draft at all (seen once at load average 6.7, session 20), so
    // a run that drafted nothing is retried (at most 3 runs) before the check counts it.
    Decoded spec;
    for (int attempt = 0; attempt < 3; ++attempt) {
      spec = run(reqs, parallel, DsparkMode{DsparkMode::Kind::kAuto, 0}, &plain.ids, false, true, rules);
      EXPECT_EQ(spec.ids, plain.ids) << "parallel " << parallel << " attempt " << attempt;
      if (spec.stats.verified > 0) break;
    }
    EXPECT_GT(spec.stats.verified, 0) << "parallel " << parallel << ": no draft verified in 3 runs";
  }
}

// The step trace (bench --dspark-trace) accounts for every decoded token, in plain and drafting
// runs, and says which steps drafted.
TEST(DsparkDecode, StepTraceAccountsForEveryToken) {
  const auto reqs = requests(6, false);
  for (DsparkMode mode : {kOff, DsparkMode{DsparkMode::Kind::kFixed, 3}, DsparkMode{DsparkMode::Kind::kAuto, 0}}) {
    const Decoded d = run(reqs, 4, mode, nullptr, false, true);
    int64_t emitted = 0, drafted = 0;
    for (const DsparkStats::Step& t : d.stats.step_trace) {
      emitted += t.emitted;
      drafted += t.drafted;
      EXPECT_GE(t.seqs, t.decode_only ? 1 : 0);  // a prefill-only step emits a prompt's first token
      EXPECT_LE(t.seqs, 4);
      EXPECT_GE(t.rows, t.seqs);
      EXPECT_LE(t.rows, t.seqs * 6);
      EXPECT_GT(t.ms, 0);
      EXPECT_GT(t.forward_ms, 0);
      EXPECT_LE(t.forward_ms + t.draft_ms, t.ms * 1.0001f) << "the forward and the draft are parts of the step";
      if (t.seqs > 0) EXPECT_EQ(t.phase != '-', mode.kind == DsparkMode::Kind::kAuto);
      if (!t.drafted) EXPECT_EQ(t.rows, t.seqs);
    }
    EXPECT_EQ(emitted, total(d)) << "mode " << int(mode.kind);
    EXPECT_EQ(drafted, d.stats.drafting_steps);
    if (mode.kind == DsparkMode::Kind::kOff) EXPECT_EQ(drafted, 0);
    if (mode.kind == DsparkMode::Kind::kFixed) EXPECT_GT(drafted, 0);
  }
  EXPECT_TRUE(run(reqs, 4, kOff).stats.step_trace.empty()) << "off by default";
}

// Runs a scheduler's submitted requests to completion: each ticket's ids, in order (empty, and a
// failure, for one that did not finish well).
std::vector<std::vector<int32_t>> finish(Scheduler& s, const std::vector<int64_t>& tickets) {
  s.run_to_completion();
  std::vector<std::vector<int32_t>> ids;
  for (int64_t t : tickets) {
    auto res = s.take(t);
    EXPECT_TRUE(res && res->status.ok()) << "ticket " << t;
    ids.push_back(res && res->status.ok() ? res->ids : std::vector<int32_t>{});
  }
  return ids;
}

// The start-up profile (Scheduler::profile_shapes) runs every shape its mode runs at batch sizes
// 1, 2, 4, … parallel — plain steps, verify steps of up to K + 1 rows (auto: block + 1) after the
// drafter —, leaves no sequence behind and changes no token: greedy decoding after it equals plain
// decoding, at batch 1 and 4, for off, K = 3 and auto. It is refused once requests are queued.
TEST(DsparkDecode, AStartUpProfileChangesNoTokenAndLeavesNothingBehind) {
  const auto reqs = requests(6, false);
  const Decoded plain = run(reqs, 4, kOff);
  for (int parallel : {1, 4}) {
    for (DsparkMode mode : {kOff, DsparkMode{DsparkMode::Kind::kFixed, 3}, DsparkMode{DsparkMode::Kind::kAuto, 0}}) {
      SCOPED_TRACE("parallel " + std::to_string(parallel) + ", mode " + std::to_string(int(mode.kind)));
      auto e = dspark_engine();
      auto s = Scheduler::create(*e, decode_options(parallel, mode));
      ASSERT_TRUE(s.ok());
      auto profile = (*s)->profile_shapes();
      ASSERT_TRUE(profile.ok()) << profile.status().to_string();
      const int rows = mode.kind == DsparkMode::Kind::kOff ? 1 : mode.kind == DsparkMode::Kind::kFixed ? 4 : e->draft_block() + 1;
      const std::vector<int> sizes = parallel == 1 ? std::vector<int>{1} : std::vector<int>{1, 2, 4};
      ASSERT_EQ(profile->points.size(), sizes.size() * size_t(rows));
      for (int seqs : sizes)
        for (int r = 1; r <= rows; ++r) {
          const ShapeProfile::Point* p = profile->find(seqs, r);
          ASSERT_NE(p, nullptr) << seqs << " × " << r;
          EXPECT_GT(p->step_ms, 0);
          EXPECT_GT(p->unfed_ms, 0);
          if (r > 1 || mode.kind == DsparkMode::Kind::kOff) EXPECT_EQ(p->unfed_ms, p->step_ms) << "fed and unfed differ only for plain steps with a drafter";
          EXPECT_EQ(p->draft_ms > 0, r > 1) << seqs << " × " << r << ": the drafter ran before each verify step";
        }
      EXPECT_EQ(e->pool_stats().sequences, 0) << "the scratch sequences are gone";
      std::vector<int64_t> tickets;
      for (const auto& r : reqs) tickets.push_back((*s)->submit(r));
      EXPECT_FALSE((*s)->profile_shapes().ok()) << "refused with requests queued";
      EXPECT_EQ(finish(**s, tickets), plain.ids);
    }
  }
}

// With the model's measured acceptance known, auto's start-up prediction spares a clear loss its
// measurement: drafts that are never accepted (every rate 0) cannot pay — a drafting step emits
// a token a sequence for the drafter and a longer verify —, so at batch 4 auto decodes plainly
// from its first step, drafts nothing, says why in its verdicts, and emits plain decoding's
// tokens. Rates of 1 predict a gain (or too little loss to skip): auto measures as before.
TEST(DsparkDecode, AutoSkipsTheMeasurementOfAPredictedClearLoss) {
  const auto reqs = requests(6, false);
  const Decoded plain = run(reqs, 4, kOff);
  double never_accepted = NAN;
  for (double rate : {0.0, 1.0}) {
    SCOPED_TRACE("acceptance " + std::to_string(rate));
    auto e = dspark_engine();
    SchedulerOptions o = decode_options(4, DsparkMode{DsparkMode::Kind::kAuto, 0});
    o.dspark_calibration.assign(size_t(e->draft_block()), SlotMap{1.0, 0.0, rate});
    auto s = Scheduler::create(*e, o);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->profile_shapes().ok());
    const double predicted = (*s)->predicted_draft_speedup(4);
    ASSERT_TRUE(std::isfinite(predicted));
    std::vector<int64_t> tickets;
    for (const auto& r : reqs) tickets.push_back((*s)->submit(r));
    EXPECT_EQ(finish(**s, tickets), plain.ids);
    const DsparkStats& st = (*s)->dspark_stats();
    // A line a bucket decoded plainly on its prediction. As the batch drains, the smaller buckets
    // (1, 2–3 sequences) get their own predictions from this machine's timings, and may be clear
    // losses where batch 4's is not: each line must name a clear loss, and batch 4's bucket (2)
    // has one exactly when its prediction is.
    bool batch4_line = false;
    for (const std::string& v : st.auto_verdicts) {
      int bucket = -1;
      double x = NAN;
      if (std::sscanf(v.c_str(), "step %*d: bucket %d decodes plainly without a measurement: drafting predicted at %lfx",
                      &bucket, &x) != 2)
        continue;
      EXPECT_LT(x, AutoDraftSwitch::kPredictedLoss + 0.005) << v;  // (printed to two decimals)
      batch4_line = batch4_line || bucket == 2;
    }
    if (rate == 0.0) {
      EXPECT_LT(predicted, AutoDraftSwitch::kPredictedLoss) << "one token a sequence for a dearer step";
      EXPECT_EQ(st.drafting_steps, 0) << "no drafting sample at batch 4";
      EXPECT_TRUE(batch4_line);
    } else {
      EXPECT_GT(predicted, never_accepted) << "certain drafts predict more than useless ones";
      EXPECT_EQ(batch4_line, predicted < AutoDraftSwitch::kPredictedLoss);
    }
    never_accepted = predicted;
  }
}

// A profile that does not fit the engine's page budget fails, naming what it was profiling, and
// leaves the engine as it was (no scratch sequence, no page held): the scheduler then decodes as it
// would have without it (serve and generate go on unprofiled).
TEST(DsparkDecode, AStartUpProfileThatDoesNotFitLeavesTheEngineAsItWas) {
  const Model& m = micro();
  EngineOptions eo;
  eo.dspark = true;
  eo.rollback_tokens = m.config().dspark_block_size;
  int64_t budget = 0;
  {
    auto probe = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), eo);
    ASSERT_TRUE(probe.ok());
    const SequenceId s = *(*probe)->add_sequence(256);
    const auto t = tokens(80, 9);
    const Segment seg{.sequence = s, .start = 0, .tokens = t, .logits = LogitRows::kNone};
    ASSERT_TRUE((*probe)->forward(std::span<const Segment>(&seg, 1)).front().status.ok());
    budget = (*probe)->pool_stats().main_bytes + (*probe)->pool_stats().index_bytes;  // 80 positions
  }
  ASSERT_GT(budget, 0);
  eo.page_budget_bytes = budget;
  auto e = Engine::create(std::make_unique<CpuBackend>(m), m.engram_tables(), eo);
  ASSERT_TRUE(e.ok());
  auto s = Scheduler::create(**e, decode_options(4, DsparkMode{DsparkMode::Kind::kAuto, 0}));
  ASSERT_TRUE(s.ok());
  auto profile = (*s)->profile_shapes();
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.status().message().find("step profile"), std::string::npos) << profile.status().to_string();
  EXPECT_EQ((*e)->pool_stats().sequences, 0);
  EXPECT_EQ((*e)->pool_stats().main_bytes + (*e)->pool_stats().index_bytes, 0);
  GenerationRequest r;
  r.prompt = tokens(10, 21);
  r.max_tokens = 30;
  r.ignore_eos = true;
  const int64_t ticket = (*s)->submit(r);
  (*s)->run_to_completion();
  auto res = (*s)->take(ticket);
  ASSERT_TRUE(res && res->status.ok()) << (res ? res->status.to_string() : "no result");
  EXPECT_EQ(res->ids, run({r}, 1, kOff).ids.front());
}

// auto on the CPU backend (StepShape::switch_cost false: nothing recorded or rebuilt per shape)
// counts every step of its measurement — no warmup draft, no settling runs —, while the options
// still force them (the device backend's defaults).
TEST(DsparkDecode, AutoCountsEveryMeasuredStepWhereSwitchingIsFree) {
  const auto reqs = requests(8, false);
  const auto steps_of = [](const Decoded& d) {
    std::string all;
    for (const std::string& v : d.stats.auto_verdicts) all += v.substr(v.find("steps:") + 6) + "\n";
    return all;
  };
  const Decoded cpu = run(reqs, 4, DsparkMode{DsparkMode::Kind::kAuto, 0});
  ASSERT_FALSE(cpu.stats.auto_verdicts.empty()) << "auto measured";
  const std::string by_backend = steps_of(cpu);
  EXPECT_EQ(by_backend.find_first_of("dp"), std::string::npos) << by_backend;
  SchedulerOptions forced;
  forced.dspark_auto_warmup = 1;
  forced.dspark_auto_settle = 1;
  const Decoded settled = run(reqs, 4, DsparkMode{DsparkMode::Kind::kAuto, 0}, nullptr, false, false, forced);
  ASSERT_FALSE(settled.stats.auto_verdicts.empty()) << "auto measured";
  const std::string with_settling = steps_of(settled);
  EXPECT_NE(with_settling.find('d'), std::string::npos) << with_settling;
}

// auto started from a measured calibration (session 20: the model's dspark_calibration.json):
// the maps decide how many drafts a step verifies — all of them where every slot is near-certain,
// none where every slot is near-hopeless — and never which tokens come out.
TEST(DsparkDecode, AMeasuredCalibrationSetsThePlansNotTheTokens) {
  const auto reqs = requests(6, false);
  const Decoded plain = run(reqs, 4, kOff);
  const auto first_drafting_rows = [](const Decoded& d) {
    for (const DsparkStats::Step& t : d.stats.step_trace)
      if (t.drafted && t.decode_only) return std::pair<int, int>{t.rows, t.seqs};
    return std::pair<int, int>{0, 0};
  };
  std::pair<int, int> rows[2];
  for (int i = 0; i < 2; ++i) {
    SchedulerOptions o;
    o.dspark_calibration.assign(5, SlotMap{0.0, i == 0 ? 8.0 : -8.0});  // σ = 0.9997 or 0.0003
    const Decoded spec = run(reqs, 4, DsparkMode{DsparkMode::Kind::kAuto, 0}, &plain.ids, false, true, o);
    EXPECT_EQ(spec.ids, plain.ids) << (i == 0 ? "near-certain" : "near-hopeless");
    rows[i] = first_drafting_rows(spec);
    ASSERT_GT(rows[i].second, 0) << "auto drafted at least once";
  }
  EXPECT_GT(rows[0].first, 2 * rows[0].second) << "near-certain slots: several drafts a sequence";
  EXPECT_EQ(rows[1].first, rows[1].second) << "near-hopeless slots: no drafts";
}

TEST(DsparkDecode, OwnDraftsGreedyEqualsPlain) {
  const auto reqs = requests(4, false);
  const Decoded plain = run(reqs, 4, kOff);
  const Decoded spec = run(reqs, 4, DsparkMode{DsparkMode::Kind::kFixed, 5});
  EXPECT_EQ(spec.ids, plain.ids);
  EXPECT_GT(spec.stats.verified, 0);
}

TEST(DsparkDecode, RejectionRuleIsReproducibleAndIndependentOfTheBatch) {
  // The rejection rule (runtime/speculative.h; its distribution is tested there by chi-square):
  // drafts drawn from q, each request with its own seeded generator, so a request's tokens do not
  // depend on its neighbours or on how many run together.
  const auto reqs = requests(8, true);
  const DsparkMode k3{DsparkMode::Kind::kFixed, 3};
  const Decoded a = run(reqs, 8, k3, nullptr, true);
  const Decoded b = run(reqs, 1, k3, nullptr, true);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_GT(a.stats.verified, 100);
  EXPECT_GT(a.stats.accepted, 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].ignore_eos) {
      EXPECT_EQ(static_cast<int64_t>(a.ids[i].size()), reqs[i].max_tokens);
    }
  }
}

TEST(DsparkDecode, SeededSamplingEqualsPlain) {
  // Sample-and-match: each row is sampled with the request's own sampler, so the tokens are the
  // plain run's for the same seed.
  const auto reqs = requests(8, true);
  const Decoded plain = run(reqs, 8, kOff);
  const Decoded spec = run(reqs, 3, DsparkMode{DsparkMode::Kind::kFixed, 4}, &plain.ids);
  EXPECT_EQ(spec.ids, plain.ids);
  EXPECT_GT(spec.stats.accepted, 0);
}

// Penalties (repetition over prompt + output, presence, frequency) depend on what was returned
// before each row: speculative output must still be the plain run's, greedy and sampled, and with
// the rejection rule asked for (such requests fall back to sample-and-match: its distributions
// know no prompt). The penalties must also change the output, or the test would prove nothing.
TEST(DsparkDecode, PenalisedRequestsEqualPlain) {
  for (bool sampled : {false, true}) {
    auto reqs = requests(6, sampled);
    const Decoded unpenalised = run(reqs, 6, kOff);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].sampling.repetition_penalty = i % 3 == 2 ? 1.0f : 1.3f;
      reqs[i].sampling.presence_penalty = i % 3 == 1 ? 0.4f : 0.0f;
      reqs[i].sampling.frequency_penalty = i % 3 == 2 ? 0.3f : 0.0f;
    }
    const Decoded plain = run(reqs, 6, kOff);
    EXPECT_NE(plain.ids, unpenalised.ids) << "sampled " << sampled;
    for (bool rejection : {false, true}) {
      const Decoded spec = run(reqs, 4, DsparkMode{DsparkMode::Kind::kFixed, 3}, &plain.ids, rejection);
      EXPECT_EQ(spec.ids, plain.ids) << "sampled " << sampled << ", rejection asked " << rejection;
      EXPECT_GT(spec.stats.accepted, 0);
    }
  }
}

// ---- After the cache tiers: a restored turn, a bounded replay ----------------------------------

struct TierSetup {
  store_test::ScratchDir dir;
  StoreIdentity identity = store_test::test_identity(8);
  std::unique_ptr<SsdStore> store;
  DramPool dram;
  TierSetup() {
    SsdStoreOptions o;
    o.identity = identity;
    auto s = SsdStore::open(dir.path, o);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    store = std::move(*s);
  }
};

// Serves `prompt` through the tiers (recording how its windows came back) and decodes it.
std::vector<int32_t> decode_turn(Engine& e, const ServeTurnTiers& tiers, const std::vector<int32_t>& prompt,
                                 PrefillDepth depth, DsparkMode mode, SwaSource* swa, int64_t* drafted = nullptr) {
  ServeTurnOptions o;
  o.depth = depth;
  o.prefill_chunk = 16;
  o.max_context = 256;
  auto turn = serve_turn(e, tiers, prompt, o);
  EXPECT_TRUE(turn.ok()) << turn.status().to_string();
  if (!turn.ok()) return {};
  *swa = turn->record.swa;
  SchedulerOptions so;
  so.parallel = 1;
  so.max_context = 256;
  so.eos_token_id = 1;
  so.dspark = mode;
  auto s = Scheduler::create(e, so);
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 120;
  r.ignore_eos = true;
  const int64_t t = (*s)->submit_prefilled(r, turn->sequence, turn->last_logits, turn->effective, turn->record.work);
  (*s)->run_to_completion();
  auto res = (*s)->take(t);
  EXPECT_TRUE(res && res->status.ok());
  if (drafted) *drafted = (*s)->dspark_stats().verified;
  return res ? res->ids : std::vector<int32_t>{};
}

TEST(DsparkDecode, EqualsPlainAfterARestoreAndAfterABoundedReplay) {
  TierSetup t;
  auto e = dspark_engine();
  const std::vector<int32_t> first = tokens(40, 21);
  std::vector<int32_t> prompt = first;  // extends the first turn: hits its 5 chunks of 8
  for (int32_t x : tokens(5, 22)) prompt.push_back(x);
  const DsparkMode k3{DsparkMode::Kind::kFixed, 3};
  SwaSource swa{};
  // A cold turn stores the chunks and the windows at 40 (the drafter's rings with them).
  decode_turn(*e, {t.store.get(), &t.dram, t.identity}, first, PrefillDepth::kFull, kOff, &swa);
  ASSERT_TRUE(t.store->flush().ok());
  // Restored: chunks from the store, windows and drafter rings from the DRAM snapshot.
  const ServeTurnTiers warm{t.store.get(), &t.dram, t.identity};
  const auto restored_plain = decode_turn(*e, warm, prompt, PrefillDepth::kBounded, kOff, &swa);
  EXPECT_EQ(swa, SwaSource::kRestored);
  int64_t drafted = 0;
  const auto restored_spec = decode_turn(*e, warm, prompt, PrefillDepth::kBounded, k3, &swa, &drafted);
  EXPECT_EQ(swa, SwaSource::kRestored);
  EXPECT_GT(drafted, 100);  // the restored rings let every step draft
  EXPECT_EQ(restored_spec, restored_plain);
  // Bounded replay (no DRAM tier): the windows and rings are rebuilt; with and without DSpark the same.
  const ServeTurnTiers replay{t.store.get(), nullptr, t.identity};
  const auto replay_plain = decode_turn(*e, replay, prompt, PrefillDepth::kBounded, kOff, &swa);
  EXPECT_EQ(swa, SwaSource::kReplayedBounded);
  const auto replay_spec = decode_turn(*e, replay, prompt, PrefillDepth::kBounded, k3, &swa, &drafted);
  EXPECT_GT(drafted, 100);
  EXPECT_EQ(replay_spec, replay_plain);
}

// ---- On the golden fixture: against the independent reference's own greedy run ---------------

// The golden v41-tiny-f32 backbone (release names) with a random drafter beside it in a second
// shard (float32, from Model::create_random of the same config), in a fresh directory.
std::string golden_with_drafter() {
  const std::string src = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32/official";
  const std::string dir = ::testing::TempDir() + "dspark-golden";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/model.safetensors", dir + "/backbone.safetensors");
  std::filesystem::copy_file(src + "/tokenizer.json", dir + "/tokenizer.json");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  nlohmann::json& tc = config["text_config"];
  tc["num_nextn_predict_layers"] = 3;
  tc["dspark_markov_rank"] = 8;
  tc["dspark_n_routed_experts"] = 4;
  tc["dspark_num_experts_per_tok"] = 2;
  std::ofstream(dir + "/config.json") << config.dump();
  auto cfg = load_model_config(dir);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto random = Model::create_random(*cfg, 99);
  EXPECT_TRUE(random.ok()) << random.status().to_string();
  const DrafterWeights& w = *(*random)->drafter();
  // Every drafter tensor as float32, release names.
  std::vector<std::pair<std::string, const std::vector<float>*>> named;
  for (int st = 0; st < w.shape.stages; ++st) {
    const std::string p = "mtp." + std::to_string(st) + ".";
    const LayerWeights& L = w.stages[st];
    for (const AttentionTensor& e : attention_tensors(*cfg, w.shape.stage_info(*cfg, st)))
      if (e.size > 0) named.push_back({p + "attn." + e.name, &(L.attn.*e.field)});
    named.push_back({p + "attn_norm.weight", &L.attn_norm});
    named.push_back({p + "ffn_norm.weight", &L.ffn_norm});
    named.push_back({p + "hc_attn_fn", &L.hc_attn_fn});
    named.push_back({p + "hc_attn_base", &L.hc_attn_base});
    named.push_back({p + "hc_attn_scale", &L.hc_attn_scale});
    named.push_back({p + "hc_ffn_fn", &L.hc_ffn_fn});
    named.push_back({p + "hc_ffn_base", &L.hc_ffn_base});
    named.push_back({p + "hc_ffn_scale", &L.hc_ffn_scale});
    named.push_back({p + "ffn.gate.weight", &L.gate});
    named.push_back({p + "ffn.gate.bias", &L.gate_bias});
    for (size_t j = 0; j < L.experts.size(); ++j) {
      const std::string e = p + "ffn.experts." + std::to_string(j) + ".";
      named.push_back({e + "w1.weight", &L.experts[j].w1.f32});
      named.push_back({e + "w3.weight", &L.experts[j].w3.f32});
      named.push_back({e + "w2.weight", &L.experts[j].w2.f32});
    }
    named.push_back({p + "ffn.shared_experts.w1.weight", &L.shared.w1.f32});
    named.push_back({p + "ffn.shared_experts.w3.weight", &L.shared.w3.f32});
    named.push_back({p + "ffn.shared_experts.w2.weight", &L.shared.w2.f32});
  }
  named.push_back({"mtp.0.main_proj.weight", &w.main_proj.f32});
  named.push_back({"mtp.0.main_norm.weight", &w.main_norm});
  named.push_back({"mtp.2.norm.weight", &w.norm});
  named.push_back({"mtp.2.markov_head.embed.weight", &w.markov_embed});
  named.push_back({"mtp.2.markov_head.head.weight", &w.markov_head});
  named.push_back({"mtp.2.confidence_head.proj.weight", &w.confidence});
  std::vector<TensorView> views;
  nlohmann::json index;
  for (const auto& [name, v] : named) {
    TensorView t;
    t.name = name;
    t.shape = {static_cast<int64_t>(v->size())};
    t.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v->data()), v->size() * 4);
    views.push_back(std::move(t));
    index["weight_map"][name] = "drafter.safetensors";
  }
  EXPECT_TRUE(write_safetensors(dir + "/drafter.safetensors", views).ok());
  // The backbone's names from its header.
  std::ifstream f(dir + "/backbone.safetensors", std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, ' ');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const nlohmann::json entries = nlohmann::json::parse(header);
  for (const auto& [name, _] : entries.items())
    if (name != "__metadata__") index["weight_map"][name] = "backbone.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump();
  return dir;
}

TEST(DsparkGolden, SpeculativeGreedyEqualsTheReferencesGreedyRun) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string dir = golden_with_drafter();
  ModelLoadOptions lo;
  lo.threads = 1;
  auto model = Model::load(dir, lo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_NE((*model)->drafter(), nullptr);
  testing::GoldenFile golden(std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32/golden.safetensors");
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (int s = 0; s < 4; ++s) {
    GenerationRequest r;
    for (int64_t id : golden.get("s" + std::to_string(s) + ".input_ids").i64) r.prompt.push_back(int32_t(id));
    std::vector<int32_t> g;
    for (int64_t id : golden.get("s" + std::to_string(s) + ".generated").i64) g.push_back(int32_t(id));
    r.max_tokens = static_cast<int64_t>(g.size());
    r.ignore_eos = true;
    reqs.push_back(r);
    want.push_back(g);
  }
  for (int parallel : {1, 4}) {
    // 0: auto (its measured switch drafts at least while measuring); −1: auto after the start-up
    // profile of its step shapes (Scheduler::profile_shapes), which must change no token; −2 / −3:
    // the same with measured acceptance rates of 0 / 0.7 a slot, through the start-up prediction
    // (plain without a measurement where it predicts a clear loss, else measuring as usual).
    for (int k : {1, 3, 5, 0, -1, -2, -3}) {
      EngineOptions eo;
      eo.dspark = true;
      eo.rollback_tokens = 5;
      auto e = Engine::create(std::make_unique<CpuBackend>(**model), (*model)->engram_tables(), eo);
      ASSERT_TRUE(e.ok());
      SchedulerOptions o;
      o.parallel = parallel;
      o.max_context = 256;
      o.dspark = k > 0 ? DsparkMode{DsparkMode::Kind::kFixed, k} : DsparkMode{DsparkMode::Kind::kAuto, 0};
      if (k < -1) o.dspark_calibration.assign(5, SlotMap{1.0, 0.0, k == -2 ? 0.0 : 0.7});
      // Drafts right at 70 % of the slots (the reference's own continuation), so accepted and
      // rejected blocks alternate.
      std::mt19937 coin(k);
      o.draft_override = [&, truth = testing::truth_drafts(reqs, want, coin, 70)](
                             std::span<const int32_t> history, int32_t anchor, DraftBlock& block) {
        truth(history, anchor, block);
        // Auto verifies only what its planner keeps, and the random drafter is not confident:
        // confident slots make it verify while it measures.
        if (k <= 0) std::fill(block.confidence.begin(), block.confidence.end(), 8.0f);
      };
      auto sch = Scheduler::create(**e, o);
      ASSERT_TRUE(sch.ok());
      if (k < 0) ASSERT_TRUE((*sch)->profile_shapes().ok());
      const bool predicted_loss = k < -1 && (*sch)->predicted_draft_speedup(parallel) < AutoDraftSwitch::kPredictedLoss;
      std::vector<int64_t> tickets;
      for (const auto& r : reqs) tickets.push_back((*sch)->submit(r));
      (*sch)->run_to_completion();
      for (size_t r = 0; r < reqs.size(); ++r) {
        auto res = (*sch)->take(tickets[r]);
        ASSERT_TRUE(res && res->status.ok());
        EXPECT_EQ(res->ids, want[r]) << "sequence " << r << " parallel " << parallel << " K " << k;
      }
      const DsparkStats& st = (*sch)->dspark_stats();
      // Which way the prediction goes on this tiny model depends on the machine's step times.
      if (predicted_loss) EXPECT_EQ(st.drafting_steps, 0) << "a predicted clear loss drafts nothing, K " << k;
      else EXPECT_GT(st.verified, 0) << "K " << k;
      if (k > 0) {  // auto drafts for as long as its timing says it pays: machine-dependent
        EXPECT_GT(st.accepted, 0);
        EXPECT_LT(st.accepted, st.verified);
      }
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsv41
