// Memory-bandwidth roofline for the memory-bound kernels (decode gemm): a streaming read of a
// buffer far larger than the last-level cache, on one thread and on the whole bench pool (bench_exec.h),
// with the portable loop (what the compiler makes of it without AVX flags: SSE2) and the AVX2
// kernel (kernels/cpu/membw.h). Reported as bytes/s; compare with gemm_bench's Wbytes/s on
// decode shapes. `dsv41 bench` runs the same kernel through measure_read_bandwidth().
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "bench/bench_exec.h"
#include "kernels/cpu/membw.h"

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

// Args: threaded (0/1), avx2 (0/1).
void BM_MemReadStream(benchmark::State& state) {
  const bool threaded = state.range(0) != 0, avx2 = state.range(1) != 0;
  if (avx2 && !read_sum_uses_avx2()) {
    state.SkipWithError("no AVX2 on this CPU");
    return;
  }
  auto sum = avx2 ? &read_sum_avx2 : &read_sum_portable;
  const std::vector<uint64_t>& buf = buffer();
  const int64_t n = static_cast<int64_t>(buf.size());
  for (auto _ : state) {
    if (!threaded) {
      benchmark::DoNotOptimize(sum(buf.data(), n));
    } else {
      constexpr int64_t kChunk = 1 << 18;  // 2 MiB of uint64
      std::vector<uint64_t> partial((n + kChunk - 1) / kChunk);
      bench_exec().parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
        partial[b / kChunk] = sum(buf.data() + b, e - b);
      });
      benchmark::DoNotOptimize(partial.data());
    }
  }
  state.counters["threads"] = threaded ? bench_exec().threads() : 1;
  state.SetBytesProcessed(state.iterations() * kBufferBytes);
  state.SetLabel(avx2 ? "avx2" : "portable");
}
BENCHMARK(BM_MemReadStream)
    ->Args({0, 0})->Args({1, 0})->Args({0, 1})->Args({1, 1})
    ->ArgNames({"threaded", "avx2"})->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

}  // namespace
}  // namespace dsv41
