// Window-state snapshots (see snapshot.h).
#include "cache/snapshot.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace dsv41 {
namespace {

constexpr char kMagic[8] = {'D', 'S', 'V', '4', '1', 'S', 'N', 'P'};

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const char* p = reinterpret_cast<const char*>(&v);
    out.append(p, sizeof v);
  }
  void bytes(const void* p, size_t n) {
    if (n > 0) out.append(static_cast<const char*>(p), n);  // p may be null when n is 0 (empty vector)
  }
  std::string out;
};

// Bounds-checked reader: every read past the end sets `bad` and yields zeros.
class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  template <typename T>
  T get() {
    T v{};
    if (!take(&v, sizeof v)) return T{};
    return v;
  }
  bool take(void* dst, size_t n) {
    if (n == 0) return !bad;  // dst may be null (an empty vector): memcpy must not see it
    if (bad || n > b_.size() - pos_) {
      bad = true;
      return false;
    }
    std::memcpy(dst, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }
  bool bad = false;

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

// Checks magic, versions and checksum; returns the body (everything before the checksum).
Result<std::string_view> checked_body(std::string_view bytes) {
  if (bytes.size() < sizeof kMagic + 4 + 4 + 8 + 8 + 8)
    return corrupt("window snapshot: " + std::to_string(bytes.size()) + " bytes, too short to be one");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return corrupt("window snapshot: bad magic");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + body.size(), 8);
  if (XXH3_64bits(body.data(), body.size()) != stored) return corrupt("window snapshot: checksum mismatch");
  uint32_t version, records;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&records, bytes.data() + 12, 4);
  if (version != kSnapshotVersion)
    return unsupported("window snapshot: version " + std::to_string(version) + ", this build reads " +
                       std::to_string(kSnapshotVersion));
  if (records != kRecordFormatVersion)
    return unsupported("window snapshot: record format " + std::to_string(records) + ", this build uses " +
                       std::to_string(kRecordFormatVersion));
  return body;
}

// The backbone's rings, then the drafter's (sequence_cache.h draft_ring).
int ring_count(const SequenceCache& cache) { return cache.num_layers() + cache.draft_stages(); }
const WindowRing& ring_at(const SequenceCache& cache, int i) {
  return i < cache.num_layers() ? cache.window(i) : cache.draft_ring(i - cache.num_layers());
}
WindowRing& ring_at(SequenceCache& cache, int i) {
  return i < cache.num_layers() ? cache.window(i) : cache.draft_ring(i - cache.num_layers());
}

struct SourceState {
  int32_t layer = 0, ratio = 0;
  int64_t entries = 0, pending = 0, history_rows = 0, history_first = 0;
  std::vector<float> pending_kv, pending_gate, history_kv, history_gate;
};

}  // namespace

std::string snapshot_sequence(const SequenceCache& cache, const std::vector<int64_t>& engram_history,
                              uint64_t model_fingerprint) {
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.put<uint32_t>(kSnapshotVersion);
  w.put<uint32_t>(kRecordFormatVersion);
  w.put<uint64_t>(model_fingerprint);
  const int64_t length = cache.length();
  w.put<int64_t>(length);
  const int rings = ring_count(cache);
  w.put<uint32_t>(static_cast<uint32_t>(rings));
  for (int l = 0; l < rings; ++l) {
    const WindowRing& ring = ring_at(cache, l);
    // A draft ring behind the backbone (never fed since a restart) is saved as restarted at n.
    if (ring.length() != length) {
      w.put<int64_t>(length);
      w.put<int64_t>(0);
      continue;
    }
    const int64_t first = std::max(ring.first_held(), ring.start());
    w.put<int64_t>(ring.start());
    w.put<int64_t>(length - first);
    for (int64_t p = first; p < length; ++p) w.bytes(ring.record(p), static_cast<size_t>(ring.record_bytes()));
  }
  uint32_t sources = 0;
  for (int l = 0; l < cache.num_layers(); ++l) sources += cache.kv_source(l) != nullptr;
  w.put<uint32_t>(sources);
  for (int l = 0; l < cache.num_layers(); ++l) {
    const KvSourceCache* kv = cache.kv_source(l);
    if (!kv) continue;
    w.put<int32_t>(kv->layer);
    w.put<int32_t>(kv->ratio);
    w.put<int64_t>(kv->entries());
    w.put<int64_t>(kv->pending);
    w.bytes(kv->pending_kv.data(), static_cast<size_t>(kv->pending * kv->dim) * 4);
    w.bytes(kv->pending_gate.data(), static_cast<size_t>(kv->pending * kv->dim) * 4);
    const int64_t rows = std::min(kv->history_slots, length);
    const int64_t first = length - rows;
    w.put<int64_t>(rows);
    w.put<int64_t>(first);
    for (int64_t p = first; p < length; ++p)
      w.bytes(kv->history_kv.data() + (p % kv->history_slots) * kv->dim, static_cast<size_t>(kv->dim) * 4);
    for (int64_t p = first; p < length; ++p)
      w.bytes(kv->history_gate.data() + (p % kv->history_slots) * kv->dim, static_cast<size_t>(kv->dim) * 4);
  }
  w.put<uint32_t>(static_cast<uint32_t>(engram_history.size()));
  for (int64_t id : engram_history) w.put<int64_t>(id);
  w.put<uint64_t>(XXH3_64bits(w.out.data(), w.out.size()));
  return std::move(w.out);
}

Result<SnapshotHeader> read_snapshot_header(std::string_view bytes) {
  DSV41_ASSIGN_OR_RETURN(std::string_view body, checked_body(bytes));
  Reader r(body.substr(16));
  SnapshotHeader h;
  h.model_fingerprint = r.get<uint64_t>();
  h.length = r.get<int64_t>();
  return h;
}

Status restore_sequence(std::string_view bytes, uint64_t model_fingerprint, SequenceCache& cache,
                        std::vector<int64_t>& engram_history) {
  DSV41_ASSIGN_OR_RETURN(std::string_view body, checked_body(bytes));
  Reader r(body.substr(16));
  const uint64_t fingerprint = r.get<uint64_t>();
  if (fingerprint != model_fingerprint)
    return invalid_argument("window snapshot: taken with another model (fingerprint mismatch)");
  const int64_t length = r.get<int64_t>();
  const uint32_t layers = r.get<uint32_t>();
  if (r.bad || length < 0 || length > cache.max_context())
    return corrupt("window snapshot: position " + std::to_string(length) + " outside the sequence's context");
  if (static_cast<int>(layers) != ring_count(cache))
    return invalid_argument("window snapshot: " + std::to_string(layers) + " window rings, this sequence has " +
                            std::to_string(ring_count(cache)) + " (" + std::to_string(cache.num_layers()) +
                            " layers + " + std::to_string(cache.draft_stages()) + " drafter stages)");
  // Parse everything first; the cache changes only once all of it checked out.
  std::vector<int64_t> starts(layers);
  std::vector<std::vector<uint8_t>> rows(layers);
  for (uint32_t l = 0; l < layers; ++l) {
    const WindowRing& ring = ring_at(cache, static_cast<int>(l));
    starts[l] = r.get<int64_t>();
    const int64_t held = r.get<int64_t>();
    if (r.bad || held < 0 || held > length || starts[l] > length || starts[l] < 0 ||
        held > (int64_t{1} << 20))
      return corrupt("window snapshot: layer " + std::to_string(l) + " window out of range");
    rows[l].resize(static_cast<size_t>(held * ring.record_bytes()));
    if (!r.take(rows[l].data(), rows[l].size())) return corrupt("window snapshot: truncated window rows");
  }
  const uint32_t sources = r.get<uint32_t>();
  std::vector<SourceState> src(sources);
  for (SourceState& s : src) {
    s.layer = r.get<int32_t>();
    s.ratio = r.get<int32_t>();
    s.entries = r.get<int64_t>();
    s.pending = r.get<int64_t>();
    const KvSourceCache* kv =
        (s.layer >= 0 && s.layer < cache.num_layers()) ? cache.kv_source(s.layer) : nullptr;
    if (r.bad || !kv || kv->ratio != s.ratio)
      return invalid_argument("window snapshot: kv source layer " + std::to_string(s.layer) +
                              " does not match this model's layer plan");
    if (s.pending < 0 || s.pending >= std::max(s.ratio, 1))
      return corrupt("window snapshot: layer " + std::to_string(s.layer) + " pending group out of range");
    if (kv->entries() != s.entries)
      return invalid_argument("window snapshot: layer " + std::to_string(s.layer) + " holds " +
                              std::to_string(kv->entries()) + " compressed entries, the snapshot continues " +
                              std::to_string(s.entries) + " (not the same prefix)");
    const size_t n = static_cast<size_t>(s.pending * kv->dim);
    s.pending_kv.resize(n);
    s.pending_gate.resize(n);
    r.take(s.pending_kv.data(), n * 4);
    r.take(s.pending_gate.data(), n * 4);
    s.history_rows = r.get<int64_t>();
    s.history_first = r.get<int64_t>();
    if (r.bad || s.history_rows < 0 || s.history_rows > length || s.history_rows > (int64_t{1} << 16))
      return corrupt("window snapshot: layer " + std::to_string(s.layer) + " history out of range");
    const size_t h = static_cast<size_t>(s.history_rows * kv->dim);
    s.history_kv.resize(h);
    s.history_gate.resize(h);
    r.take(s.history_kv.data(), h * 4);
    r.take(s.history_gate.data(), h * 4);
  }
  int sources_here = 0;
  for (int l = 0; l < cache.num_layers(); ++l) sources_here += cache.kv_source(l) != nullptr;
  if (static_cast<int>(sources) != sources_here)
    return invalid_argument("window snapshot: " + std::to_string(sources) + " kv sources, the model has " +
                            std::to_string(sources_here));
  const uint32_t nids = r.get<uint32_t>();
  if (r.bad || nids > 64) return corrupt("window snapshot: Engram look-back out of range");
  std::vector<int64_t> ids(nids);
  for (int64_t& id : ids) id = r.get<int64_t>();
  if (r.bad) return corrupt("window snapshot: truncated");
  if (r.pos() != body.size() - 16) return corrupt("window snapshot: trailing bytes");

  // Commit.
  for (uint32_t l = 0; l < layers; ++l) {
    WindowRing& ring = ring_at(cache, static_cast<int>(l));
    const int64_t rb = ring.record_bytes();
    const int64_t held = static_cast<int64_t>(rows[l].size()) / rb;
    const int64_t keep = std::min(held, ring.slots());
    for (int64_t i = held - keep; i < held; ++i) {
      const int64_t p = length - held + i;
      std::memcpy(ring.raw().data() + (p % ring.slots()) * rb, rows[l].data() + i * rb, static_cast<size_t>(rb));
    }
    ring.set_positions(starts[l], length);
  }
  for (SourceState& s : src) {
    KvSourceCache& kv = *cache.kv_source(s.layer);
    kv.pending = s.pending;
    kv.pending_kv = std::move(s.pending_kv);
    kv.pending_gate = std::move(s.pending_gate);
    if (kv.history_slots > 0) {
      for (int64_t i = 0; i < s.history_rows; ++i) {
        const int64_t p = s.history_first + i;
        const int64_t slot = p % kv.history_slots;
        std::copy_n(s.history_kv.begin() + i * kv.dim, kv.dim, kv.history_kv.begin() + slot * kv.dim);
        std::copy_n(s.history_gate.begin() + i * kv.dim, kv.dim, kv.history_gate.begin() + slot * kv.dim);
      }
    }
  }
  engram_history = std::move(ids);
  return ok_status();
}

}  // namespace dsv41
