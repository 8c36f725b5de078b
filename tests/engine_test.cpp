// The engine against the simple path (one sequence at a time): batched forwards of many sequences,
// rejected segments, fork, rollback, window snapshots and windows restarted at a replay start.
// Issue 9 items 1, 3, 4, 5. A random-weight model with a ratio-2 and a ratio-1 kv source, Engram,
// window 5 and pages of 2 records, so prompts cross compressor groups, windows and pages often.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

const Model& test_model() { return testing::engine_test_model(); }

std::unique_ptr<Engine> make_engine(const EngineOptions& options = {}) {
  EngineOptions o = options;
  if (o.rows_per_page == 256) o.rows_per_page = 2;
  auto e = Engine::create(std::make_unique<CpuBackend>(test_model()), test_model().engram_tables(), o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

std::vector<int32_t> random_tokens(int n, uint32_t seed) { return testing::test_tokens(n, seed); }

std::vector<float> copy_logits(const SegmentResult& r, int64_t V) {
  EXPECT_TRUE(r.status.ok()) << r.status.to_string();
  if (!r.status.ok()) return {};
  return std::vector<float>(r.logits, r.logits + r.logit_rows * V);
}

// Whether one segment of `tokens` is admitted and runs.
bool run_ok(Engine& e, SequenceId id, const std::vector<int32_t>& tokens) {
  Segment s{id, *e.length(id), tokens, LogitRows::kLast};
  return e.forward(std::span<const Segment>(&s, 1)).front().status.ok();
}

// Runs one segment alone; returns its logits (all rows or the last).
std::vector<float> run(Engine& e, SequenceId id, const std::vector<int32_t>& tokens, LogitRows rows = LogitRows::kLast) {
  Segment s{id, *e.length(id), tokens, rows};
  return copy_logits(e.forward(std::span<const Segment>(&s, 1)).front(), e.config().vocab_size);
}

// Logits of every step of: prefill `prompt` (chunks of `chunk`), then decode each of `decode`.
std::vector<std::vector<float>> solo(const std::vector<int32_t>& prompt, int chunk,
                                     const std::vector<int32_t>& decode) {
  auto e = make_engine();
  SequenceId id = *e->add_sequence(256);
  std::vector<std::vector<float>> out;
  for (size_t s = 0; s < prompt.size(); s += chunk) {
    const size_t n = std::min<size_t>(chunk, prompt.size() - s);
    out.push_back(run(*e, id, std::vector<int32_t>(prompt.begin() + s, prompt.begin() + s + n)));
  }
  for (int32_t t : decode) out.push_back(run(*e, id, {t}));
  return out;
}

TEST(Engine, BatchOfManySequencesGivesTheSameBitsAsEachAlone) {
  const int V = 89;
  const std::vector<int> prompt_len = {1, 7, 12, 23};
  std::vector<std::vector<int32_t>> prompts, decodes;
  std::vector<std::vector<std::vector<float>>> want;
  for (size_t i = 0; i < prompt_len.size(); ++i) {
    prompts.push_back(random_tokens(prompt_len[i], 100 + i));
    decodes.push_back(random_tokens(6, 200 + i));
    want.push_back(solo(prompts[i], 1000, decodes[i]));
  }
  auto e = make_engine();
  std::vector<SequenceId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(*e->add_sequence(256));
  // One batch: every prompt at once.
  std::vector<Segment> segs;
  for (size_t i = 0; i < prompts.size(); ++i) segs.push_back({ids[i], 0, prompts[i], LogitRows::kLast});
  const auto& first = e->forward(segs);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(copy_logits(first[i], V), want[i][0]) << "prefill " << i;
  // Decode steps of all sequences together.
  for (int step = 0; step < 6; ++step) {
    segs.clear();
    for (size_t i = 0; i < prompts.size(); ++i)
      segs.push_back({ids[i], *e->length(ids[i]), std::span<const int32_t>(&decodes[i][step], 1), LogitRows::kLast});
    const auto& r = e->forward(segs);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(copy_logits(r[i], V), want[i][1 + step]) << "sequence " << i << " step " << step;
  }
}

TEST(Engine, MixedPrefillChunkAndDecodesInOneStep) {
  const int V = 89;
  const auto long_prompt = random_tokens(17, 7);
  const auto short_prompt = random_tokens(4, 8);
  const auto next = random_tokens(3, 9);
  // Alone: the long prompt in chunks of 9 and 8, the short one then three decodes.
  auto want_long = solo(long_prompt, 9, {});
  auto want_short = solo(short_prompt, 100, next);
  auto e = make_engine();
  const SequenceId a = *e->add_sequence(64), b = *e->add_sequence(64);
  run(*e, b, short_prompt);
  std::vector<int32_t> c1(long_prompt.begin(), long_prompt.begin() + 9), c2(long_prompt.begin() + 9, long_prompt.end());
  std::vector<Segment> segs = {{a, 0, c1, LogitRows::kLast}, {b, 4, std::span<const int32_t>(&next[0], 1)}};
  auto r = e->forward(segs);
  EXPECT_EQ(copy_logits(r[0], V), want_long[0]);
  EXPECT_EQ(copy_logits(r[1], V), want_short[1]);
  segs = {{b, 5, std::span<const int32_t>(&next[1], 1)}, {a, 9, c2, LogitRows::kLast}};
  r = e->forward(segs);
  EXPECT_EQ(copy_logits(r[0], V), want_short[2]);
  EXPECT_EQ(copy_logits(r[1], V), want_long[1]);
}

TEST(Engine, RejectedSegmentsNameTheirSequenceAndTheRestRuns) {
  const int V = 89;
  const auto good = random_tokens(6, 31);
  const auto want = solo(good, 100, {});
  auto e = make_engine(EngineOptions{});
  const SequenceId s1 = *e->add_sequence(8), s2 = *e->add_sequence(8), s3 = *e->add_sequence(8);
  const std::vector<int32_t> bad_id = {3, 89}, too_long = random_tokens(9, 1), one = {5};
  std::vector<Segment> segs = {
      {s1, 0, bad_id},   // token id outside the vocabulary
      {s2, 3, one},      // wrong start
      {999, 0, one},     // unknown sequence
      {s3, 0, good},     // fine
      {s3, 0, one},      // same sequence twice
      {s2, 0, too_long}, // beyond the context
      {s2, 0, {}},       // no tokens
  };
  const auto& r = e->forward(segs);
  EXPECT_NE(r[0].status.message().find("sequence " + std::to_string(s1)), std::string::npos) << r[0].status.message();
  EXPECT_NE(r[0].status.message().find("89"), std::string::npos);
  EXPECT_NE(r[1].status.message().find("starts at position 3"), std::string::npos) << r[1].status.message();
  EXPECT_EQ(r[2].status.kind(), ErrorKind::kNotFound);
  EXPECT_EQ(copy_logits(r[3], V), want[0]);
  EXPECT_NE(r[4].status.message().find("twice"), std::string::npos) << r[4].status.message();
  EXPECT_EQ(r[5].status.kind(), ErrorKind::kOutOfRange);
  EXPECT_FALSE(r[6].status.ok());
  // Rejected segments changed nothing.
  EXPECT_EQ(*e->length(s1), 0);
  EXPECT_EQ(*e->length(s2), 0);
  EXPECT_EQ(*e->length(s3), 6);
}

TEST(Engine, PageBudgetRejectsWhatDoesNotFitBeforeAnyCompute) {
  EngineOptions o;
  o.rows_per_page = 2;
  // Pages of 2 records: main 2 × 24 B... the budget fits a few pages only.
  auto probe = make_engine(o);
  const SequenceId p = *probe->add_sequence(64);
  run(*probe, p, random_tokens(8, 3));
  const int64_t eight_tokens = probe->pool_stats().main_bytes + probe->pool_stats().index_bytes;
  ASSERT_GT(eight_tokens, 0);
  o.page_budget_bytes = eight_tokens;
  auto e = make_engine(o);
  const SequenceId a = *e->add_sequence(64), b = *e->add_sequence(64);
  const auto t8 = random_tokens(8, 3), t12 = random_tokens(12, 4);
  std::vector<Segment> segs = {{a, 0, t8}, {b, 0, t12}};
  const auto& r = e->forward(segs);
  EXPECT_TRUE(r[0].status.ok()) << r[0].status.to_string();
  EXPECT_EQ(r[1].status.kind(), ErrorKind::kOutOfRange);
  EXPECT_NE(r[1].status.message().find("budget"), std::string::npos) << r[1].status.message();
  EXPECT_EQ(*e->length(b), 0);
  EXPECT_LE(e->pool_stats().main_bytes + e->pool_stats().index_bytes, eight_tokens);
}

// A backend that can hold only so many cache bytes (a device's memory) caps the engine's budget:
// the caller's when smaller, else the backend's, and an unlimited caller gets the backend's.
TEST(Engine, PageBudgetIsCappedByWhatTheBackendCanHold) {
  struct Holding : CpuBackend {
    int64_t capacity;
    Holding(const Model& m, int64_t c) : CpuBackend(m), capacity(c) {}
    int64_t cache_capacity_bytes() const override { return capacity; }
  };
  const auto budget = [](int64_t asked, int64_t capacity) {
    EngineOptions o;
    o.page_budget_bytes = asked;
    auto e = Engine::create(std::make_unique<Holding>(test_model(), capacity), test_model().engram_tables(), o);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? (*e)->pool_stats().budget_bytes : -1;
  };
  EXPECT_EQ(budget(0, 0), 0);
  EXPECT_EQ(budget(5000, 0), 5000);
  EXPECT_EQ(budget(0, 7000), 7000);
  EXPECT_EQ(budget(5000, 7000), 5000);
  EXPECT_EQ(budget(9000, 7000), 7000);
}

TEST(Engine, ForkSharesFullPagesAndForksContinueIndependently) {
  const int V = 89;
  const auto prompt = random_tokens(21, 41);
  const auto xa = random_tokens(5, 42), xb = random_tokens(5, 43);
  std::vector<int32_t> full_a = prompt, full_b = prompt;
  full_a.insert(full_a.end(), xa.begin(), xa.end());
  full_b.insert(full_b.end(), xb.begin(), xb.end());
  const auto want_a = solo(prompt, 100, xa), want_b = solo(prompt, 100, xb);
  auto e = make_engine();
  const SequenceId a = *e->add_sequence(64);
  run(*e, a, prompt);
  const int64_t before = e->pool_stats().main_bytes + e->pool_stats().index_bytes;
  const SequenceId b = *e->fork(a);
  EXPECT_EQ(e->pool_stats().main_bytes + e->pool_stats().index_bytes, before) << "a fork copies no page";
  for (int i = 0; i < 5; ++i) {
    std::vector<Segment> segs = {{a, *e->length(a), std::span<const int32_t>(&xa[i], 1)},
                                 {b, *e->length(b), std::span<const int32_t>(&xb[i], 1)}};
    const auto& r = e->forward(segs);
    EXPECT_EQ(copy_logits(r[0], V), want_a[1 + i]) << i;
    EXPECT_EQ(copy_logits(r[1], V), want_b[1 + i]) << i;
  }
  // Full pages of the shared prefix are still shared.
  EXPECT_GT(e->cache(b)->kv_source(1)->main.shared_pages(), 0);
  ASSERT_TRUE(e->remove_sequence(a).ok());
  EXPECT_EQ(e->cache(b)->kv_source(1)->main.shared_pages(), 0);
  EXPECT_EQ(std::vector<int32_t>(e->tokens(b)->begin(), e->tokens(b)->end()), full_b);
}

// Uninterrupted: prompt, then `keep`; interrupted: prompt, then `drafts` (one segment or one by
// one), rolled back to `keep` of them, then `after`. Logits of `after` must be the same bits.
void expect_rollback_exact(int prompt_len, int accepted, int drafted, bool one_segment) {
  const auto prompt = random_tokens(prompt_len, 50 + prompt_len);
  const auto drafts = random_tokens(drafted, 60 + drafted);
  const auto after = random_tokens(4, 70);
  std::vector<int32_t> kept(drafts.begin(), drafts.begin() + accepted);
  kept.insert(kept.end(), after.begin(), after.end());
  const auto want = solo(prompt, 100, kept);
  EngineOptions o;
  o.rollback_tokens = 6;
  auto e = make_engine(o);
  const SequenceId id = *e->add_sequence(64);
  run(*e, id, prompt);
  if (one_segment) {
    run(*e, id, drafts, LogitRows::kAll);
  } else {
    for (int32_t t : drafts) run(*e, id, {t});
  }
  ASSERT_TRUE(e->rollback(id, drafted - accepted).ok());
  EXPECT_EQ(*e->length(id), prompt_len + accepted);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(run(*e, id, {after[i]}), want[1 + accepted + i])
        << "prompt " << prompt_len << " accepted " << accepted << "/" << drafted << " step " << i;
}

TEST(Engine, RollbackContinuesBitIdentically) {
  for (int prompt_len : {5, 6, 9, 12})   // odd and even, across groups and pages
    for (int drafted : {1, 3, 6})
      for (int accepted = 0; accepted <= drafted; accepted += 2) {
        expect_rollback_exact(prompt_len, accepted, drafted, true);
        expect_rollback_exact(prompt_len, accepted, drafted, false);
      }
}

TEST(Engine, RollbackBeyondTheLimitIsRefused) {
  EngineOptions o;
  o.rollback_tokens = 2;
  auto e = make_engine(o);
  const SequenceId id = *e->add_sequence(64);
  run(*e, id, random_tokens(7, 1));
  EXPECT_FALSE(e->rollback(id, 3).ok());
  EXPECT_EQ(*e->length(id), 7);
  EXPECT_TRUE(e->rollback(id, 2).ok());
  EXPECT_EQ(*e->length(id), 5);
}

TEST(Engine, SnapshotRestoredOnTheSamePrefixContinuesBitIdentically) {
  for (int n : {1, 4, 7, 10, 13}) {  // odd and even, before and after the window fills, across pages
    const auto prompt = random_tokens(n, 80 + n);
    const auto next = random_tokens(5, 90);
    EngineOptions o;
    o.rollback_tokens = 3;
    auto e = make_engine(o);
    const SequenceId a = *e->add_sequence(64);
    run(*e, a, prompt);
    auto snap = e->snapshot(a);
    ASSERT_TRUE(snap.ok()) << snap.status().to_string();
    const SequenceId b = *e->fork_prefix(a, n);  // global KV only
    ASSERT_TRUE(e->restore(b, *snap).ok());
    for (int i = 0; i < 5; ++i) {
      std::vector<Segment> segs = {{a, n + i, std::span<const int32_t>(&next[i], 1)},
                                   {b, n + i, std::span<const int32_t>(&next[i], 1)}};
      const auto& r = e->forward(segs);
      EXPECT_EQ(copy_logits(r[0], 89), copy_logits(r[1], 89)) << "n " << n << " step " << i;
    }
    // The restored sequence can roll back like the original.
    EXPECT_TRUE(e->rollback(b, 3).ok());
  }
}

TEST(Engine, DamagedOrForeignSnapshotsAreRefusedAndChangeNothing) {
  auto e = make_engine();
  const SequenceId a = *e->add_sequence(64);
  run(*e, a, random_tokens(9, 5));
  const std::string snap = *e->snapshot(a);
  const SequenceId shorter = *e->fork_prefix(a, 8);
  const Status wrong_prefix = e->restore(shorter, snap);
  EXPECT_FALSE(wrong_prefix.ok());
  const SequenceId b = *e->fork_prefix(a, 9);
  for (size_t at : {size_t{0}, size_t{9}, snap.size() / 2, snap.size() - 1}) {
    std::string bad = snap;
    bad[at] ^= 0x20;
    EXPECT_EQ(e->restore(b, bad).kind(), ErrorKind::kCorrupt) << at;
  }
  EXPECT_FALSE(e->restore(b, snap.substr(0, snap.size() - 9)).ok());
  EXPECT_FALSE(e->restore(b, "").ok());
  // Another model: a snapshot carries the fingerprint.
  EngineOptions other;
  other.model_fingerprint = 1234;
  auto e2 = make_engine(other);
  const SequenceId c = *e2->add_sequence(64);
  run(*e2, c, random_tokens(9, 5));
  const SequenceId d = *e2->fork_prefix(c, 9);
  EXPECT_NE(e2->restore(d, snap).message().find("another model"), std::string::npos);
  // Nothing changed: b still restores and runs.
  EXPECT_TRUE(e->restore(b, snap).ok());
}

TEST(Engine, ReplayFromPositionZeroRebuildsTheExactWindowsWithoutTouchingGlobalRows) {
  for (int n : {7, 8, 11}) {
    const auto prompt = random_tokens(n, 300 + n);
    const auto next = random_tokens(4, 301);
    auto e = make_engine();
    const SequenceId a = *e->add_sequence(64);
    run(*e, a, prompt);
    const SequenceId b = *e->fork_prefix(a, n);  // windows and the pending group dropped
    const int64_t pool_before = e->pool_stats().main_bytes + e->pool_stats().index_bytes;
    Segment replay{b, 0, prompt, LogitRows::kNone, true};
    ASSERT_TRUE(e->forward(std::span<const Segment>(&replay, 1)).front().status.ok());
    EXPECT_EQ(*e->length(b), n);
    // The write floor: no global row was rewritten, so no shared page was copied.
    EXPECT_EQ(e->pool_stats().main_bytes + e->pool_stats().index_bytes, pool_before);
    for (int i = 0; i < 4; ++i) {
      std::vector<Segment> segs = {{a, n + i, std::span<const int32_t>(&next[i], 1)},
                                   {b, n + i, std::span<const int32_t>(&next[i], 1)}};
      const auto& r = e->forward(segs);
      EXPECT_EQ(copy_logits(r[0], 89), copy_logits(r[1], 89)) << "n " << n << " step " << i;
    }
  }
}

TEST(Engine, ReplayNeedsTheSequencesOwnTokens) {
  auto e = make_engine();
  const SequenceId a = *e->add_sequence(64);
  const auto prompt = random_tokens(9, 3);
  run(*e, a, prompt);
  const SequenceId b = *e->fork_prefix(a, 9);
  std::vector<int32_t> tail(prompt.begin() + 4, prompt.end()), wrong = tail;
  wrong[0] = (wrong[0] + 1) % 89;
  Segment bad{b, 4, wrong, LogitRows::kNone, true};
  EXPECT_FALSE(e->forward(std::span<const Segment>(&bad, 1)).front().status.ok());
  Segment past_end{b, 7, std::span<const int32_t>(tail).subspan(3, 2), LogitRows::kNone, true};
  past_end.tokens = std::span<const int32_t>(prompt).subspan(7, 2);
  std::vector<int32_t> beyond(prompt.begin() + 7, prompt.end());
  beyond.push_back(4);
  past_end.tokens = beyond;  // positions 7..9: the sequence holds 0..8
  EXPECT_FALSE(e->forward(std::span<const Segment>(&past_end, 1)).front().status.ok());
  // From 9 the ratio-2 source's pending group (position 8) cannot be rebuilt.
  Segment gap{b, 9, {}, LogitRows::kNone, true};
  EXPECT_FALSE(e->forward(std::span<const Segment>(&gap, 1)).front().status.ok());
  Segment ok{b, 4, tail, LogitRows::kLast, true};
  EXPECT_TRUE(e->forward(std::span<const Segment>(&ok, 1)).front().status.ok());
}

TEST(Engine, TwoSequencesWithDifferentContextsAndRemoval) {
  auto e = make_engine();
  EXPECT_FALSE(e->add_sequence(0).ok());
  EXPECT_FALSE(e->add_sequence(int64_t{1} << 40).ok());
  const SequenceId a = *e->add_sequence(4);
  EXPECT_TRUE(e->remove_sequence(a).ok());
  EXPECT_FALSE(e->remove_sequence(a).ok());
  EXPECT_FALSE(e->length(a).ok());
}

TEST(Engine, ForksTakeTheirOwnContextAndTheLongestLivePrefixIsFound) {
  auto e = make_engine();
  const std::vector<int32_t> prompt = testing::test_tokens(10, 31);
  const SequenceId a = *e->add_sequence(10);
  run(*e, a, prompt);
  EXPECT_FALSE(run_ok(*e, a, {5})) << "a holds its whole context";
  const SequenceId b = *e->fork(a, 20);
  EXPECT_EQ(e->cache(b)->max_context(), 20);
  EXPECT_TRUE(run_ok(*e, b, {5, 6, 7}));
  const SequenceId c = *e->fork_prefix(a, 6, 8);
  EXPECT_EQ(*e->length(c), 6);
  EXPECT_FALSE(e->fork(a, 9).ok()) << "below the 10 positions held";
  EXPECT_FALSE(e->fork_prefix(a, 6, int64_t{1} << 40).ok()) << "beyond max_position_embeddings";
  std::vector<int32_t> query = prompt;
  query.push_back(5);
  query.push_back(9);
  const Engine::LivePrefix live = e->longest_live_prefix(query);
  EXPECT_EQ(live.sequence, b);  // b holds prompt + 5, 6, 7: 11 in common
  EXPECT_EQ(live.length, 11);
  const Engine::LivePrefix one = e->longest_live_prefix(std::vector<int32_t>{prompt[0]});
  EXPECT_EQ(one.length, 1);
  EXPECT_EQ(one.sequence, a) << "ties go to the lowest id";
  EXPECT_EQ(e->longest_live_prefix(std::vector<int32_t>{}).sequence, -1);
}

}  // namespace
}  // namespace dsv41
