// The packed per-sequence attention cache. Spec: model.md §4 (decode-time state), §3.4–§3.5;
// issue 3 item 2.
//
// Per backbone layer: a window ring of `sliding_window` FP8 window records (slot = position mod w),
// holding the post-RoPE window KV of the last w positions.
// Per kv-source (Full) layer additionally, growing with the context:
//   main  — one NVFP4 record per compressed entry (post-RoPE latent, entry g at position g·r)
//   index — one MXFP4 record per compressed entry (indexer key from the pre-RoPE latent)
//   the compressor's pending partial group: the fp32 projections (a, b) of the < r tokens that
//   arrived since the last complete group (cleared when the group completes).
// Growing rows live in pages of `rows_per_page` records from per-kind PagePools owned by the cache.
// Everything is sized from the config alone; plan_cache_bytes() says what a context of n tokens
// costs without allocating, using the same page arithmetic as the live cache.
// Not thread-safe; one cache per sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "cache/records.h"
#include "cache/page_pool.h"
#include "format/config.h"
#include "model/layer_plan.h"

namespace dsv41 {

// Bytes by kind. window is fixed per sequence; main/index grow with the context.
struct CacheFootprint {
  int64_t window = 0;
  int64_t main = 0;
  int64_t index = 0;
  int64_t pending = 0;  // compressor fp32 partial groups (bounded, not per token)
  int64_t global() const { return main + index; }
  int64_t total() const { return window + main + index + pending; }
};

struct CacheOptions {
  int64_t rows_per_page = 256;  // records per page, same for every kind
};

// The cost of a context of `tokens` tokens (all pages that a cache holding that many tokens
// owns). For the V4.1-Flash config and 2^20 tokens: global() / tokens == 890 exactly.
Result<CacheFootprint> plan_cache_bytes(const ModelConfig& config, const LayerPlan& plan, int64_t tokens,
                                    const CacheOptions& options = {});

// Window ring of one layer.
class WindowRing {
 public:
  WindowRing(int64_t slots, int64_t dim);
  int64_t slots() const { return slots_; }
  int64_t dim() const { return dim_; }
  int64_t length() const { return length_; }  // positions written so far (next position)
  // Oldest position still held: max(0, length − slots).
  int64_t first_held() const { return length_ > slots_ ? length_ - slots_ : 0; }
  // Appends the record of position length(): x[dim] (values already fake-quantised or not;
  // packing quantises either way).
  void push(const float* x);
  // Appends n consecutive positions, rows[n, dim]; only the newest `slots` are packed (older ones
  // would be overwritten within the same call).
  void push_rows(const float* rows, int64_t n);
  // Dequantised row of position pos (first_held() ≤ pos < length()).
  void read(int64_t pos, float* out) const;
  int64_t bytes() const { return static_cast<int64_t>(data_.size()); }
  void reset() { length_ = 0; }

 private:
  int64_t slots_, dim_, record_bytes_;
  int64_t length_ = 0;
  std::vector<uint8_t> data_;  // [slots, record_bytes]
};

// Global state of one kv-source layer.
struct KvSourceCache {
  int layer = -1;
  int ratio = 0;
  int64_t dim = 0, index_dim = 0;
  PagedRows main;   // NVFP4 records, one per compressed entry
  PagedRows index;  // MXFP4 records, one per compressed entry
  // Compressor pending group: `pending` tokens' fp32 projections, [pending, dim] each.
  int64_t pending = 0;
  std::vector<float> pending_kv, pending_gate;

  KvSourceCache(int layer_, int ratio_, int64_t dim_, int64_t index_dim_, PagePool* main_pool,
                PagePool* index_pool, int64_t rows_per_page);
  int64_t entries() const { return main.size(); }
  void read_main(int64_t g, float* out) const { row_unpack(RowKind::kMain, main.row(g), dim, out); }
  void read_index(int64_t g, float* out) const {
    row_unpack(RowKind::kIndex, index.row(g), index_dim, out);
  }
};

class SequenceCache {
 public:
  // Fails if a record dimension does not divide into its codec's blocks or max_context < 1.
  static Result<std::unique_ptr<SequenceCache>> create(const ModelConfig& config, const LayerPlan& plan,
                                                       int64_t max_context, const CacheOptions& options = {});

  int64_t max_context() const { return max_context_; }
  int num_layers() const { return static_cast<int>(windows_.size()); }
  // Positions every layer has processed (the next token's position once a forward completes).
  int64_t length() const;

  WindowRing& window(int layer) { return windows_[layer]; }
  const WindowRing& window(int layer) const { return windows_[layer]; }
  // nullptr unless `layer` is a kv source.
  KvSourceCache* kv_source(int layer) { return kv_[layer].get(); }
  const KvSourceCache* kv_source(int layer) const { return kv_[layer].get(); }

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
  int64_t max_context_ = 0;
  std::unique_ptr<PagePool> main_pool_, index_pool_;
  std::vector<WindowRing> windows_;
  std::vector<std::unique_ptr<KvSourceCache>> kv_;  // [num_layers], null for non-sources
};

}  // namespace dsv41
