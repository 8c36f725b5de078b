// SsdStore (ssd_store.h): directory handling, locking, index rebuild, the writer thread, reads,
// eviction and compaction. Byte layout in segment.h; rules in docs/STORE.md.
#include "store/ssd_store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "store/store_env.h"

namespace dsv41 {
namespace {

constexpr char kIdentityFile[] = "IDENTITY";
constexpr char kLockFile[] = "LOCK";
constexpr char kCountersFile[] = "COUNTERS";
constexpr char kIdentityHeader[] = "dsv41 cache store v1";
// After a quota eviction the live bytes are brought this far below the quota, so that the
// next few puts do not trigger another sweep at once.
constexpr double kQuotaLowWater = 0.8;

struct KeyHash {
  size_t operator()(const PrefixKey& k) const {
    size_t h;
    std::memcpy(&h, k.data(), sizeof h);  // keys are SHA-256 outputs: any 8 bytes are uniform
    return h;
  }
};

std::string short_key(const PrefixKey& k) { return digest_hex(k).substr(0, 16); }

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t system_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string segment_name(uint64_t id) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "seg-%016llx.dseg", static_cast<unsigned long long>(id));
  return buf;
}

bool parse_segment_name(const std::string& name, uint64_t* id) {
  if (name.size() != 25 || name.compare(0, 4, "seg-") != 0 || name.compare(20, 5, ".dseg") != 0) return false;
  uint64_t v = 0;
  for (size_t i = 4; i < 20; ++i) {
    const char c = name[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *id = v;
  return true;
}

std::string identity_text(const StoreIdentity& id) {
  return std::string(kIdentityHeader) + "\nroot " + digest_hex(root_key(id)) + "\nmodel_fingerprint " +
         digest_hex(id.model_fingerprint) + "\nrecord_format " + std::to_string(id.record_format) +
         "\nchunk_tokens " + std::to_string(id.chunk_tokens) + "\ntokenizer " + digest_hex(id.tokenizer) + "\n";
}

Result<StoreIdentity> parse_identity(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kIdentityHeader) return corrupt(path + ": not a dsv41 cache identity file");
  std::map<std::string, std::string> kv;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) kv[line.substr(0, sp)] = line.substr(sp + 1);
  }
  StoreIdentity id;
  for (const char* k : {"root", "model_fingerprint", "record_format", "chunk_tokens", "tokenizer"}) {
    if (!kv.count(k)) return corrupt(path + ": missing '" + k + "'");
  }
  auto fp = digest_from_hex(kv["model_fingerprint"]);
  auto tk = digest_from_hex(kv["tokenizer"]);
  auto root = digest_from_hex(kv["root"]);
  if (!fp.ok() || !tk.ok() || !root.ok()) return corrupt(path + ": malformed digest");
  id.model_fingerprint = *fp;
  id.tokenizer = *tk;
  try {
    id.record_format = static_cast<uint32_t>(std::stoul(kv["record_format"]));
    id.chunk_tokens = static_cast<uint32_t>(std::stoul(kv["chunk_tokens"]));
  } catch (...) {
    return corrupt(path + ": malformed number");
  }
  if (root_key(id) != *root) return corrupt(path + ": root key does not match the fields (edited by hand?)");
  return id;
}

std::string describe(const StoreIdentity& id) {
  return "model " + digest_hex(id.model_fingerprint).substr(0, 12) + ", record format " +
         std::to_string(id.record_format) + ", chunk " + std::to_string(id.chunk_tokens) + " tokens, tokenizer " +
         digest_hex(id.tokenizer).substr(0, 12);
}

struct Segment {
  uint64_t id = 0;
  std::string path;
  std::unique_ptr<StoreFile> file;  // open while any reader of this segment holds it
  uint64_t file_bytes = 0;  // valid bytes: the append offset of the active segment
  uint64_t live_bytes = 0;  // record spans of index entries in this segment
  bool sealed = false;
  std::vector<PrefixKey> chunk_keys;  // every chunk record (live or dead), for compaction
  std::vector<PrefixKey> drop_keys;   // every tombstone
};

struct Entry {
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint64_t span = 0;
  uint64_t body_bytes = 0;
  uint32_t parts = 0;
  uint32_t tokens = 0;
  int64_t write_ms = 0;
  int64_t last_use_ms = 0;
  uint64_t hits = 0;
  uint64_t payload_bytes() const { return body_bytes - uint64_t{parts} * kPartEntryBytes; }
};

struct Item {
  PrefixKey key{};
  uint32_t tokens = 0;
  Payload payload;
  uint64_t bytes = 0;
};

// What a scan of one segment found.
struct ScanOutcome {
  bool sealed = false;
  uint64_t valid_end = kSegmentHeaderBytes;  // end of the last good record (or seal)
  bool torn = false;                         // stopped at an incomplete record at the tail
};

using RecordFn = std::function<void(uint64_t offset, const RecordHeader& h)>;
using ProblemFn = std::function<void(const std::string&)>;

// Finds the next offset > from (multiple of kRecordAlign) holding a record header whose checksum
// holds, after a damaged header made the scanner lose its place.
Result<std::optional<uint64_t>> resync(StoreFile& f, uint64_t size, uint64_t from) {
  const std::string& path = f.path();
  constexpr size_t kBlock = 1 << 20;
  std::vector<uint8_t> buf(kBlock + kRecordHeaderBytes);
  for (uint64_t base = from + kRecordAlign; base + kRecordHeaderBytes <= size; base += kBlock) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - base));
    DSV41_ASSIGN_OR_RETURN(size_t got, f.pread(buf.data(), want, base));
    for (size_t p = 0; p + kRecordHeaderBytes <= got && p < kBlock; p += kRecordAlign) {
      if (buf[p] != 'D' || buf[p + 1] != 'S' || buf[p + 2] != 'R' || buf[p + 3] != 'C') continue;
      if (decode_record_header({buf.data() + p, kRecordHeaderBytes}, path).ok()) return std::optional<uint64_t>(base + p);
    }
  }
  return std::optional<uint64_t>();
}

// Walks the records of a segment whose header was already checked. With verify_bodies every
// chunk body is read and its checksum checked (bad ones are reported and not passed to
// on_record); otherwise only headers are read (a sealed segment: bodies are checked on get).
Result<ScanOutcome> scan_records(StoreFile& f, uint64_t size, bool verify_bodies,
                                 const RecordFn& on_record, const ProblemFn& on_problem, uint64_t* bad_bodies) {
  const std::string& path = f.path();
  ScanOutcome out;
  uint64_t off = kSegmentHeaderBytes;
  std::vector<uint8_t> body;
  uint8_t hb[kRecordHeaderBytes];
  while (off < size) {
    const std::string where = path + " @" + std::to_string(off);
    if (size - off < kRecordHeaderBytes) {
      on_problem(where + ": " + std::to_string(size - off) + " bytes of an incomplete record at the end (torn write)");
      out.torn = true;
      break;
    }
    DSV41_ASSIGN_OR_RETURN(size_t got, f.pread(hb, kRecordHeaderBytes, off));
    auto h = decode_record_header({hb, got}, where);
    if (!h.ok()) {
      DSV41_ASSIGN_OR_RETURN(std::optional<uint64_t> next, resync(f, size, off));
      if (!next) {
        on_problem(h.status().message() + "; no valid record after it (torn or damaged tail of " +
                   std::to_string(size - off) + " bytes)");
        out.torn = true;
        break;
      }
      on_problem(h.status().message() + "; skipped " + std::to_string(*next - off) + " bytes to the next record");
      if (bad_bodies) ++*bad_bodies;
      off = *next;
      continue;
    }
    const uint64_t span = record_span(h->body_bytes);
    if (span > size - off) {
      on_problem(where + ": record of " + std::to_string(span) + " bytes runs past the end (" +
                 std::to_string(size - off) + " left; torn write)");
      out.torn = true;
      break;
    }
    if (h->type == RecordType::kSeal) {
      out.sealed = true;
      out.valid_end = off + kRecordHeaderBytes;
      return out;
    }
    if (verify_bodies && h->type == RecordType::kChunk) {
      body.resize(h->body_bytes);
      DSV41_ASSIGN_OR_RETURN(size_t n, f.pread(body.data(), body.size(), off + kRecordHeaderBytes));
      const bool ok = n == body.size() && xxh3_64(body) == h->body_checksum &&
                      decode_payload_body(body, h->parts, where).ok();
      if (!ok) {
        on_problem(where + ": chunk " + short_key(h->key) + ": body checksum or framing mismatch; skipped");
        if (bad_bodies) ++*bad_bodies;
        off += span;
        continue;
      }
    }
    on_record(off, *h);
    off += span;
    out.valid_end = off;
  }
  return out;
}

// Reads and checks the chunk record of `e` in `seg`: header (checksum, type, key, length), part
// table, then the parts straight into the payload's buffers (no staging copy), hashing the body
// piece by piece. corrupt/io_error naming the file and offset.
Result<Payload> read_chunk(const Segment& seg, const Entry& e, const PrefixKey& key) {
  const std::string where = seg.path + " @" + std::to_string(e.offset);
  const uint64_t table_bytes = uint64_t{e.parts} * kPartEntryBytes;
  if (table_bytes > e.body_bytes) return corrupt(where + ": index entry inconsistent");
  std::vector<uint8_t> head(kRecordHeaderBytes + table_bytes);
  DSV41_ASSIGN_OR_RETURN(size_t got, seg.file->pread(head.data(), head.size(), e.offset));
  if (got < head.size()) return corrupt(where + ": record truncated (file shrank)");
  DSV41_ASSIGN_OR_RETURN(RecordHeader h, decode_record_header({head.data(), kRecordHeaderBytes}, where));
  if (h.type != RecordType::kChunk || h.key != key || h.body_bytes != e.body_bytes || h.parts != e.parts) {
    return corrupt(where + ": record there is not the indexed chunk");
  }
  const std::span<const uint8_t> table(head.data() + kRecordHeaderBytes, table_bytes);
  DSV41_ASSIGN_OR_RETURN(Payload p, decode_part_table(table, h.parts, h.body_bytes, where));
  std::vector<std::span<const uint8_t>> pieces{table};
  uint64_t off = e.offset + head.size();
  for (PayloadPart& part : p.parts) {
    DSV41_ASSIGN_OR_RETURN(size_t n, seg.file->pread(part.bytes.data(), part.bytes.size(), off));
    if (n < part.bytes.size()) return corrupt(where + ": record truncated (file shrank)");
    pieces.emplace_back(part.bytes);
    off += part.bytes.size();
  }
  if (xxh3_64(pieces) != h.body_checksum) return corrupt(where + ": body checksum mismatch");
  return p;
}

}  // namespace

class SsdStore::Impl {
 public:
  Impl(std::string dir, SsdStoreOptions opt) : dir_(std::move(dir)), opt_(std::move(opt)) {
    if (!opt_.clock) opt_.clock = system_ms;
    env_ = opt_.env ? opt_.env : make_posix_store_env();
    if (!opt_.log) opt_.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 cache: %s\n", m.c_str()); };
  }
  ~Impl() { (void)close(); }

  Status open();
  Status close();
  Result<PutOutcome> put(const PrefixKey& key, uint32_t tokens, Payload payload);
  Status flush();
  bool synced(const PrefixKey& key) const {
    std::lock_guard lk(mu_);
    return index_.count(key) != 0;
  }
  bool contains(const PrefixKey& key) const {
    const int64_t now = opt_.clock();
    std::lock_guard lk(mu_);
    auto it = index_.find(key);
    return it != index_.end() && !expired(it->second, now);
  }
  Result<std::optional<Payload>> get(const PrefixKey& key);
  Status refresh() {
    if (!opt_.read_only) return ok_status();
    std::lock_guard lk(mu_);
    index_.clear();
    segments_.clear();  // in-flight reads keep their segments (and fds) alive
    live_record_bytes_ = live_payload_bytes_ = live_tokens_ = 0;
    ignored_segments_ = 0;
    return rebuild_index();
  }
  size_t longest_prefix(std::span<const PrefixKey> keys) const {
    const int64_t now = opt_.clock();
    std::lock_guard lk(mu_);
    size_t n = 0;
    for (; n < keys.size(); ++n) {
      auto it = index_.find(keys[n]);
      if (it == index_.end() || expired(it->second, now)) break;
    }
    return n;
  }
  StoreStats stats() const;
  VerifyReport verify() const;
  Result<GcReport> gc(int64_t now_ms);

  std::string dir_;
  SsdStoreOptions opt_;
  StoreIdentity identity_;
  PrefixKey root_{};

 private:
  bool expired(const Entry& e, int64_t now) const { return opt_.ttl_ms > 0 && now - e.last_use_ms > opt_.ttl_ms; }
  std::string path_of(const std::string& name) const { return dir_ + "/" + name; }
  Status lock_dir();
  Status load_identity();
  Status rebuild_index();
  void load_counters();
  void save_counters();
  void log_write_error(const Status& s);

  // ---- writer thread only -------------------------------------------------------------------
  void writer_loop();
  Status append(const std::vector<uint8_t>& rec, RecordType type, const PrefixKey& key, uint64_t* offset);
  Status seal_active();   // sync, append the seal record, sync; no open segment afterwards
  Status open_segment();  // a new segment becomes the open one
  Status sync_and_publish();
  GcReport run_gc(int64_t now);
  Status compact(const std::shared_ptr<Segment>& seg);
  void erase_locked(std::unordered_map<PrefixKey, Entry, KeyHash>::iterator it);
  uint64_t file_bytes_locked() const {
    uint64_t n = 0;
    for (const auto& [id, s] : segments_) n += s->file_bytes;
    return n;
  }

  std::shared_ptr<StoreEnv> env_;
  std::unique_ptr<StoreLock> lock_;
  bool closed_ = false;
  bool started_ = false;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // wakes the writer
  std::condition_variable done_cv_;  // wakes flush() / gc() callers
  std::unordered_map<PrefixKey, Entry, KeyHash> index_;
  std::map<uint64_t, std::shared_ptr<Segment>> segments_;
  std::unordered_set<PrefixKey, KeyHash> pending_;  // queued or written, not yet synced
  std::deque<Item> queue_;
  uint64_t queue_bytes_ = 0;
  std::vector<PrefixKey> corrupt_drops_;  // found by get(); the writer appends tombstones
  uint64_t flush_req_ = 0, flush_done_ = 0;
  uint64_t gc_req_ = 0, gc_done_ = 0;
  int64_t gc_now_ = 0;
  GcReport gc_report_;
  bool stop_ = false;
  Status write_error_;  // since the last flush()
  std::string last_logged_error_;
  StoreStats counters_;  // only the counter fields are used
  uint64_t ignored_segments_ = 0;
  uint64_t next_segment_id_ = 1;
  uint64_t live_record_bytes_ = 0, live_payload_bytes_ = 0, live_tokens_ = 0;

  // Writer thread state (touched by no other thread while it runs).
  std::shared_ptr<Segment> active_;
  std::vector<std::pair<PrefixKey, Entry>> unsynced_;
  bool dirty_ = false;  // bytes appended since the last sync
  int64_t first_unsynced_ = 0;
  std::thread writer_;
};

// ---- open ---------------------------------------------------------------------------------------

Status SsdStore::Impl::lock_dir() {
  auto lock = env_->try_lock(path_of(kLockFile));
  if (lock.ok()) {
    lock_ = std::move(lock).value();
    return ok_status();
  }
  if (lock.status().kind() == ErrorKind::kInvalidArgument) {
    return invalid_argument("cache directory " + dir_ + " is in use by another writer (" + lock.status().message() +
                            "); only one process may write it: open it read-only or use another --cache-dir");
  }
  return io_error(lock.status().message() + " (cannot write to the cache directory " + dir_ +
                  "; open it read-only or choose another --cache-dir)");
}

Status SsdStore::Impl::load_identity() {
  const std::string path = path_of(kIdentityFile);
  auto existing = env_->read_file(path);
  if (!existing.ok() && existing.status().kind() != ErrorKind::kNotFound) return existing.status();
  if (existing.ok()) {
    const std::string& text = *existing;
    DSV41_ASSIGN_OR_RETURN(StoreIdentity found, parse_identity(text, path));
    if (opt_.identity && !(*opt_.identity == found)) {
      return invalid_argument("cache directory " + dir_ + " holds another store (" + describe(found) +
                              "); this run needs " + describe(*opt_.identity) +
                              ": nothing from it will be used; choose another --cache-dir or remove it");
    }
    identity_ = found;
  } else {
    if (!opt_.identity) return not_found(dir_ + ": no dsv41 cache store here (no " + kIdentityFile + " file)");
    if (opt_.read_only) return not_found(dir_ + ": no dsv41 cache store here yet (nothing to read)");
    identity_ = *opt_.identity;
    const std::string text = identity_text(identity_);
    DSV41_RETURN_IF_ERROR(env_->write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
    DSV41_RETURN_IF_ERROR(env_->sync_dir(dir_));
  }
  DSV41_RETURN_IF_ERROR(check_identity(identity_).with_context(path));
  root_ = root_key(identity_);
  return ok_status();
}

Status SsdStore::Impl::rebuild_index() {
  std::vector<std::pair<uint64_t, std::string>> files;
  DSV41_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->list_dir(dir_));
  for (const std::string& n : names) {
    uint64_t id;
    if (parse_segment_name(n, &id)) files.emplace_back(id, n);
  }
  std::sort(files.begin(), files.end());
  const int64_t now = opt_.clock();
  for (const auto& entry : files) {
    // Plain names, not structured bindings: lambdas below capture them (clang 14, which builds
    // the fuzz targets, cannot capture a structured binding).
    const uint64_t id = entry.first;
    const std::string& name = entry.second;
    next_segment_id_ = std::max(next_segment_id_, id + 1);
    auto seg = std::make_shared<Segment>();
    seg->id = id;
    seg->path = path_of(name);
    auto file = env_->open(seg->path, StoreEnv::OpenMode::kRead);
    if (!file.ok()) {
      opt_.log(file.status().message() + "; segment ignored");
      ++ignored_segments_;
      continue;
    }
    seg->file = std::move(file).value();
    DSV41_ASSIGN_OR_RETURN(const uint64_t size, seg->file->size());
    uint8_t hb[kSegmentHeaderBytes];
    DSV41_ASSIGN_OR_RETURN(size_t got, seg->file->pread(hb, sizeof hb, 0));
    auto header = decode_segment_header({hb, got}, seg->path);
    if (!header.ok() && size < kSegmentHeaderBytes && !opt_.read_only) {
      // A writer died between creating the file and syncing its header: no record can be in it.
      seg->file.reset();
      if (env_->remove(seg->path).ok()) {
        opt_.log(seg->path + ": removed a segment of " + std::to_string(size) + " bytes left by a crash at its creation");
        continue;
      }
    }
    if (!header.ok()) {
      opt_.log(header.status().message() + "; segment ignored");
      ++ignored_segments_;
      continue;
    }
    if (header->root != root_) {
      opt_.log(seg->path + ": belongs to another store (record format " + std::to_string(header->record_format) +
               ", chunk " + std::to_string(header->chunk_tokens) + " tokens, root " + short_key(header->root) +
               "; this store's root is " + short_key(root_) + "); segment ignored, none of its chunks can hit");
      ++ignored_segments_;
      continue;
    }
    // A seal record at the very end means the writer finished this segment and synced it: its
    // headers suffice (bodies are checked on every read). Otherwise every body is checked now.
    bool sealed_tail = false;
    if (size >= kSegmentHeaderBytes + kRecordHeaderBytes) {
      uint8_t tb[kRecordHeaderBytes];
      DSV41_ASSIGN_OR_RETURN(size_t n, seg->file->pread(tb, sizeof tb, size - kRecordHeaderBytes));
      auto th = decode_record_header({tb, n}, seg->path);
      sealed_tail = th.ok() && th->type == RecordType::kSeal;
    }
    uint64_t bad = 0;
    // A reader beside a live writer normally finds the newest segment unsealed with a record
    // half-written at its end: expected, so not logged.
    const bool expect_torn = opt_.read_only && id == files.back().first;
    const ProblemFn on_problem = [&](const std::string& m) {
      if (!(expect_torn && m.find("torn") != std::string::npos)) opt_.log(m);
    };
    auto on_record = [&](uint64_t off, const RecordHeader& h) {
      if (h.type == RecordType::kDrop) {
        seg->drop_keys.push_back(h.key);
        auto it = index_.find(h.key);
        if (it != index_.end()) erase_locked(it);
        return;
      }
      seg->chunk_keys.push_back(h.key);
      auto it = index_.find(h.key);
      if (it != index_.end()) erase_locked(it);  // a later copy (compaction, re-put) wins
      Entry e;
      e.segment = id;
      e.offset = off;
      e.span = record_span(h.body_bytes);
      e.body_bytes = h.body_bytes;
      e.parts = h.parts;
      e.tokens = h.tokens;
      e.write_ms = h.write_ms;
      // Last use is not persisted: after a restart a chunk counts as used when written (or now,
      // if its write time lies in the future: a clock step must not expire it early).
      e.last_use_ms = std::min(h.write_ms, now);
      index_.emplace(h.key, e);
      seg->live_bytes += e.span;
      live_record_bytes_ += e.span;
      live_payload_bytes_ += e.payload_bytes();
      live_tokens_ += e.tokens;
    };
    segments_[id] = seg;  // erase_locked looks segments up by id
    DSV41_ASSIGN_OR_RETURN(ScanOutcome sc, scan_records(*seg->file, size, !sealed_tail, on_record,
                                                        on_problem, &bad));
    counters_.corrupt_records += bad;
    seg->sealed = sc.sealed;
    seg->file_bytes = sc.sealed ? sc.valid_end : size;
    if (!sc.sealed && !opt_.read_only) {
      // The writer that wrote this segment died. Cut the torn tail (nothing after the last good
      // record was ever reported synced) and seal it, so the next open trusts its headers.
      const auto seal = encode_marker_record(RecordType::kSeal, PrefixKey{}, now);
      Status s;
      auto wf = env_->open(seg->path, StoreEnv::OpenMode::kReadWrite);
      if (!wf.ok()) s = wf.status();
      if (s.ok()) s = (*wf)->truncate(sc.valid_end);
      if (s.ok()) s = (*wf)->pwrite(seal.data(), seal.size(), sc.valid_end);
      if (s.ok()) s = (*wf)->sync();
      if (!s.ok()) {
        opt_.log(s.message() + "; " + seg->path + " left unsealed (it is fully checked at every open)");
        seg->file_bytes = size;
      } else {
        if (sc.torn) opt_.log(seg->path + ": cut " + std::to_string(size - sc.valid_end) + " bytes of torn tail and sealed");
        seg->sealed = true;
        seg->file_bytes = sc.valid_end + seal.size();
      }
    }
  }
  return ok_status();
}

void SsdStore::Impl::load_counters() {
  auto text = env_->read_file(path_of(kCountersFile));
  if (!text.ok()) return;
  std::istringstream in(*text);
  std::string name;
  uint64_t v;
  while (in >> name >> v) {
    if (name == "hits") counters_.hits += v;
    else if (name == "misses") counters_.misses += v;
    else if (name == "puts_written") counters_.puts_written += v;
    else if (name == "puts_dropped") counters_.puts_dropped += v;
    else if (name == "evicted_quota") counters_.evicted_quota += v;
    else if (name == "evicted_ttl") counters_.evicted_ttl += v;
    else if (name == "compactions") counters_.compactions += v;
  }
}

void SsdStore::Impl::save_counters() {
  const StoreStats& c = counters_;
  const std::string text = "hits " + std::to_string(c.hits) + "\nmisses " + std::to_string(c.misses) +
                           "\nputs_written " + std::to_string(c.puts_written) + "\nputs_dropped " +
                           std::to_string(c.puts_dropped) + "\nevicted_quota " + std::to_string(c.evicted_quota) +
                           "\nevicted_ttl " + std::to_string(c.evicted_ttl) + "\ncompactions " +
                           std::to_string(c.compactions) + "\n";
  // Counters are informational; a failed save only loses statistics.
  (void)env_->write_file_atomic(path_of(kCountersFile), {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Status SsdStore::Impl::open() {
  if (opt_.identity) DSV41_RETURN_IF_ERROR(check_identity(*opt_.identity));
  if (opt_.read_only) {
    if (!env_->is_dir(dir_)) return not_found(dir_ + ": no such cache directory");
  } else {
    DSV41_RETURN_IF_ERROR(env_->create_dirs(dir_));
    DSV41_RETURN_IF_ERROR(lock_dir());
  }
  DSV41_RETURN_IF_ERROR(load_identity());
  load_counters();
  {
    std::lock_guard lk(mu_);
    DSV41_RETURN_IF_ERROR(rebuild_index());
  }
  if (!opt_.read_only) {
    writer_ = std::thread([this] { writer_loop(); });
    started_ = true;
  }
  return ok_status();
}

Status SsdStore::Impl::close() {
  if (closed_) return ok_status();
  closed_ = true;
  Status s;
  if (started_) {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    writer_.join();
    s = write_error_;
  }
  // Counters only from a store that opened: a refused open (another identity) must not
  // overwrite the directory's totals.
  if (started_) save_counters();
  lock_.reset();  // releases the writer lock
  return s;
}

// ---- put / flush / get --------------------------------------------------------------------------

Result<PutOutcome> SsdStore::Impl::put(const PrefixKey& key, uint32_t tokens, Payload payload) {
  if (opt_.read_only) return unsupported(dir_ + ": cache opened read-only; put refused");
  DSV41_RETURN_IF_ERROR(check_payload(payload));
  const uint64_t bytes = payload_body_bytes(payload);
  {
    std::lock_guard lk(mu_);
    if (stop_) return unsupported(dir_ + ": cache is closing; put refused");
    auto it = index_.find(key);
    const int64_t now = opt_.clock();
    if (it != index_.end() && !expired(it->second, now)) {
      // The engine just produced this prefix again: it is in use, so LRU keeps it.
      it->second.last_use_ms = std::max(it->second.last_use_ms, now);
      ++counters_.puts_duplicate;
      return PutOutcome::kAlreadyStored;
    }
    if (pending_.count(key)) {
      ++counters_.puts_duplicate;
      return PutOutcome::kAlreadyQueued;
    }
    // A single chunk larger than the whole queue is still accepted into an empty queue.
    if (queue_bytes_ > 0 && queue_bytes_ + bytes > opt_.queue_bytes) {
      ++counters_.puts_dropped;
      return PutOutcome::kDropped;
    }
    pending_.insert(key);
    queue_bytes_ += bytes;
    queue_.push_back(Item{key, tokens, std::move(payload), bytes});
  }
  work_cv_.notify_one();
  return PutOutcome::kQueued;
}

Status SsdStore::Impl::flush() {
  if (opt_.read_only) return ok_status();
  std::unique_lock lk(mu_);
  if (stop_) return ok_status();
  const uint64_t mine = ++flush_req_;
  work_cv_.notify_one();
  done_cv_.wait(lk, [&] { return flush_done_ >= mine; });
  Status s = write_error_;
  write_error_ = Status();
  return s;
}

Result<std::optional<Payload>> SsdStore::Impl::get(const PrefixKey& key) {
  const int64_t now = opt_.clock();
  Entry e;
  std::shared_ptr<Segment> seg;
  {
    std::lock_guard lk(mu_);
    auto it = index_.find(key);
    if (it == index_.end() || expired(it->second, now)) {
      ++counters_.misses;
      return std::optional<Payload>();
    }
    e = it->second;
    auto sit = segments_.find(e.segment);
    if (sit != segments_.end()) seg = sit->second;
  }
  // The segment's fd stays open while `seg` lives, so compaction may unlink the file meanwhile.
  std::string problem;
  std::optional<Payload> out;
  if (seg == nullptr) {
    problem = "segment " + std::to_string(e.segment) + " vanished";
  } else {
    auto p = read_chunk(*seg, e, key);
    if (p.ok()) out = std::move(*p);
    else problem = p.status().message();
  }
  std::lock_guard lk(mu_);
  if (!out) {
    opt_.log(problem + " (chunk " + short_key(key) + "); not served, treated as a miss and dropped");
    ++counters_.corrupt_records;
    ++counters_.misses;
    auto it = index_.find(key);
    if (it != index_.end() && it->second.segment == e.segment && it->second.offset == e.offset) {
      erase_locked(it);
      if (!opt_.read_only) {
        corrupt_drops_.push_back(key);
        work_cv_.notify_one();
      }
    }
    return std::optional<Payload>();
  }
  ++counters_.hits;
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second.last_use_ms = std::max(it->second.last_use_ms, now);
    ++it->second.hits;
  }
  return out;
}

void SsdStore::Impl::erase_locked(std::unordered_map<PrefixKey, Entry, KeyHash>::iterator it) {
  const Entry& e = it->second;
  auto sit = segments_.find(e.segment);
  if (sit != segments_.end()) sit->second->live_bytes -= e.span;
  live_record_bytes_ -= e.span;
  live_payload_bytes_ -= e.payload_bytes();
  live_tokens_ -= e.tokens;
  index_.erase(it);
}

StoreStats SsdStore::Impl::stats() const {
  const int64_t now = opt_.clock();
  std::lock_guard lk(mu_);
  StoreStats s = counters_;
  for (const auto& [k, e] : index_) {
    if (expired(e, now)) continue;
    ++s.chunks;
    s.tokens += e.tokens;
    s.payload_bytes += e.payload_bytes();
    s.record_bytes += e.span;
  }
  s.file_bytes = file_bytes_locked();
  s.segments = segments_.size();
  s.ignored_segments = ignored_segments_;
  s.queued_bytes = queue_bytes_;
  return s;
}

VerifyReport SsdStore::Impl::verify() const {
  VerifyReport r;
  std::vector<std::shared_ptr<Segment>> segs;
  std::vector<std::pair<PrefixKey, Entry>> live;
  {
    std::lock_guard lk(mu_);
    for (const auto& [id, s] : segments_) segs.push_back(s);
    live.assign(index_.begin(), index_.end());
    r.ignored_segments = ignored_segments_;
  }
  auto problem = [&](const std::string& m) { r.problems.push_back(m); };
  for (const auto& seg : segs) {
    ++r.segments;
    auto sz = seg->file->size();
    if (!sz.ok()) {
      problem(sz.status().message());
      continue;
    }
    const uint64_t size = *sz;
    r.bytes_scanned += size;
    uint64_t bad = 0;
    auto sc = scan_records(*seg->file, size, true,
                           [&](uint64_t, const RecordHeader& h) { r.records_ok += h.type == RecordType::kChunk; },
                           problem, &bad);
    r.records_corrupt += bad;
    if (!sc.ok()) problem(sc.status().message());
    else if (sc->torn) ++r.torn_tails;
  }
  // What get() would serve: each live entry read back through the index.
  for (const auto& [key, e] : live) {
    std::shared_ptr<Segment> seg;
    for (const auto& s : segs) {
      if (s->id == e.segment) seg = s;
    }
    auto p = seg ? read_chunk(*seg, e, key) : Result<Payload>(internal_error("no segment"));
    if (p.ok()) {
      ++r.live_chunks_ok;
      r.live_tokens += e.tokens;
      for (const PayloadPart& part : p->parts) {
        auto it = std::find_if(r.parts.begin(), r.parts.end(), [&](const VerifyReport::PartBytes& b) {
          return b.layer == part.layer && b.kind == part.kind && b.record_bytes == part.record_bytes;
        });
        if (it == r.parts.end()) it = r.parts.insert(r.parts.end(), {part.layer, part.kind, part.record_bytes, 0, 0});
        it->records += part.count;
        it->bytes += part.bytes.size();
      }
    } else {
      ++r.live_chunks_bad;
      problem("indexed chunk " + short_key(key) + " in segment " + std::to_string(e.segment) + " @" +
              std::to_string(e.offset) + " does not read back intact");
    }
  }
  std::sort(r.parts.begin(), r.parts.end(), [](const auto& a, const auto& b) {
    return std::tie(a.layer, a.kind, a.record_bytes) < std::tie(b.layer, b.kind, b.record_bytes);
  });
  return r;
}

Result<GcReport> SsdStore::Impl::gc(int64_t now_ms) {
  if (opt_.read_only) return unsupported(dir_ + ": cache opened read-only; gc needs the writer");
  std::unique_lock lk(mu_);
  if (stop_) return unsupported(dir_ + ": cache is closing");
  const uint64_t mine = ++gc_req_;
  gc_now_ = now_ms;
  work_cv_.notify_one();
  done_cv_.wait(lk, [&] { return gc_done_ >= mine; });
  return gc_report_;
}

// ---- writer thread ------------------------------------------------------------------------------

void SsdStore::Impl::log_write_error(const Status& s) {
  // A full disk fails every put the same way; say it once per distinct message.
  if (s.message() != last_logged_error_) opt_.log(s.message());
  last_logged_error_ = s.message();
}

Status SsdStore::Impl::seal_active() {
  if (!active_) return ok_status();
  DSV41_RETURN_IF_ERROR(sync_and_publish());
  const auto seal = encode_marker_record(RecordType::kSeal, PrefixKey{}, opt_.clock());
  DSV41_RETURN_IF_ERROR(active_->file->pwrite(seal.data(), seal.size(), active_->file_bytes));
  DSV41_RETURN_IF_ERROR(active_->file->sync());
  std::lock_guard lk(mu_);
  active_->file_bytes += seal.size();
  active_->sealed = true;
  active_.reset();
  return ok_status();
}

Status SsdStore::Impl::open_segment() {
  auto seg = std::make_shared<Segment>();
  {
    std::lock_guard lk(mu_);
    seg->id = next_segment_id_++;
  }
  seg->path = path_of(segment_name(seg->id));
  DSV41_ASSIGN_OR_RETURN(seg->file, env_->open(seg->path, StoreEnv::OpenMode::kCreateNew));
  uint8_t hb[kSegmentHeaderBytes];
  encode_segment_header(SegmentHeader{identity_.record_format, identity_.chunk_tokens, root_}, hb);
  Status s = seg->file->pwrite(hb, sizeof hb, 0);
  if (s.ok()) s = seg->file->sync();
  if (s.ok()) s = env_->sync_dir(dir_);  // the new name must survive a power cut with its records
  if (!s.ok()) {
    seg->file.reset();
    (void)env_->remove(seg->path);
    return s;
  }
  seg->file_bytes = kSegmentHeaderBytes;
  std::lock_guard lk(mu_);
  segments_[seg->id] = seg;
  active_ = seg;
  return ok_status();
}

Status SsdStore::Impl::append(const std::vector<uint8_t>& rec, RecordType type, const PrefixKey& key, uint64_t* offset) {
  // Room is kept for the seal record, so a segment never grows past segment_bytes.
  const bool full = active_ && active_->file_bytes > kSegmentHeaderBytes &&
                    active_->file_bytes + rec.size() + kRecordHeaderBytes > opt_.segment_bytes;
  if (full) DSV41_RETURN_IF_ERROR(seal_active());
  if (!active_) DSV41_RETURN_IF_ERROR(open_segment());
  const uint64_t off = active_->file_bytes;
  Status s = active_->file->pwrite(rec.data(), rec.size(), off);
  if (!s.ok()) {
    // Leave no partial record behind (a full disk): the next append starts at the same offset.
    if (!active_->file->truncate(off).ok()) {
      // If even that fails the partial bytes stay; a later record's header is found by the
      // scanner's resync at the next open, so only this record is lost.
    }
    return s;
  }
  std::lock_guard lk(mu_);
  active_->file_bytes = off + rec.size();
  if (type == RecordType::kChunk) active_->chunk_keys.push_back(key);
  if (type == RecordType::kDrop) active_->drop_keys.push_back(key);
  if (!dirty_) first_unsynced_ = steady_ms();
  dirty_ = true;
  *offset = off;
  return ok_status();
}

Status SsdStore::Impl::sync_and_publish() {
  bool ok = true;
  Status s;
  if (dirty_ && active_) {
    s = active_->file->sync();
    ok = s.ok();
  }
  dirty_ = false;
  if (unsynced_.empty() && ok) return s;
  std::lock_guard lk(mu_);
  for (auto& [key, e] : unsynced_) {
    pending_.erase(key);
    if (!ok) continue;  // the records may still be on disk; a later open checks and finds them
    auto it = index_.find(key);
    if (it != index_.end()) erase_locked(it);
    index_.emplace(key, e);
    auto sit = segments_.find(e.segment);
    if (sit != segments_.end()) sit->second->live_bytes += e.span;
    live_record_bytes_ += e.span;
    live_payload_bytes_ += e.payload_bytes();
    live_tokens_ += e.tokens;
    ++counters_.puts_written;
  }
  unsynced_.clear();
  if (!ok) {
    ++counters_.write_errors;
    write_error_ = s;
  }
  return s;
}

Status SsdStore::Impl::compact(const std::shared_ptr<Segment>& seg) {
  // Live chunks of `seg` move to the open segment byte for byte (records carry no position).
  std::vector<std::pair<PrefixKey, Entry>> live;
  std::vector<PrefixKey> keep_drops;
  {
    std::lock_guard lk(mu_);
    for (const PrefixKey& k : seg->chunk_keys) {
      auto it = index_.find(k);
      if (it != index_.end() && it->second.segment == seg->id) live.emplace_back(k, it->second);
    }
    // A tombstone still matters while an older segment holds a record of its key (and the key
    // was not stored again since). Memory stays O(tombstones), not O(store).
    std::unordered_set<PrefixKey, KeyHash> drops;
    for (const PrefixKey& k : seg->drop_keys) {
      if (!index_.count(k)) drops.insert(k);
    }
    for (const auto& [id, s] : segments_) {
      if (id >= seg->id || drops.empty()) break;
      for (const PrefixKey& k : s->chunk_keys) {
        if (drops.erase(k)) keep_drops.push_back(k);
      }
    }
  }
  std::vector<std::pair<PrefixKey, Entry>> moved;
  std::vector<uint8_t> rec;
  Status copy_error;
  uint64_t evicted_for_space = 0;
  for (auto& [key, e] : live) {
    rec.resize(e.span);
    DSV41_ASSIGN_OR_RETURN(size_t got, seg->file->pread(rec.data(), rec.size(), e.offset));
    auto h = decode_record_header({rec.data(), std::min<size_t>(got, kRecordHeaderBytes)}, seg->path);
    const bool ok = got == rec.size() && h.ok() && h->key == key &&
                    xxh3_64({rec.data() + kRecordHeaderBytes, e.body_bytes}) == h->body_checksum;
    if (!ok) {
      opt_.log(seg->path + " @" + std::to_string(e.offset) + ": chunk " + short_key(key) +
               " is corrupt; dropped during compaction");
      std::lock_guard lk(mu_);
      ++counters_.corrupt_records;
      auto it = index_.find(key);
      if (it != index_.end() && it->second.segment == seg->id) erase_locked(it);
      continue;
    }
    uint64_t off = 0;
    if (Status s = append(rec, RecordType::kChunk, key, &off); !s.ok()) {
      // No room to copy (a full disk): the rest of this segment's chunks are evicted instead, so
      // that deleting the segment still frees space. This is a cache; losing entries is allowed.
      if (!copy_error.ok()) continue;
      copy_error = s;
    }
    if (!copy_error.ok()) {
      std::lock_guard lk(mu_);
      auto it = index_.find(key);
      if (it != index_.end() && it->second.segment == seg->id) {
        erase_locked(it);
        ++counters_.evicted_quota;
        ++evicted_for_space;
      }
      continue;
    }
    Entry ne = e;
    ne.segment = active_->id;
    ne.offset = off;
    moved.emplace_back(key, ne);
  }
  if (!copy_error.ok()) {
    opt_.log(copy_error.message() + "; compaction of " + seg->path + " evicted " + std::to_string(evicted_for_space) +
             " chunks instead of moving them");
  }
  for (const PrefixKey& k : keep_drops) {
    // A lost tombstone can only bring back a valid chunk after a restart; not worth failing for.
    uint64_t off;
    if (!append(encode_marker_record(RecordType::kDrop, k, opt_.clock()), RecordType::kDrop, k, &off).ok()) break;
  }
  DSV41_RETURN_IF_ERROR(sync_and_publish());  // the copies are durable before the original goes
  {
    std::lock_guard lk(mu_);
    for (auto& [key, ne] : moved) {
      auto it = index_.find(key);
      if (it == index_.end() || it->second.segment != seg->id) continue;
      const Entry old = it->second;
      erase_locked(it);
      Entry e = ne;
      e.last_use_ms = old.last_use_ms;
      e.hits = old.hits;
      index_.emplace(key, e);
      segments_[e.segment]->live_bytes += e.span;
      live_record_bytes_ += e.span;
      live_payload_bytes_ += e.payload_bytes();
      live_tokens_ += e.tokens;
    }
    segments_.erase(seg->id);
    ++counters_.compactions;
  }
  if (Status s = env_->remove(seg->path); !s.ok()) opt_.log(s.message());
  (void)env_->sync_dir(dir_);
  return ok_status();
}

GcReport SsdStore::Impl::run_gc(int64_t now) {
  GcReport r;
  std::vector<PrefixKey> victims;
  {
    std::lock_guard lk(mu_);
    r.file_bytes_before = file_bytes_locked();
    if (opt_.ttl_ms > 0) {
      for (auto it = index_.begin(); it != index_.end();) {
        auto next = std::next(it);
        if (expired(it->second, now)) {
          victims.push_back(it->first);
          erase_locked(it);
          ++r.evicted_ttl;
        }
        it = next;
      }
    }
  }
  std::unique_lock ul(mu_);
  if (opt_.quota_bytes > 0 && r.file_bytes_before > opt_.quota_bytes) {
    const auto low = static_cast<uint64_t>(double(opt_.quota_bytes) * kQuotaLowWater);
    // Least recently used first; ties (a burst of writes, or a restart, where last use is the
    // write time) in log order, so whole old segments die and are freed without copying.
    struct Victim {
      int64_t last_use;
      uint64_t segment, offset;
      PrefixKey key;
      bool operator<(const Victim& o) const {
        return std::tie(last_use, segment, offset) < std::tie(o.last_use, o.segment, o.offset);
      }
    };
    std::vector<Victim> lru;
    lru.reserve(index_.size());
    for (const auto& [k, e] : index_) lru.push_back(Victim{e.last_use_ms, e.segment, e.offset, k});
    // Sorted without the lock (millions of entries take a while; put/get must not wait). An
    // entry used meanwhile is skipped: it is no longer least recently used.
    ul.unlock();
    std::sort(lru.begin(), lru.end());
    ul.lock();
    for (const Victim& v : lru) {
      if (live_record_bytes_ <= low) break;
      auto it = index_.find(v.key);
      if (it == index_.end() || it->second.last_use_ms != v.last_use || it->second.segment != v.segment) continue;
      erase_locked(it);
      victims.push_back(v.key);
      ++r.evicted_quota;
    }
  }
  counters_.evicted_ttl += r.evicted_ttl;
  counters_.evicted_quota += r.evicted_quota;
  ul.unlock();
  // Tombstones make the evictions survive a restart (a lost one only brings back a valid chunk).
  for (const PrefixKey& k : victims) {
    uint64_t off;
    Status s = append(encode_marker_record(RecordType::kDrop, k, now), RecordType::kDrop, k, &off);
    if (!s.ok()) {
      log_write_error(s);
      break;
    }
  }
  if (Status s = sync_and_publish(); !s.ok()) log_write_error(s);
  // Compaction candidates: sealed segments that are mostly dead, least live first. The open
  // segment is sealed first when it is itself mostly dead, so quota can always be met.
  // Only ids are held while compacting: an unlinked segment's space returns to the disk when
  // its last reference (and so its fd) goes, which matters most when the disk is full.
  auto pick = [&](bool over_quota) {
    std::lock_guard lk(mu_);
    std::vector<std::pair<double, uint64_t>> c;
    for (const auto& [id, s] : segments_) {
      // Tombstones count as live: a segment of tombstones alone would otherwise be rewritten
      // (tombstones re-appended) by every sweep. The seal record counts as neither.
      const uint64_t overhead = kSegmentHeaderBytes + (s->sealed ? kRecordHeaderBytes : 0);
      const double data = double(std::max<uint64_t>(s->file_bytes, overhead + 1) - overhead);
      const double live = double(s->live_bytes + s->drop_keys.size() * kRecordHeaderBytes) / data;
      if (live < opt_.compact_live_fraction || (over_quota && live < 1.0)) c.emplace_back(live, id);
    }
    std::sort(c.begin(), c.end());
    return c;
  };
  bool over = false;
  {
    std::lock_guard lk(mu_);
    over = opt_.quota_bytes > 0 && file_bytes_locked() > opt_.quota_bytes;
  }
  for (const auto& [live, id] : pick(over)) {
    if (active_ && active_->id == id) {
      if (Status s = seal_active(); !s.ok()) {  // a new one opens with the next append
        log_write_error(s);
        break;
      }
    }
    std::shared_ptr<Segment> seg;
    {
      std::lock_guard lk(mu_);
      if (opt_.quota_bytes > 0 && live >= opt_.compact_live_fraction && file_bytes_locked() <= opt_.quota_bytes) break;
      auto it = segments_.find(id);
      if (it == segments_.end()) continue;
      seg = it->second;
    }
    Status s = compact(seg);
    seg.reset();
    if (!s.ok()) {
      log_write_error(s.with_context("compaction of segment " + segment_name(id)));
      break;
    }
    ++r.segments_compacted;
  }
  std::lock_guard lk(mu_);
  r.file_bytes_after = file_bytes_locked();
  return r;
}

void SsdStore::Impl::writer_loop() {
  int64_t last_maintenance = steady_ms();
  uint64_t flushed = 0, gced = 0;
  for (;;) {
    std::deque<Item> batch;
    std::vector<PrefixKey> drops;
    uint64_t flush_target, gc_target;
    int64_t gc_now;
    bool stopping;
    {
      std::unique_lock lk(mu_);
      auto ready = [&] {
        return !queue_.empty() || stop_ || flush_req_ > flushed || gc_req_ > gced || !corrupt_drops_.empty();
      };
      if (!ready()) {
        int64_t wait = dirty_ ? first_unsynced_ + opt_.fsync_interval_ms - steady_ms()
                              : last_maintenance + opt_.maintenance_interval_ms - steady_ms();
        work_cv_.wait_for(lk, std::chrono::milliseconds(std::max<int64_t>(wait, 1)), ready);
      }
      batch.swap(queue_);
      queue_bytes_ = 0;
      drops.swap(corrupt_drops_);
      flush_target = flush_req_;
      gc_target = gc_req_;
      gc_now = gc_now_;
      stopping = stop_;
    }
    // Tombstones for corrupt records first: a put of the same key can only have been accepted
    // after get() erased it, so it must land after the tombstone in the log.
    for (const PrefixKey& k : drops) {
      uint64_t off;
      (void)append(encode_marker_record(RecordType::kDrop, k, opt_.clock()), RecordType::kDrop, k, &off);
    }
    for (Item& item : batch) {
      const int64_t now = opt_.clock();
      const auto rec = encode_chunk_record(item.key, item.tokens, item.payload, now);
      uint64_t off = 0;
      Status s = append(rec, RecordType::kChunk, item.key, &off);
      if (!s.ok()) {
        log_write_error(s.with_context("chunk " + short_key(item.key) + " not stored"));
        std::lock_guard lk(mu_);
        pending_.erase(item.key);
        ++counters_.write_errors;
        write_error_ = s;
        continue;
      }
      Entry e;
      e.segment = active_->id;
      e.offset = off;
      e.span = rec.size();
      e.body_bytes = payload_body_bytes(item.payload);
      e.parts = static_cast<uint32_t>(item.payload.parts.size());
      e.tokens = item.tokens;
      e.write_ms = now;
      e.last_use_ms = now;
      unsynced_.emplace_back(item.key, e);
    }
    const bool due = dirty_ && steady_ms() - first_unsynced_ >= opt_.fsync_interval_ms;
    if (dirty_ && (due || flush_target > flushed || gc_target > gced || stopping)) {
      if (Status s = sync_and_publish(); !s.ok()) log_write_error(s);
    }
    bool over_quota;
    {
      std::lock_guard lk(mu_);
      over_quota = opt_.quota_bytes > 0 && file_bytes_locked() > opt_.quota_bytes;
    }
    if (gc_target > gced) {
      GcReport r = run_gc(gc_now);
      std::lock_guard lk(mu_);
      gc_report_ = r;
      gc_done_ = gced = gc_target;
      done_cv_.notify_all();
    } else if (over_quota || steady_ms() - last_maintenance >= opt_.maintenance_interval_ms) {
      (void)run_gc(opt_.clock());
      last_maintenance = steady_ms();
    }
    if (flush_target > flushed) {
      std::lock_guard lk(mu_);
      flush_done_ = flushed = flush_target;
      done_cv_.notify_all();
    }
    if (stopping) {
      std::lock_guard lk(mu_);
      if (queue_.empty() && corrupt_drops_.empty()) break;
    }
  }
  // Clean close: seal the open segment so the next open trusts its headers.
  if (Status s = seal_active(); !s.ok()) log_write_error(s);
  active_.reset();
  std::lock_guard lk(mu_);
  flush_done_ = flush_req_;
  gc_done_ = gc_req_;
  done_cv_.notify_all();
}

// ---- public wrappers ----------------------------------------------------------------------------

SsdStore::SsdStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SsdStore::~SsdStore() = default;

Result<std::unique_ptr<SsdStore>> SsdStore::open(const std::string& dir, SsdStoreOptions options) {
  auto impl = std::make_unique<Impl>(dir, std::move(options));
  DSV41_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<SsdStore>(new SsdStore(std::move(impl)));
}

const StoreIdentity& SsdStore::identity() const { return impl_->identity_; }
const std::string& SsdStore::dir() const { return impl_->dir_; }
bool SsdStore::read_only() const { return impl_->opt_.read_only; }
Result<PutOutcome> SsdStore::put(const PrefixKey& key, uint32_t tokens, Payload payload) {
  return impl_->put(key, tokens, std::move(payload));
}
Status SsdStore::flush() { return impl_->flush(); }
bool SsdStore::synced(const PrefixKey& key) const { return impl_->synced(key); }
bool SsdStore::contains(const PrefixKey& key) const { return impl_->contains(key); }
Result<std::optional<Payload>> SsdStore::get(const PrefixKey& key) { return impl_->get(key); }
size_t SsdStore::longest_prefix(std::span<const PrefixKey> keys) const { return impl_->longest_prefix(keys); }
StoreStats SsdStore::stats() const { return impl_->stats(); }
VerifyReport SsdStore::verify() const { return impl_->verify(); }
Result<GcReport> SsdStore::gc(int64_t now_ms) { return impl_->gc(now_ms); }
Status SsdStore::refresh() { return impl_->refresh(); }
Status SsdStore::close() { return impl_->close(); }

}  // namespace dsv41
