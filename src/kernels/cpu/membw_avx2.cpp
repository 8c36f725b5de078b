// AVX2 streaming read (see membw.h). The range is cut into kStreams contiguous parts read in
// lockstep, 64 bytes of each per step: one linear stream leaves the core's hardware prefetchers
// and fill buffers half idle (≈ 12 GB/s on one core of the development VM), 4–8 concurrent
// streams keep them busy (≈ 18–19 GB/s) — the access pattern of a decode GEMM, which reads
// several weight rows at once. One accumulator per stream keeps the adds independent.
// The only file of this module built with -mavx2.
#include <immintrin.h>

#include "kernels/cpu/membw.h"

namespace dsv41 {

namespace {

constexpr int kStreams = 8;

inline __m256i load(const uint64_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline uint64_t horizontal_sum(__m256i v) {
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace

uint64_t read_sum_avx2(const uint64_t* p, int64_t n) {
  // Words per stream: whole 8-word (64-byte) steps. The remainder, fewer than
  // kStreams · 8 + 8 words past kStreams · m, is read as one stream after the loop.
  const int64_t m = (n / kStreams) & ~int64_t{7};
  __m256i acc[kStreams];
  for (__m256i& a : acc) a = _mm256_setzero_si256();
  for (int64_t i = 0; i < m; i += 8)
    for (int k = 0; k < kStreams; ++k) {
      const uint64_t* q = p + k * m + i;
      acc[k] = _mm256_add_epi64(acc[k], _mm256_add_epi64(load(q), load(q + 4)));
    }
  __m256i s = _mm256_setzero_si256();
  for (const __m256i& a : acc) s = _mm256_add_epi64(s, a);
  int64_t i = kStreams * m;
  for (; i + 4 <= n; i += 4) s = _mm256_add_epi64(s, load(p + i));
  uint64_t sum = horizontal_sum(s);
  for (; i < n; ++i) sum += p[i];
  return sum;
}

}  // namespace dsv41
