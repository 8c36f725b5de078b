// Decode-shaped y = x · Wᵀ from the stored FP8 / FP4 bytes (gemm_quant, issue 13) against the
// same weights widened to float32 (gemm_f32) and to bf16 bits (gemm_bf16w), on each ISA this CPU
// has (isa: 0 = portable, 1 = AVX2, 2 = AVX-512) and on one thread (threads = 1) or the whole
// machine's pool (threads = 0). With cold = 1 every call streams its weights from DRAM: the runs
// cycle through ≥ 1 GiB of copies, as a decode step whose weights dwarf the caches; cold = 0
// reuses one copy (small shapes: from cache), the kernel's compute ceiling. Wbytes/s counts the
// bytes as held (codes + scales for the stored formats); W/s the weights.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/numerics.h"
#include "bench/bench_exec.h"
#include "bench/bench_weights.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {
namespace {

enum Kind : int64_t { kF32 = 0, kBf16 = 1, kFp8 = 2, kFp4 = 3 };
constexpr int64_t kColdBytes = int64_t{1} << 30;

// Bytes on 2-MiB-aligned memory advised onto transparent huge pages (huge = true), as the engine's
// weight mapping is (base/file_io.cpp), or on ordinary 4-KiB pages.
class PagedBytes {
 public:
  PagedBytes(size_t n, bool huge) : n_(n) {
    const size_t align = huge ? size_t{1} << 21 : 64;
    p_ = static_cast<uint8_t*>(std::aligned_alloc(align, (n + align - 1) / align * align));
    if (p_ != nullptr) (void)::madvise(p_, n, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  }
  ~PagedBytes() { std::free(p_); }
  PagedBytes(const PagedBytes&) = delete;
  PagedBytes& operator=(const PagedBytes&) = delete;
  uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  size_t n_;
  uint8_t* p_ = nullptr;
};

void decode_product(benchmark::State& state, int64_t rows, int64_t in, int64_t out, int64_t kind_arg, CpuIsa isa,
                    bool one_thread, bool cold, bool huge);

void BM_GemmQuantDecode(benchmark::State& state) {
  decode_product(state, state.range(0), state.range(1), state.range(2), state.range(3),
                 static_cast<CpuIsa>(state.range(4)), state.range(5) == 1, state.range(6) != 0, false);
}

// The wq_b shape streamed cold from FP8 copies on 4-KiB pages (huge = 0) or on transparent huge
// pages (huge = 1): what the engine's huge-page advice buys a decode product.
void BM_GemmQuantDecodePages(benchmark::State& state) {
  decode_product(state, 1, 1280, 32768, 2, CpuIsa::kAvx2, state.range(0) == 1, true, state.range(1) != 0);
}
BENCHMARK(BM_GemmQuantDecodePages)->ArgsProduct({{1, 0}, {0, 1}})->ArgNames({"threads", "huge"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MeasureProcessCPUTime();

void decode_product(benchmark::State& state, int64_t rows, int64_t in, int64_t out, int64_t kind_arg, CpuIsa isa,
                    bool one_thread, bool cold, bool huge) {
  const Kind kind = static_cast<Kind>(kind_arg);
  if (isa > cpu_best_isa()) {
    state.SkipWithError("ISA not on this CPU");
    return;
  }
  CpuExec ex = one_thread ? CpuExec::serial() : bench_exec();
  ex.isa = isa;
  const bool fp8 = kind != kFp4;  // f32 / bf16 hold the FP8 matrix's values
  const int64_t code_bytes = fp8 ? out * in : out * in / 2;
  const int64_t scale_bytes = fp8 ? ((out + 31) / 32) * ((in + 31) / 32) : out * ((in + 31) / 32);
  const int64_t held = kind == kF32 ? 4 * out * in : kind == kBf16 ? 2 * out * in : code_bytes + scale_bytes;
  const int64_t copies = cold ? (kColdBytes + held - 1) / held : 1;
  std::vector<uint8_t> codes(code_bytes), scales(scale_bytes);
  uint32_t s = 12345;
  for (uint8_t& c : codes) {
    s = s * 1664525u + 1013904223u;
    c = static_cast<uint8_t>(s >> 24);
    if (fp8 && (c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes
  }
  for (uint8_t& c : scales) c = 120 + (s = s * 1664525u + 1013904223u) % 8;
  QuantWeights q;
  q.format = fp8 ? QuantFormat::kFp8E4M3 : QuantFormat::kFp4E2M1;
  q.rows = out;
  q.in = in;
  q.scale_cols = (in + 31) / 32;
  q.block_rows_log2 = fp8 ? 5 : 0;
  q.block_cols_log2 = 5;
  q.nan_free = fp8 && e4m3_codes_nan_free(codes.data(), code_bytes);  // as the loader sets it
  const bool stored = kind == kFp8 || kind == kFp4;
  PagedBytes qc(stored ? static_cast<size_t>(copies * code_bytes) : 0, huge);  // copies of codes / scales
  std::vector<uint8_t> qs;
  std::vector<float> wf;
  std::vector<uint16_t> wb;
  if (stored) {
    if (qc.data() == nullptr) {
      state.SkipWithError("cannot allocate the weight copies");
      return;
    }
    for (int64_t c = 0; c < copies; ++c) {
      std::memcpy(qc.data() + c * code_bytes, codes.data(), static_cast<size_t>(code_bytes));
      qs.insert(qs.end(), scales.begin(), scales.end());
    }
  } else {
    q.codes = codes.data();
    q.scales = scales.data();
    std::vector<float> one(out * in);
    for (int64_t i = 0; i < out * in; ++i) one[i] = q.at(i / in, i % in);
    for (int64_t c = 0; c < copies; ++c)
      for (float v : one) {
        if (kind == kF32) wf.push_back(v);
        else wb.push_back(f32_to_bf16(v));
      }
  }
  std::vector<float> x(rows * in, 0.25f), y(rows * out);
  int64_t c = 0;
  for (auto _ : state) {
    switch (kind) {
      case kF32: gemm_f32(ex, x.data(), rows, in, wf.data() + c * out * in, out, y.data()); break;
      case kBf16: gemm_bf16w(ex, x.data(), rows, in, wb.data() + c * out * in, out, y.data()); break;
      case kFp8:
      case kFp4:
        q.codes = qc.data() + c * code_bytes;
        q.scales = qs.data() + c * scale_bytes;
        gemm_quant(ex, x.data(), rows, in, q, out, y.data());
        break;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  state.counters["Wbytes/s"] = benchmark::Counter(static_cast<double>(held), benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
  state.counters["W/s"] = benchmark::Counter(static_cast<double>(out * in), benchmark::Counter::kIsIterationInvariantRate,
                                             benchmark::Counter::kIs1000);
  state.SetLabel(kind == kF32 ? "f32" : kind == kBf16 ? "bf16" : kind == kFp8 ? "fp8" : "fp4");
}

// {rows, in, out, kind, isa, threads, cold}: mini-flash's wq_b (32768 × 1280), one expert's w1
// (512 × 1024), a wo_a group and wo_b; from cache: 512 × 1280 FP8 (655 KB), the expert w1 at 1–3 rows (the AVX2 FP4
// bits tiles take ≤ 2).
void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {1, 0})
    for (int64_t isa : {1, 2})
      for (int64_t kind : {kF32, kBf16, kFp8}) b->Args({1, 1280, 32768, kind, isa, threads, 1});
  for (int64_t threads : {1, 0})
    for (int64_t isa : {1, 2})
      for (int64_t kind : {kBf16, kFp4}) b->Args({1, 1024, 512, kind, isa, threads, 1});
  for (int64_t kind : {kBf16, kFp8}) b->Args({4, 1280, 32768, kind, 2, 0, 1});
  // attention_output's FP8 matrices: one wo_a group (1024 × 4096) and wo_b (1024 × 8192).
  for (int64_t threads : {1, 0})
    for (int64_t in : {4096, 8192}) b->Args({1, in, 1024, kFp8, 2, threads, 1});
  for (int64_t isa : {1, 2}) {
    b->Args({1, 1280, 512, kFp8, isa, 1, 0});
    for (int64_t rows : {1, 2, 3}) b->Args({rows, 1024, 512, kFp4, isa, 1, 0});
  }
}
BENCHMARK(BM_GemmQuantDecode)->Apply(Shapes)->ArgNames({"rows", "in", "out", "kind", "isa", "threads", "cold"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime()->MeasureProcessCPUTime();

// One mini-flash layer's FP8 decode products in a decode step's order — wq_b (32768 × 1280), the
// eight wo_a groups (1024 × 4096), wo_b (1024 × 8192), 84 MB — on the machine's pool, from
// copies on huge pages cycled over ≥ 1 GiB so that every product streams from DRAM as in the
// model: the kernel-level figure behind mini-flash's batch-1 decode (docs/BENCHMARKS.md, session
// 33: tuning the weight prefetch on one shape moved this, and not the model, on the noisy VM).
void BM_GemmQuantDecodeLayer(benchmark::State& state) {
  struct Shape {
    int64_t out, in;
  };
  constexpr Shape kLayer[] = {{32768, 1280}, {1024, 4096}, {1024, 4096}, {1024, 4096}, {1024, 4096},
                              {1024, 4096},  {1024, 4096}, {1024, 4096}, {1024, 4096}, {1024, 8192}};
  int64_t layer_bytes = 0;
  for (const Shape& sh : kLayer) layer_bytes += sh.out * sh.in;
  const int64_t copies = (kColdBytes + layer_bytes - 1) / layer_bytes;
  PagedBytes codes(static_cast<size_t>(copies * layer_bytes), true);
  if (codes.data() == nullptr) {
    state.SkipWithError("cannot allocate the weight copies");
    return;
  }
  uint32_t s = 12345;
  for (size_t i = 0; i < codes.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    codes.data()[i] = static_cast<uint8_t>(s >> 24);
    if ((codes.data()[i] & 0x7F) == 0x7F) codes.data()[i] ^= 1;  // no NaN codes
  }
  std::vector<uint8_t> scales(static_cast<size_t>((32768 / 32) * (8192 / 32)));
  for (uint8_t& c : scales) c = 120 + (s = s * 1664525u + 1013904223u) % 8;
  const CpuExec& ex = bench_exec();
  std::vector<float> x(8192, 0.25f), y(32768);
  int64_t c = 0;
  for (auto _ : state) {
    const uint8_t* at = codes.data() + c * layer_bytes;
    for (const Shape& sh : kLayer) {
      QuantWeights q;
      q.format = QuantFormat::kFp8E4M3;
      q.codes = at;
      q.scales = scales.data();
      q.rows = sh.out;
      q.in = sh.in;
      q.scale_cols = sh.in / 32;
      q.block_rows_log2 = 5;
      q.block_cols_log2 = 5;
      q.nan_free = true;  // no NaN codes written above
      gemm_quant(ex, x.data(), 1, sh.in, q, sh.out, y.data());
      at += sh.out * sh.in;
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    if (++c == copies) c = 0;
  }
  state.counters["Wbytes/s"] = benchmark::Counter(static_cast<double>(layer_bytes),
                                                  benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_GemmQuantDecodeLayer)->Unit(benchmark::kMicrosecond)->UseRealTime()->MeasureProcessCPUTime();

// Prefill-shaped y = x · Wᵀ (issue 13 item 4): `rows` prompt rows against one stored matrix, on
// isa 1 = AVX2, 2 = AVX-512, 3 = AMX-BF16 (gemm_amx.h), all threads. Compute-bound: one copy of
// the weights, warm. GFLOP/s counts 2 · rows · in · out per call.
void BM_GemmPrefill(benchmark::State& state) {
  const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  const Kind kind = static_cast<Kind>(state.range(3));
  const CpuIsa isa = static_cast<CpuIsa>(state.range(4));
  if (isa == CpuIsa::kAmx ? !cpu_has_amx() : isa > cpu_best_isa()) {
    state.SkipWithError(isa == CpuIsa::kAmx ? amx_unavailable_reason() : "ISA not on this CPU");
    return;
  }
  CpuExec ex = bench_exec();
  ex.isa = isa;
  const BenchStoredWeights w(out, in, kind != kFp4);
  const QuantWeights& q = w.q;
  uint32_t s = w.lcg;
  std::vector<uint16_t> wb;
  if (kind == kBf16) {
    wb.resize(out * in);
    for (int64_t i = 0; i < out * in; ++i) wb[i] = f32_to_bf16(q.at(i / in, i % in));
  }
  std::vector<float> x(rows * in), y(rows * out);
  for (float& v : x) v = static_cast<float>(static_cast<int32_t>(s = s * 1664525u + 1013904223u)) * 0x1p-31f;
  for (auto _ : state) {
    if (kind == kBf16) gemm_bf16w(ex, x.data(), rows, in, wb.data(), out, y.data());
    else gemm_quant(ex, x.data(), rows, in, q, out, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * static_cast<double>(rows * in * out),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kind == kBf16 ? "bf16 " : kind == kFp8 ? "fp8 " : "fp4 ") + cpu_isa_name(isa));
}

// {rows, in, out, kind, isa}: 2048 prompt rows through mini-flash's wq_b (1280 → 32768, FP8), one
// wo_a group (4096 → 1024, FP8), wq_a-sized (1024 → 1280, FP8 and bf16), one expert's w1 (FP4);
// wo_b (8192 → 1024, FP8) and an expert's w2 at its average 768 rows (512 → 1024, FP4).
void PrefillShapes(benchmark::internal::Benchmark* b) {
  for (int64_t isa : {1, 2, 3}) {
    b->Args({2048, 1280, 32768, kFp8, isa});
    b->Args({2048, 4096, 1024, kFp8, isa});
    b->Args({2048, 1024, 1280, kFp8, isa});
    b->Args({2048, 1024, 1280, kBf16, isa});
    b->Args({2048, 1024, 512, kFp4, isa});
    b->Args({2048, 8192, 1024, kFp8, isa});
    b->Args({768, 512, 1024, kFp4, isa});
  }
}
BENCHMARK(BM_GemmPrefill)->Apply(PrefillShapes)->ArgNames({"rows", "in", "out", "kind", "isa"})
    ->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);

}  // namespace
}  // namespace dsv41
