// Speed of unpacking packed cache records (cache/records.h) to float rows, the per-decode-step
// cost of reading the window ring, the compressed main rows and the index keys: the scalar
// reference vs the table-driven scalar path vs the AVX2/F16C path (all bit-identical, tested in
// records_test.cpp). Arguments: kind (0 window, 1 main, 2 index), channels, impl (0 reference,
// 1 table, 2 AVX2). Each iteration unpacks one page of 256 records (rows_per_page default) of
// random bytes with finite scales. Counters: bytes = packed record bytes read; items = floats
// written.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cache/records.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/unpack_avx2.h"

namespace dsv41 {
namespace {

constexpr int64_t kRows = 256;  // one page (cache/sequence_cache.h CacheOptions default)

void BM_RowUnpack(benchmark::State& state) {
  const RowKind kind = static_cast<RowKind>(state.range(0));
  const size_t channels = static_cast<size_t>(state.range(1));
  const int impl = static_cast<int>(state.range(2));
  if (impl == 2 && !(cpu_has_avx2_fma() && cpu_has_f16c())) {
    state.SkipWithError("no AVX2/F16C on this CPU");
    return;
  }
  const size_t nbytes = row_bytes(kind, channels), nblocks = channels / row_block_channels(kind);
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> byte(0, 255), scale(100, 140);  // finite scales
  std::vector<uint8_t> records(nbytes * kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    uint8_t* rec = records.data() + r * nbytes;
    for (size_t i = 0; i < nbytes - nblocks; ++i) rec[i] = static_cast<uint8_t>(byte(rng));
    // Main rows take E4M3 scales, the others UE8M0; 100..140 is finite and normal for both.
    for (size_t b = 0; b < nblocks; ++b) rec[nbytes - nblocks + b] = static_cast<uint8_t>(scale(rng));
  }
  std::vector<float> out(channels * kRows);
  using Fn = void (*)(const uint8_t*, size_t, float*);
  Fn fns[3][3] = {
      {window_row_unpack_reference, window_row_unpack_table, window_row_unpack_avx2},
      {main_row_unpack_reference, main_row_unpack_table, main_row_unpack_avx2},
      {index_row_unpack_reference, index_row_unpack_table, index_row_unpack_avx2},
  };
  const Fn fn = fns[state.range(0)][impl];
  for (auto _ : state) {
    for (int64_t r = 0; r < kRows; ++r) fn(records.data() + r * nbytes, channels, out.data() + r * channels);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kRows * static_cast<int64_t>(nbytes));
  state.SetItemsProcessed(state.iterations() * kRows * static_cast<int64_t>(channels));
}

void unpack_args(benchmark::internal::Benchmark* b) {
  for (int64_t kind : {0, 1, 2})
    for (int64_t channels : {128, 512})
      for (int64_t impl : {0, 1, 2}) b->Args({kind, channels, impl});
  b->ArgNames({"kind", "channels", "impl"});
}

BENCHMARK(BM_RowUnpack)->Apply(unpack_args)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv41
