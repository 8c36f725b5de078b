// The engine's new paths on the golden fixture (v41-tiny-f32: 12 layers, decoder from layer 6,
// window 8, Engram) against a cold, full-depth, single-sequence run of the same prompt: exact
// prefill (cold, and after a hit without window state), rollback, snapshot restore onto a
// global-only prefix, and an SSD-style export/import of the prefix's records. Each must give the
// cold run's logits bit for bit (the CPU kernels' rows do not depend on the other rows); and the
// cold run itself is the one the golden tests check against the reference.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "runtime/prefill.h"
#include "runtime/serve_turn.h"
#include "store/store_test_util.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

class GoldenPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
    if (!std::filesystem::exists(dir_)) GTEST_SKIP() << dir_ << " is absent (a plain clone has no ../shared)";
    testing::GoldenFile g(dir_ + "/golden.safetensors");
    const auto ids = g.get("s3.input_ids").i64;  // 97 tokens
    prompt_.assign(ids.begin(), ids.end());
    auto m = Model::load(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  std::unique_ptr<Engine> engine(int64_t rollback = 0) {
    EngineOptions o;
    o.rows_per_page = 4;
    o.rollback_tokens = rollback;
    auto e = Engine::create(std::make_unique<CpuBackend>(*model_), model_->engram_tables(), o);
    EXPECT_TRUE(e.ok());
    return std::move(*e);
  }
  // Logits of every decode step of `next` after the sequence's current state.
  std::vector<std::vector<float>> decode(Engine& e, SequenceId id, const std::vector<int32_t>& next) {
    std::vector<std::vector<float>> out;
    for (int32_t t : next) {
      Segment s{id, *e.length(id), std::span<const int32_t>(&t, 1), LogitRows::kLast};
      const SegmentResult& r = e.forward(std::span<const Segment>(&s, 1)).front();
      EXPECT_TRUE(r.status.ok()) << r.status.to_string();
      if (r.status.ok()) out.emplace_back(r.logits, r.logits + model_->vocab_size());
    }
    return out;
  }
  // The cold run: the whole prompt at full depth in one sequence, then `next`.
  std::vector<std::vector<float>> cold(const std::vector<int32_t>& next) {
    auto e = engine();
    const SequenceId id = *e->add_sequence(160);
    EXPECT_TRUE(prefill(*e, id, prompt_, PrefillOptions{PrefillDepth::kFull, 0, true}).ok());
    return decode(*e, id, next);
  }
  std::string dir_;
  std::vector<int32_t> prompt_;
  std::unique_ptr<Model> model_;
  const std::vector<int32_t> next_ = {100, 7, 300, 42, 5};
};

TEST_F(GoldenPaths, ExactPrefillColdAndAfterAHit) {
  const auto want = cold(next_);
  for (int64_t hit : {0, 33, 48, 64}) {
    auto e = engine();
    SequenceId id = *e->add_sequence(160);
    bool windows = true;
    if (hit > 0) {
      ASSERT_TRUE(prefill(*e, id, std::span<const int32_t>(prompt_).subspan(0, hit), {PrefillDepth::kFull, 0, true}).ok());
      const SequenceId b = *e->fork_prefix(id, hit);
      ASSERT_TRUE(e->remove_sequence(id).ok());
      id = b;
      windows = false;
    }
    auto p = prefill(*e, id, prompt_, PrefillOptions{PrefillDepth::kExact, 16, windows});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->effective, PrefillDepth::kExact) << hit;
    EXPECT_EQ(decode(*e, id, next_), want) << "hit " << hit;
  }
}

TEST_F(GoldenPaths, RollbackAndSnapshotRestore) {
  const auto want = cold(next_);
  // Rollback: three drafted tokens rejected, then the real continuation.
  {
    auto e = engine(4);
    const SequenceId id = *e->add_sequence(160);
    ASSERT_TRUE(prefill(*e, id, prompt_, {PrefillDepth::kFull, 0, true}).ok());
    decode(*e, id, {9, 8, 7});
    ASSERT_TRUE(e->rollback(id, 3).ok());
    EXPECT_EQ(decode(*e, id, next_), want);
  }
  // Snapshot at the prompt end restored onto the prompt's global KV only.
  {
    auto e = engine();
    const SequenceId a = *e->add_sequence(160);
    ASSERT_TRUE(prefill(*e, a, prompt_, {PrefillDepth::kFull, 0, true}).ok());
    const std::string snap = *e->snapshot(a);
    const SequenceId b = *e->fork_prefix(a, static_cast<int64_t>(prompt_.size()));
    ASSERT_TRUE(e->restore(b, snap).ok());
    EXPECT_EQ(decode(*e, b, next_), want);
  }
}

TEST_F(GoldenPaths, ExportedRecordsImportedIntoAFreshSequence) {
  std::vector<int32_t> longer = prompt_;
  longer.insert(longer.end(), {11, 22, 33, 44, 55, 66, 77, 88});
  // Cold: the longer prompt at full depth.
  auto c = engine();
  const SequenceId cid = *c->add_sequence(160);
  ASSERT_TRUE(prefill(*c, cid, longer, {PrefillDepth::kFull, 0, true}).ok());
  const auto want = decode(*c, cid, next_);
  // The first 96 tokens' records exported in chunks of 32, imported into another engine, then the
  // rest of the prompt at exact depth.
  auto e = engine();
  const SequenceId a = *e->add_sequence(160);
  ASSERT_TRUE(prefill(*e, a, std::span<const int32_t>(prompt_).subspan(0, 96), {PrefillDepth::kFull, 0, true}).ok());
  std::vector<Payload> chunks;
  for (int64_t b = 0; b < 96; b += 32) {
    auto p = e->export_global(a, b, b + 32);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    chunks.push_back(std::move(*p));
  }
  auto f = engine();
  const std::vector<int32_t> hit(prompt_.begin(), prompt_.begin() + 96);
  auto id = f->import_global(160, hit, chunks, 32);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  ASSERT_TRUE(prefill(*f, *id, longer, PrefillOptions{PrefillDepth::kExact, 16, false}).ok());
  EXPECT_EQ(decode(*f, *id, next_), want);
}

// Two turns of a session through the cache tiers (issue 11): turn 1 is served, decodes 7 tokens
// (104 positions = 13 chunks of 8) and ends (end_turn: chunks stored, windows snapshotted). Turn 2
// (turn 1's tokens + 3 new) then continues exactly like the live sequence fed the same tokens —
// forked from the live sequence (engine tier), and in a fresh engine (a second process) from the
// SSD store with the DRAM snapshot restored, and with the windows replayed when there is none.
TEST_F(GoldenPaths, TurnsThroughTheTiersContinueTheLiveSequence) {
  store_test::ScratchDir dir;
  SsdStoreOptions so;
  so.identity = store_test::test_identity(8);
  auto store = SsdStore::open(dir.path, so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  DramPool dram;
  const ServeTurnTiers tiers{store->get(), &dram, *so.identity, true};
  const ServeTurnOptions o{PrefillDepth::kExact, 16, 160, nullptr};
  auto e = engine();
  auto t1 = serve_turn(*e, tiers, prompt_, o);
  ASSERT_TRUE(t1.ok()) << t1.status().to_string();
  decode(*e, t1->sequence, {100, 7, 300, 42, 5, 9, 8});
  ASSERT_EQ(*e->length(t1->sequence), 104);
  ASSERT_TRUE(end_turn(*e, tiers, t1->sequence, o).ok());
  ASSERT_TRUE((*store)->flush().ok());
  std::vector<int32_t> turn2(e->tokens(t1->sequence)->begin(), e->tokens(t1->sequence)->end());
  turn2.insert(turn2.end(), {11, 22, 33});
  // The live continuation.
  const SequenceId live = *e->fork(t1->sequence);
  ASSERT_TRUE(prefill(*e, live, turn2, {PrefillDepth::kFull, 0, true}).ok());
  const auto want = decode(*e, live, next_);
  ASSERT_TRUE(e->remove_sequence(live).ok());  // else the engine tier would fork it (it holds more)
  // Engine tier: the live turn forked.
  auto t2 = serve_turn(*e, tiers, turn2, o);
  ASSERT_TRUE(t2.ok()) << t2.status().to_string();
  EXPECT_EQ(t2->record.hit_tier, HitTier::kEngine);
  EXPECT_EQ(t2->record.global_hit_tokens, 104);
  EXPECT_EQ(decode(*e, t2->sequence, next_), want);
  // A second process: the store's 13 chunks and the DRAM snapshot at 104; then without the pool.
  for (DramPool* pool : {&dram, static_cast<DramPool*>(nullptr)}) {
    auto f = engine();
    const ServeTurnTiers cold_tiers{store->get(), pool, *so.identity, true};
    auto t3 = serve_turn(*f, cold_tiers, turn2, o);
    ASSERT_TRUE(t3.ok()) << t3.status().to_string();
    EXPECT_EQ(t3->record.hit_tier, HitTier::kSsd);
    EXPECT_EQ(t3->record.global_hit_tokens, 104);
    EXPECT_EQ(t3->record.swa, pool ? SwaSource::kRestored : SwaSource::kReplayedExact);
    EXPECT_EQ(decode(*f, t3->sequence, next_), want) << (pool ? "restored" : "replayed");
  }
}

}  // namespace
}  // namespace dsv41
