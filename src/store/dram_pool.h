// The host-DRAM tier of the cache (spec system.md §2, §3 step 2): window-state snapshots (SWA
// rings and the partial compressor group) taken at prompt end and at turn end, so that a later
// turn whose global hit ends exactly there restores them instead of replaying.
//
// A snapshot is keyed by the prefix key of exactly its position (prefix_key_at: full chunks plus
// the partial last chunk chained on top) and the position itself. It must be used only when the
// global hit ends at exactly that position; lookup() therefore takes both and matches both.
// The bytes are opaque here. Budget in bytes (default 10% of physical memory) and a TTL since
// last use (default 30 minutes); least recently used snapshots go first.
//
// Thread safety: all methods may be called from any thread. Snapshots are shared immutable
// buffers: a caller may keep one after it was evicted.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "store/prefix_key.h"

namespace dsv41 {

// Physical memory / 10 (sysconf); 1 GiB when it cannot be read.
uint64_t default_dram_pool_budget();

struct DramPoolOptions {
  uint64_t budget_bytes = 0;            // 0 = default_dram_pool_budget()
  int64_t ttl_ms = 30 * 60 * 1000;      // since last use; 0 = never expires
  std::function<int64_t()> clock;       // Unix ms; default system clock (tests inject one)
};

struct DramPoolStats {
  uint64_t snapshots = 0, bytes = 0, budget_bytes = 0;
  uint64_t hits = 0, misses = 0, inserted = 0, evicted_budget = 0, expired = 0, rejected = 0;
};

using Snapshot = std::shared_ptr<const std::vector<uint8_t>>;

class DramPool {
 public:
  explicit DramPool(DramPoolOptions options = {});

  // Stores (or replaces) the snapshot at (key, position). A snapshot larger than the whole
  // budget is rejected (false); otherwise older ones are evicted to make room.
  bool put(const PrefixKey& key, uint64_t position, Snapshot snapshot);
  // The snapshot stored for exactly (key, position), or null. Refreshes its last use.
  Snapshot lookup(const PrefixKey& key, uint64_t position);
  // Drops snapshots past their TTL at `now_ms`; returns how many.
  size_t expire(int64_t now_ms);
  DramPoolStats stats() const;

 private:
  struct Node {
    PrefixKey key{};
    uint64_t position = 0;
    Snapshot snapshot;
    int64_t last_use_ms = 0;
  };
  struct Hash {
    size_t operator()(const std::pair<PrefixKey, uint64_t>& k) const;
  };
  using Lru = std::list<Node>;  // front = most recently used

  void evict_back_locked();
  size_t expire_locked(int64_t now_ms);

  DramPoolOptions opt_;
  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_map<std::pair<PrefixKey, uint64_t>, Lru::iterator, Hash> map_;
  uint64_t bytes_ = 0;
  DramPoolStats counters_;
};

}  // namespace dsv41
