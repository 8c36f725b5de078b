// Attention-layer throughput at the real per-layer V4.1 geometry (64 heads × 512, q_lora 1280,
// o_groups 8 × 1024, window 128, indexer 32 × 128, top-k 512) with a reduced hidden size (1024)
// so the random weights stay small. One Full layer of ratio 1 (the decoder's kv source, which
// also builds the candidate pool) and one SWA layer; decode steps after a prefill of `context`
// tokens, and prefill chunks. Weights are random; GEMMs use whatever gemm_f32 currently is (while it
// is the scalar reference the GEMMs dominate, so contexts are kept short).
// Counters: FLOP/s and bytes/s from the counts in AttentionCost below (projection matrices,
// core attention over the window and the selected entries, the indexer scan; weights and cache
// rows read), so the kernels can be placed against the machine's FLOP and bandwidth roofs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bench/bench_exec.h"
#include "cache/records.h"
#include "cache/sequence_cache.h"
#include "model/attention.h"
#include "testing/random_model.h"
#include "model/rope.h"

namespace dsv41 {
namespace {

struct MiniModel {
  ModelConfig config;
  LayerPlan plan;
  std::vector<AttentionWeights> weights;
  Rope rope;
  MiniModel() {
    config.source = "attention_bench";
    config.hidden_size = 1024;
    config.num_hidden_layers = 2;
    config.compress_ratios = {0, 1};
    config.kv_source_layer_ids = {1};
    config.index_source_layer_ids = {1};
    config.candidate_source_layer_id = 1;
    config.rope_scaling = YarnScaling{};
    config.engram_layer_ids.clear();
    config.engram_num_embeddings.clear();
    config.dspark_target_layer_ids.clear();
    config.num_nextn_predict_layers = 0;
    LayerInfo swa;
    swa.index = 0;
    LayerInfo full;
    full.index = 1;
    full.role = LayerRole::kFull;
    full.ratio = 1;
    full.kv_source = 1;
    full.index_source = 1;
    full.candidate_source = true;
    full.rope = RopeKind::kCompress;
    plan.layers = {swa, full};
    for (const LayerInfo& l : plan.layers) weights.push_back(random_attention_weights(config, l, 1));
    rope = Rope::create(config).value();
  }
};

// Work of one token at context C (C positions visible, itself included) through both layers.
// Matrices: 2 FLOPs per weight. Core attention: per head and key read, q·k plus the weighted
// value sum = 4·head_dim FLOPs; the SWA layer reads min(C, window) window rows, the Full layer
// those plus min(index_topk, C) main entries (ratio 1: one entry per token) and its indexer
// scores all C index keys with idx_heads × idx_head_dim multiply-adds. Bytes: every weight
// (float32) plus the cache rows those reads touch in their packed record formats.
struct AttentionCost {
  double flops = 0, bytes = 0;
};

AttentionCost attention_cost(const MiniModel& m, int64_t C) {
  const ModelConfig& c = m.config;
  AttentionCost a;
  const double window = static_cast<double>(std::min<int64_t>(C, c.sliding_window));
  const double selected = static_cast<double>(std::min<int64_t>(C, c.index_topk));
  const double per_key = 4.0 * c.head_dim * c.num_attention_heads;
  for (const LayerInfo& l : m.plan.layers) {
    const AttentionWeights& w = m.weights[l.index];
    for (const std::vector<float>* mat : {&w.wq_a, &w.wq_b, &w.wkv, &w.wo_a, &w.wo_b, &w.compressor_wkv,
                                          &w.compressor_wgate, &w.indexer_wk, &w.indexer_wq_b,
                                          &w.indexer_weights_proj})
      a.flops += 2.0 * static_cast<double>(mat->size());
    for (const std::vector<float>* v : {&w.wq_a, &w.q_norm, &w.wq_b, &w.wkv, &w.kv_norm, &w.wo_a, &w.wo_b,
                                        &w.attn_sink, &w.compressor_wkv, &w.compressor_wgate, &w.compressor_norm,
                                        &w.indexer_wk, &w.indexer_k_norm, &w.indexer_wq_b, &w.indexer_weights_proj})
      a.bytes += sizeof(float) * static_cast<double>(v->size());
    a.flops += per_key * window;
    a.bytes += window * static_cast<double>(window_row_bytes(c.head_dim));
    if (l.role == LayerRole::kFull) {
      a.flops += per_key * selected + 2.0 * C * c.index_n_heads * c.index_head_dim;
      a.bytes += selected * static_cast<double>(main_row_bytes(c.head_dim)) +
                 static_cast<double>(C) * static_cast<double>(index_row_bytes(c.index_head_dim));
    }
  }
  return a;
}

void set_cost_counters(benchmark::State& state, double flops_per_iteration, double bytes_per_iteration) {
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
  state.counters["bytes/s"] = benchmark::Counter(bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1024);
}

MiniModel& model() {
  static MiniModel* m = new MiniModel;
  return *m;
}

void run_tokens(MiniModel& m, SequenceCache& cache, const std::vector<float>& x, int64_t T) {
  SharedAttentionState shared;
  std::vector<float> out(T * m.config.hidden_size);
  const int64_t pos = cache.length();
  shared.begin_forward(pos, T);
  AttentionOptions options;
  options.exec = bench_exec();
  for (const LayerInfo& l : m.plan.layers)
    (void)attention_forward(m.config, l, m.weights[l.index], m.rope, shared, cache, x.data(), T, pos, out.data(),
                            options);
}

void BM_AttentionDecode(benchmark::State& state) {
  MiniModel& m = model();
  const int64_t context = state.range(0);
  auto cache = std::move(SequenceCache::create(m.config, m.plan, context + 16).value());
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(256 * m.config.hidden_size);
  for (auto& v : x) v = nd(rng);
  for (int64_t done = 0; done < context; done += 256) run_tokens(m, *cache, x, std::min<int64_t>(256, context - done));
  std::vector<float> one(x.begin(), x.begin() + m.config.hidden_size);
  for (auto _ : state) run_tokens(m, *cache, one, 1);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  // The context grows by one per iteration; the middle one stands for all.
  const AttentionCost cost = attention_cost(m, context + 1 + static_cast<int64_t>(state.iterations()) / 2);
  set_cost_counters(state, cost.flops, cost.bytes);
}
BENCHMARK(BM_AttentionDecode)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(8)->UseRealTime()
    ->MeasureProcessCPUTime();

void BM_AttentionPrefillChunk(benchmark::State& state) {
  MiniModel& m = model();
  const int64_t T = state.range(0);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(T * m.config.hidden_size);
  for (auto& v : x) v = nd(rng);
  for (auto _ : state) {
    auto cache = std::move(SequenceCache::create(m.config, m.plan, T).value());
    run_tokens(m, *cache, x, T);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * T), benchmark::Counter::kIsRate);
  // FLOPs: every token's work at its own context. Bytes: the weights once per chunk (they stay
  // in cache across the chunk's rows only if small; this counts the minimum) plus each token's
  // cache reads.
  double flops = 0, bytes = 0;
  const double weight_bytes = attention_cost(m, 0).bytes;
  for (int64_t t = 1; t <= T; ++t) {
    const AttentionCost c = attention_cost(m, t);
    flops += c.flops;
    bytes += c.bytes - weight_bytes;
  }
  set_cost_counters(state, flops, bytes + weight_bytes);
}
BENCHMARK(BM_AttentionPrefillChunk)->Arg(32)->Arg(128)->Unit(benchmark::kMillisecond)->Iterations(2)->UseRealTime()
    ->MeasureProcessCPUTime();

}  // namespace
}  // namespace dsv41

