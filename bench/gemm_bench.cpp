// Speed of y = x · Wᵀ (kernels/cpu/gemm.h): reference vs AVX2 fast path (f32 and bf16 weights)
// vs portable fallback, on decode shapes (1..8 rows: memory-bound, reported in GB/s of weights —
// compare with BM_MemReadStream) and prefill shapes (hundreds of rows: compute-bound, GFLOP/s).
// Decode runs cycle through enough copies of W (≥ 1 GiB in all) that every call streams its
// weights from DRAM, as in a real forward pass whose weights dwarf the caches.
// Times: real (wall) time; the CPU column is the whole process's CPU time (all pool threads), so
// on a shared machine FLOP/s per CPU-second = FLOP/s · real / CPU.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "base/numerics.h"
#include "bench/bench_exec.h"
#include "kernels/cpu/gemm.h"

namespace dsv41 {
namespace {

enum Kind : int64_t { kReference = 0, kFastF32 = 1, kFastBf16w = 2, kPortableF32 = 3 };

constexpr int64_t kColdBytes = int64_t{1} << 30;

// Deterministic values in [-1, 1) without the cost of a real RNG on a GiB of weights.
void fill(std::vector<float>& v, uint32_t seed) {
  uint32_t s = seed * 2654435761u + 1;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(s)) * (1.0f / 2147483648.0f);
  }
}

void BM_Gemm(benchmark::State& state) {
  const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  const Kind kind = static_cast<Kind>(state.range(3));
  const bool bf16 = kind == kFastBf16w;
  const int64_t w_bytes = out * in * (bf16 ? 2 : 4);
  const int64_t copies = rows <= 8 ? (kColdBytes + w_bytes - 1) / w_bytes : 1;

  std::vector<float> x(rows * in), y(rows * out);
  fill(x, 1);
  std::vector<float> w(kind == kFastBf16w ? 0 : copies * out * in);
  std::vector<uint16_t> wb(kind == kFastBf16w ? copies * out * in : 0);
  if (bf16) {
    std::vector<float> tmp(out * in);
    fill(tmp, 2);
    for (int64_t c = 0; c < copies; ++c)
      for (int64_t i = 0; i < out * in; ++i) wb[c * out * in + i] = f32_to_bf16(tmp[i]);
  } else {
    fill(w, 2);
  }

  int64_t c = 0;
  for (auto _ : state) {
    const int64_t off = c * out * in;
    switch (kind) {
      case kReference: gemm_f32_reference(x.data(), rows, in, w.data() + off, out, y.data()); break;
      case kFastF32: gemm_f32(bench_exec(), x.data(), rows, in, w.data() + off, out, y.data()); break;
      case kFastBf16w: gemm_bf16w(bench_exec(), x.data(), rows, in, wb.data() + off, out, y.data()); break;
      case kPortableF32: gemm_f32_portable(x.data(), rows, in, w.data() + off, out, y.data()); break;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  const double flops = 2.0 * rows * in * out;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
  state.counters["Wbytes/s"] = benchmark::Counter(static_cast<double>(w_bytes),
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1024);
  state.SetLabel(kind == kReference ? "reference" : kind == kFastF32 ? "fast_f32"
                 : kind == kFastBf16w ? "fast_bf16w" : "portable_f32");
}

// {rows, in, out}
void DecodeShapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][3] = {{1, 5120, 1280}, {1, 1280, 32768}, {1, 4096, 1024}, {1, 1280, 1280},
                               {1, 512, 256},   {4, 5120, 1280},  {8, 4096, 1024}};
  for (const auto& s : shapes)
    for (int64_t kind : {kReference, kFastF32, kFastBf16w}) b->Args({s[0], s[1], s[2], kind});
}
BENCHMARK(BM_Gemm)->Name("BM_GemmDecode")->Apply(DecodeShapes)->ArgNames({"rows", "in", "out", "kind"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MeasureProcessCPUTime();

void PrefillShapes(benchmark::internal::Benchmark* b) {
  // The reference takes seconds on the big shapes: it runs on the first one only.
  b->Args({128, 1280, 1280, kReference});
  b->Args({128, 1280, 1280, kPortableF32});
  const int64_t shapes[][3] = {{128, 1280, 1280}, {512, 1280, 5120}, {512, 5120, 1280}, {2048, 1280, 1280}};
  for (const auto& s : shapes)
    for (int64_t kind : {kFastF32, kFastBf16w}) b->Args({s[0], s[1], s[2], kind});
}
BENCHMARK(BM_Gemm)->Name("BM_GemmPrefill")->Apply(PrefillShapes)->ArgNames({"rows", "in", "out", "kind"})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

// Small-batch decode of a small model (dsv41-mini: hidden 256, projections up to 512 outputs,
// head 8192): one thread (no pool), bf16 weights cycled through ≥ 1 GiB of copies as in a decode
// step that streams every weight, on each ISA this CPU has (isa: 1 = AVX2, 2 = AVX-512). Compare
// FLOP/s across rows at one ISA and across ISAs at one row count.
void BM_GemmSmallBatch(benchmark::State& state) {
  const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  const CpuIsa isa = static_cast<CpuIsa>(state.range(3));
  if (isa > cpu_best_isa()) {
    state.SkipWithError("ISA not on this CPU");
    return;
  }
  CpuExec ex = CpuExec::serial();
  ex.isa = isa;
  const int64_t w_bytes = out * in * 2;
  const int64_t copies = (kColdBytes + w_bytes - 1) / w_bytes;
  std::vector<float> x(rows * in), y(rows * out), tmp(out * in);
  fill(x, 1);
  fill(tmp, 2);
  std::vector<uint16_t> wb(copies * out * in);
  for (int64_t c = 0; c < copies; ++c)
    for (int64_t i = 0; i < out * in; ++i) wb[c * out * in + i] = f32_to_bf16(tmp[i]);
  int64_t c = 0;
  for (auto _ : state) {
    gemm_bf16w(ex, x.data(), rows, in, wb.data() + c * out * in, out, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * rows * in * out, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
  state.counters["Wbytes/s"] = benchmark::Counter(static_cast<double>(w_bytes),
                                                  benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1024);
  state.SetLabel(cpu_isa_name(isa));
}

void SmallBatchShapes(benchmark::internal::Benchmark* b) {
  for (int64_t out : {512, 8192})
    for (int64_t rows : {1, 2, 4, 8, 16})
      for (int64_t isa : {1, 2}) b->Args({rows, 256, out, isa});
}
BENCHMARK(BM_GemmSmallBatch)->Apply(SmallBatchShapes)->ArgNames({"rows", "in", "out", "isa"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace dsv41
