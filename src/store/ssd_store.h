// The SSD tier of the prefix cache (spec system.md §2; docs/STORE.md has the byte layout and the
// rules): chunk payloads (packed global-KV records, opaque here) keyed by prefix keys
// (prefix_key.h), in append-only checksummed segment files (segment.h) under one directory.
//
// Writer and readers. One process opens a directory as the writer (an exclusive flock on
// `LOCK`; a second writer is refused with a message naming the directory and the holder's pid);
// any number of processes may open it read-only at the same time. A reader sees the chunks that
// were synced when it opened (it never writes, locks or truncates anything).
//
// Index. Built at open from the segments, never from a trusted side file: sealed segments by
// their record headers (each checksummed), unsealed ones (the last writer died, or is still
// writing) by reading and checking every record. Every get() re-checks the record it reads;
// a corrupt record is logged, treated as a miss and (writer) dropped. Nothing corrupt is served.
//
// Writes. put() only queues (bounded by bytes; a full queue drops the put and counts it, so a
// slow disk never stalls the engine). A background thread appends, fdatasyncs at
// `fsync_interval_ms` (or on flush()), and only then makes the chunks visible: a chunk counts
// as stored once its segment is synced. Quota (bytes on disk) and TTL (since last use) evict the
// least recently used chunks by appending tombstones; segments left mostly dead are compacted.
//
// Thread safety: every public method may be called from any thread. The object must be
// destroyed (or close()d) before its directory is removed; destruction syncs and seals.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/prefix_key.h"
#include "store/segment.h"
#include "store/store_env.h"

namespace dsv41 {

struct SsdStoreOptions {
  bool read_only = false;
  // Required to create a store. When the directory already has one, it must be equal (else open
  // fails with a message naming both); nullopt adopts the directory's (maintenance tools).
  std::optional<StoreIdentity> identity;
  uint64_t quota_bytes = 0;                         // segment-file bytes; 0 = unlimited
  int64_t ttl_ms = int64_t{72} * 3600 * 1000;       // since last use (or write); 0 = never expires
  int64_t fsync_interval_ms = 200;                  // longest a written chunk waits for its sync
  uint64_t segment_bytes = uint64_t{256} << 20;     // a segment is sealed when it would exceed this
  uint64_t queue_bytes = uint64_t{256} << 20;       // payload bytes waiting for the writer thread
  double compact_live_fraction = 0.5;               // sealed segments below this are compacted
  int64_t maintenance_interval_ms = 60 * 1000;      // automatic TTL/quota sweep (steady time)
  // Wall clock, Unix milliseconds (write times, TTL, LRU). Tests inject one.
  std::function<int64_t()> clock;
  // File system access (store_env.h); null = the real one. Tests inject faults through it.
  std::shared_ptr<StoreEnv> env;
  // One line per event worth a human's attention (corruption, refusals, disk errors). Default:
  // stderr, prefixed "dsv41 cache: ".
  std::function<void(const std::string&)> log;
};

enum class PutOutcome {
  kQueued,         // will be written; synced(key) turns true after its sync
  kAlreadyStored,  // the key is stored (same bytes by construction of keys); counts as a use
  kAlreadyQueued,  // an earlier put of the key is still on its way
  kDropped,        // the queue was full (slow disk): nothing written, counted in stats
};

struct StoreStats {
  uint64_t chunks = 0;          // live (synced, not evicted, not expired) chunks
  uint64_t tokens = 0;          // tokens they cover
  uint64_t payload_bytes = 0;   // their part bytes (what the engine handed over)
  uint64_t record_bytes = 0;    // their on-disk records (framing and padding included)
  uint64_t file_bytes = 0;      // all segment files (live + dead + headers)
  uint64_t segments = 0;
  uint64_t ignored_segments = 0;  // unreadable or of another identity (logged at open)
  double bytes_per_token() const { return tokens ? double(payload_bytes) / double(tokens) : 0.0; }
  // Counters. Since this store object opened, plus (hits..compactions) the totals that earlier
  // writers saved in COUNTERS at close.
  uint64_t hits = 0, misses = 0;
  uint64_t puts_written = 0, puts_dropped = 0, puts_duplicate = 0;
  uint64_t evicted_quota = 0, evicted_ttl = 0, compactions = 0;
  uint64_t corrupt_records = 0, write_errors = 0;
  uint64_t queued_bytes = 0;    // now waiting for the writer
};

struct VerifyReport {
  uint64_t segments = 0, ignored_segments = 0;
  uint64_t records_ok = 0, records_corrupt = 0;  // chunk records (live or dead) checked in full
  uint64_t torn_tails = 0;      // segments whose last record is incomplete (a crash mid-write)
  uint64_t bytes_scanned = 0;
  uint64_t live_chunks_ok = 0, live_chunks_bad = 0;  // what get() would serve
  std::vector<std::string> problems;  // one line each, naming file and offset
  // Live payload by kv-source layer and record kind (from the part tables of the live chunks).
  struct PartBytes {
    uint32_t layer = 0;
    RowKind kind = RowKind::kMain;
    uint32_t record_bytes = 0;
    uint64_t records = 0, bytes = 0;
  };
  std::vector<PartBytes> parts;
  uint64_t live_tokens = 0;
  bool clean() const { return records_corrupt == 0 && live_chunks_bad == 0 && ignored_segments == 0; }
};

struct GcReport {
  uint64_t evicted_ttl = 0, evicted_quota = 0, segments_compacted = 0, segments_deleted = 0;
  uint64_t file_bytes_before = 0, file_bytes_after = 0;
};

class SsdStore {
 public:
  // Opens (writer: creates) the store in `dir`. Errors: another writer holds the directory
  // (its pid named), identity mismatch, a read-only directory for a writer, I/O. Damaged
  // segments are not errors: they are logged and skipped.
  static Result<std::unique_ptr<SsdStore>> open(const std::string& dir, SsdStoreOptions options);
  ~SsdStore();
  SsdStore(const SsdStore&) = delete;
  SsdStore& operator=(const SsdStore&) = delete;

  const StoreIdentity& identity() const;
  const std::string& dir() const;
  bool read_only() const;

  // Queues a chunk. invalid_argument for a malformed payload, unsupported on a reader. The
  // payload is moved into the queue; the caller never waits for the disk.
  Result<PutOutcome> put(const PrefixKey& key, uint32_t tokens, Payload payload);
  // Waits until everything queued before the call is written and synced. io_error (the last
  // one) if a write or sync failed since the previous flush; those chunks are not stored.
  Status flush();
  bool synced(const PrefixKey& key) const;  // stored and synced (even if past its TTL)
  bool contains(const PrefixKey& key) const;  // servable: synced and not expired

  // The chunk, checksums verified; nullopt on a miss. A corrupt or unreadable record is a miss
  // (logged, and dropped from the index); the Result is kept for errors of future tiers.
  Result<std::optional<Payload>> get(const PrefixKey& key);
  // How many leading keys are servable (the global hit, in chunks).
  size_t longest_prefix(std::span<const PrefixKey> keys) const;

  StoreStats stats() const;
  // Reads every record of every segment and checks checksums and payload framing.
  VerifyReport verify() const;
  // Applies TTL and quota at Unix time `now_ms` and compacts; writer only (unsupported otherwise).
  Result<GcReport> gc(int64_t now_ms);

  // Reader: rebuilds the index from the directory now, to see chunks the writer synced since
  // this reader opened (and forget compacted ones). Reads every segment's headers, holding the
  // index lock meanwhile (concurrent get() calls wait). Writer: nothing to do, ok.
  Status refresh();

  // Flushes, seals the open segment, saves the counters and releases the lock. Idempotent.
  Status close();

  class Impl;

 private:
  explicit SsdStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv41
