// Cache sizing from the config (see cache_plan.h).
#include "plan/cache_plan.h"

#include <string>

namespace dsv41 {

Result<RecordSizes> record_sizes(const ModelConfig& config) {
  if (config.head_dim <= 0 || config.index_head_dim <= 0)
    return invalid_argument(config.source + ": head_dim and index_head_dim must be positive");
  const size_t dim = static_cast<size_t>(config.head_dim), idim = static_cast<size_t>(config.index_head_dim);
  for (RowKind kind : {RowKind::kWindow, RowKind::kMain}) {
    Status st = check_row_channels(kind, dim);
    if (!st.ok()) return unsupported(config.source + ": head_dim: " + st.message());
  }
  Status st = check_row_channels(RowKind::kIndex, idim);
  if (!st.ok()) return unsupported(config.source + ": index_head_dim: " + st.message());
  RecordSizes s;
  s.window = static_cast<int64_t>(window_row_bytes(dim));
  s.main = static_cast<int64_t>(main_row_bytes(dim));
  s.index = static_cast<int64_t>(index_row_bytes(idim));
  return s;
}

Result<CacheFootprint> plan_cache_bytes(const ModelConfig& config, const LayerPlan& plan, int64_t tokens,
                                        const CacheOptions& options) {
  if (tokens < 0) return invalid_argument("plan_cache_bytes: negative token count");
  if (options.rows_per_page < 1) return invalid_argument("cache rows_per_page must be ≥ 1");
  if (options.rollback_tokens < 0) return invalid_argument("cache rollback_tokens must be ≥ 0");
  DSV41_ASSIGN_OR_RETURN(RecordSizes sizes, record_sizes(config));
  CacheFootprint bytes;
  const int64_t rpp = options.rows_per_page;
  for (const LayerInfo& layer : plan.layers) {
    bytes.window += (static_cast<int64_t>(config.sliding_window) + options.rollback_tokens) * sizes.window;
    if (layer.role != LayerRole::kFull) continue;
    const int64_t pages = pages_for(entries_after(tokens, layer.ratio), rpp);
    bytes.main += pages * rpp * sizes.main;
    bytes.index += pages * rpp * sizes.index;
    bytes.pending += pending_bytes(layer.ratio, config.head_dim, options.rollback_tokens);
  }
  return bytes;
}

}  // namespace dsv41
