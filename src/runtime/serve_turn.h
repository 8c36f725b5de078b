// Serving one turn's prompt through the cache tiers (spec system.md §3 steps 1–5; issue 11
// items 4–5; docs/STORE.md "Serving a turn"): look the prompt's whole chunks up in the SSD store,
// import the longest hit into a new sequence, restore its window state from the DRAM pool when a
// snapshot of exactly the hit position is there (else prefill replays the windows), prefill the
// suffix at the chosen depth, queue every new full chunk's records to the store, and snapshot the
// windows at the prompt's end into the DRAM pool. Decoding is the caller's; end_turn then stores
// what the answer added and snapshots the windows at the turn's end.
//
// The engine tier (tiers.engine): a live sequence of the engine that shares a longer prefix than
// the store is forked instead (pages shared, nothing loaded); when the prompt extends all of it,
// its windows come along exact, otherwise they are restored from the DRAM pool or replayed.
// Not done here (yet): a DRAM copy of global KV (hit_tier "dram" is reserved for it; the DRAM pool
// holds window snapshots only, reported as swa "restored").
// Not thread-safe: the engine's thread calls it. The store and pool are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "plan/replay_rule.h"
#include "store/dram_pool.h"
#include "store/prefix_key.h"
#include "store/ssd_store.h"

namespace dsv41 {

struct ServeTurnOptions {
  PrefillDepth depth = PrefillDepth::kBounded;
  int64_t prefill_chunk = 512;  // positions per forward
  int64_t max_context = 4096;   // of the new sequence (prompt + what the caller will decode)
  // Where a tier problem that does not fail the turn is reported (a chunk that vanished between
  // lookup and load, a payload the engine refused: the turn then runs cold). Null: dropped.
  std::function<void(const std::string&)> log;
  // Queue the prompt's new whole chunks to the SSD store (false: look up only, e.g. a benchmark
  // that serves one prompt several ways and must hit the same chunks each time).
  bool store_chunks = true;
  // Prefill progress (PrefillOptions::progress); may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
  // The prompt's images (issue 16), borrowed: their marks enter every prefix key (store chunks and
  // DRAM snapshots, in serve_turn and end_turn alike), the types and embedding rows go to the
  // prefill (runtime/prefill.h). Empty: a text prompt.
  std::span<const ImageMark> images;
  std::span<const int8_t> token_types;
  std::span<const float> image_embeddings;
};

// The cache tiers a turn may use; both borrowed, may be null (no tier).
struct ServeTurnTiers {
  SsdStore* ssd = nullptr;
  DramPool* dram = nullptr;
  StoreIdentity identity;  // the keys' root: model fingerprint, record format, chunk size, tokenizer
  bool engine = false;     // look among the engine's live sequences first (the engine tier)
};

enum class HitTier { kNone, kEngine, kDram, kSsd };
enum class SwaSource { kNone, kRestored, kReplayedBounded, kReplayedExact };
const char* hit_tier_name(HitTier t);    // "none", "engine", "dram", "ssd"
const char* swa_source_name(SwaSource s);  // "none", "restored", "replayed_bounded", "replayed_exact"

// One line of telemetry per turn (JSON keys exactly these names; serve_turn_json).
struct ServeTurnRecord {
  int64_t prompt_tokens = 0;
  int64_t global_hit_tokens = 0;   // whole chunks imported from the tier
  HitTier hit_tier = HitTier::kNone;
  SwaSource swa = SwaSource::kNone;
  TokenLayers work;                // encoder / decoder / replay / full_depth token-layers
  uint64_t ssd_read_bytes = 0;     // payload bytes of the chunks loaded
  uint64_t ssd_written_bytes = 0;  // payload bytes of the chunks queued to the store
  double lookup_ms = 0, load_ms = 0, prefill_ms = 0, store_ms = 0;
  // prefill_ms by part: the windows' replay, the encoder over the new positions, the decoder tail
  // (+ head). Measured per forward (engine ForwardTiming); in a batch, the shared forwards' times.
  double replay_ms = 0, encoder_ms = 0, decoder_ms = 0;
};

struct ServeTurnResult {
  SequenceId sequence = -1;        // holds the prompt; owned by the caller (remove_sequence)
  std::vector<float> last_logits;  // [vocab] of the last prompt position
  PrefillDepth effective = PrefillDepth::kFull;
  ServeTurnRecord record;
};

// Errors: the engine's (bad token ids, context, page budget) — the new sequence is then removed.
// Tier trouble never fails a turn: it is logged and the turn runs with less of a hit.
// serve_turn = open_turn, prefill, close_prompt: callers that batch (the scheduler's
// submit_opened, runtime/scheduler.h) run the three apart, the prefill beside other requests.
Result<ServeTurnResult> serve_turn(Engine& engine, const ServeTurnTiers& tiers, std::span<const int32_t> prompt,
                                   const ServeTurnOptions& options);

// Steps 1–3 of a turn: lookup, the engine tier's fork or the store's import, the DRAM pool's
// window snapshot. The new sequence holds the hit (`hit` positions, 0 when cold) and is owned by
// the caller; its prefill is the caller's (prefill() or Scheduler::submit_opened with
// windows_present), then close_prompt.
struct OpenedTurn {
  SequenceId sequence = -1;
  int64_t hit = 0;
  bool windows_present = true;   // exact window state at `hit` (no replay needed)
  std::vector<PrefixKey> keys;   // the prompt's whole-chunk keys (empty without a store)
  ServeTurnRecord record;        // lookup / load fields filled; the rest by close_prompt
};
Result<OpenedTurn> open_turn(Engine& engine, const ServeTurnTiers& tiers, std::span<const int32_t> prompt,
                             const ServeTurnOptions& options);
// Step 5, once the whole prompt is in the sequence (prefilled at `effective` with `work`): the
// record's swa source and work, the prompt's new whole chunks to the store, the windows at the
// prompt's end to the DRAM pool. The caller sets record.prefill_ms (its own clock: in a batch the
// prefill shares steps with other requests).
void close_prompt(Engine& engine, const ServeTurnTiers& tiers, OpenedTurn& turn, std::span<const int32_t> prompt,
                  PrefillDepth effective, const TokenLayers& work, const PrefillTiming& timing,
                  const ServeTurnOptions& options);

// The turn's end, after the caller decoded into the sequence: every whole chunk of the tokens it
// now holds (the prompt and the generated tokens fed back so far) that the store lacks is queued
// to the SSD store, and its window state at that length goes to the DRAM pool — so the next turn,
// whose prompt extends this one's tokens, finds a global hit that covers the answer and, when it
// ends exactly here, the windows to restore. (The global KV of decoded positions is what decode
// computed: a later hit continues the live sequence exactly, not a cold prefill of the same
// tokens, which may round differently; see golden README.)
struct EndTurnRecord {
  int64_t tokens = 0;              // held by the sequence at the turn's end
  uint64_t ssd_written_bytes = 0;  // payload bytes queued to the store
  double store_ms = 0;
};
Result<EndTurnRecord> end_turn(Engine& engine, const ServeTurnTiers& tiers, SequenceId id,
                               const ServeTurnOptions& options);

// {"event":"SERVE_TURN","prompt_tokens",…,"hit_tier","swa","encoder_token_layers",
//  "decoder_token_layers","replay_token_layers","full_depth_token_layers","ssd_read_bytes",
//  "ssd_written_bytes","lookup_ms","load_ms","prefill_ms","replay_ms","encoder_ms","decoder_ms",
//  "store_ms"} on one line.
std::string serve_turn_json(const ServeTurnRecord& r);

}  // namespace dsv41
