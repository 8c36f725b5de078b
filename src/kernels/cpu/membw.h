// Streaming-read memory bandwidth: the roofline of memory-bound decode (issue 3 item 6).
// A decode step reads every active weight once; it cannot run faster than those bytes divided
// by the bandwidth measured here. Owns nothing but the buffer inside measure_read_bandwidth.
//
// read_sum(p, n) = Σ p[i] mod 2^64 over n 64-bit words: the arithmetic is one add per word, so
// the loop is bound by the loads. Integer addition is associative, so the AVX2 path (eight
// interleaved streams, one 256-bit accumulator each, membw_avx2.cpp) returns exactly the
// portable (single-stream) result in any order.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

uint64_t read_sum_portable(const uint64_t* p, int64_t n);
// Call only when the CPU reports AVX2 (read_sum checks).
uint64_t read_sum_avx2(const uint64_t* p, int64_t n);
bool read_sum_uses_avx2();
// The AVX2 path when available, else the portable one.
uint64_t read_sum(const uint64_t* p, int64_t n);

struct ReadBandwidth {
  int64_t buffer_bytes = 0;
  int passes = 0;
  bool avx2 = false;
  int threads = 0;                 // ex.threads(): the pool size used for the all-threads figure
  double one_thread = 0;           // bytes/s, best pass, calling thread only
  double all_threads = 0;          // bytes/s, best pass, split over ex.pool
};

// Reads a buffer of buffer_bytes (rounded down to whole 2 MiB chunks, ≥ 1 chunk) `passes`
// times on one thread, then `passes` times over ex.pool (inline without one); the best pass of each
// (least disturbed by other processes on a shared machine). Pick buffer_bytes well above the
// last-level cache. Errors: buffer_bytes < 2 MiB, passes < 1, allocation failure.
Result<ReadBandwidth> measure_read_bandwidth(const CpuExec& ex, int64_t buffer_bytes, int passes);

}  // namespace dsv41
