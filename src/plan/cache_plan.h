// Cache sizing as a pure function of the config and the layer plan: the bytes a sequence of n
// tokens holds by kind, with the live cache's own page and record arithmetic (cache/ allocates
// with these functions, so the plan and the allocator cannot disagree). Spec: model.md §4,
// system.md §1 (890 B/token of global KV for V4.1-Flash).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "format/config.h"
#include "format/record_layout.h"
#include "plan/layer_plan.h"

namespace dsv41 {

// Bytes by kind. window is fixed per sequence; main/index grow with the context.
struct CacheFootprint {
  int64_t window = 0;
  int64_t main = 0;
  int64_t index = 0;
  int64_t pending = 0;  // compressor fp32 partial groups and their rollback history (bounded)
  int64_t global() const { return main + index; }
  int64_t total() const { return window + main + index + pending; }
};

struct CacheOptions {
  int64_t rows_per_page = 256;  // records per page, same for every kind
  // Positions a sequence can be rolled back by (speculative decoding): extra window slots and
  // compressor history. 0 = no rollback (the window ring holds exactly sliding_window rows).
  int64_t rollback_tokens = 0;
  // DSpark stages whose rings the cache holds (issue 15; 0 = none): one window ring per stage,
  // of the drafter's main KV rows (model/dspark.h), sized like a backbone window ring.
  int draft_stages = 0;
};

// The cost of a context of `tokens` tokens (all pages that a cache holding that many tokens
// owns). For the V4.1-Flash config and 2^20 tokens: global() / tokens == 890 exactly.
Result<CacheFootprint> plan_cache_bytes(const ModelConfig& config, const LayerPlan& plan, int64_t tokens,
                                        const CacheOptions& options = {});

// Record sizes of a config (head_dim for window and main rows, index_head_dim for index keys);
// fails naming the key when a dimension is not a whole number of codec blocks.
struct RecordSizes {
  int64_t window = 0, main = 0, index = 0;
};
Result<RecordSizes> record_sizes(const ModelConfig& config);

// Compressed entries a kv source of ratio r holds after `tokens` tokens.
inline int64_t entries_after(int64_t tokens, int ratio) { return ratio > 0 ? tokens / ratio : 0; }

// Rollback history slots of a kv source: the pending group after rolling back k ≤ rollback
// positions is at most r − 1 tokens that all lie within the newest rollback + r − 1 positions.
inline int64_t history_slots_for(int ratio, int64_t rollback) {
  return ratio > 1 && rollback > 0 ? rollback + ratio - 1 : 0;
}

// Bytes of a kv source's fp32 pending group (at most r − 1 tokens) and rollback history.
inline int64_t pending_bytes(int ratio, int64_t dim, int64_t rollback) {
  if (ratio <= 1) return 0;
  return (static_cast<int64_t>(ratio - 1) + history_slots_for(ratio, rollback)) * 2 * dim * 4;
}

// Pages of `rows_per_page` records needed for `rows` records.
inline int64_t pages_for(int64_t rows, int64_t rows_per_page) { return (rows + rows_per_page - 1) / rows_per_page; }

}  // namespace dsv41
