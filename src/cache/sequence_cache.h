// The packed per-sequence attention cache. Spec: model.md §4 (decode-time state), §3.4–§3.5;
// system.md §2–§3; issue 9 items 3–5.
//
// Per backbone layer: a window ring of FP8 window records (slot = position mod slots), holding the
// post-RoPE window KV of the newest positions. It has sliding_window + rollback_tokens slots, so
// that after rolling back k ≤ rollback_tokens positions the last sliding_window − 1 rows before the
// new end are still there (speculative decoding), and a start position: rows before it are absent
// (a window restarted at s for bounded replay: a query at i sees keys [max(s, i−w+1), i]).
// Per kv-source (Full) layer additionally, growing with the context:
//   main  — one NVFP4 record per compressed entry (post-RoPE latent, entry g at position g·r)
//   index — one MXFP4 record per compressed entry (indexer key from the pre-RoPE latent)
//   the compressor's pending partial group: the fp32 projections (a, b) of the < r tokens that
//     arrived since the last complete group, and (for rollback) the projections of the newest
//     rollback_tokens + r − 1 tokens in a small ring.
// Growing rows live in pages of `rows_per_page` records from per-kind PagePools, either owned by
// the cache or shared by every sequence of an engine (CachePools, one byte budget). Full pages can
// be shared between sequences (fork); window rings and pending groups are always private.
// Everything is sized from the config alone; plan_cache_bytes() (plan/cache_plan.h) says what a
// context of n tokens costs without allocating, with the same page arithmetic as this cache.
// Not thread-safe; one cache per sequence, all caches of one CachePools on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "cache/page_pool.h"
#include "cache/records.h"
#include "format/config.h"
#include "plan/cache_plan.h"
#include "plan/layer_plan.h"

namespace dsv41 {

// The page pools of every sequence of one engine: main rows and index keys (two page sizes), one
// byte budget (0 = unlimited).
struct CachePools {
  PageBudget budget;
  std::unique_ptr<PagePool> main, index;
  int64_t rows_per_page = 0;
  static Result<std::unique_ptr<CachePools>> create(const ModelConfig& config, int64_t rows_per_page,
                                                    int64_t budget_bytes);
  int64_t bytes_in_use() const { return main->bytes_in_use() + index->bytes_in_use(); }
};

// Window ring of one layer.
class WindowRing {
 public:
  // `window` = sliding_window (keys a query sees, itself included); slots ≥ window.
  WindowRing(int64_t window, int64_t slots, int64_t dim);
  int64_t window() const { return window_; }
  int64_t slots() const { return slots_; }
  int64_t dim() const { return dim_; }
  int64_t length() const { return length_; }  // positions written so far (next position)
  int64_t start() const { return start_; }    // first position this ring was (re)started at
  // Oldest position still held: max(start, length − slots).
  int64_t first_held() const { return std::max(start_, length_ - slots_); }
  // Appends the record of position length(): x[dim] (values already fake-quantised or not;
  // packing quantises either way).
  void push(const float* x);
  // Appends n consecutive positions, rows[n, dim]; only the newest `slots` are packed (older ones
  // would be overwritten within the same call).
  void push_rows(const float* rows, int64_t n);
  // Dequantised row of position pos (first_held() ≤ pos < length()).
  void read(int64_t pos, float* out) const;
  // The packed record of position pos (first_held() ≤ pos < length()).
  const uint8_t* record(int64_t pos) const { return data_.data() + (pos % slots_) * record_bytes_; }
  int64_t record_bytes() const { return record_bytes_; }
  int64_t bytes() const { return static_cast<int64_t>(data_.size()); }
  // Forgets the newest k positions (k ≤ slots − window + 1 keeps a full window before the end).
  void rollback(int64_t k) { length_ -= k; }
  // Empties the ring and makes `pos` its next position and its start (windows cut at pos).
  void restart(int64_t pos) {
    length_ = pos;
    start_ = pos;
  }
  void reset() { restart(0); }
  // Raw state for snapshots: ring bytes in slot order.
  const std::vector<uint8_t>& raw() const { return data_; }
  std::vector<uint8_t>& raw() { return data_; }
  void set_positions(int64_t start, int64_t length) {
    start_ = start;
    length_ = length;
  }

 private:
  int64_t window_, slots_, dim_, record_bytes_;
  int64_t start_ = 0, length_ = 0;
  std::vector<uint8_t> data_;  // [slots, record_bytes]
};

// Global state of one kv-source layer.
struct KvSourceCache {
  int layer = -1;
  int ratio = 0;
  int64_t dim = 0, index_dim = 0;
  PagedRows main;   // NVFP4 records, one per compressed entry
  PagedRows index;  // MXFP4 records, one per compressed entry
  // Compressor pending group: `pending` tokens' fp32 projections, [pending, dim] each; they are
  // positions ratio·entries() … ratio·entries() + pending − 1.
  int64_t pending = 0;
  std::vector<float> pending_kv, pending_gate;
  // Rollback history (ratio ≥ 2 and rollback enabled): the projections of the newest
  // history_slots positions, [history_slots, dim] each, slot = position mod history_slots.
  int64_t history_slots = 0;
  std::vector<float> history_kv, history_gate;

  KvSourceCache(int layer_, int ratio_, int64_t dim_, int64_t index_dim_, PagePool* main_pool,
                PagePool* index_pool, int64_t rows_per_page, int64_t history_slots_ = 0);
  int64_t entries() const { return main.size(); }
  // The position the compressor takes next: every earlier position is in a published entry or
  // in the pending group.
  int64_t next_position() const { return ratio > 1 ? entries() * ratio + pending : entries(); }
  void read_main(int64_t g, float* out) const { row_unpack(RowKind::kMain, main.row(g), dim, out); }
  void read_index(int64_t g, float* out) const {
    row_unpack(RowKind::kIndex, index.row(g), index_dim, out);
  }
  // Records a token's projections in the rollback history (no-op without history).
  void remember(int64_t pos, const float* kv, const float* gate);
};

class SequenceCache {
 public:
  // Fails if a record dimension does not divide into its codec's blocks or max_context < 1.
  // pools: the engine's shared pools (borrowed, must outlive the cache; their rows_per_page wins
  // over options.rows_per_page), or null for pools owned by this cache.
  static Result<std::unique_ptr<SequenceCache>> create(const ModelConfig& config, const LayerPlan& plan,
                                                       int64_t max_context, const CacheOptions& options = {},
                                                       CachePools* pools = nullptr);

  int64_t max_context() const { return max_context_; }
  // The admission bound only (nothing is sized by it): a fork may serve a longer turn than the
  // sequence it came from. The caller checks it against the model and the positions held.
  void set_max_context(int64_t max_context) { max_context_ = max_context; }
  int64_t rollback_tokens() const { return rollback_tokens_; }
  int num_layers() const { return static_cast<int>(windows_.size()); }
  // Positions every layer has processed (the next token's position once a forward completes).
  int64_t length() const;

  WindowRing& window(int layer) { return windows_[layer]; }
  const WindowRing& window(int layer) const { return windows_[layer]; }
  // The DSpark drafter's rings (CacheOptions::draft_stages; model/dspark.h): window state like
  // the backbone's rings (forked, snapshotted, rolled back with them), but not part of length():
  // a ring restarted after a replay may hold fewer positions than the backbone (the drafter then
  // sees fewer keys; nothing else changes).
  int draft_stages() const { return static_cast<int>(drafts_.size()); }
  WindowRing& draft_ring(int stage) { return drafts_[stage]; }
  const WindowRing& draft_ring(int stage) const { return drafts_[stage]; }
  // nullptr unless `layer` is a kv source.
  KvSourceCache* kv_source(int layer) { return kv_[layer].get(); }
  const KvSourceCache* kv_source(int layer) const { return kv_[layer].get(); }

  // A new cache (same pools, same options) holding this one's whole state: global pages shared,
  // windows and pending groups copied.
  Result<std::unique_ptr<SequenceCache>> fork() const;
  // A new cache holding only the global KV of the first `prefix` positions (pages shared, the
  // last partial page too until either side appends) and no window state: every ring restarted at
  // `prefix`, no pending group. Requires prefix ≤ length(). What bounded replay and snapshot
  // restore start from (the pending group of an incomplete last group is lost: a snapshot or a
  // replay supplies it).
  Result<std::unique_ptr<SequenceCache>> fork_global(int64_t prefix) const;
  // Forgets the newest k positions: windows, compressed entries and index keys of groups that
  // are no longer complete, the pending group rebuilt from the history. k ≤ rollback_tokens().
  Status rollback(int64_t k);

  CacheFootprint bytes_in_use() const;
  void reset();  // back to an empty sequence (pages return to the pools)

  // Dequantised views for dumps and golden comparisons (the golden tensors' shapes):
  //   window_rows:  the newest min(length, sliding_window − 1) window rows of `layer`, oldest
  //                 first, [rows, head_dim] (what the reference keeps between calls)
  //   main_rows:    every compressed entry of kv-source `layer`, [entries, head_dim]
  //   index_rows:   every index key of kv-source `layer`, [entries, index_head_dim]
  // Empty for a layer without that state.
  std::vector<float> window_rows(int layer) const;
  std::vector<float> main_rows(int layer) const;
  std::vector<float> index_rows(int layer) const;

 private:
  SequenceCache() = default;
  // An empty cache with this one's layout, pools and options.
  std::unique_ptr<SequenceCache> empty_like() const;
  int64_t max_context_ = 0, rollback_tokens_ = 0;
  std::shared_ptr<CachePools> own_pools_;  // set when the cache (and its forks) own the pools
  CachePools* pools_ = nullptr;
  std::vector<WindowRing> windows_;
  std::vector<WindowRing> drafts_;  // [draft stages]
  std::vector<std::unique_ptr<KvSourceCache>> kv_;  // [num_layers], null for non-sources
};

}  // namespace dsv41
