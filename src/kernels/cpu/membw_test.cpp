// Streaming-read kernel (kernels/cpu/membw.h): the AVX2 path equals the portable sum at every
// length and start offset around its 16-word block; the measurement reports sane numbers and
// rejects bad arguments.
#include "kernels/cpu/membw.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/rng.h"

namespace dsv41 {
namespace {

// Lengths around the 8 streams × 8 words step (64 words) and its multiples, where the split into
// streams and the single-stream remainder change, and unaligned starts.
TEST(MemBw, Avx2SumEqualsPortableAtBoundaryLengthsAndOffsets) {
  if (!read_sum_uses_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  Xoshiro256 rng(7);
  std::vector<uint64_t> v(1200);
  for (auto& x : v) x = rng.next();
  for (int64_t off = 0; off < 5; ++off)
    for (int64_t n = 0; n + off <= 1100; ++n)
      ASSERT_EQ(read_sum_avx2(v.data() + off, n), read_sum_portable(v.data() + off, n)) << off << " " << n;
  EXPECT_EQ(read_sum(v.data(), 1200), read_sum_portable(v.data(), 1200));
}

TEST(MemBw, PortableSumWrapsModulo2To64) {
  const std::vector<uint64_t> v = {~uint64_t{0}, 2, 5};
  EXPECT_EQ(read_sum_portable(v.data(), 3), 6u);
  EXPECT_EQ(read_sum(v.data(), 3), 6u);
}

TEST(MemBw, MeasurementIsPositiveAndChecksArguments) {
  ThreadPool pool(2);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  auto r = measure_read_bandwidth(ex, int64_t{4} << 20, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->buffer_bytes, int64_t{4} << 20);
  EXPECT_GT(r->one_thread, 1e8);  // any machine reads 4 MiB faster than 100 MB/s
  EXPECT_GT(r->all_threads, 1e8);
  EXPECT_EQ(r->threads, 2);
  EXPECT_FALSE(measure_read_bandwidth(ex, 1 << 20, 1).ok());
  EXPECT_FALSE(measure_read_bandwidth(ex, int64_t{4} << 20, 0).ok());
}

}  // namespace
}  // namespace dsv41
