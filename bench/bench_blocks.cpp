// Speed of the model blocks' scalar references vs their fast paths (kernels/cpu/cpu_exec.h) at
// mini-flash sizes (bench/configs/mini-flash.json: hidden 1024, hc 4, 20 Sinkhorn rounds; Engram
// 12 columns × 128 → (4+1)·1024; compressor 1024 → 512, ratios 2 and 1), for decode (T = 1) and
// prefill chunks. Second argument: 0 = scalar reference, 1 = fast path (same run, same inputs).
// Counters: items = tokens; bytes = the activations read and written (the memory-bound mHC
// collapse / expand); FLOP/s = 2 · multiply-adds of the block's projections (the compute-bound
// parts). Times are wall time; the fast paths use the whole thread pool.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_exec.h"
#include "cache/page_pool.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "model/compressor.h"
#include "model/engram.h"
#include "model/mhc.h"

namespace dsv41 {
namespace {

const ModelConfig& mini_flash() {
  static const ModelConfig* c = [] {
    auto r = load_model_config(std::string(DSV41_SOURCE_DIR) + "/bench/configs/mini-flash.json");
    if (!r.ok()) {
      std::fprintf(stderr, "bench_blocks: %s\n", r.status().to_string().c_str());
      std::abort();
    }
    return new ModelConfig(*r);
  }();
  return *c;
}

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

bool want_fast(benchmark::State& state) {
  const bool fast = state.range(1) != 0;
  if (fast && !cpu_has_avx2_fma()) state.SkipWithError("no AVX2/FMA on this CPU");
  return fast;
}

void flops(benchmark::State& state, double per_iteration) {
  state.counters["FLOP/s"] = benchmark::Counter(per_iteration * double(state.iterations()),
                                                benchmark::Counter::kIsRate);
}

void BM_MhcCoefficients(benchmark::State& state) {
  const MhcShape s = MhcShape::from_config(mini_flash());
  const int64_t T = state.range(0), n = s.hc * s.dim;
  const bool fast = want_fast(state);
  auto fn = random_vec(s.mix_width() * n, 1, 1.0f / std::sqrt(float(n)));
  auto base = random_vec(s.mix_width(), 2, 0.5f), x = random_vec(T * n, 3, 1.0f);
  std::vector<float> scale = {1.0f, 1.0f, 1.0f}, pre(T * s.hc), post(T * s.hc), comb(T * s.hc * s.hc);
  const MhcWeights w{fn.data(), base.data(), scale.data()};
  for (auto _ : state) {
    if (fast) {
      mhc_coefficients_fast(bench_exec(), s, w, x.data(), T, pre.data(), post.data(), comb.data());
    } else {
      mhc_coefficients_reference(s, w, x.data(), T, pre.data(), post.data(), comb.data());
    }
    benchmark::DoNotOptimize(comb.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  state.SetBytesProcessed(state.iterations() * T * n * 4);
  flops(state, 2.0 * double(T) * double(s.mix_width()) * double(n));
}

void BM_MhcCollapse(benchmark::State& state) {
  const MhcShape s = MhcShape::from_config(mini_flash());
  const int64_t T = state.range(0), n = s.hc * s.dim;
  const bool fast = want_fast(state);
  auto x = random_vec(T * n, 4, 1.0f), pre = random_vec(T * s.hc, 5, 1.0f);
  std::vector<float> y(T * s.dim);
  for (auto _ : state) {
    if (fast) {
      mhc_collapse_fast(bench_exec(), s, x.data(), pre.data(), T, y.data());
    } else {
      mhc_collapse_reference(s, x.data(), pre.data(), T, y.data());
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  state.SetBytesProcessed(state.iterations() * T * (n + s.dim) * 4);
}

void BM_MhcExpand(benchmark::State& state) {
  const MhcShape s = MhcShape::from_config(mini_flash());
  const int64_t T = state.range(0), n = s.hc * s.dim;
  const bool fast = want_fast(state);
  auto x = random_vec(T * n, 6, 1.0f), a = random_vec(T * s.dim, 7, 1.0f);
  auto post = random_vec(T * s.hc, 8, 1.0f), comb = random_vec(T * s.hc * s.hc, 9, 0.3f);
  std::vector<float> out(T * n);
  for (auto _ : state) {
    if (fast) {
      mhc_expand_fast(bench_exec(), s, a.data(), x.data(), post.data(), comb.data(), T, out.data());
    } else {
      mhc_expand_reference(s, a.data(), x.data(), post.data(), comb.data(), T, out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  state.SetBytesProcessed(state.iterations() * T * (2 * n + s.dim) * 4);
}

void BM_Engram(benchmark::State& state) {
  const ModelConfig& c = mini_flash();
  const EngramShape s = EngramShape::from_config(c);
  const int64_t T = state.range(0), in = s.columns * s.head_dim, out = (s.hc + 1) * s.dim;
  const bool fast = want_fast(state);
  const int64_t rows = c.engram_num_embeddings.empty() ? 4096 : c.engram_num_embeddings[0];
  auto table = random_vec(rows * s.head_dim, 10, 1.0f), wkv = random_vec(out * in, 11, 1.0f / std::sqrt(float(in)));
  auto qw = random_vec(s.hc * s.dim, 12, 1.0f), kw = random_vec(s.hc * s.dim, 13, 1.0f);
  const EngramWeights w{table.data(), rows, wkv.data(), qw.data(), kw.data()};
  std::mt19937 rng(14);
  std::vector<int64_t> ids(T * s.columns);
  for (int64_t& id : ids) id = rng() % rows;
  const auto x0 = random_vec(T * s.hc * s.dim, 15, 1.0f);
  auto x = x0;
  for (auto _ : state) {
    state.PauseTiming();
    x = x0;  // the block adds into x: start each iteration from the same streams
    state.ResumeTiming();
    const Status st = fast ? engram_forward_fast(bench_exec(), s, w, ids.data(), T, x.data())
                           : engram_forward_reference(s, w, ids.data(), T, x.data());
    if (!st.ok()) state.SkipWithError(st.to_string().c_str());
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  flops(state, 2.0 * double(T) * double(in) * double(out));
}

// The Engram row gather alone, from a table far larger than the caches (2^21 rows × head_dim, as
// real tables are hundreds of GB): dense float32 (third argument 0) or stored FP8 E4M3 with a
// row-wise UE8M0 scale, dequantised per lookup (1), the way a loaded checkpoint is read.
// Bytes = table bytes touched (row payload + scales).
void BM_EngramGather(benchmark::State& state) {
  const EngramShape s = EngramShape::from_config(mini_flash());
  const int64_t T = state.range(0), hd = s.head_dim, rows = int64_t{1} << 21, sc = (hd + 31) / 32;
  const bool fast = want_fast(state), fp8 = state.range(2) != 0;
  static std::vector<float> dense;
  static std::vector<uint8_t> codes, scales;
  static TensorView view, scale;
  if (!fp8 && dense.empty()) dense = random_vec(rows * hd, 20, 1.0f);
  if (fp8 && codes.empty()) {
    codes.resize(rows * hd);
    uint32_t x = 1;
    for (uint8_t& b : codes) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<uint8_t>(x >> 24);
      if ((b & 0x7F) == 0x7F) b = 0x3C;  // no E4M3 NaN codes
    }
    scales.assign(rows * sc, 127);  // UE8M0 127 = 2^0
    view = TensorView{"engram.embed.weight", DType::kF8E4M3, {rows, hd}, codes, "bench"};
    scale = TensorView{"engram.embed.scale", DType::kF8E8M0, {rows, sc}, scales, "bench"};
  }
  EngramWeights w;
  w.rows = rows;
  if (fp8) {
    w.stored = &view;
    w.stored_scale = &scale;
  } else {
    w.table = dense.data();
  }
  std::mt19937_64 rng(21);
  std::vector<int64_t> ids(T * s.columns);
  for (int64_t& id : ids) id = static_cast<int64_t>(rng() % uint64_t(rows));
  std::vector<float> r(T * s.columns * hd);
  for (auto _ : state) {
    const Status st = fast ? engram_gather_fast(bench_exec(), s, w, ids.data(), T, r.data())
                           : engram_gather_reference(s, w, ids.data(), T, r.data());
    if (!st.ok()) state.SkipWithError(st.to_string().c_str());
    benchmark::DoNotOptimize(r.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  state.SetBytesProcessed(state.iterations() * T * s.columns * (fp8 ? hd + sc : hd * 4));
}

// ratio 2 (with a pending odd token carried between iterations) and ratio 1, hidden → head_dim.
void BM_Compressor(benchmark::State& state) {
  const ModelConfig& c = mini_flash();
  const int64_t T = state.range(0), hidden = c.hidden_size, D = c.head_dim;
  const int ratio = static_cast<int>(state.range(2));
  const bool fast = want_fast(state);
  AttentionWeights w;
  w.compressor_wkv = random_vec(D * hidden, 16, 1.0f / std::sqrt(float(hidden)));
  if (ratio > 1) w.compressor_wgate = random_vec(D * hidden, 17, 1.0f / std::sqrt(float(hidden)));
  w.compressor_norm = random_vec(D, 18, 0.1f);
  const auto x = random_vec(T * hidden, 19, 1.0f);
  PagePool pool(4096);
  KvSourceCache kv(0, ratio, D, c.index_head_dim, &pool, &pool, 8);
  CompressedGroups groups;
  for (auto _ : state) {
    if (fast) {
      compressor_step_fast(bench_exec(), c, w, kv, x.data(), T, groups);
    } else {
      compressor_step_reference(c, w, kv, x.data(), T, groups);
    }
    benchmark::DoNotOptimize(groups.latents.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  flops(state, 2.0 * double(T) * double(hidden) * double(D) * (ratio > 1 ? 2 : 1));
}

// Scalar references are slow (double accumulation, one thread): they run at T = 1 and 32 only.
void token_args(benchmark::internal::Benchmark* b) {
  for (int64_t T : {1, 32}) b->Args({T, 0});
  for (int64_t T : {1, 32, 256}) b->Args({T, 1});
  b->ArgNames({"T", "fast"});
}
void gather_args(benchmark::internal::Benchmark* b) {
  for (int64_t fp8 : {0, 1})
    for (int64_t fast : {0, 1})
      for (int64_t T : {1, 256}) b->Args({T, fast, fp8});
  b->ArgNames({"T", "fast", "fp8"});
}
void compressor_args(benchmark::internal::Benchmark* b) {
  for (int64_t ratio : {2, 1}) {
    for (int64_t T : {1, 32}) b->Args({T, 0, ratio});
    for (int64_t T : {1, 32, 256}) b->Args({T, 1, ratio});
  }
  b->ArgNames({"T", "fast", "ratio"});
}

BENCHMARK(BM_MhcCoefficients)->Apply(token_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MhcCollapse)->Apply(token_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MhcExpand)->Apply(token_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Engram)->Apply(token_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EngramGather)->Apply(gather_args)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Compressor)->Apply(compressor_args)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv41
