// Attention-layer throughput at the real per-layer V4.1 geometry (64 heads × 512, q_lora 1280,
// o_groups 8 × 1024, window 128, indexer 32 × 128, top-k 512) with a reduced hidden size (1024)
// so the random weights stay small. One Full layer of ratio 1 (the decoder's kv source, which
// also builds the candidate pool) and one SWA layer; decode steps after a prefill of `context`
// tokens, and prefill chunks. Weights are random; GEMMs use whatever gemm_f32 currently is (while it
// is the scalar reference the GEMMs dominate, so contexts are kept short).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "cache/sequence_cache.h"
#include "model/attention.h"
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

MiniModel& model() {
  static MiniModel* m = new MiniModel;
  return *m;
}

void run_tokens(MiniModel& m, SequenceCache& cache, const std::vector<float>& x, int64_t T) {
  SharedAttentionState shared;
  std::vector<float> out(T * m.config.hidden_size);
  const int64_t pos = cache.length();
  shared.begin_forward(pos, T);
  for (const LayerInfo& l : m.plan.layers)
    (void)attention_forward(m.config, l, m.weights[l.index], m.rope, shared, cache, x.data(), T, pos, out.data());
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
}
BENCHMARK(BM_AttentionDecode)->Arg(256)->Unit(benchmark::kMillisecond)->Iterations(8);

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
}
BENCHMARK(BM_AttentionPrefillChunk)->Arg(32)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace dsv41

