// Packed per-sequence attention cache and its sizing plan (see sequence_cache.h). Spec: model.md §4.
#include "cache/sequence_cache.h"

#include <algorithm>
#include <string>

namespace dsv41 {
namespace {

struct RecordSizes {
  int64_t window = 0, main = 0, index = 0;
};

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

// Compressed entries a kv source of ratio r holds after `tokens` tokens.
int64_t entries_after(int64_t tokens, int ratio) { return ratio > 0 ? tokens / ratio : 0; }

}  // namespace

Result<CacheFootprint> plan_cache_bytes(const ModelConfig& config, const LayerPlan& plan, int64_t tokens,
                                    const CacheOptions& options) {
  if (tokens < 0) return invalid_argument("plan_cache_bytes: negative token count");
  if (options.rows_per_page < 1) return invalid_argument("cache rows_per_page must be ≥ 1");
  DSV41_ASSIGN_OR_RETURN(RecordSizes sizes, record_sizes(config));
  CacheFootprint bytes;
  const int64_t rpp = options.rows_per_page;
  for (const LayerInfo& layer : plan.layers) {
    bytes.window += static_cast<int64_t>(config.sliding_window) * sizes.window;
    if (layer.role != LayerRole::kFull) continue;
    const int64_t pages = PagedRows::pages_for(entries_after(tokens, layer.ratio), rpp);
    bytes.main += pages * rpp * sizes.main;
    bytes.index += pages * rpp * sizes.index;
    // The pending group is at most ratio−1 tokens of two fp32 [head_dim] projections.
    if (layer.ratio > 1)
      bytes.pending += static_cast<int64_t>(layer.ratio - 1) * 2 * config.head_dim * 4;
  }
  return bytes;
}

WindowRing::WindowRing(int64_t slots, int64_t dim)
    : slots_(slots),
      dim_(dim),
      record_bytes_(static_cast<int64_t>(window_row_bytes(static_cast<size_t>(dim)))),
      data_(static_cast<size_t>(slots * record_bytes_)) {}

void WindowRing::push(const float* x) {
  row_pack(RowKind::kWindow, x, dim_, data_.data() + (length_ % slots_) * record_bytes_);
  ++length_;
}

void WindowRing::push_rows(const float* rows, int64_t n) {
  const int64_t skip = n > slots_ ? n - slots_ : 0;
  length_ += skip;
  for (int64_t i = skip; i < n; ++i) push(rows + i * dim_);
}

void WindowRing::read(int64_t pos, float* out) const {
  row_unpack(RowKind::kWindow, data_.data() + (pos % slots_) * record_bytes_, dim_, out);
}

KvSourceCache::KvSourceCache(int layer_, int ratio_, int64_t dim_, int64_t index_dim_, PagePool* main_pool,
                             PagePool* index_pool, int64_t rows_per_page)
    : layer(layer_),
      ratio(ratio_),
      dim(dim_),
      index_dim(index_dim_),
      main(main_pool, static_cast<int64_t>(main_row_bytes(static_cast<size_t>(dim_))), rows_per_page),
      index(index_pool, static_cast<int64_t>(index_row_bytes(static_cast<size_t>(index_dim_))), rows_per_page) {}

Result<std::unique_ptr<SequenceCache>> SequenceCache::create(const ModelConfig& config, const LayerPlan& plan,
                                                             int64_t max_context, const CacheOptions& options) {
  if (max_context < 1) return invalid_argument("cache max_context must be ≥ 1");
  if (options.rows_per_page < 1) return invalid_argument("cache rows_per_page must be ≥ 1");
  if (config.sliding_window < 1)
    return invalid_argument(config.source + ": sliding_window must be ≥ 1");
  DSV41_ASSIGN_OR_RETURN(RecordSizes sizes, record_sizes(config));
  std::unique_ptr<SequenceCache> cache(new SequenceCache());
  cache->max_context_ = max_context;
  const int64_t rpp = options.rows_per_page;
  cache->main_pool_ = std::make_unique<PagePool>(rpp * sizes.main);
  cache->index_pool_ = std::make_unique<PagePool>(rpp * sizes.index);
  for (const LayerInfo& layer : plan.layers) {
    cache->windows_.emplace_back(config.sliding_window, config.head_dim);
    if (layer.role == LayerRole::kFull) {
      if (layer.ratio < 1)
        return internal_error("layer " + std::to_string(layer.index) + " is Full with ratio " +
                              std::to_string(layer.ratio));
      cache->kv_.push_back(std::make_unique<KvSourceCache>(layer.index, layer.ratio, config.head_dim,
                                                           config.index_head_dim, cache->main_pool_.get(),
                                                           cache->index_pool_.get(), rpp));
    } else {
      cache->kv_.push_back(nullptr);
    }
  }
  return cache;
}

int64_t SequenceCache::length() const {
  if (windows_.empty()) return 0;
  int64_t n = windows_.front().length();
  for (const WindowRing& w : windows_) n = std::min(n, w.length());
  return n;
}

CacheFootprint SequenceCache::bytes_in_use() const {
  CacheFootprint b;
  for (const WindowRing& w : windows_) b.window += w.bytes();
  b.main = main_pool_ ? main_pool_->bytes_in_use() : 0;
  b.index = index_pool_ ? index_pool_->bytes_in_use() : 0;
  for (const auto& kv : kv_)
    if (kv && kv->ratio > 1) b.pending += static_cast<int64_t>(kv->ratio - 1) * 2 * kv->dim * 4;
  return b;
}

void SequenceCache::reset() {
  for (WindowRing& w : windows_) w.reset();
  for (auto& kv : kv_) {
    if (!kv) continue;
    kv->main.clear();
    kv->index.clear();
    kv->pending = 0;
    kv->pending_kv.clear();
    kv->pending_gate.clear();
  }
}

std::vector<float> SequenceCache::window_rows(int layer) const {
  const WindowRing& ring = windows_[layer];
  const int64_t rows = std::min(ring.length(), ring.slots() - 1);
  std::vector<float> out(static_cast<size_t>(rows * ring.dim()));
  for (int64_t i = 0; i < rows; ++i) ring.read(ring.length() - rows + i, out.data() + i * ring.dim());
  return out;
}

std::vector<float> SequenceCache::main_rows(int layer) const {
  const KvSourceCache* kv = kv_[layer].get();
  if (!kv) return {};
  std::vector<float> out(static_cast<size_t>(kv->entries() * kv->dim));
  for (int64_t g = 0; g < kv->entries(); ++g) kv->read_main(g, out.data() + g * kv->dim);
  return out;
}

std::vector<float> SequenceCache::index_rows(int layer) const {
  const KvSourceCache* kv = kv_[layer].get();
  if (!kv) return {};
  std::vector<float> out(static_cast<size_t>(kv->entries() * kv->index_dim));
  for (int64_t g = 0; g < kv->entries(); ++g) kv->read_index(g, out.data() + g * kv->index_dim);
  return out;
}

}  // namespace dsv41
