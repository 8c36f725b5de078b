// Memory-bandwidth roofline for the memory-bound kernels (decode gemm): a streaming read of a
// buffer far larger than the last-level cache, on one thread and on the whole default pool.
// Reported as bytes/s; compare with gemm_bench's GB/s on decode shapes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"

namespace dsv41 {
namespace {

constexpr int64_t kBufferBytes = int64_t{1} << 30;  // 1 GiB: above any L3 we run on

const std::vector<uint64_t>& buffer() {
  static const std::vector<uint64_t> buf = [] {
    std::vector<uint64_t> b(kBufferBytes / sizeof(uint64_t));
    for (size_t i = 0; i < b.size(); ++i) b[i] = i * 0x9E3779B97F4A7C15ull;  // touch every page
    return b;
  }();
  return buf;
}

// Integer sum: the compiler vectorises it without reassociation flags, so the loop is load-bound.
uint64_t sum_range(const uint64_t* p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

void BM_MemReadStream(benchmark::State& state) {
  const bool threaded = state.range(0) != 0;
  const std::vector<uint64_t>& buf = buffer();
  const int64_t n = static_cast<int64_t>(buf.size());
  for (auto _ : state) {
    if (!threaded) {
      benchmark::DoNotOptimize(sum_range(buf.data(), n));
    } else {
      constexpr int64_t kChunk = 1 << 18;  // 2 MiB of uint64
      std::vector<uint64_t> partial((n + kChunk - 1) / kChunk);
      default_pool().parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
        partial[b / kChunk] = sum_range(buf.data() + b, e - b);
      });
      benchmark::DoNotOptimize(partial.data());
    }
  }
  state.counters["threads"] = threaded ? default_pool().num_threads() : 1;
  state.SetBytesProcessed(state.iterations() * kBufferBytes);
}
BENCHMARK(BM_MemReadStream)->Arg(0)->Arg(1)->ArgNames({"threaded"})->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace
}  // namespace dsv41
