// Serving a turn from the SSD tier (issue 11 items 4–5): the engine's global KV exported as
// store payloads and imported into a fresh sequence continues bit for bit like a cold prefill
// (exact depth), inconsistent payloads are refused, and serve_turn hits the store on a second
// turn (a new engine and a reopened store, as a second process would), restores a DRAM snapshot
// of exactly the hit position, and never hits under another identity. The random model of
// tests/test_models.h: window 5, a ratio-2 source at layer 1 and a ratio-1 source at layer 3,
// pages of 2 records.
#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_backend.h"
#include "runtime/prefill.h"
#include "runtime/scheduler.h"
#include "runtime/serve_turn.h"
#include "store/store_test_util.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

using store_test::ScratchDir;

std::unique_ptr<Engine> make_engine() { return testing::make_test_engine(); }
std::vector<int32_t> tokens(int n, uint32_t seed) { return testing::test_tokens(n, seed); }

std::span<const int32_t> head(const std::vector<int32_t>& v, int64_t n) {
  return std::span<const int32_t>(v).subspan(0, static_cast<size_t>(n));
}

// Last logits of a cold full-depth prefill of `prompt` in a fresh engine.
std::vector<float> cold_logits(const std::vector<int32_t>& prompt) {
  auto e = make_engine();
  const SequenceId id = *e->add_sequence(128);
  auto p = prefill(*e, id, prompt, PrefillOptions{PrefillDepth::kFull, 0, true});
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? p->last_logits : std::vector<float>{};
}

// Chunks [0, chunks) of `prompt`'s first `filled` tokens, prefilled at full depth, exported.
std::vector<Payload> export_chunks(Engine& e, const std::vector<int32_t>& prompt, int64_t filled, int64_t chunk,
                                   int64_t chunks) {
  const SequenceId id = *e.add_sequence(128);
  EXPECT_TRUE(prefill(e, id, head(prompt, filled), PrefillOptions{PrefillDepth::kFull, 0, true}).ok());
  std::vector<Payload> out;
  for (int64_t i = 0; i < chunks; ++i) {
    auto p = e.export_global(id, i * chunk, (i + 1) * chunk);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    if (p.ok()) out.push_back(std::move(*p));
  }
  EXPECT_TRUE(e.remove_sequence(id).ok());
  return out;
}

TEST(ServeTurn, ExportImportThenExactPrefillEqualsCold) {
  const auto prompt = tokens(37, 5);
  const std::vector<float> cold = cold_logits(prompt);
  // Chunk sizes even (a ratio-2 group never split); hits on both sides of page and group boundaries.
  for (int64_t chunk : {int64_t{2}, int64_t{6}, int64_t{8}}) {
    for (int64_t chunks : {int64_t{1}, int64_t{3}, int64_t{4}}) {
      const int64_t h = chunk * chunks;
      auto e = make_engine();
      const std::vector<Payload> payloads = export_chunks(*e, prompt, std::min<int64_t>(h + 3, 36), chunk, chunks);
      ASSERT_EQ(static_cast<int64_t>(payloads.size()), chunks);
      // Layer 1 (ratio 2): chunk / 2 entries per chunk; layer 3 (ratio 1): chunk entries.
      ASSERT_EQ(payloads[0].parts.size(), 4u);
      EXPECT_EQ(payloads[0].parts[0].count, chunk / 2);
      EXPECT_EQ(payloads[0].parts[2].count, chunk);
      auto id = e->import_global(128, head(prompt, h), payloads, chunk);
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      EXPECT_EQ(*e->length(*id), h);
      // The imported pages hold exactly the exported bytes.
      for (int64_t i = 0; i < chunks; ++i) EXPECT_EQ(*e->export_global(*id, i * chunk, (i + 1) * chunk), payloads[i]);
      auto p = prefill(*e, *id, prompt, PrefillOptions{PrefillDepth::kExact, 4, false});
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      EXPECT_EQ(p->last_logits, cold) << "chunk " << chunk << " hit " << h;
    }
  }
}

TEST(ServeTurn, ImportRefusesInconsistentPayloads) {
  const auto prompt = tokens(20, 6);
  auto e = make_engine();
  const std::vector<Payload> good = export_chunks(*e, prompt, 20, 8, 2);
  ASSERT_EQ(good.size(), 2u);
  const int64_t sequences = e->pool_stats().sequences;
  auto refused = [&](std::vector<Payload> p, const std::string& needle, std::vector<int32_t> toks = {}) {
    if (toks.empty()) toks = std::vector<int32_t>(prompt.begin(), prompt.begin() + 16);
    auto id = e->import_global(128, toks, p, 8);
    EXPECT_FALSE(id.ok()) << needle;
    if (!id.ok()) {
      EXPECT_NE(id.status().message().find(needle), std::string::npos) << id.status().message();
    }
    EXPECT_EQ(e->pool_stats().sequences, sequences);
  };
  auto p = good;
  p[1].parts.pop_back();
  refused(p, "chunk 1 part 3: missing");
  p = good;
  p[0].parts.push_back(p[0].parts[0]);
  refused(p, "chunk 0: 1 parts more");
  p = good;
  p[1].parts[2].count += 1;
  refused(p, "chunk 1 part 2: 9 records");
  p = good;
  p[0].parts[0].bytes.pop_back();
  refused(p, "chunk 0 part 0");
  p = good;
  p[0].parts[1].record_bytes += 4;
  refused(p, "chunk 0 part 1: records of");
  p = good;
  std::swap(p[0].parts[0], p[0].parts[2]);
  refused(p, "chunk 0 part 0: layer 3");
  refused(good, "do not make a prefix", std::vector<int32_t>(prompt.begin(), prompt.begin() + 15));
  auto bad_tokens = std::vector<int32_t>(prompt.begin(), prompt.begin() + 16);
  bad_tokens[3] = 89;
  refused(good, "token 89 at position 3", bad_tokens);
  EXPECT_TRUE(e->import_global(128, head(prompt, 16), good, 8).ok());
}

struct Tiers {
  ScratchDir dir;
  StoreIdentity identity = store_test::test_identity(8);
  std::unique_ptr<SsdStore> store;
  DramPool dram;
  void open() {
    store.reset();
    SsdStoreOptions o;
    o.identity = identity;
    auto s = SsdStore::open(dir.path, o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    store = std::move(*s);
  }
  ServeTurnTiers tiers(bool with_dram) { return {store.get(), with_dram ? &dram : nullptr, identity}; }
};

ServeTurnResult serve(Engine& e, const ServeTurnTiers& t, const std::vector<int32_t>& prompt, PrefillDepth depth) {
  ServeTurnOptions o;
  o.depth = depth;
  o.prefill_chunk = 4;
  o.max_context = 128;
  auto r = serve_turn(e, t, prompt, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  EXPECT_TRUE(e.remove_sequence(r->sequence).ok());
  return std::move(*r);
}

TEST(ServeTurn, SecondTurnHitsTheStoreAndEqualsCold) {
  Tiers t;
  t.open();
  const auto first = tokens(30, 7);
  {
    auto e = make_engine();
    const ServeTurnResult r = serve(*e, t.tiers(false), first, PrefillDepth::kExact);
    EXPECT_EQ(r.record.hit_tier, HitTier::kNone);
    EXPECT_EQ(r.record.swa, SwaSource::kNone);
    EXPECT_EQ(r.record.global_hit_tokens, 0);
    EXPECT_GT(r.record.ssd_written_bytes, 0u);
    EXPECT_EQ(r.last_logits, cold_logits(first));
  }
  ASSERT_TRUE(t.store->flush().ok());
  t.open();  // a second process: a new engine, the store reopened from disk
  auto second = first;
  for (int32_t x : tokens(9, 8)) second.push_back(x);
  auto e = make_engine();
  const ServeTurnResult r = serve(*e, t.tiers(false), second, PrefillDepth::kExact);
  EXPECT_EQ(r.record.hit_tier, HitTier::kSsd);
  EXPECT_EQ(r.record.global_hit_tokens, 24);  // chunks [0, 24) of the 30 shared tokens
  EXPECT_EQ(r.record.swa, SwaSource::kReplayedExact);
  EXPECT_GT(r.record.ssd_read_bytes, 0u);
  EXPECT_GT(r.record.work.replay, 0);
  EXPECT_EQ(r.last_logits, cold_logits(second));
  // Bounded replays the windows of the hit's last w positions only.
  ASSERT_TRUE(t.store->flush().ok());
  const ServeTurnResult b = serve(*e, t.tiers(false), second, PrefillDepth::kBounded);
  EXPECT_EQ(b.record.global_hit_tokens, 32);  // the second turn stored chunk [24, 32)
  EXPECT_EQ(b.record.swa, SwaSource::kReplayedBounded);
  const std::string json = serve_turn_json(r.record);
  for (const char* key : {"\"prompt_tokens\":39", "\"global_hit_tokens\":24", "\"hit_tier\":\"ssd\"",
                          "\"swa\":\"replayed_exact\"", "\"encoder_token_layers\"", "\"decoder_token_layers\"",
                          "\"replay_token_layers\"", "\"full_depth_token_layers\"", "\"ssd_read_bytes\"",
                          "\"ssd_written_bytes\"", "\"lookup_ms\"", "\"load_ms\"", "\"prefill_ms\"", "\"replay_ms\"",
                          "\"encoder_ms\"", "\"decoder_ms\"", "\"store_ms\""})
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  // The prefill's time split: a replay ran, the new positions ran encoder and decoder layers, and
  // the parts add up to no more than the prefill's wall time.
  EXPECT_GT(r.record.replay_ms, 0.0);
  EXPECT_GT(r.record.encoder_ms, 0.0);
  EXPECT_GT(r.record.decoder_ms, 0.0);
  EXPECT_LE(r.record.replay_ms + r.record.encoder_ms + r.record.decoder_ms, r.record.prefill_ms + 1e-6);
}

TEST(ServeTurn, DramSnapshotOfExactlyTheHitIsRestored) {
  Tiers t;
  t.open();
  auto e = make_engine();
  const auto first = tokens(24, 9);  // three whole chunks: the snapshot at 24 is at a chunk end
  serve(*e, t.tiers(true), first, PrefillDepth::kExact);
  ASSERT_TRUE(t.store->flush().ok());
  auto second = first;
  for (int32_t x : tokens(9, 10)) second.push_back(x);
  const ServeTurnResult r = serve(*e, t.tiers(true), second, PrefillDepth::kExact);
  ASSERT_TRUE(t.store->flush().ok());
  EXPECT_EQ(r.record.global_hit_tokens, 24);
  EXPECT_EQ(r.record.swa, SwaSource::kRestored);
  EXPECT_EQ(r.record.work.replay, 0);
  EXPECT_EQ(r.last_logits, cold_logits(second));
  // A hit that ends elsewhere than a snapshot (the pool holds those at 24 and 33) replays.
  auto third = second;
  for (int32_t x : tokens(5, 11)) third.push_back(x);  // 38 tokens: hit 32 (the second turn stored [24, 32))
  const ServeTurnResult q = serve(*e, t.tiers(true), third, PrefillDepth::kExact);
  EXPECT_EQ(q.record.global_hit_tokens, 32);
  EXPECT_EQ(q.record.swa, SwaSource::kReplayedExact);
  EXPECT_EQ(q.last_logits, cold_logits(third));
}

// A turn decodes past a chunk end; end_turn stores the answer's chunk and snapshots the windows
// at the turn's end. The next turn (the first turn's tokens + new ones) hits through the answer,
// restores the windows and continues exactly like the live sequence fed the same new tokens.
TEST(ServeTurn, EndOfTurnStoresTheAnswerAndSnapshotsTheWindows) {
  Tiers t;
  t.open();
  auto e = make_engine();
  const auto prompt = tokens(13, 13);
  ServeTurnOptions o{PrefillDepth::kExact, 4, 128, nullptr};
  auto turn = serve_turn(*e, t.tiers(true), prompt, o);
  ASSERT_TRUE(turn.ok()) << turn.status().to_string();
  const SequenceId id = turn->sequence;
  // Decode 11 tokens: the sequence then holds 24 = three whole chunks of 8.
  for (int32_t x : tokens(11, 14)) {
    Segment s{id, *e->length(id), std::span<const int32_t>(&x, 1), LogitRows::kLast};
    ASSERT_TRUE(e->forward(std::span<const Segment>(&s, 1)).front().status.ok());
  }
  ASSERT_EQ(*e->length(id), 24);
  auto end = end_turn(*e, t.tiers(true), id, o);
  ASSERT_TRUE(end.ok()) << end.status().to_string();
  EXPECT_EQ(end->tokens, 24);
  EXPECT_GT(end->ssd_written_bytes, 0u);  // chunk [8, 24) holds decoded positions
  ASSERT_TRUE(t.store->flush().ok());
  // The live continuation, for reference.
  const std::vector<int32_t> more = tokens(6, 15);
  const SequenceId live = *e->fork(id);
  auto live_p = prefill(*e, live, [&] {
    std::vector<int32_t> all(e->tokens(id)->begin(), e->tokens(id)->end());
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }(), PrefillOptions{PrefillDepth::kFull, 0, true});
  ASSERT_TRUE(live_p.ok());
  std::vector<int32_t> next(e->tokens(id)->begin(), e->tokens(id)->end());
  next.insert(next.end(), more.begin(), more.end());
  ASSERT_TRUE(e->remove_sequence(id).ok());
  const ServeTurnResult r = serve(*e, t.tiers(true), next, PrefillDepth::kExact);
  EXPECT_EQ(r.record.hit_tier, HitTier::kSsd);
  EXPECT_EQ(r.record.global_hit_tokens, 24);
  EXPECT_EQ(r.record.swa, SwaSource::kRestored);
  EXPECT_EQ(r.last_logits, live_p->last_logits);
}

// The engine tier: a live sequence that the prompt extends is forked (nothing loaded, windows
// exact); one it leaves mid-way is cut there (windows replayed); either way the logits are the
// cold ones at exact depth. A longer store hit wins over a shorter live prefix.
TEST(ServeTurn, EngineTierForksALiveSequence) {
  Tiers t;
  t.open();
  auto e = make_engine();
  ServeTurnTiers tiers = t.tiers(false);
  tiers.engine = true;
  const auto first = tokens(21, 16);
  ServeTurnOptions o{PrefillDepth::kExact, 4, 128, nullptr};
  auto a = serve_turn(*e, tiers, first, o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->record.hit_tier, HitTier::kNone);
  auto longer = first;
  for (int32_t x : tokens(7, 17)) longer.push_back(x);
  auto b = serve_turn(*e, tiers, longer, o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->record.hit_tier, HitTier::kEngine);
  EXPECT_EQ(b->record.global_hit_tokens, 21);
  EXPECT_EQ(b->record.swa, SwaSource::kRestored);
  EXPECT_EQ(b->record.ssd_read_bytes, 0u);
  EXPECT_EQ(b->last_logits, cold_logits(longer));
  // Branching off inside the 28-token live sequence at 25: forked at 25, windows replayed.
  auto branch = std::vector<int32_t>(longer.begin(), longer.begin() + 25);
  for (int32_t x : tokens(6, 18)) branch.push_back(x);
  ASSERT_TRUE(e->remove_sequence(a->sequence).ok());
  auto c = serve_turn(*e, tiers, branch, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->record.hit_tier, HitTier::kEngine);
  EXPECT_EQ(c->record.global_hit_tokens, 25);
  EXPECT_EQ(c->record.swa, SwaSource::kReplayedExact);
  EXPECT_EQ(c->last_logits, cold_logits(branch));
  // With only 3 live tokens in common, the store's 24 win.
  ASSERT_TRUE(t.store->flush().ok());
  ASSERT_TRUE(e->remove_sequence(b->sequence).ok());
  ASSERT_TRUE(e->remove_sequence(c->sequence).ok());
  auto other = std::vector<int32_t>(first.begin(), first.begin() + 3);
  auto d0 = serve_turn(*e, tiers, other, o);  // a live 3-token sequence
  ASSERT_TRUE(d0.ok());
  auto d = serve_turn(*e, tiers, longer, o);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->record.hit_tier, HitTier::kSsd);
  EXPECT_EQ(d->record.global_hit_tokens, 24);
  EXPECT_EQ(d->last_logits, cold_logits(longer));
}

TEST(ServeTurn, AnotherIdentityNeverHits) {
  Tiers t;
  t.open();
  auto e = make_engine();
  const auto prompt = tokens(40, 12);
  serve(*e, t.tiers(false), prompt, PrefillDepth::kExact);
  ASSERT_TRUE(t.store->flush().ok());
  EXPECT_EQ(serve(*e, t.tiers(false), prompt, PrefillDepth::kExact).record.global_hit_tokens, 32);
  for (int change = 0; change < 3; ++change) {
    // The same store looked up with another identity's keys (every identity field enters key_0).
    ServeTurnTiers other = t.tiers(false);
    if (change == 0) other.identity.chunk_tokens = 16;
    if (change == 1) other.identity.model_fingerprint[0] ^= 1;
    if (change == 2) other.identity.record_format += 1;
    auto r = serve_turn(*e, other, prompt, ServeTurnOptions{PrefillDepth::kExact, 4, 128, nullptr});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->record.global_hit_tokens, 0) << "change " << change;
    EXPECT_EQ(r->record.hit_tier, HitTier::kNone);
    EXPECT_TRUE(e->remove_sequence(r->sequence).ok());
  }
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// Decodes `n` tokens of `prompt` with a plain scheduler (cold, the reference).
std::vector<int32_t> cold_ids(const std::vector<int32_t>& prompt, int64_t n, PrefillDepth depth) {
  auto e = make_engine();
  auto s = Scheduler::create(*e, SchedulerOptions{1, 4, 8, 128, -1});
  const int64_t t = (*s)->submit(GenerationRequest{prompt, n, {}, true, depth});
  (*s)->run_to_completion();
  return (*s)->take(t)->ids;
}

// A turn opened through the tiers (open_turn) is prefilled by the scheduler in the batch, beside
// a cold request, with the windows' replay when the hit brought none: its ids are those of
// serve_turn + submit_prefilled (the same chunks, bounded and exact), and at exact depth those of
// a cold run; close_prompt at the prompt's end stores the new chunks and the window snapshot, so
// the next turn hits through them.
TEST(ServeTurn, OpenedTurnsPrefillInTheBatch) {
  const auto first = tokens(26, 31);
  auto second = first;
  for (int32_t x : tokens(13, 32)) second.push_back(x);  // 39 tokens: hit 24, no snapshot there
  const auto other = tokens(17, 33);
  for (PrefillDepth depth : {PrefillDepth::kExact, PrefillDepth::kBounded}) {
    SCOPED_TRACE(prefill_depth_name(depth));
    const ServeTurnOptions o{depth, 4, 128, nullptr};
    std::vector<int32_t> reference;
    {  // serve_turn (its own prefill), then decoded by the scheduler
      Tiers t;
      t.open();
      auto e = make_engine();
      serve(*e, t.tiers(true), first, depth);
      ASSERT_TRUE(t.store->flush().ok());
      auto turn = serve_turn(*e, t.tiers(true), second, o);
      ASSERT_TRUE(turn.ok()) << turn.status().to_string();
      auto s = Scheduler::create(*e, SchedulerOptions{2, 4, 8, 128, -1});
      const int64_t tk = (*s)->submit_prefilled(GenerationRequest{second, 6, {}, true, depth}, turn->sequence,
                                                turn->last_logits, turn->effective, turn->record.work);
      (*s)->run_to_completion();
      reference = (*s)->take(tk)->ids;
    }
    Tiers t;
    t.open();
    auto e = make_engine();
    serve(*e, t.tiers(true), first, depth);
    ASSERT_TRUE(t.store->flush().ok());
    auto opened = open_turn(*e, t.tiers(true), second, o);
    ASSERT_TRUE(opened.ok()) << opened.status().to_string();
    EXPECT_EQ(opened->hit, 24);
    EXPECT_FALSE(opened->windows_present);
    auto s = Scheduler::create(*e, SchedulerOptions{2, 4, 8, 128, -1});
    int64_t tk = -1;
    int closed = 0, other_prompts = 0;
    (*s)->on_prompt_done([&](int64_t ticket, SequenceId id, const GenerationResult& so_far) {
      if (ticket != tk) {
        ++other_prompts;
        return;
      }
      ++closed;
      EXPECT_EQ(*e->length(id), static_cast<int64_t>(second.size()));
      close_prompt(*e, t.tiers(true), *opened, second, so_far.effective_depth, so_far.prefill_work,
                   so_far.prefill_timing, o);
    });
    const int64_t cold = (*s)->submit(GenerationRequest{other, 5, {}, true, depth});
    tk = (*s)->submit_opened(GenerationRequest{second, 6, {}, true, depth}, opened->sequence, false);
    bool shared_step = false;
    while ((*s)->step()) shared_step |= (*s)->last_step().segments == 2 && (*s)->last_step().prefill_tokens > 4;
    EXPECT_TRUE(shared_step);  // the two prompts were prefilled in one forward at least once
    auto got = (*s)->take(tk);
    ASSERT_TRUE(got && got->status.ok()) << (got ? got->status.to_string() : "");
    EXPECT_EQ(got->ids, reference);
    EXPECT_GT(got->prefill_work.replay, 0);
    EXPECT_EQ((*s)->take(cold)->ids, cold_ids(other, 5, depth));
    if (depth == PrefillDepth::kExact) {
      EXPECT_EQ(got->ids, cold_ids(second, 6, depth));
    }
    EXPECT_EQ(closed, 1);
    EXPECT_EQ(other_prompts, 1);  // the callback hears of every prompt; the caller picks its own
    EXPECT_EQ(opened->record.swa,
              depth == PrefillDepth::kExact ? SwaSource::kReplayedExact : SwaSource::kReplayedBounded);
    EXPECT_GT(opened->record.ssd_written_bytes, 0u);  // the new whole chunk [24, 32)
    // The windows at the prompt's end are in the DRAM pool, and the next turn hits through [24, 32).
    EXPECT_TRUE(t.dram.lookup(prefix_key_at(t.identity, second, second.size()), second.size()));
    ASSERT_TRUE(t.store->flush().ok());
    auto third = second;
    for (int32_t x : tokens(3, 34)) third.push_back(x);
    EXPECT_EQ(serve(*e, t.tiers(true), third, depth).record.global_hit_tokens, 32);
  }
}

}  // namespace
}  // namespace dsv41
