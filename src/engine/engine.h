// The engine: many sequences, one batched forward over any mix of prefill chunks and decode
// tokens, one page pool, and sequence state that can be forked, snapshotted, restored and rolled
// back. Spec: issue 9 (items 1–5), model.md §3 (the walk), system.md §2–§4.
//
// The layer-plan walk lives here and only here (forward_layers in engine.cpp): for each layer it
// decides which steps run (attention_steps.h layer_steps), which kv source is the latest
// published one, whether an index source is restricted to the candidate pool, and which layers
// borrow the latest top-k; the Backend does the arithmetic. Token-wise blocks run over every row
// of the batch at once; attention state is per segment.
//
// Segments: each names a sequence, the position it starts at and its tokens, and which logits to
// return. A segment is checked before any compute (sequence known and not twice in the batch,
// start = the sequence's length, token ids in the vocabulary, image rows consistent with the
// image_token_id positions, context and page budget) and, if
// rejected, reported with its reason while the rest of the batch runs. An error in the middle of
// the forward (a damaged Engram row in a mapped checkpoint) fails only the segments it touches;
// their sequences are reset (the message says so) and the others complete.
// Results are the same bits whatever else is in the batch (every block's per-row arithmetic is
// independent of the other rows).
//
// Steady-state decode (issue 9 item 2): a forward whose batch has the shape of an earlier one
// (the same number of segments and rows) makes no heap allocation, in the engine, the CPU backend
// or its kernels, on any thread, unless it takes a new cache page: pages come from the pool when
// a kv source's entries cross a page boundary (a fresh one is allocated only when the free list is
// empty). Every workspace (the engine's batch vectors, the backend's activations and the blocks'
// scratch) is resized to the batch and keeps its storage; a sequence reserves room for all its
// tokens; parallel loops take borrowed function references. A growing context can still enlarge
// a buffer sized by the entry count (indexer scores) — by doubling, so rarely. Rejected segments,
// errors, replays and traces allocate (messages, copies). tests/decode_alloc_test.cpp counts.
//
// Not thread-safe: one thread drives an engine. Two engines (different backends or options) can
// live in one process.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "engine/backend.h"
#include "model/engram_hash.h"
#include "plan/replay_rule.h"
#include "store/segment.h"

namespace dsv41 {

struct ForwardTrace;

using SequenceId = int64_t;

enum class LogitRows { kNone, kLast, kAll };

struct Segment {
  SequenceId sequence = -1;
  int64_t start = 0;                  // must equal the sequence's length (see replay)
  std::span<const int32_t> tokens;    // borrowed for the call
  LogitRows logits = LogitRows::kLast;
  // Replay (the primitive of bounded replay, system.md §3): `tokens` are the sequence's own
  // tokens at positions start … end − 1 (a replay in chunks continues where the previous chunk
  // stopped); without per-layer ranges (depth) every window ring restarts at `start` (a query at i sees
  // keys [max(start, i − w + 1), i]) and is rebuilt, global rows already present are not
  // rewritten (write floor: the compressor takes only positions it has not covered, rebuilding a
  // lost pending group), the Engram look-back is that of the real tokens before `start`. The
  // sequence's length is unchanged afterwards. Needs start ≤ every kv source's next position.
  bool replay = false;
  // Per-layer position ranges (plan/replay_rule.h; one entry per layer, empty = every layer runs
  // every position: full depth). Layer ℓ takes its attention input (and feeds its compressor)
  // from depth[ℓ].input_from and runs attention + FFN from depth[ℓ].attend_from, its window cut
  // there when that position falls inside the segment. Borrowed for the call. logits kAll needs
  // full depth; kLast needs the last layer to run the last position.
  std::span<const LayerRange> depth;
  // Image spans (issue 16, model.md §3.10; model/vision/image_span.h builds both), borrowed for
  // the call; empty = all text. token_types [tokens] (−1 text, 0..3 span) and the span rows'
  // embeddings [span rows, hidden] in order (the aligner rows between the learned start /
  // newline / end vectors). Every span row must hold the model's image_token_id and every
  // image_token_id row must be a span row; the model needs a vision tower. A replay over image
  // positions must pass them again.
  std::span<const int8_t> token_types;
  std::span<const float> image_embeddings;
};

struct SegmentResult {
  Status status;
  int64_t logit_rows = 0;           // rows of logits returned: 0, 1 or the segment's tokens
  const float* logits = nullptr;    // [logit_rows, vocab], valid until the next forward
  TokenLayers work;                 // token-layers the segment ran, by kind (plan/replay_rule.h)
};

// Wall time of one forward by part of the layer plan: the encoder layers (below the plan's
// decoder start; every layer when the plan has no decoder), the decoder layers (from the decoder
// start on) and the head (final norm + logits). For a batch of several segments the times are
// the batch's, shared by its segments.
struct ForwardTiming {
  double encoder_ms = 0, decoder_ms = 0, head_ms = 0;
  double total_ms() const { return encoder_ms + decoder_ms + head_ms; }
};

// A prefill's forwards summed by kind: replays of a hit's windows, and the new positions'
// encoder and decoder tail (the head counted with the decoder tail).
struct PrefillTiming {
  double replay_ms = 0, encoder_ms = 0, decoder_ms = 0;
  void add(const ForwardTiming& t, bool replay) {
    if (replay) {
      replay_ms += t.total_ms();
    } else {
      encoder_ms += t.encoder_ms;
      decoder_ms += t.decoder_ms + t.head_ms;
    }
  }
};

struct EngineOptions {
  int64_t rows_per_page = 256;      // cache records per page
  int64_t page_budget_bytes = 0;    // global-KV bytes all sequences may hold together (0 = unlimited; capped by Backend::cache_capacity_bytes)
  int64_t rollback_tokens = 0;      // positions a sequence can be rolled back by (speculative decoding)
  // DSpark (issue 15): every sequence keeps the drafter's rings, fed from every forward, so
  // draft() can run after any position. Needs a backend with the model's drafter.
  bool dspark = false;
  // Identity of the weights, carried by snapshots (0: derived from the config's shape; callers that
  // can hash the checkpoint pass that hash).
  uint64_t model_fingerprint = 0;
};

// Global-KV bytes held, counting each shared page once.
struct PoolStats {
  int64_t main_bytes = 0, index_bytes = 0;
  int64_t budget_bytes = 0;  // 0 = unlimited
  int64_t sequences = 0;
};

class Engine {
 public:
  // engram_tables: the model's Engram hash constants (null when it has no Engram layers); they
  // must outlive the engine.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Backend> backend,
                                                const EngramHashTables* engram_tables,
                                                const EngineOptions& options = {});

  Backend& backend() { return *backend_; }
  const ModelConfig& config() const { return backend_->config(); }
  const EngineOptions& options() const { return options_; }
  uint64_t model_fingerprint() const { return fingerprint_; }

  // A fresh, empty sequence able to hold max_context positions (≤ max_position_embeddings).
  Result<SequenceId> add_sequence(int64_t max_context);
  // A new sequence with `from`'s whole state: its global pages shared (no copy), windows, pending
  // groups, Engram look-back and tokens copied. max_context: the new sequence's (0 = from's).
  Result<SequenceId> fork(SequenceId from, int64_t max_context = 0);
  // A new sequence holding only the global KV of `from`'s first `prefix` positions (shared pages)
  // and its tokens; no window state: restore a snapshot of that position into it (exact), or
  // replay (issue 10). Until then its windows are cut at `prefix`. max_context as for fork.
  Result<SequenceId> fork_prefix(SequenceId from, int64_t prefix, int64_t max_context = 0);
  // The live sequence sharing the longest prefix with `tokens` (the engine tier of system.md §3):
  // its id and the prefix length; {-1, 0} when none shares a token. Ties go to the lowest id.
  struct LivePrefix {
    SequenceId sequence = -1;
    int64_t length = 0;
  };
  LivePrefix longest_live_prefix(std::span<const int32_t> tokens) const;
  Status remove_sequence(SequenceId id);
  Status reset_sequence(SequenceId id);
  bool has_sequence(SequenceId id) const { return sequences_.count(id) != 0; }

  Result<int64_t> length(SequenceId id) const;
  // Every token id the sequence holds, in order.
  Result<std::span<const int32_t>> tokens(SequenceId id) const;
  // The packed cache (read-only), e.g. for dumps; null for an unknown id.
  const SequenceCache* cache(SequenceId id) const;

  // Forgets the newest k ≤ rollback_tokens positions (windows, compressor state, published
  // entries and index keys, Engram look-back, tokens): the sequence continues as if they had never
  // been appended.
  Status rollback(SequenceId id, int64_t k);
  // The sequence's window state at its current length (snapshot.h), and its restore into a
  // sequence whose global KV holds the same prefix.
  Result<std::string> snapshot(SequenceId id) const;
  Status restore(SequenceId id, std::string_view snapshot);

  // Global KV as stored records (the SSD tier, issue 11; docs/STORE.md "Serving a turn").
  // export_global: the packed records of positions [begin, end) — per kv source (ascending
  // layer), one main part then one index part, the bytes exactly as in the pages. Entry g of a
  // ratio-r source covers positions g·r … g·r + r − 1 and goes with the range holding its last
  // position, so the entries are those of entries_after(end) minus entries_after(begin); callers
  // cut at multiples of an even chunk so a ratio-2 group is never split. Needs
  // 0 ≤ begin ≤ end ≤ length(id).
  Result<Payload> export_global(SequenceId id, int64_t begin, int64_t end) const;
  // A NEW sequence (max_context positions) holding the global KV of `prefix_tokens` from
  // `chunks`, chunk i covering positions [i·chunk_tokens, (i+1)·chunk_tokens); prefix_tokens
  // must be exactly chunks.size()·chunk_tokens long. The state is the one fork_prefix gives:
  // tokens set, every window ring restarted at the prefix end, no pending group, the Engram
  // look-back rebuilt from the tokens. Every part is checked (layer, kind, record size, entry
  // count; no part missing or extra) and every token id against the vocabulary before anything
  // is allocated; an inconsistent payload is refused with a message naming the chunk and part,
  // and nothing is created.
  Result<SequenceId> import_global(int64_t max_context, std::span<const int32_t> prefix_tokens,
                                   std::span<const Payload> chunks, int64_t chunk_tokens);

  // DSpark drafts (options().dspark): for each (sequence, anchor) — the anchor being the token
  // the sequence's next position will hold — the drafter's block after the sequence's last
  // position (model/dspark.h). Fails as a whole on an unknown sequence or a drafter ring that does
  // not end at the sequence's last position.
  struct DraftSpec {
    SequenceId sequence = -1;
    int32_t anchor = 0;
    int slots = 0;  // draft slots wanted (0 = the whole block; model/dspark.h DraftRequest)
    bool logits = true;  // the caller reads DraftBlock::logits (false: they may be left empty)
  };
  Status draft(std::span<const DraftSpec> specs, std::vector<DraftBlock>& out, const DraftPicker& pick = {});
  int draft_block() const { return config().dspark_block_size; }
  // Whether draft() can run for the sequence now: DSpark on and its drafter rings end at its last
  // position holding at least that position (not restarted since the last forward).
  bool can_draft(SequenceId id) const;
  // Wall time spent feeding the drafter's rings since the engine was made (DSpark's cost on
  // every forward, drafting or not).
  double draft_feed_ms() const { return feed_ms_; }
  // Feeding the drafter's rings after each forward can be paused (DSpark's auto mode does while
  // plain decoding wins): drafts then wait until a forward has fed the rings again (can_draft).
  void set_draft_feeding(bool on) { feeding_ = on; }
  bool draft_feeding() const { return feeding_; }

  // One batched forward. Returns one result per segment, in order (valid until the next call).
  // Under expert parallelism (the backend exchanges MoE rows with other ranks: docs/PARALLEL.md)
  // every rank's engine calls forward once per step, with or without segments (runtime/rank_group.h).
  // trace: named intermediates, only for a batch of one segment.
  const std::vector<SegmentResult>& forward(std::span<const Segment> segments, ForwardTrace* trace = nullptr);

  // forward calls so far (a caller driving ranks in lockstep checks that a step made one).
  int64_t forward_calls() const { return forward_calls_; }

  PoolStats pool_stats() const;
  // The timing of the last forward (zero before the first, or when nothing was admitted).
  const ForwardTiming& last_timing() const { return timing_; }

 private:
  struct Sequence {
    std::unique_ptr<SequenceCache> cache;
    std::unique_ptr<EngramHasher> hasher;  // null without Engram layers
    std::vector<int32_t> tokens;
  };
  // Per-forward bookkeeping of an admitted segment.
  struct Admitted {
    int index = 0;          // position in the caller's segment list
    const Segment* segment = nullptr;
    Sequence* seq = nullptr;
    int64_t row0 = 0, rows = 0;
    std::vector<int64_t> saved_history;  // Engram look-back before a replay segment (else empty)
    Status failure;         // set when a step failed mid-forward
  };

  Engine(std::unique_ptr<Backend> backend, const EngramHashTables* tables, const EngineOptions& options);
  Status check_segment(const Segment& s, const Sequence* seq) const;
  Status check_replay(const Segment& s, const Sequence& seq) const;
  Status check_image_rows(const Segment& s) const;
  void forward_layers(ForwardTrace* trace);
  // A forward without rows for backends that exchange data with other ranks (backend.h).
  void idle_forward();
  // Segment rows from which layer ℓ takes its input / runs attention + FFN (0 … rows).
  static int64_t input_first(const Segment& s, int layer, int64_t rows);
  static int64_t attend_first(const Segment& s, int layer, int64_t rows);
  Status check_depth(const Segment& s, const Sequence& seq) const;
  void run_engram(int layer);
  Result<Sequence*> find(SequenceId id);
  Result<const Sequence*> find(SequenceId id) const;
  Sequence make_sequence(std::unique_ptr<SequenceCache> cache) const;
  // A fork's own max_context: within the model and above the positions it holds.
  Status check_fork_context(int64_t max_context, int64_t held) const;

  std::unique_ptr<Backend> backend_;
  ForwardTiming timing_;
  const EngramHashTables* engram_tables_;
  EngineOptions options_;
  uint64_t fingerprint_ = 0;
  std::unique_ptr<CachePools> pools_;
  std::unordered_map<SequenceId, Sequence> sequences_;
  SequenceId next_id_ = 1;

  // Workspace of the current forward, reused between calls.
  std::vector<Admitted> admitted_;
  std::vector<SegmentRows> rows_;
  std::vector<int32_t> batch_tokens_;
  std::vector<int64_t> batch_positions_;
  std::vector<int8_t> batch_types_;       // only filled when a segment has image rows
  std::vector<float> batch_embeddings_;   // the span rows' embeddings, in batch order
  std::vector<int64_t> engram_ids_;     // [rows, engram layers, columns]
  std::vector<int64_t> layer_ids_;      // [rows, columns] of one layer
  std::vector<int64_t> logit_rows_;
  std::vector<RowRange> input_rows_, attend_rows_;  // of the current layer
  std::vector<SegmentAttention> attention_jobs_;     // of the current layer (capacity kept)
  std::vector<SegmentCompress> compress_jobs_;       // of the current layer (capacity kept)
  std::vector<float> logits_;
  std::vector<SegmentResult> results_;
  int64_t forward_calls_ = 0;
  std::vector<DraftRequest> draft_requests_;
  double feed_ms_ = 0;
  bool feeding_ = true;
  std::vector<Backend::DraftFeed> draft_feeds_;
  // DSpark: feeds each admitted segment's rows into its drafter rings (after the layers).
  void feed_draft_rings();
  CacheOptions cache_options() const;
};

// A fingerprint of the model's shape (config numbers that change the records or their meaning),
// for snapshots when no weight hash is given.
uint64_t config_fingerprint(const ModelConfig& config);

}  // namespace dsv41
