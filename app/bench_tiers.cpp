// `dsv41 bench --tiers`: returning-turn time to first token per cache tier (see bench_tiers.h).
#include "app/bench_tiers.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "app/cache_open.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "runtime/serve_turn.h"
#include "runtime/speed_bench.h"
#include "store/dram_pool.h"

namespace dsv41::app {
namespace {

namespace fs = std::filesystem;

constexpr int kRounds = 3;

// One served turn: its wall time to the first logits and its record.
struct TimedTurn {
  const char* name = "";
  int64_t prompt_tokens = 0;
  double seconds = 0;
  ServeTurnRecord record;
};

struct TierPoint {
  int64_t context = 0;
  std::vector<TimedTurn> turns;  // cold full, cold bounded, DRAM, SSD + bounded, SSD + exact
  uint64_t disk_bytes = 0;       // the store's files
  uint64_t payload_bytes = 0;    // the packed records stored (what the engine holds)
  int64_t stored_tokens = 0;
};

// Syncs every file under `dir` and drops its pages, so the next read comes from the device.
uint64_t drop_page_cache(const std::string& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    bytes += e.file_size(ec);
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return bytes;
}

Result<TimedTurn> timed_turn(Engine& engine, const ServeTurnTiers& tiers, const char* name,
                             const std::vector<int32_t>& prompt, PrefillDepth depth, const TierBenchOptions& o,
                             bool store_chunks = false) {
  ServeTurnOptions so;
  so.store_chunks = store_chunks;
  so.depth = depth;
  so.prefill_chunk = o.prefill_chunk;
  so.max_context = static_cast<int64_t>(prompt.size()) + 1;
  so.log = [](const std::string& m) { std::fprintf(stderr, "dsv41 bench: cache: %s\n", m.c_str()); };
  const auto t0 = std::chrono::steady_clock::now();
  DSV41_ASSIGN_OR_RETURN(ServeTurnResult r, serve_turn(engine, tiers, prompt, so));
  TimedTurn t;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.name = name;
  t.prompt_tokens = static_cast<int64_t>(prompt.size());
  t.record = r.record;
  DSV41_RETURN_IF_ERROR(engine.remove_sequence(r.sequence));
  std::fprintf(stderr, "context %lld, %s: %.3f s to first token (hit %lld, windows %s)\n",
               static_cast<long long>(prompt.size()), name, t.seconds, static_cast<long long>(r.record.global_hit_tokens),
               swa_source_name(r.record.swa));
  return t;
}

Result<TierPoint> measure_context(const Model& model, int64_t C, const TierBenchOptions& o) {
  const std::string scratch = o.cache_dir + "/tiers-bench-" + std::to_string(::getpid()) + "-" + std::to_string(C);
  std::error_code ec;
  fs::remove_all(scratch, ec);
  StoreIdentity identity;
  std::unique_ptr<SsdStore> store = open_cache(scratch, o.model_dir, o.cache_chunk, identity, [](const std::string& m) {
    std::fprintf(stderr, "dsv41 bench: cache: %s\n", m.c_str());
  });
  if (!store) return io_error(scratch + ": the scratch store could not be opened (see above)");
  DramPool dram;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                         Engine::create(std::make_unique<CpuBackend>(model), model.engram_tables()));
  const std::vector<int32_t> prompt = speed_bench_prompt(model.vocab_size(), C, o.seed);
  std::vector<int32_t> returning = prompt;
  const std::vector<int32_t> suffix = speed_bench_prompt(model.vocab_size(), o.suffix, o.seed + 1);
  returning.insert(returning.end(), suffix.begin(), suffix.end());

  TierPoint p;
  p.context = C;
  const ServeTurnTiers none{nullptr, nullptr, identity};
  const ServeTurnTiers both{store.get(), &dram, identity};
  const ServeTurnTiers ssd_only{store.get(), nullptr, identity};
  // The cold full turn fills the store (its chunks) and the DRAM pool (the windows at C).
  DSV41_ASSIGN_OR_RETURN(TimedTurn cold, timed_turn(*engine, both, "cold full", prompt, PrefillDepth::kFull, o, true));
  p.payload_bytes = cold.record.ssd_written_bytes;
  DSV41_RETURN_IF_ERROR(store->flush());
  p.turns.push_back(cold);
  DSV41_ASSIGN_OR_RETURN(TimedTurn cold_b, timed_turn(*engine, none, "cold bounded", prompt, PrefillDepth::kBounded, o));
  p.turns.push_back(cold_b);
  // The hits are short: each is served kRounds times, interleaved (a shared machine's load moves
  // within seconds), and the median kept.
  struct Hit {
    const char* name;
    const ServeTurnTiers* tiers;
    PrefillDepth depth;
    std::vector<TimedTurn> runs;
  };
  std::vector<Hit> hits = {{"DRAM hit", &both, PrefillDepth::kBounded, {}},
                           {"SSD + bounded", &ssd_only, PrefillDepth::kBounded, {}},
                           {"SSD + exact", &ssd_only, PrefillDepth::kExact, {}}};
  for (int round = 0; round < kRounds; ++round) {
    for (Hit& h : hits) {
      DSV41_RETURN_IF_ERROR(store->flush());
      drop_page_cache(scratch);
      DSV41_ASSIGN_OR_RETURN(TimedTurn t, timed_turn(*engine, *h.tiers, h.name, returning, h.depth, o));
      h.runs.push_back(t);
    }
  }
  for (Hit& h : hits) {
    std::sort(h.runs.begin(), h.runs.end(), [](const TimedTurn& a, const TimedTurn& b) { return a.seconds < b.seconds; });
    p.turns.push_back(h.runs[h.runs.size() / 2]);
  }
  DSV41_RETURN_IF_ERROR(store->flush());
  p.stored_tokens = static_cast<int64_t>(store->stats().chunks) * o.cache_chunk;
  DSV41_RETURN_IF_ERROR(store->close());
  store.reset();
  // The files of the store itself (the fingerprint memo beside it is not the store's).
  for (const auto& e : fs::recursive_directory_iterator(scratch, ec))
    if (e.is_regular_file(ec) && e.path().parent_path() != fs::path(scratch)) p.disk_bytes += e.file_size(ec);
  fs::remove_all(scratch, ec);
  return p;
}

}  // namespace

int run_tier_bench_mode(const Model& model, const TierBenchOptions& o, bool json) {
  std::vector<TierPoint> points;
  for (int64_t C : o.contexts) {
    auto p = measure_context(model, C, o);
    if (!p.ok()) {
      std::fprintf(stderr, "dsv41 bench: %s\n", p.status().to_string().c_str());
      return 1;
    }
    points.push_back(std::move(*p));
  }
  if (!json) {
    for (const TierPoint& p : points) {
      const double cold = p.turns[0].seconds;
      std::printf("context %lld (+%lld new tokens in the returning turn):\n", static_cast<long long>(p.context),
                  static_cast<long long>(o.suffix));
      std::printf("  %-14s %10s %9s %9s %18s %12s\n", "turn", "TTFT s", "of cold", "hit", "windows", "SSD read B");
      for (const TimedTurn& t : p.turns)
        std::printf("  %-14s %10.3f %8.2f%% %9lld %18s %12llu\n", t.name, t.seconds, 100.0 * t.seconds / cold,
                    static_cast<long long>(t.record.global_hit_tokens), swa_source_name(t.record.swa),
                    static_cast<unsigned long long>(t.record.ssd_read_bytes));
      std::printf("  store: %llu bytes on disk for %lld tokens = %.1f B/token; payload %.1f B/token; framing %.2f%%\n",
                  static_cast<unsigned long long>(p.disk_bytes), static_cast<long long>(p.stored_tokens),
                  double(p.disk_bytes) / std::max<int64_t>(p.stored_tokens, 1),
                  double(p.payload_bytes) / std::max<int64_t>(p.stored_tokens, 1),
                  100.0 * (double(p.disk_bytes) - double(p.payload_bytes)) / std::max<double>(double(p.payload_bytes), 1));
    }
    return 0;
  }
  nlohmann::ordered_json j;
  j["suffix_tokens"] = o.suffix;
  j["cache_chunk"] = o.cache_chunk;
  j["points"] = nlohmann::json::array();
  for (const TierPoint& p : points) {
    nlohmann::ordered_json q;
    q["context"] = p.context;
    q["disk_bytes"] = p.disk_bytes;
    q["payload_bytes"] = p.payload_bytes;
    q["stored_tokens"] = p.stored_tokens;
    for (const TimedTurn& t : p.turns) {
      nlohmann::ordered_json r = nlohmann::ordered_json::parse(serve_turn_json(t.record));
      r["turn"] = t.name;
      r["ttft_seconds"] = t.seconds;
      r["fraction_of_cold_full"] = t.seconds / p.turns[0].seconds;
      q["turns"].push_back(r);
    }
    j["points"].push_back(q);
  }
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

}  // namespace dsv41::app
