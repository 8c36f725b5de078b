// Where an AMX prefill's time goes (issue 13: AMX ≥ 3× AVX2 at 2K on mini-flash), part by part,
// on the real tiles (both benchmarks skip without AMX):
//
// BM_AmxSinkTokenParts: one prompt token's sparse sink attention at mini-flash's shape (64 heads
// × 512, a full window of 128 keys and 512 selected entries of a 2048-entry bf16 table, as a
// 2K prefill's compressed layers) through sink_attention_token_amx with SinkTokenArgs::times set,
// on 1 thread and on every core at once (each thread its own tokens, the table shared, as the
// engine's ranges run). Counters: µs per token of each part (attention_amx.h's SinkTokenPart),
// averaged over the threads; args softmax_heads, vector_pack and prefetch are SinkTileOptions'
// switches (1 = on, the default).
// The tile products of one such token are 15,360 TDPBF16PS (2 × 7,680: logits and values, three
// parts each), ≈ 0.25 M cycles at one per 16 cycles.
//
// BM_AmxTileProbe: the tiles' own rate (tile_probe.h): ns per TDPBF16PS back to back, without
// loads and with the inner loops' 8 tile loads per 12 products from L1; 16 cycles each at peak.
//
// BM_GemmAmxParts: gemm_quant_amx at mini-flash's prefill shapes (2048 rows) with its phases
// timed (GemmTileTimes): ms per call of the x split, the weight fill and the tile products, and
// the tile products' rate in TFLOP/s of bf16 tile work (3 parts · 2 · rows · in · out).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/numerics.h"
#include "base/thread_pool.h"
#include "bench/bench_exec.h"
#include "bench/bench_weights.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/tile_probe.h"

namespace dsv41 {
namespace {

// mini-flash's attention geometry (bench/configs/mini-flash.json) at a 2K prefill.
constexpr int64_t kHeads = 64, kDim = 512, kWindow = 128, kTopk = 512, kEntries = 2048;
constexpr int64_t kWindowRows = kWindow + 256;  // tokens slide their window over these
constexpr int kSelections = 16;                  // distinct selections a thread cycles through

uint16_t random_bf16(std::mt19937& rng) {
  std::normal_distribution<float> nd;
  return f32_to_bf16(nd(rng));
}

// Shared by every thread: the window rows and the compressed entries, as bf16 (cache rows).
struct KeyRows {
  std::vector<uint16_t> window, table;
  KeyRows() {
    std::mt19937 rng(2048);
    window.resize(kWindowRows * kDim);
    table.resize(kEntries * kDim);
    for (uint16_t& v : window) v = random_bf16(rng);
    for (uint16_t& v : table) v = random_bf16(rng);
  }
};

const KeyRows& key_rows() {
  static const KeyRows rows;
  return rows;
}

void BM_AmxSinkTokenParts(benchmark::State& state) {
  if (!cpu_has_amx()) {
    state.SkipWithError(amx_unavailable_reason());
    return;
  }
  const KeyRows& rows = key_rows();
  std::mt19937 rng(77 + state.thread_index());
  std::normal_distribution<float> nd;
  std::vector<float> q(kHeads * kDim), sinks(kHeads), o(kHeads * kDim);
  for (float& v : q) v = nd(rng);
  for (float& v : sinks) v = nd(rng);
  const int64_t lstride = kWindow + kTopk;
  std::vector<float> logits(kHeads * lstride);
  std::vector<std::vector<int32_t>> selections(kSelections);
  std::vector<int32_t> ids(kEntries);
  std::iota(ids.begin(), ids.end(), 0);
  for (auto& sel : selections) {
    std::shuffle(ids.begin(), ids.end(), rng);
    sel.assign(ids.begin(), ids.begin() + kTopk);
  }
  SinkTokenBuffers buffers;
  SinkTokenTimes times;
  SinkTokenArgs a;
  a.q = q.data();
  a.heads = kHeads;
  a.D = kDim;
  a.nwin = kWindow;
  a.nsel = kTopk;
  a.scaling = static_cast<float>(1.0 / std::sqrt(static_cast<double>(kDim)));
  a.sinks = sinks.data();
  a.isa = CpuIsa::kAvx512;
  a.logits = logits.data();
  a.lstride = lstride;
  a.o = o.data();
  a.table_bf16 = rows.table.data();
  a.tile.softmax_heads = state.range(0) != 0;
  a.tile.vector_pack = state.range(1) != 0;
  a.tile.prefetch_rows = state.range(2) != 0;
  a.times = &times;
  int64_t token = 0;
  for (auto _ : state) {
    a.win_bf16 = rows.window.data() + (token % (kWindowRows - kWindow)) * kDim;
    a.sel_ids = selections[token % kSelections].data();
    if (!sink_attention_token_amx(a, buffers)) {
      state.SkipWithError("the tiles refused the token");
      return;
    }
    benchmark::DoNotOptimize(o.data());
    ++token;
  }
  static const char* const kNames[kSinkTokenParts] = {"pack_keys_us", "pack_queries_us", "logits_us",
                                                      "softmax_us",   "pack_probs_us",   "values_us"};
  double total = 0;
  for (int p = 0; p < kSinkTokenParts; ++p) {
    const double us = times.ns[p] / 1e3 / static_cast<double>(std::max<int64_t>(times.tokens, 1));
    total += us;
    state.counters[kNames[p]] = benchmark::Counter(us, benchmark::Counter::kAvgThreads);
  }
  state.counters["parts_us"] = benchmark::Counter(total, benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_AmxSinkTokenParts)
    ->ArgNames({"softmax_heads", "vector_pack", "prefetch"})
    ->Args({0, 1, 1})
    ->Args({1, 0, 0})
    ->Args({1, 1, 0})
    ->Args({1, 1, 1})
    ->Threads(1)
    ->Threads(hardware_threads())
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.2);

void BM_AmxTileProbe(benchmark::State& state) {
  if (!cpu_has_amx()) {
    state.SkipWithError(amx_unavailable_reason());
    return;
  }
  alignas(64) static thread_local uint16_t tiles[8 * 512];
  for (int i = 0; i < 8 * 512; ++i) tiles[i] = f32_to_bf16(0.001f * static_cast<float>(i % 97));
  constexpr int64_t kSteps = 10000;
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) sink += amx_tile_probe(kSteps, state.range(0) != 0, tiles);
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  benchmark::DoNotOptimize(sink);
  const double dps = static_cast<double>(kSteps * 12 * std::max<int64_t>(state.iterations(), 1));
  state.counters["ns_per_dp"] = benchmark::Counter(ns / dps, benchmark::Counter::kAvgThreads);
}
BENCHMARK(BM_AmxTileProbe)
    ->ArgNames({"with_loads"})
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(hardware_threads())
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.1);

enum WeightKind : int64_t { kFp8 = 0, kFp4 = 1 };

void BM_GemmAmxParts(benchmark::State& state) {
  if (!cpu_has_amx()) {
    state.SkipWithError(amx_unavailable_reason());
    return;
  }
  const int64_t rows = state.range(0), in = state.range(1), out = state.range(2);
  const BenchStoredWeights w(out, in, state.range(3) == kFp8);
  std::vector<float> x(rows * in), y(rows * out);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  const CpuExec& ex = bench_exec();
  GemmTileTimes times;
  for (auto _ : state) {
    gemm_quant_amx(ex, x.data(), rows, in, w.q, out, y.data(), &times);
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = static_cast<double>(std::max<int64_t>(times.calls, 1));
  state.counters["pack_x_ms"] = times.pack_x_ns / 1e6 / calls;
  state.counters["fill_w_ms"] = times.fill_w_ns / 1e6 / calls;
  state.counters["tiles_ms"] = times.tiles_ns / 1e6 / calls;
  state.counters["tile_TFLOP/s"] = 3.0 * 2.0 * static_cast<double>(rows * in * out) / (times.tiles_ns / calls) / 1e3;
  state.SetLabel(state.range(3) == kFp8 ? "fp8" : "fp4");
}
// {rows, in, out, kind}: wq_b (1280 → 32768), wq_a (1024 → 1280), one wo_a group (4096 → 1024),
// wo_b (8192 → 1024), one expert's w1 at 768 rows (1024 → 512, FP4).
BENCHMARK(BM_GemmAmxParts)
    ->ArgNames({"rows", "in", "out", "kind"})
    ->Args({2048, 1280, 32768, kFp8})
    ->Args({2048, 1024, 1280, kFp8})
    ->Args({2048, 4096, 1024, kFp8})
    ->Args({2048, 8192, 1024, kFp8})
    ->Args({768, 1024, 512, kFp4})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.2);

}  // namespace
}  // namespace dsv41
