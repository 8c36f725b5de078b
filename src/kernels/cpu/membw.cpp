// Streaming-read bandwidth (see membw.h): the portable loop, dispatch, and the timed passes.
#include "kernels/cpu/membw.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <vector>


namespace dsv41 {

uint64_t read_sum_portable(const uint64_t* p, int64_t n) {
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

bool read_sum_uses_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

uint64_t read_sum(const uint64_t* p, int64_t n) {
  return read_sum_uses_avx2() ? read_sum_avx2(p, n) : read_sum_portable(p, n);
}

namespace {

constexpr int64_t kChunkWords = int64_t{1} << 18;  // 2 MiB per pool task

double seconds_of(const auto& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<ReadBandwidth> measure_read_bandwidth(const CpuExec& ex, int64_t buffer_bytes, int passes) {
  const int64_t chunks = buffer_bytes / (kChunkWords * 8);
  if (chunks < 1) return invalid_argument("bandwidth buffer must be at least 2 MiB, got " + std::to_string(buffer_bytes));
  if (passes < 1) return invalid_argument("bandwidth passes must be ≥ 1, got " + std::to_string(passes));
  const int64_t n = chunks * kChunkWords;
  std::unique_ptr<uint64_t[]> buf(new (std::nothrow) uint64_t[n]);
  if (!buf) return internal_error("cannot allocate a " + std::to_string(n * 8) + "-byte bandwidth buffer");
  // Touch every page (and make the sum data-dependent) before timing.
  for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  const uint64_t want = read_sum_portable(buf.get(), n);

  ReadBandwidth r;
  r.buffer_bytes = n * 8;
  r.passes = passes;
  r.avx2 = read_sum_uses_avx2();
  r.threads = ex.threads();
  double best1 = 1e300, bestn = 1e300;
  bool consistent = true;
  for (int k = 0; k < passes; ++k) {
    uint64_t got = 0;
    best1 = std::min(best1, seconds_of([&] { got = read_sum(buf.get(), n); }));
    consistent &= got == want;
  }
  std::vector<uint64_t> partial(chunks);
  for (int k = 0; k < passes; ++k) {
    bestn = std::min(bestn, seconds_of([&] {
      ex.parallel_for(n, kChunkWords, [&](int64_t b, int64_t e) {
        partial[b / kChunkWords] = read_sum(buf.get() + b, e - b);
      });
    }));
    uint64_t got = 0;
    for (uint64_t v : partial) got += v;
    consistent &= got == want;
  }
  // The sums keep the compiler from dropping the reads; a mismatch would be a kernel bug.
  if (!consistent) return internal_error("bandwidth read sums disagree with the portable sum");
  r.one_thread = static_cast<double>(r.buffer_bytes) / best1;
  r.all_threads = static_cast<double>(r.buffer_bytes) / bestn;
  return r;
}

}  // namespace dsv41
