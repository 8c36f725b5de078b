#include "store/ssd_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "store/store_test_util.h"

namespace dsv41 {
namespace {

using namespace store_test;

SsdStoreOptions writer_options(const LogSink& log, StoreIdentity id = test_identity()) {
  SsdStoreOptions o;
  o.identity = id;
  o.log = log.fn();
  o.fsync_interval_ms = 5;
  o.segment_bytes = 64 << 10;
  return o;
}

std::unique_ptr<SsdStore> must_open(const std::string& dir, SsdStoreOptions o) {
  auto s = SsdStore::open(dir, std::move(o));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Puts chunks [from, to) and flushes.
void put_range(SsdStore& s, uint64_t from, uint64_t to, uint32_t scale = 1) {
  for (uint64_t i = from; i < to; ++i) {
    auto r = s.put(test_key(s.identity(), i), 16, test_payload(i, 16, scale));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  ASSERT_TRUE(s.flush().ok());
}

// True when chunk i is served and byte-exact; fails the test if it is served but wrong.
bool served_exact(SsdStore& s, uint64_t i, uint32_t scale = 1) {
  auto got = s.get(test_key(s.identity(), i));
  EXPECT_TRUE(got.ok());
  if (!got.ok() || !got->has_value()) return false;
  EXPECT_TRUE(**got == test_payload(i, 16, scale)) << "chunk " << i << " served with wrong bytes";
  return **got == test_payload(i, 16, scale);
}

std::vector<std::string> segment_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".dseg") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x40));
}

TEST(SsdStore, PutFlushGetRoundTripAndStats) {
  ScratchDir dir;
  LogSink log;
  auto s = must_open(dir.path, writer_options(log));
  ASSERT_TRUE(s);
  const PrefixKey k = test_key(s->identity(), 1);
  EXPECT_FALSE(s->contains(k));
  auto r = s->put(k, 16, test_payload(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, PutOutcome::kQueued);
  EXPECT_EQ(*s->put(k, 16, test_payload(1)), PutOutcome::kAlreadyQueued);
  ASSERT_TRUE(s->flush().ok());
  EXPECT_TRUE(s->synced(k));
  EXPECT_TRUE(s->contains(k));
  EXPECT_EQ(*s->put(k, 16, test_payload(1)), PutOutcome::kAlreadyStored);
  EXPECT_TRUE(served_exact(*s, 1));
  auto miss = s->get(test_key(s->identity(), 2));
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
  const StoreStats st = s->stats();
  EXPECT_EQ(st.chunks, 1u);
  EXPECT_EQ(st.tokens, 16u);
  EXPECT_EQ(st.payload_bytes, 8u * 288 + 8u * 68);
  EXPECT_DOUBLE_EQ(st.bytes_per_token(), (8.0 * 288 + 8.0 * 68) / 16);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.puts_written, 1u);
  const VerifyReport v = s->verify();
  EXPECT_TRUE(v.clean());
  ASSERT_EQ(v.parts.size(), 2u);
  EXPECT_EQ(v.parts[0].kind, RowKind::kMain);
  EXPECT_EQ(v.parts[0].bytes, 8u * 288);
  EXPECT_EQ(v.parts[1].kind, RowKind::kIndex);
  EXPECT_EQ(v.parts[1].records, 8u);
  EXPECT_EQ(v.live_tokens, 16u);
  EXPECT_TRUE(log.all().empty()) << log.all();
}

TEST(SsdStore, MalformedPayloadIsRefused) {
  ScratchDir dir;
  LogSink log;
  auto s = must_open(dir.path, writer_options(log));
  Payload p = test_payload(1);
  p.parts[0].count += 1;
  auto r = s->put(test_key(s->identity(), 1), 16, p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
}

TEST(SsdStore, ReopenRebuildsIndexAcrossSegments) {
  ScratchDir dir;
  LogSink log;
  {
    auto s = must_open(dir.path, writer_options(log));
    put_range(*s, 0, 60);  // ~3 KB each, 64 KB segments: several sealed segments
    EXPECT_GT(s->stats().segments, 1u);
  }
  for (bool read_only : {false, true}) {
    SsdStoreOptions o = writer_options(log);
    o.read_only = read_only;
    auto s = must_open(dir.path, o);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->stats().chunks, 60u);
    for (uint64_t i = 0; i < 60; ++i) EXPECT_TRUE(served_exact(*s, i)) << i;
    std::vector<PrefixKey> keys;
    for (uint64_t i = 0; i < 70; ++i) keys.push_back(test_key(s->identity(), i));
    EXPECT_EQ(s->longest_prefix(keys), 60u);
    keys[5] = test_key(test_identity(16, 9), 5);
    EXPECT_EQ(s->longest_prefix(keys), 5u);
  }
  EXPECT_TRUE(log.all().empty()) << log.all();
}

TEST(SsdStore, ReaderDoesNotWriteAnything) {
  ScratchDir dir;
  LogSink log;
  {
    auto s = must_open(dir.path, writer_options(log));
    put_range(*s, 0, 5);
  }
  auto listing = [&] {
    std::vector<std::pair<std::string, uintmax_t>> out;
    for (const auto& e : std::filesystem::directory_iterator(dir.path)) out.emplace_back(e.path().string(), e.file_size());
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto before = listing();
  SsdStoreOptions o;
  o.read_only = true;  // no identity: adopted from the directory
  o.log = log.fn();
  auto r = must_open(dir.path, o);
  ASSERT_TRUE(r);
  EXPECT_TRUE(served_exact(*r, 3));
  auto put = r->put(test_key(r->identity(), 9), 16, test_payload(9));
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.status().kind(), ErrorKind::kUnsupported);
  EXPECT_FALSE(r->gc(0).ok());
  r.reset();
  EXPECT_EQ(listing(), before);
}

TEST(SsdStore, ReaderRefreshSeesNewChunksBesideALiveWriter) {
  ScratchDir dir;
  LogSink log;
  SsdStoreOptions wo = writer_options(log);
  wo.segment_bytes = 16 << 10;
  auto w = must_open(dir.path, wo);
  put_range(*w, 0, 3);
  SsdStoreOptions ro = writer_options(log);
  ro.read_only = true;
  auto r = must_open(dir.path, ro);
  EXPECT_EQ(r->stats().chunks, 3u);
  put_range(*w, 3, 20);  // several segments, the newest unsealed
  EXPECT_FALSE(r->contains(test_key(r->identity(), 10)));
  ASSERT_TRUE(r->refresh().ok());
  EXPECT_EQ(r->stats().chunks, 20u);
  for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(served_exact(*r, i)) << i;
  // The writer evicts and compacts; a reader that has not refreshed still serves intact bytes
  // (it holds the unlinked files open), and after a refresh it agrees with the writer.
  SsdStoreOptions gc_opts = wo;
  w.reset();
  gc_opts.quota_bytes = 20 << 10;
  w = must_open(dir.path, gc_opts);
  ASSERT_TRUE(w->gc(0).ok());
  for (uint64_t i = 0; i < 20; ++i) served_exact(*r, i);  // any chunk served is exact
  ASSERT_TRUE(r->refresh().ok());
  EXPECT_EQ(r->stats().chunks, w->stats().chunks);
  EXPECT_TRUE(log.all().empty()) << log.all();
}

TEST(SsdStore, SecondWriterIsRefusedNamingDirectoryAndPid) {
  ScratchDir dir;
  LogSink log;
  auto first = must_open(dir.path, writer_options(log));
  ASSERT_TRUE(first);
  auto second = SsdStore::open(dir.path, writer_options(log));
  ASSERT_FALSE(second.ok());
  const std::string m = second.status().message();
  EXPECT_NE(m.find(dir.path), std::string::npos) << m;
  EXPECT_NE(m.find("pid " + std::to_string(::getpid())), std::string::npos) << m;
  // A reader may still open it.
  SsdStoreOptions ro = writer_options(log);
  ro.read_only = true;
  EXPECT_TRUE(SsdStore::open(dir.path, ro).ok());
  first.reset();  // the lock goes with the writer
  EXPECT_TRUE(SsdStore::open(dir.path, writer_options(log)).ok());
}

TEST(SsdStore, ForeignIdentityIsRefusedAndForeignSegmentsIgnored) {
  ScratchDir dir;
  LogSink log;
  const std::string a = dir.sub("a"), b = dir.sub("b");
  {
    auto s = must_open(a, writer_options(log, test_identity(16, 1)));
    put_range(*s, 0, 4);
  }
  // Another model, record format or chunk size: open is refused with a message naming both.
  for (StoreIdentity other : {test_identity(16, 2), test_identity(16, 1, 2), test_identity(32, 1)}) {
    auto s = SsdStore::open(a, writer_options(log, other));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("holds another store"), std::string::npos) << s.status().message();
    SsdStoreOptions ro = writer_options(log, other);
    ro.read_only = true;
    EXPECT_FALSE(SsdStore::open(a, ro).ok());
  }
  // A segment of another store copied into the directory is ignored with a log line.
  {
    auto s = must_open(b, writer_options(log, test_identity(16, 2)));
    put_range(*s, 100, 104);
  }
  const auto foreign = segment_files(b);
  ASSERT_FALSE(foreign.empty());
  std::filesystem::copy_file(foreign[0], a + "/seg-00000000000000ff.dseg");
  auto s = must_open(a, writer_options(log, test_identity(16, 1)));
  ASSERT_TRUE(s);
  EXPECT_TRUE(log.contains("belongs to another store")) << log.all();
  EXPECT_EQ(s->stats().ignored_segments, 1u);
  EXPECT_EQ(s->stats().chunks, 4u);
  EXPECT_EQ(s->stats().puts_written, 4u);  // the refused opens left the saved counters alone
  // The foreign chunks' own keys are not found through this store.
  for (uint64_t i = 100; i < 104; ++i) EXPECT_FALSE(s->contains(test_key(test_identity(16, 2), i)));
}

TEST(SsdStore, BodyByteFlipIsNeverServed) {
  ScratchDir dir;
  LogSink log;
  {
    auto s = must_open(dir.path, writer_options(log));
    put_range(*s, 0, 3);
  }
  const auto segs = segment_files(dir.path);
  ASSERT_EQ(segs.size(), 1u);
  // Chunk 1's body: header 64, record 0 spans 80 + body, round up to 8.
  const uint64_t body = 2 * kPartEntryBytes + 8 * 288 + 8 * 68;
  const uint64_t rec1 = kSegmentHeaderBytes + record_span(body);
  flip_byte(segs[0], rec1 + kRecordHeaderBytes + 1000);
  auto s = must_open(dir.path, writer_options(log));  // sealed: headers only, the flip is found on read
  EXPECT_TRUE(served_exact(*s, 0));
  EXPECT_FALSE(served_exact(*s, 1));
  EXPECT_TRUE(log.contains("body checksum mismatch")) << log.all();
  EXPECT_TRUE(served_exact(*s, 2));
  EXPECT_FALSE(s->contains(test_key(s->identity(), 1)));  // dropped after the failed read
  EXPECT_EQ(s->stats().corrupt_records, 1u);
  // It can be stored again.
  put_range(*s, 1, 2);
  EXPECT_TRUE(served_exact(*s, 1));
  s.reset();
  auto again = must_open(dir.path, writer_options(log));
  EXPECT_TRUE(served_exact(*again, 1)) << log.all();
  const VerifyReport v = again->verify();
  EXPECT_EQ(v.records_corrupt, 1u);  // the damaged original is still in its segment
  EXPECT_EQ(v.live_chunks_bad, 0u);
}

TEST(SsdStore, HeaderByteFlipSkipsOneRecordAndKeepsTheRest) {
  ScratchDir dir;
  LogSink log;
  {
    auto s = must_open(dir.path, writer_options(log));
    put_range(*s, 0, 5);
  }
  const auto segs = segment_files(dir.path);
  const uint64_t body = 2 * kPartEntryBytes + 8 * 288 + 8 * 68;
  flip_byte(segs[0], kSegmentHeaderBytes + 2 * record_span(body) + 40);  // record 2's key
  auto s = must_open(dir.path, writer_options(log));
  EXPECT_TRUE(log.contains("record header checksum mismatch")) << log.all();
  for (uint64_t i : {0, 1, 3, 4}) EXPECT_TRUE(served_exact(*s, i)) << i;
  EXPECT_FALSE(s->contains(test_key(s->identity(), 2)));
  EXPECT_GE(s->verify().records_corrupt, 1u);
}

TEST(SsdStore, TruncatedTailIsCutAndWritingContinues) {
  ScratchDir dir;
  LogSink log;
  {
    auto s = must_open(dir.path, writer_options(log));
    put_range(*s, 0, 5);
  }
  auto segs = segment_files(dir.path);
  const uint64_t body = 2 * kPartEntryBytes + 8 * 288 + 8 * 68;
  // Cut in the middle of record 3 (the seal goes too): like a crash mid-write.
  const uint64_t cut = kSegmentHeaderBytes + 3 * record_span(body) + 500;
  ASSERT_EQ(::truncate(segs[0].c_str(), static_cast<off_t>(cut)), 0);
  {
    SsdStoreOptions ro = writer_options(log);
    ro.read_only = true;
    auto r = must_open(dir.path, ro);  // a reader sees the same, and changes nothing
    EXPECT_EQ(r->stats().chunks, 3u);
    EXPECT_EQ(std::filesystem::file_size(segs[0]), cut);
  }
  auto s = must_open(dir.path, writer_options(log));
  EXPECT_TRUE(log.contains("torn")) << log.all();
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(served_exact(*s, i));
  EXPECT_FALSE(s->contains(test_key(s->identity(), 3)));
  EXPECT_FALSE(s->contains(test_key(s->identity(), 4)));
  put_range(*s, 3, 8);
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(served_exact(*s, i));
  s.reset();
  auto again = must_open(dir.path, writer_options(log));
  EXPECT_EQ(again->stats().chunks, 8u);
  EXPECT_TRUE(again->verify().clean()) << again->verify().problems.size();
}

TEST(SsdStore, GarbageFileAndEmptySegmentAreSkipped) {
  ScratchDir dir;
  LogSink log;
  {
    auto s = must_open(dir.path, writer_options(log));
    put_range(*s, 0, 2);
  }
  std::ofstream(dir.sub("seg-00000000000000f0.dseg"), std::ios::binary) << std::string(300, 'z');
  std::ofstream(dir.sub("seg-00000000000000f1.dseg"), std::ios::binary) << "";
  auto s = must_open(dir.path, writer_options(log));
  ASSERT_TRUE(s);
  EXPECT_TRUE(served_exact(*s, 0));
  EXPECT_EQ(s->stats().ignored_segments, 1u);  // the garbage; the empty one (a crash at creation) is removed
  EXPECT_FALSE(std::filesystem::exists(dir.sub("seg-00000000000000f1.dseg")));
  EXPECT_TRUE(std::filesystem::exists(dir.sub("seg-00000000000000f0.dseg")));
  put_range(*s, 2, 3);  // new segment ids continue after the highest name
  EXPECT_TRUE(served_exact(*s, 2));
}

TEST(SsdStore, TtlWithInjectedClockAndTombstonesSurviveRestart) {
  ScratchDir dir;
  LogSink log;
  FakeClock clock;
  SsdStoreOptions o = writer_options(log);
  o.clock = clock.fn();
  o.ttl_ms = 72ll * 3600 * 1000;
  {
    auto s = must_open(dir.path, o);
    put_range(*s, 0, 4);
    clock.advance_ms(71ll * 3600 * 1000);
    EXPECT_TRUE(served_exact(*s, 0));  // used: its TTL restarts
    clock.advance_ms(2ll * 3600 * 1000);  // 73 h after the write
    EXPECT_TRUE(s->contains(test_key(s->identity(), 0)));
    EXPECT_FALSE(s->contains(test_key(s->identity(), 1)));  // expired: never served
    EXPECT_FALSE(served_exact(*s, 1));
    auto gc = s->gc(clock.now->load());
    ASSERT_TRUE(gc.ok());
    EXPECT_EQ(gc->evicted_ttl, 3u);
    EXPECT_EQ(s->stats().evicted_ttl, 3u);
  }
  // Back at the write time, the evicted chunks would not be expired: only the tombstones keep
  // them gone.
  *clock.now -= 73ll * 3600 * 1000;
  auto s = must_open(dir.path, o);
  EXPECT_TRUE(served_exact(*s, 0));
  for (uint64_t i = 1; i < 4; ++i) EXPECT_FALSE(s->contains(test_key(s->identity(), i))) << i;
}

TEST(SsdStore, CompactionKeepsTombstonesWhileOlderRecordsExist) {
  ScratchDir dir;
  LogSink log;
  FakeClock clock;
  const int64_t h = 3600 * 1000;
  const int64_t t0 = *clock.now;
  SsdStoreOptions o = writer_options(log);
  o.clock = clock.fn();
  {
    auto s = must_open(dir.path, o);
    put_range(*s, 0, 8);  // all in the first segment, sealed at close
  }
  {
    auto s = must_open(dir.path, o);
    *clock.now = t0 + 71 * h;
    for (uint64_t i = 1; i < 8; ++i) EXPECT_TRUE(served_exact(*s, i));
    *clock.now = t0 + 73 * h;
    auto g = s->gc(*clock.now);  // evicts chunk 0: its tombstone goes to a second segment
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->evicted_ttl, 1u);
    put_range(*s, 100, 110);  // fillers beside the tombstone
    *clock.now = t0 + 140 * h;
    for (uint64_t i = 1; i < 8; ++i) EXPECT_TRUE(served_exact(*s, i));
    *clock.now = t0 + 147 * h;
    g = s->gc(*clock.now);  // the fillers expire: the second segment is mostly dead and compacted
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->evicted_ttl, 10u);
    EXPECT_GE(g->segments_compacted, 1u);
  }
  // At t0 chunk 0 would be fresh: only its tombstone (moved by the compaction) keeps it gone.
  *clock.now = t0 + 1;
  auto s = must_open(dir.path, o);
  EXPECT_FALSE(s->contains(test_key(s->identity(), 0)));
  for (uint64_t i = 1; i < 8; ++i) EXPECT_TRUE(served_exact(*s, i));
  for (uint64_t i = 100; i < 110; ++i) EXPECT_FALSE(s->contains(test_key(s->identity(), i)));
}

TEST(SsdStore, QuotaEvictsLeastRecentlyUsedAndCompacts) {
  ScratchDir dir;
  LogSink log;
  FakeClock clock;
  SsdStoreOptions o = writer_options(log);
  o.clock = clock.fn();
  o.quota_bytes = 128 << 10;
  o.segment_bytes = 32 << 10;
  auto s = must_open(dir.path, o);
  for (uint64_t i = 0; i < 30; ++i) {  // ~90 KB: under quota
    clock.advance_ms(1000);
    put_range(*s, i, i + 1);
  }
  clock.advance_ms(1000);
  EXPECT_TRUE(served_exact(*s, 0));  // chunk 0 becomes the most recently used
  for (uint64_t i = 30; i < 80; ++i) {  // another ~150 KB; chunk 0 stays in use
    clock.advance_ms(1000);
    put_range(*s, i, i + 1);
    if (i % 8 == 0) {
      EXPECT_TRUE(served_exact(*s, 0)) << "the recently used chunk was evicted at " << i;
    }
  }
  auto gc = s->gc(clock.now->load());
  ASSERT_TRUE(gc.ok());
  const StoreStats st = s->stats();
  EXPECT_LE(st.file_bytes, o.quota_bytes) << "segments " << st.segments;
  EXPECT_GT(st.evicted_quota, 0u);
  EXPECT_GT(st.compactions, 0u);
  EXPECT_TRUE(served_exact(*s, 0)) << "the recently used chunk was evicted";
  EXPECT_FALSE(s->contains(test_key(s->identity(), 1)));  // the oldest unused went first
  EXPECT_TRUE(served_exact(*s, 79));
  uint64_t live = 0;
  for (uint64_t i = 0; i < 80; ++i) live += s->contains(test_key(s->identity(), i));
  EXPECT_EQ(live, st.chunks);
  s.reset();
  auto again = must_open(dir.path, o);
  EXPECT_EQ(again->stats().chunks, st.chunks);
  for (uint64_t i = 0; i < 80; ++i) {
    if (again->contains(test_key(again->identity(), i))) {
      EXPECT_TRUE(served_exact(*again, i)) << i;
    }
  }
  EXPECT_TRUE(again->verify().clean());
}

TEST(SsdStore, FullQueueDropsPutsInsteadOfBlocking) {
  ScratchDir dir;
  LogSink log;
  SsdStoreOptions o = writer_options(log);
  o.queue_bytes = 64 << 10;
  o.segment_bytes = 1 << 20;
  auto s = must_open(dir.path, o);
  uint64_t dropped = 0, queued = 0;
  const Payload big = test_payload(1, 16, 16);  // ~45 KB: copying it is much faster than writing it
  for (uint64_t i = 0; i < 2000; ++i) {
    auto r = s->put(test_key(s->identity(), i), 16, big);
    ASSERT_TRUE(r.ok());
    dropped += *r == PutOutcome::kDropped;
    queued += *r == PutOutcome::kQueued;
  }
  ASSERT_TRUE(s->flush().ok());
  EXPECT_GT(dropped, 0u) << "the writer kept up with 2000 in-memory puts";
  const StoreStats st = s->stats();
  EXPECT_EQ(st.puts_dropped, dropped);
  EXPECT_EQ(st.chunks, queued);
}

// ---- injected faults (StoreEnv): no root needed -------------------------------------------------

TEST(SsdStore, InjectedFullDiskRefusesChunksAndRecovers) {
  ScratchDir dir;
  LogSink log;
  auto env = std::make_shared<FaultEnv>();
  SsdStoreOptions o = writer_options(log);
  o.env = env;
  auto s = must_open(dir.path, o);
  put_range(*s, 0, 2);  // the segment exists; now about 4 more chunks fit
  env->faults->write_budget = 12000;
  for (uint64_t i = 2; i < 20; ++i) ASSERT_TRUE(s->put(test_key(s->identity(), i), 16, test_payload(i)).ok());
  const Status f = s->flush();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("No space left on device"), std::string::npos) << f.message();
  EXPECT_TRUE(log.contains("No space left on device")) << log.all();
  StoreStats st = s->stats();
  EXPECT_GT(st.write_errors, 0u);
  EXPECT_GE(st.chunks, 4u);
  EXPECT_LT(st.chunks, 20u);
  for (uint64_t i = 0; i < 20; ++i) {
    if (s->contains(test_key(s->identity(), i))) {
      EXPECT_TRUE(served_exact(*s, i)) << i;
    }
  }
  env->faults->write_budget = -1;  // space again: the refused chunks can be stored now
  put_range(*s, 0, 20);
  for (uint64_t i = 0; i < 20; ++i) EXPECT_TRUE(served_exact(*s, i)) << i;
  s.reset();
  auto again = must_open(dir.path, writer_options(log));
  EXPECT_EQ(again->stats().chunks, 20u);
  EXPECT_TRUE(again->verify().clean());
}

TEST(SsdStore, InjectedSyncFailurePublishesNothingOfThatBatch) {
  ScratchDir dir;
  LogSink log;
  auto env = std::make_shared<FaultEnv>();
  SsdStoreOptions o = writer_options(log);
  o.env = env;
  o.fsync_interval_ms = 60000;  // only flush() syncs
  auto s = must_open(dir.path, o);
  put_range(*s, 0, 2);
  env->faults->fail_sync = true;
  for (uint64_t i = 2; i < 6; ++i) ASSERT_TRUE(s->put(test_key(s->identity(), i), 16, test_payload(i)).ok());
  const Status f = s->flush();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("fdatasync"), std::string::npos) << f.message();
  for (uint64_t i = 2; i < 6; ++i) EXPECT_FALSE(s->synced(test_key(s->identity(), i))) << i;
  EXPECT_TRUE(served_exact(*s, 1));
  env->faults->fail_sync = false;
  put_range(*s, 6, 8);
  EXPECT_TRUE(served_exact(*s, 7));
  s.reset();
  // The unsynced batch's bytes did reach the file; after a restart they are checked like any
  // record and may be served (they are valid), never corrupt.
  auto again = must_open(dir.path, writer_options(log));
  for (uint64_t i = 0; i < 8; ++i) {
    if (again->contains(test_key(again->identity(), i))) {
      EXPECT_TRUE(served_exact(*again, i)) << i;
    }
  }
  EXPECT_TRUE(again->verify().clean());
}

// ---- file systems that say no: a full tmpfs, a read-only bind mount (root only) -----------------

bool try_mount(const std::string& cmd) { return std::system((cmd + " 2>/dev/null").c_str()) == 0; }

// Unmounts at scope exit, so a failed assertion never leaves a mount behind.
struct Unmount {
  std::string path;
  ~Unmount() { (void)std::system(("umount " + path + " 2>/dev/null").c_str()); }
};

TEST(SsdStore, FullDiskOnSmallTmpfs) {
  ScratchDir dir;
  const std::string mnt = dir.sub("tmpfs");
  std::filesystem::create_directories(mnt);
  if (!try_mount("mount -t tmpfs -o size=256k tmpfs " + mnt)) GTEST_SKIP() << "cannot mount a tmpfs (not root?)";
  Unmount unmount{mnt};
  LogSink log;
  {
    SsdStoreOptions o = writer_options(log);
    o.segment_bytes = 32 << 10;
    auto s = must_open(mnt, o);
    ASSERT_TRUE(s);
    for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(s->put(test_key(s->identity(), i), 16, test_payload(i)).ok());
    Status f = s->flush();
    EXPECT_FALSE(f.ok());  // some chunks could not be written
    EXPECT_TRUE(log.contains("No space left on device")) << log.all();
    const StoreStats st = s->stats();
    EXPECT_GT(st.write_errors, 0u);
    EXPECT_GT(st.chunks, 0u);
    for (uint64_t i = 0; i < 200; ++i) {
      if (s->contains(test_key(s->identity(), i))) {
        EXPECT_TRUE(served_exact(*s, i)) << i;
      }
    }
  }
  // Reopened with a quota below the disk size, the store frees space and keeps working.
  {
    SsdStoreOptions o = writer_options(log);
    o.segment_bytes = 32 << 10;
    o.quota_bytes = 160 << 10;
    auto s = must_open(mnt, o);
    ASSERT_TRUE(s);
    auto g = s->gc(0);
    ASSERT_TRUE(g.ok());
    EXPECT_LE(g->file_bytes_after, o.quota_bytes);  // even though the disk was full
    for (uint64_t i = 200; i < 300; ++i) {
      ASSERT_TRUE(s->put(test_key(s->identity(), i), 16, test_payload(i)).ok());
      if (i % 10 == 0) (void)s->flush();
    }
    (void)s->flush();
    EXPECT_TRUE(served_exact(*s, 299)) << log.all();
    EXPECT_TRUE(s->verify().clean());
  }
}

TEST(SsdStore, ReadOnlyBindMount) {
  ScratchDir dir;
  const std::string src = dir.sub("src"), ro = dir.sub("ro");
  std::filesystem::create_directories(ro);
  LogSink log;
  {
    auto s = must_open(src, writer_options(log));
    put_range(*s, 0, 3);
  }
  if (!try_mount("mount --bind " + src + " " + ro)) GTEST_SKIP() << "cannot bind-mount (not root?)";
  Unmount unmount{ro};
  if (!try_mount("mount -o remount,ro,bind " + ro)) GTEST_SKIP() << "cannot remount read-only";
  auto w = SsdStore::open(ro, writer_options(log));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("Read-only file system"), std::string::npos) << w.status().message();
  EXPECT_NE(w.status().message().find("read-only"), std::string::npos);
  SsdStoreOptions o = writer_options(log);
  o.read_only = true;
  {
    auto r = must_open(ro, o);
    ASSERT_TRUE(r);
    for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(served_exact(*r, i));
  }
}

}  // namespace
}  // namespace dsv41
