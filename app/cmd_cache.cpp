// `dsv41 cache`: maintenance of an SSD prefix-cache directory (src/store, docs/STORE.md).
//   dsv41 cache stats  [--cache-dir D] [--json]      chunks, bytes, bytes per token, hit counts
//   dsv41 cache verify [--cache-dir D]               every record's checksum and framing
//   dsv41 cache gc     [--cache-dir D] [--quota 50G] [--ttl-hours 72]   apply quota/TTL now
//   dsv41 cache bench  [--cache-dir D] [--mb 512] [--chunk-kb 222.5]    store write/read MB/s
// stats and verify open the directory read-only (they work beside a running writer); gc needs
// the writer lock. The store's identity (model, record format, chunk size) is taken from the
// directory. Default directory: $XDG_CACHE_HOME/dsv41/prefix-cache, else ~/.cache/dsv41/...
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "app/command.h"
#include "store/ssd_store.h"

namespace dsv41::app {
namespace {

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/dsv41/prefix-cache";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/dsv41/prefix-cache";
  return "/var/tmp/dsv41-prefix-cache";
}

// "50G", "512M", "4096" (bytes); binary units.
bool parse_bytes(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return false;
  }
  const std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "K" || unit == "KiB") mul = 1024.0;
  else if (unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB") mul = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return false;
  if (v < 0) return false;
  *out = static_cast<uint64_t>(v * mul);
  return true;
}

int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "dsv41 cache %s: %s\n", what, s.to_string().c_str());
  return 1;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int run_stats(const std::string& dir, bool json) {
  SsdStoreOptions o;
  o.read_only = true;
  auto s = SsdStore::open(dir, o);
  if (!s.ok()) return fail("stats", s.status());
  const StoreStats st = (*s)->stats();
  const StoreIdentity& id = (*s)->identity();
  if (json) {
    nlohmann::json j = {{"dir", dir},
                        {"model_fingerprint", digest_hex(id.model_fingerprint)},
                        {"record_format", id.record_format},
                        {"chunk_tokens", id.chunk_tokens},
                        {"chunks", st.chunks},
                        {"tokens", st.tokens},
                        {"payload_bytes", st.payload_bytes},
                        {"record_bytes", st.record_bytes},
                        {"file_bytes", st.file_bytes},
                        {"bytes_per_token", st.bytes_per_token()},
                        {"segments", st.segments},
                        {"ignored_segments", st.ignored_segments},
                        {"hits", st.hits},
                        {"misses", st.misses},
                        {"puts_written", st.puts_written},
                        {"puts_dropped", st.puts_dropped},
                        {"evicted_quota", st.evicted_quota},
                        {"evicted_ttl", st.evicted_ttl},
                        {"compactions", st.compactions},
                        {"corrupt_records", st.corrupt_records}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("cache dir        %s\n", dir.c_str());
  std::printf("identity         model %s, record format %u, chunk %u tokens\n",
              digest_hex(id.model_fingerprint).substr(0, 16).c_str(), id.record_format, id.chunk_tokens);
  std::printf("chunks           %llu (%llu tokens)\n", (unsigned long long)st.chunks, (unsigned long long)st.tokens);
  std::printf("payload bytes    %llu (%.1f bytes per token)\n", (unsigned long long)st.payload_bytes, st.bytes_per_token());
  std::printf("on disk          %llu bytes in %llu segments (%llu in live records)\n", (unsigned long long)st.file_bytes,
              (unsigned long long)st.segments, (unsigned long long)st.record_bytes);
  if (st.ignored_segments) std::printf("ignored segments %llu (see the log lines above)\n", (unsigned long long)st.ignored_segments);
  std::printf("hits / misses    %llu / %llu (totals saved by writers at close)\n", (unsigned long long)st.hits,
              (unsigned long long)st.misses);
  std::printf("puts             %llu written, %llu dropped (queue full)\n", (unsigned long long)st.puts_written,
              (unsigned long long)st.puts_dropped);
  std::printf("evicted          %llu by quota, %llu by TTL; %llu compactions\n", (unsigned long long)st.evicted_quota,
              (unsigned long long)st.evicted_ttl, (unsigned long long)st.compactions);
  return 0;
}

int run_verify(const std::string& dir) {
  SsdStoreOptions o;
  o.read_only = true;
  auto s = SsdStore::open(dir, o);
  if (!s.ok()) return fail("verify", s.status());
  const VerifyReport r = (*s)->verify();
  for (const std::string& p : r.problems) std::printf("problem: %s\n", p.c_str());
  std::printf("%llu segments (%llu ignored), %.1f MB read: %llu records ok, %llu corrupt, %llu torn tails; "
              "%llu live chunks read back intact, %llu not\n",
              (unsigned long long)r.segments, (unsigned long long)r.ignored_segments, double(r.bytes_scanned) / 1e6,
              (unsigned long long)r.records_ok, (unsigned long long)r.records_corrupt, (unsigned long long)r.torn_tails,
              (unsigned long long)r.live_chunks_ok, (unsigned long long)r.live_chunks_bad);
  if (!r.parts.empty()) {
    std::printf("live payload by kv source (%llu tokens):\n", (unsigned long long)r.live_tokens);
    for (const auto& p : r.parts) {
      std::printf("  layer %3u %-5s %4u B x %10llu = %12llu bytes (%.1f B/token)\n", p.layer, row_kind_name(p.kind),
                  p.record_bytes, (unsigned long long)p.records, (unsigned long long)p.bytes,
                  r.live_tokens ? double(p.bytes) / double(r.live_tokens) : 0.0);
    }
  }
  std::printf("%s\n", r.clean() ? "clean" : "NOT clean (damaged records are never served; `gc` compacts them away)");
  return r.clean() ? 0 : 1;
}

int run_gc(const std::string& dir, const std::string& quota, double ttl_hours) {
  SsdStoreOptions o;
  if (!quota.empty() && !parse_bytes(quota, &o.quota_bytes)) {
    return fail("gc", invalid_argument("--quota '" + quota + "': expected bytes like 50G, 512M or 4096"));
  }
  if (ttl_hours < 0) return fail("gc", invalid_argument("--ttl-hours must be >= 0"));
  o.ttl_ms = static_cast<int64_t>(ttl_hours * 3600 * 1000);
  auto s = SsdStore::open(dir, o);
  if (!s.ok()) return fail("gc", s.status());
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch()).count();
  auto r = (*s)->gc(now);
  if (!r.ok()) return fail("gc", r.status());
  std::printf("evicted %llu by TTL, %llu by quota; %llu segments compacted; %llu -> %llu bytes on disk\n",
              (unsigned long long)r->evicted_ttl, (unsigned long long)r->evicted_quota,
              (unsigned long long)r->segments_compacted, (unsigned long long)r->file_bytes_before,
              (unsigned long long)r->file_bytes_after);
  return (*s)->close().ok() ? 0 : 1;
}

// Drops a file's pages from the page cache so the next read comes from the device.
void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Writes `mb` MB of chunks shaped like V4.1 global KV (main rows of 288 B and index keys of
// 68 B) into a fresh store under `dir`, then reads them back cold and warm.
int run_bench(const std::string& parent, double mb, double chunk_kb) {
  const std::string dir = parent + "/bench-" + std::to_string(::getpid());
  StoreIdentity id;
  id.model_fingerprint.fill(0xbe);
  id.chunk_tokens = 256;
  SsdStoreOptions o;
  o.identity = id;
  o.queue_bytes = uint64_t{64} << 20;
  auto s = SsdStore::open(dir, o);
  if (!s.ok()) return fail("bench", s.status());
  // One chunk: per kv source 128 main rows (ratio-2 groups of 256 tokens) and 128 index keys;
  // as many sources as reach --chunk-kb.
  Payload p;
  const uint64_t target = static_cast<uint64_t>(chunk_kb * 1024);
  for (uint32_t layer = 0; p.data_bytes() < target; ++layer) {
    for (auto [kind, size] : {std::pair{RowKind::kMain, 288u}, std::pair{RowKind::kIndex, 68u}}) {
      PayloadPart part{layer, kind, size, 128, std::vector<uint8_t>(size_t{size} * 128)};
      for (size_t i = 0; i < part.bytes.size(); ++i) part.bytes[i] = static_cast<uint8_t>(i * 131 + layer);
      p.parts.push_back(std::move(part));
    }
  }
  const uint64_t chunk_bytes = p.data_bytes();
  const uint64_t n = std::max<uint64_t>(1, static_cast<uint64_t>(mb * 1e6 / double(chunk_bytes)));
  std::vector<PrefixKey> keys;
  PrefixKey k = root_key(id);
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(i);
    k = chain_key(k, std::span<const int32_t>(&t, 1));
    keys.push_back(k);
  }
  uint64_t retried = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    Payload copy = p;
    copy.parts[0].bytes[0] = static_cast<uint8_t>(i);
    for (;;) {
      auto r = (*s)->put(keys[i], 256, copy);
      if (!r.ok()) return fail("bench", r.status());
      if (*r != PutOutcome::kDropped) break;
      ++retried;  // the queue is full: the disk is the bottleneck, which is what we measure
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (Status f = (*s)->flush(); !f.ok()) return fail("bench", f);
  const double write_s = seconds_since(t0);
  const double total_mb = double(n * chunk_bytes) / 1e6;
  (void)(*s)->close();
  s.value().reset();
  for (const auto& e : std::filesystem::directory_iterator(dir)) drop_cache(e.path().string());
  SsdStoreOptions ro;
  ro.read_only = true;
  double read_s[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    auto r = SsdStore::open(dir, ro);
    if (!r.ok()) return fail("bench", r.status());
    auto t1 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      auto g = (*r)->get(keys[i]);
      if (!g.ok() || !g->has_value() || (*g)->data_bytes() != chunk_bytes) {
        return fail("bench", internal_error("chunk " + std::to_string(i) + " did not read back"));
      }
    }
    read_s[pass] = seconds_since(t1);
  }
  std::printf("store bench in %s: %llu chunks of %.1f KB (%.1f MB)\n", dir.c_str(), (unsigned long long)n,
              double(chunk_bytes) / 1024, total_mb);
  std::printf("write (put .. flush, fdatasync'd): %.1f MB/s  (%llu puts waited for a full queue)\n",
              total_mb / write_s, (unsigned long long)retried);
  std::printf("read  cold (page cache dropped):  %.1f MB/s, %.2f ms per chunk\n", total_mb / read_s[0],
              1e3 * read_s[0] / double(n));
  std::printf("read  warm (page cache):          %.1f MB/s, %.2f ms per chunk\n", total_mb / read_s[1],
              1e3 * read_s[1] / double(n));
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}

int cache_main(int argc, char** argv) {
  CLI::App cli{"Inspect and maintain the SSD prefix cache (docs/STORE.md)", argv[0]};
  cli.require_subcommand(1);
  std::string dir = default_cache_dir();
  bool json = false;
  std::string quota;
  double ttl_hours = 72;
  double mb = 512, chunk_kb = 222.5;  // 256 tokens x 890 B: one V4.1-Flash chunk
  auto* stats = cli.add_subcommand("stats", "chunks, bytes, bytes per token, hit counts");
  stats->add_option("--cache-dir", dir, "cache directory")->capture_default_str();
  stats->add_flag("--json", json, "print JSON");
  auto* verify = cli.add_subcommand("verify", "check the checksum and framing of every record");
  verify->add_option("--cache-dir", dir, "cache directory")->capture_default_str();
  auto* gc = cli.add_subcommand("gc", "apply the quota and TTL now and compact (needs the writer lock)");
  gc->add_option("--cache-dir", dir, "cache directory")->capture_default_str();
  gc->add_option("--quota", quota, "quota in bytes (50G, 512M); default none");
  gc->add_option("--ttl-hours", ttl_hours, "chunks unused this long are evicted (0 = never)")->capture_default_str();
  auto* bench = cli.add_subcommand("bench", "store write and read throughput in a scratch store under --cache-dir");
  bench->add_option("--cache-dir", dir, "directory on the disk to measure")->capture_default_str();
  bench->add_option("--mb", mb, "megabytes to write")->capture_default_str();
  bench->add_option("--chunk-kb", chunk_kb, "payload KiB per chunk")->capture_default_str();
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  if (*stats) return run_stats(dir, json);
  if (*verify) return run_verify(dir);
  if (*gc) return run_gc(dir, quota, ttl_hours);
  if (*bench) {
    if (!(mb > 0) || !(chunk_kb > 0)) return fail("bench", invalid_argument("--mb and --chunk-kb must be positive"));
    return run_bench(dir, mb, chunk_kb);
  }
  return 2;
}

const CommandRegistration kRegister{{"cache", "SSD prefix cache: stats, verify, gc, bench (--cache-dir)", cache_main}};

}  // namespace
}  // namespace dsv41::app
