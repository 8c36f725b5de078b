// Packed per-sequence attention cache and its sizing plan (see sequence_cache.h). Spec: model.md §4.
#include "cache/sequence_cache.h"

#include <algorithm>
#include <string>

namespace dsv41 {

Result<std::unique_ptr<CachePools>> CachePools::create(const ModelConfig& config, int64_t rows_per_page,
                                                       int64_t budget_bytes) {
  if (rows_per_page < 1) return invalid_argument("cache rows_per_page must be ≥ 1");
  if (budget_bytes < 0) return invalid_argument("cache page budget must be ≥ 0 bytes");
  DSV41_ASSIGN_OR_RETURN(RecordSizes sizes, record_sizes(config));
  auto pools = std::make_unique<CachePools>();
  pools->budget.limit_bytes = budget_bytes;
  pools->rows_per_page = rows_per_page;
  pools->main = std::make_unique<PagePool>(rows_per_page * sizes.main, &pools->budget);
  pools->index = std::make_unique<PagePool>(rows_per_page * sizes.index, &pools->budget);
  return pools;
}

WindowRing::WindowRing(int64_t window, int64_t slots, int64_t dim)
    : window_(window),
      slots_(std::max(slots, window)),
      dim_(dim),
      record_bytes_(static_cast<int64_t>(window_row_bytes(static_cast<size_t>(dim)))),
      data_(static_cast<size_t>(slots_ * record_bytes_)) {}

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
                             PagePool* index_pool, int64_t rows_per_page, int64_t history_slots_)
    : layer(layer_),
      ratio(ratio_),
      dim(dim_),
      index_dim(index_dim_),
      main(main_pool, static_cast<int64_t>(main_row_bytes(static_cast<size_t>(dim_))), rows_per_page),
      index(index_pool, static_cast<int64_t>(index_row_bytes(static_cast<size_t>(index_dim_))), rows_per_page),
      history_slots(history_slots_),
      history_kv(static_cast<size_t>(history_slots_ * dim_)),
      history_gate(static_cast<size_t>(history_slots_ * dim_)) {}

void KvSourceCache::remember(int64_t pos, const float* kv, const float* gate) {
  if (history_slots == 0) return;
  const int64_t slot = pos % history_slots;
  std::copy(kv, kv + dim, history_kv.begin() + slot * dim);
  std::copy(gate, gate + dim, history_gate.begin() + slot * dim);
}

Result<std::unique_ptr<SequenceCache>> SequenceCache::create(const ModelConfig& config, const LayerPlan& plan,
                                                             int64_t max_context, const CacheOptions& options,
                                                             CachePools* pools) {
  if (max_context < 1) return invalid_argument("cache max_context must be ≥ 1");
  if (options.rows_per_page < 1) return invalid_argument("cache rows_per_page must be ≥ 1");
  if (options.rollback_tokens < 0) return invalid_argument("cache rollback_tokens must be ≥ 0");
  if (options.draft_stages < 0) return invalid_argument("cache draft_stages must be ≥ 0");
  if (config.sliding_window < 1) return invalid_argument(config.source + ": sliding_window must be ≥ 1");
  DSV41_ASSIGN_OR_RETURN(RecordSizes sizes, record_sizes(config));
  std::unique_ptr<SequenceCache> cache(new SequenceCache());
  cache->max_context_ = max_context;
  cache->rollback_tokens_ = options.rollback_tokens;
  if (!pools) {
    DSV41_ASSIGN_OR_RETURN(std::unique_ptr<CachePools> own, CachePools::create(config, options.rows_per_page, 0));
    cache->own_pools_ = std::move(own);
    pools = cache->own_pools_.get();
  }
  cache->pools_ = pools;
  (void)sizes;
  const int64_t slots = config.sliding_window + options.rollback_tokens;
  for (int s = 0; s < options.draft_stages; ++s) cache->drafts_.emplace_back(config.sliding_window, slots, config.head_dim);
  for (const LayerInfo& layer : plan.layers) {
    cache->windows_.emplace_back(config.sliding_window, slots, config.head_dim);
    if (layer.role == LayerRole::kFull) {
      if (layer.ratio < 1)
        return internal_error("layer " + std::to_string(layer.index) + " is Full with ratio " +
                              std::to_string(layer.ratio));
      cache->kv_.push_back(std::make_unique<KvSourceCache>(
          layer.index, layer.ratio, config.head_dim, config.index_head_dim, pools->main.get(), pools->index.get(),
          pools->rows_per_page, history_slots_for(layer.ratio, options.rollback_tokens)));
    } else {
      cache->kv_.push_back(nullptr);
    }
  }
  return cache;
}

std::unique_ptr<SequenceCache> SequenceCache::empty_like() const {
  std::unique_ptr<SequenceCache> c(new SequenceCache());
  c->max_context_ = max_context_;
  c->rollback_tokens_ = rollback_tokens_;
  c->own_pools_ = own_pools_;
  c->pools_ = pools_;
  for (const WindowRing& w : windows_) c->windows_.emplace_back(w.window(), w.slots(), w.dim());
  for (const WindowRing& w : drafts_) c->drafts_.emplace_back(w.window(), w.slots(), w.dim());
  for (const auto& kv : kv_) {
    if (!kv) {
      c->kv_.push_back(nullptr);
      continue;
    }
    c->kv_.push_back(std::make_unique<KvSourceCache>(kv->layer, kv->ratio, kv->dim, kv->index_dim, pools_->main.get(),
                                                     pools_->index.get(), pools_->rows_per_page, kv->history_slots));
  }
  return c;
}

Result<std::unique_ptr<SequenceCache>> SequenceCache::fork() const {
  std::unique_ptr<SequenceCache> c = empty_like();
  c->windows_ = windows_;
  c->drafts_ = drafts_;
  for (size_t l = 0; l < kv_.size(); ++l) {
    if (!kv_[l]) continue;
    KvSourceCache& dst = *c->kv_[l];
    const KvSourceCache& src = *kv_[l];
    dst.main.share_from(src.main, src.main.size());
    dst.index.share_from(src.index, src.index.size());
    dst.pending = src.pending;
    dst.pending_kv = src.pending_kv;
    dst.pending_gate = src.pending_gate;
    dst.history_kv = src.history_kv;
    dst.history_gate = src.history_gate;
  }
  return c;
}

Result<std::unique_ptr<SequenceCache>> SequenceCache::fork_global(int64_t prefix) const {
  if (prefix < 0 || prefix > length())
    return out_of_range("fork_global: prefix of " + std::to_string(prefix) + " positions, the sequence holds " +
                        std::to_string(length()));
  std::unique_ptr<SequenceCache> c = empty_like();
  for (WindowRing& w : c->windows_) w.restart(prefix);
  for (WindowRing& w : c->drafts_) w.restart(prefix);
  for (size_t l = 0; l < kv_.size(); ++l) {
    if (!kv_[l]) continue;
    const KvSourceCache& src = *kv_[l];
    const int64_t entries = entries_after(prefix, src.ratio);
    c->kv_[l]->main.share_from(src.main, entries);
    c->kv_[l]->index.share_from(src.index, entries);
  }
  return c;
}

Status SequenceCache::rollback(int64_t k) {
  if (k < 0 || k > rollback_tokens_)
    return out_of_range("rollback of " + std::to_string(k) + " positions; this sequence allows at most " +
                        std::to_string(rollback_tokens_));
  const int64_t len = length();
  if (k > len) return out_of_range("rollback of " + std::to_string(k) + " positions past the sequence start");
  for (const WindowRing& w : windows_)
    if (len - k < w.start())
      return invalid_argument("rollback to position " + std::to_string(len - k) +
                                 " before the windows' start " + std::to_string(w.start()));
  if (k == 0) return ok_status();
  const int64_t target = len - k;
  for (WindowRing& w : windows_) w.rollback(w.length() - target);
  // A draft ring holds at most the backbone's positions; one cut later than the target (after a
  // replay) restarts there.
  for (WindowRing& w : drafts_) {
    if (w.length() <= target) continue;
    if (target < w.start()) {
      w.restart(target);
    } else {
      w.rollback(w.length() - target);
    }
  }
  for (auto& kvp : kv_) {
    if (!kvp) continue;
    KvSourceCache& kv = *kvp;
    const int64_t entries = entries_after(target, kv.ratio);
    kv.main.truncate(entries);
    kv.index.truncate(entries);
    if (kv.ratio <= 1) continue;
    // The pending group after the rollback: positions ratio·entries … target − 1, from the history
    // (all within the newest rollback + ratio − 1 positions of the sequence before the rollback).
    const int64_t first = entries * kv.ratio;
    kv.pending = target - first;
    kv.pending_kv.resize(static_cast<size_t>(kv.pending * kv.dim));
    kv.pending_gate.resize(static_cast<size_t>(kv.pending * kv.dim));
    for (int64_t p = first; p < target; ++p) {
      const int64_t slot = p % kv.history_slots;
      std::copy_n(kv.history_kv.begin() + slot * kv.dim, kv.dim, kv.pending_kv.begin() + (p - first) * kv.dim);
      std::copy_n(kv.history_gate.begin() + slot * kv.dim, kv.dim, kv.pending_gate.begin() + (p - first) * kv.dim);
    }
  }
  return ok_status();
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
  for (const WindowRing& w : drafts_) b.window += w.bytes();
  for (const auto& kv : kv_) {
    if (!kv) continue;
    // Pages shared with another sequence count once per holder here; the pools count them once.
    b.main += kv->main.pages() * kv->main.rows_per_page() * kv->main.record_bytes();
    b.index += kv->index.pages() * kv->index.rows_per_page() * kv->index.record_bytes();
    b.pending += pending_bytes(kv->ratio, kv->dim, rollback_tokens_);
  }
  return b;
}

void SequenceCache::reset() {
  for (WindowRing& w : windows_) w.reset();
  for (WindowRing& w : drafts_) w.reset();
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
  const int64_t rows = std::min(ring.length() - ring.first_held(), ring.window() - 1);
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
