// Serving one turn's prompt through the cache tiers (see serve_turn.h), read top to bottom as the
// steps of system.md §3.
#include "runtime/serve_turn.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "runtime/prefill.h"

namespace dsv41 {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

void say(const ServeTurnOptions& o, const std::string& line) {
  if (o.log) o.log(line);
}

// Queues to the store every whole chunk of `tokens` (the sequence's, keys given) from `first` on
// that it lacks: a copy of the records (Engine::export_global); the store's writer thread does the
// I/O, so a slow disk never stalls the caller. Returns the payload bytes queued.
uint64_t store_new_chunks(Engine& engine, const ServeTurnTiers& tiers, SequenceId id, std::span<const int32_t> tokens,
                          const std::vector<PrefixKey>& keys, size_t first, const ServeTurnOptions& options) {
  if (!tiers.ssd || tiers.ssd->read_only()) return 0;
  const int64_t chunk = tiers.identity.chunk_tokens;
  uint64_t queued = 0;
  for (size_t i = first; i < keys.size() && static_cast<int64_t>(i + 1) * chunk <= static_cast<int64_t>(tokens.size());
       ++i) {
    if (tiers.ssd->contains(keys[i])) continue;
    auto payload = engine.export_global(id, static_cast<int64_t>(i) * chunk, static_cast<int64_t>(i + 1) * chunk);
    if (!payload.ok()) {
      say(options, "chunk " + std::to_string(i) + " not stored: " + payload.status().to_string());
      break;
    }
    const uint64_t bytes = payload->data_bytes();
    auto put = tiers.ssd->put(keys[i], static_cast<uint32_t>(chunk), std::move(*payload));
    if (!put.ok()) say(options, "chunk " + std::to_string(i) + " not stored: " + put.status().to_string());
    else if (*put == PutOutcome::kQueued) queued += bytes;
  }
  return queued;
}

// The sequence's window state at its length into the DRAM pool, keyed by the prefix there.
void snapshot_windows(Engine& engine, const ServeTurnTiers& tiers, SequenceId id, std::span<const int32_t> tokens,
                      std::span<const ImageMark> images) {
  if (!tiers.dram) return;
  auto snap = engine.snapshot(id);
  if (snap.ok())
    tiers.dram->put(prefix_key_at(tiers.identity, tokens, tokens.size(), images), static_cast<uint64_t>(tokens.size()),
                    std::make_shared<const std::vector<uint8_t>>(snap->begin(), snap->end()));
}

}  // namespace

const char* hit_tier_name(HitTier t) {
  switch (t) {
    case HitTier::kEngine: return "engine";
    case HitTier::kDram: return "dram";
    case HitTier::kSsd: return "ssd";
    case HitTier::kNone: break;
  }
  return "none";
}

const char* swa_source_name(SwaSource s) {
  switch (s) {
    case SwaSource::kRestored: return "restored";
    case SwaSource::kReplayedBounded: return "replayed_bounded";
    case SwaSource::kReplayedExact: return "replayed_exact";
    case SwaSource::kNone: break;
  }
  return "none";
}

Result<OpenedTurn> open_turn(Engine& engine, const ServeTurnTiers& tiers, std::span<const int32_t> prompt,
                             const ServeTurnOptions& options) {
  const int64_t N = static_cast<int64_t>(prompt.size());
  if (N < 1) return invalid_argument("serve_turn: empty prompt");
  OpenedTurn out;
  ServeTurnRecord& rec = out.record;
  rec.prompt_tokens = N;
  const int64_t chunk = tiers.identity.chunk_tokens;

  // 1. Lookup: the prompt's whole-chunk keys, and how many lead the store. At least the last
  //    prompt position is always computed (its logits), so a hit stops short of N.
  auto t = Clock::now();
  std::vector<PrefixKey> keys;
  size_t hit_chunks = 0;
  if (tiers.ssd && chunk > 0) {
    keys = chunk_keys(tiers.identity, prompt, options.images);
    hit_chunks = std::min(tiers.ssd->longest_prefix(keys), static_cast<size_t>((N - 1) / chunk));
  }
  rec.lookup_ms = ms_since(t);

  // 2. The engine tier: a live sequence sharing more of the prompt than the store is forked (its
  //    pages shared, nothing loaded). At least the last prompt position is computed.
  SequenceId id = -1;
  int64_t h = 0;
  bool windows_present = true;
  if (tiers.engine) {
    const Engine::LivePrefix live = engine.longest_live_prefix(prompt);
    const int64_t usable = std::min(live.length, N - 1);
    if (usable > 0 && usable >= static_cast<int64_t>(hit_chunks) * chunk) {
      DSV41_ASSIGN_OR_RETURN(const int64_t held, engine.length(live.sequence));
      auto forked = usable == held ? engine.fork(live.sequence, options.max_context)
                                   : engine.fork_prefix(live.sequence, usable, options.max_context);
      if (forked.ok()) {
        id = *forked;
        h = usable;
        windows_present = usable == held;  // a cut inside the live sequence leaves its windows behind
        rec.hit_tier = HitTier::kEngine;
      } else {
        say(options, "live sequence " + std::to_string(live.sequence) + " not forked: " + forked.status().to_string());
      }
    }
  }

  // 3. Load: the hit's payloads into a new sequence. A chunk gone since the lookup (evicted,
  //    corrupt) shortens the hit; a payload the engine refuses makes the turn cold.
  t = Clock::now();
  std::vector<Payload> payloads;
  for (size_t i = 0; id < 0 && i < hit_chunks; ++i) {
    auto got = tiers.ssd->get(keys[i]);
    if (!got.ok() || !got->has_value()) {
      say(options, "chunk " + std::to_string(i) + " (" + digest_hex(keys[i]) + ") could not be loaded" +
                       (got.ok() ? std::string(" (gone since the lookup)") : ": " + got.status().to_string()) +
                       "; hit shortened to " + std::to_string(i) + " chunks");
      break;
    }
    rec.ssd_read_bytes += (*got)->data_bytes();
    payloads.push_back(std::move(**got));
  }
  if (id < 0) {
    h = static_cast<int64_t>(payloads.size()) * chunk;
    if (h > 0) {
      auto imported = engine.import_global(options.max_context, prompt.subspan(0, static_cast<size_t>(h)), payloads,
                                           chunk);
      if (imported.ok()) {
        id = *imported;
        rec.hit_tier = HitTier::kSsd;
        windows_present = false;
      } else {
        say(options, "stored chunks refused, the turn runs cold: " + imported.status().to_string());
        h = 0;  // the bytes were read all the same: ssd_read_bytes keeps them
      }
    }
  }
  payloads.clear();
  if (id < 0) {
    DSV41_ASSIGN_OR_RETURN(id, engine.add_sequence(options.max_context));
  }
  rec.global_hit_tokens = h;

  // 3b. Window state at h when the hit brought none: a DRAM snapshot of exactly that position
  //     restores it (exact); otherwise prefill replays the windows (bounded or exact per depth).
  if (!windows_present && tiers.dram) {
    Snapshot snap = tiers.dram->lookup(prefix_key_at(tiers.identity, prompt, static_cast<size_t>(h), options.images),
                                       static_cast<uint64_t>(h));
    if (snap) {
      Status st = engine.restore(id, std::string_view(reinterpret_cast<const char*>(snap->data()), snap->size()));
      if (st.ok()) windows_present = true;
      else say(options, "window snapshot at " + std::to_string(h) + " refused, replaying: " + st.to_string());
    }
  }
  rec.load_ms = ms_since(t);
  out.sequence = id;
  out.hit = h;
  out.windows_present = windows_present;
  out.keys = std::move(keys);
  return out;
}

void close_prompt(Engine& engine, const ServeTurnTiers& tiers, OpenedTurn& turn, std::span<const int32_t> prompt,
                  PrefillDepth effective, const TokenLayers& work, const PrefillTiming& timing,
                  const ServeTurnOptions& options) {
  ServeTurnRecord& rec = turn.record;
  rec.work = work;
  rec.replay_ms = timing.replay_ms;
  rec.encoder_ms = timing.encoder_ms;
  rec.decoder_ms = timing.decoder_ms;
  if (turn.hit == 0) rec.swa = SwaSource::kNone;
  else if (turn.windows_present) rec.swa = SwaSource::kRestored;
  else rec.swa = effective == PrefillDepth::kBounded ? SwaSource::kReplayedBounded : SwaSource::kReplayedExact;

  // 5. Store: every full chunk the store lacks (queued; the store's writer does the I/O), and the
  //    windows at the prompt's end into the DRAM pool (used when a later hit ends exactly here).
  const auto t = Clock::now();
  // (After an engine-tier hit the store may lack the early chunks too: they are checked from 0.)
  const int64_t chunk = tiers.identity.chunk_tokens;
  const size_t first_new = rec.hit_tier == HitTier::kSsd ? static_cast<size_t>(turn.hit / chunk) : 0;
  if (options.store_chunks)
    rec.ssd_written_bytes += store_new_chunks(engine, tiers, turn.sequence, prompt, turn.keys, first_new, options);
  snapshot_windows(engine, tiers, turn.sequence, prompt, options.images);
  rec.store_ms = ms_since(t);
}

Result<ServeTurnResult> serve_turn(Engine& engine, const ServeTurnTiers& tiers, std::span<const int32_t> prompt,
                                   const ServeTurnOptions& options) {
  DSV41_ASSIGN_OR_RETURN(OpenedTurn turn, open_turn(engine, tiers, prompt, options));
  // 4. Prefill the suffix (with the windows' replay when they were not restored).
  const auto t = Clock::now();
  PrefillOptions po;
  po.depth = options.depth;
  po.chunk = options.prefill_chunk;
  po.windows_present = turn.windows_present;
  po.progress = options.progress;
  po.token_types = options.token_types;
  po.image_embeddings = options.image_embeddings;
  auto p = prefill(engine, turn.sequence, prompt, po);
  if (!p.ok()) {
    (void)engine.remove_sequence(turn.sequence);
    return p.status();
  }
  turn.record.prefill_ms = ms_since(t);
  close_prompt(engine, tiers, turn, prompt, p->effective, p->work, p->timing, options);
  ServeTurnResult out;
  out.sequence = turn.sequence;
  out.last_logits = std::move(p->last_logits);
  out.effective = p->effective;
  out.record = std::move(turn.record);
  return out;
}

Result<EndTurnRecord> end_turn(Engine& engine, const ServeTurnTiers& tiers, SequenceId id,
                               const ServeTurnOptions& options) {
  DSV41_ASSIGN_OR_RETURN(std::span<const int32_t> tokens, engine.tokens(id));
  EndTurnRecord rec;
  rec.tokens = static_cast<int64_t>(tokens.size());
  const auto t = Clock::now();
  if (tiers.ssd && tiers.identity.chunk_tokens > 0) {
    const std::vector<PrefixKey> keys = chunk_keys(tiers.identity, tokens, options.images);
    rec.ssd_written_bytes = store_new_chunks(engine, tiers, id, tokens, keys, 0, options);
  }
  snapshot_windows(engine, tiers, id, tokens, options.images);
  rec.store_ms = ms_since(t);
  return rec;
}

std::string serve_turn_json(const ServeTurnRecord& r) {
  nlohmann::ordered_json j;
  j["event"] = "SERVE_TURN";
  j["prompt_tokens"] = r.prompt_tokens;
  j["global_hit_tokens"] = r.global_hit_tokens;
  j["hit_tier"] = hit_tier_name(r.hit_tier);
  j["swa"] = swa_source_name(r.swa);
  j["encoder_token_layers"] = r.work.encoder;
  j["decoder_token_layers"] = r.work.decoder;
  j["replay_token_layers"] = r.work.replay;
  j["full_depth_token_layers"] = r.work.full_depth;
  j["ssd_read_bytes"] = r.ssd_read_bytes;
  j["ssd_written_bytes"] = r.ssd_written_bytes;
  j["lookup_ms"] = r.lookup_ms;
  j["load_ms"] = r.load_ms;
  j["prefill_ms"] = r.prefill_ms;
  j["replay_ms"] = r.replay_ms;
  j["encoder_ms"] = r.encoder_ms;
  j["decoder_ms"] = r.decoder_ms;
  j["store_ms"] = r.store_ms;
  return j.dump();
}

}  // namespace dsv41
