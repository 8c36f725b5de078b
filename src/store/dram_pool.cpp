// DramPool (dram_pool.h): an LRU map of window-state snapshots with a byte budget and a TTL.
#include "store/dram_pool.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

namespace dsv41 {

uint64_t default_dram_pool_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 30;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 10;
}

size_t DramPool::Hash::operator()(const std::pair<PrefixKey, uint64_t>& k) const {
  size_t h;
  std::memcpy(&h, k.first.data(), sizeof h);  // SHA-256 bytes are uniform
  return h ^ (k.second * 0x9E3779B97F4A7C15ull);
}

DramPool::DramPool(DramPoolOptions options) : opt_(std::move(options)) {
  if (opt_.budget_bytes == 0) opt_.budget_bytes = default_dram_pool_budget();
  if (!opt_.clock) {
    opt_.clock = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
}

void DramPool::evict_back_locked() {
  Node& n = lru_.back();
  bytes_ -= n.snapshot ? n.snapshot->size() : 0;
  map_.erase({n.key, n.position});
  lru_.pop_back();
}

size_t DramPool::expire_locked(int64_t now_ms) {
  if (opt_.ttl_ms <= 0) return 0;
  size_t n = 0;
  // The list is ordered by last use, so the expired ones are all at the back.
  while (!lru_.empty() && now_ms - lru_.back().last_use_ms > opt_.ttl_ms) {
    evict_back_locked();
    ++n;
  }
  counters_.expired += n;
  return n;
}

bool DramPool::put(const PrefixKey& key, uint64_t position, Snapshot snapshot) {
  const uint64_t size = snapshot ? snapshot->size() : 0;
  const int64_t now = opt_.clock();
  std::lock_guard lk(mu_);
  if (size > opt_.budget_bytes) {
    ++counters_.rejected;
    return false;
  }
  auto it = map_.find({key, position});
  if (it != map_.end()) {
    bytes_ -= it->second->snapshot ? it->second->snapshot->size() : 0;
    lru_.erase(it->second);
    map_.erase(it);
  }
  expire_locked(now);
  while (!lru_.empty() && bytes_ + size > opt_.budget_bytes) {
    evict_back_locked();
    ++counters_.evicted_budget;
  }
  lru_.push_front(Node{key, position, std::move(snapshot), now});
  map_[{key, position}] = lru_.begin();
  bytes_ += size;
  ++counters_.inserted;
  return true;
}

Snapshot DramPool::lookup(const PrefixKey& key, uint64_t position) {
  const int64_t now = opt_.clock();
  std::lock_guard lk(mu_);
  expire_locked(now);
  auto it = map_.find({key, position});
  if (it == map_.end()) {
    ++counters_.misses;
    return nullptr;
  }
  it->second->last_use_ms = now;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++counters_.hits;
  return it->second->snapshot;
}

size_t DramPool::expire(int64_t now_ms) {
  std::lock_guard lk(mu_);
  return expire_locked(now_ms);
}

DramPoolStats DramPool::stats() const {
  std::lock_guard lk(mu_);
  DramPoolStats s = counters_;
  s.snapshots = lru_.size();
  s.bytes = bytes_;
  s.budget_bytes = opt_.budget_bytes;
  return s;
}

}  // namespace dsv41
