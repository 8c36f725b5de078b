// Random-weight models in memory, for tests and benchmarks of shapes unlike the fixtures:
// Model::create_random (declared in model/model.h) and random attention weights. Every value comes
// from the one generator of testing/random_stream.h. Spec: model.md §2 (shapes), §3.8 (Engram
// rows from the bucket primes).
#include "testing/random_model.h"

#include <cmath>

#include "model/dspark_weights.h"
#include "model/engram_hash.h"
#include "model/model.h"
#include "testing/random_stream.h"

namespace dsv41 {

AttentionWeights random_attention_weights(const ModelConfig& config, const LayerInfo& layer, uint64_t seed) {
  AttentionWeights w;
  w.layer = layer.index;
  RandomStream rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(layer.index));
  for (const AttentionTensor& e : attention_tensors(config, layer)) {
    std::vector<float>& v = w.*e.field;
    v.resize(static_cast<size_t>(e.size));
    const std::string name = e.name;
    const bool norm = name.find("norm") != std::string::npos;
    const bool sink = name == "attn_sink";
    // fan_in = elements / rows; rows are the first dimension of [out, in].
    int64_t fan_in = 1;
    if (name == "wq_a.weight" || name == "wkv.weight" || name.rfind("compressor.w", 0) == 0 ||
        name == "indexer.weights_proj.weight")
      fan_in = config.hidden_size;
    else if (name == "wq_b.weight" || name == "indexer.wq_b.weight")
      fan_in = config.q_lora_rank;
    else if (name == "wo_a.weight")
      fan_in = config.num_attention_heads * config.head_dim / std::max(1, config.o_groups);
    else if (name == "wo_b.weight")
      fan_in = static_cast<int64_t>(config.o_groups) * config.o_lora_rank;
    else if (name == "indexer.wk.weight")
      fan_in = config.head_dim;
    const float sd = norm ? 0.1f : sink ? 0.5f : static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    for (float& x : v) x = (norm ? 1.0f : 0.0f) + sd * rng.normal();
  }
  return w;
}

Result<std::unique_ptr<Model>> Model::create_random(ModelConfig config, uint64_t seed,
                                                     const ModelLoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->init_exec(options);
  const auto primes = engram_bucket_primes(config);
  config.engram_num_embeddings.clear();
  for (const auto& layer : primes) {
    int64_t sum = 0;
    for (int64_t p : layer) sum += p;
    config.engram_num_embeddings.push_back(sum);
  }
  m->config_ = std::move(config);
  DSV41_RETURN_IF_ERROR(m->init_common());
  const ModelConfig& c = m->config_;
  if (!c.engram_layer_ids.empty()) {
    if (c.vocab_size < c.engram_compressed_vocab_size)
      return invalid_argument("random model: vocab_size below engram_compressed_vocab_size");
    std::vector<int64_t> map(c.vocab_size);
    for (int64_t i = 0; i < c.vocab_size; ++i) map[i] = i % c.engram_compressed_vocab_size;
    DSV41_ASSIGN_OR_RETURN(EngramHashTables tables, build_engram_hash_tables(c, std::move(map)));
    m->engram_tables_ = std::move(tables);
  }
  RandomStream rng(seed);
  auto fill = [&](std::vector<float>& v, int64_t n, double mean, double stddev) {
    v.resize(n);
    for (float& x : v) x = static_cast<float>(mean + stddev * rng.normal());
  };
  const int64_t d = c.hidden_size, V = c.vocab_size, hc = c.hc_mult, mix = (2 + hc) * hc;
  const double sd = 1.0 / std::sqrt(double(d));
  fill(m->embed_, V * d, 0, 1);
  fill(m->final_norm_, d, 1, 0.1);
  fill(m->head_.f32, V * d, 0, sd);
  // Everything of a block but its attention and Engram (backbone layer or DSpark stage).
  auto block = [&](LayerWeights& L, const MoeShape& moe) {
    fill(L.attn_norm, d, 1, 0.1);
    fill(L.ffn_norm, d, 1, 0.1);
    fill(L.hc_attn_fn, mix * hc * d, 0, 1.0 / std::sqrt(double(hc * d)));
    fill(L.hc_attn_base, mix, 0, 0.5);
    fill(L.hc_attn_scale, 3, 1, 0.2);
    fill(L.hc_ffn_fn, mix * hc * d, 0, 1.0 / std::sqrt(double(hc * d)));
    fill(L.hc_ffn_base, mix, 0, 0.5);
    fill(L.hc_ffn_scale, 3, 1, 0.2);
    fill(L.gate, moe.n_experts * d, 0, sd);
    fill(L.gate_bias, moe.n_experts, 0, 0.1);
    fill(L.gate_bias_vl, moe.n_experts, 0, 0.1);
    L.experts.resize(moe.n_experts);
    auto expert = [&](ExpertStore& e, int64_t inter) {
      fill(e.w1.f32, inter * d, 0, 2 * sd);
      fill(e.w3.f32, inter * d, 0, 2 * sd);
      fill(e.w2.f32, d * inter, 0, 1.0 / std::sqrt(double(inter)));
    };
    for (ExpertStore& e : L.experts) expert(e, moe.inter);
    if (moe.has_shared) expert(L.shared, moe.shared_inter);
  };
  m->layers_.resize(c.num_hidden_layers);
  for (const LayerInfo& info : m->plan_.layers) {
    LayerWeights& L = m->layers_[info.index];
    L.attn = random_attention_weights(c, info, seed + 1000 + info.index);
    block(L, m->moe_);
    if (info.has_engram) {
      L.engram_rows = c.engram_num_embeddings[info.engram_slot];
      fill(L.engram_table, L.engram_rows * m->engram_.head_dim, 0, 1);
      const int64_t in = m->engram_.columns * m->engram_.head_dim;
      fill(L.engram_wkv, (hc + 1) * d * in, 0, 1.0 / std::sqrt(double(in)));
      fill(L.engram_q_weight, hc * d, 1, 0.2);
      fill(L.engram_k_weight, hc * d, 1, 0.2);
    }
  }
  // The DSpark drafter, when the config describes one (same generator, after the backbone).
  if (DrafterShape::configured(c)) {
    auto w = std::make_unique<DrafterWeights>();
    DSV41_ASSIGN_OR_RETURN(w->shape, DrafterShape::from_config(c));
    const int64_t T = static_cast<int64_t>(w->shape.targets.size()), r = w->shape.markov_rank;
    w->stages.resize(w->shape.stages);
    for (int s = 0; s < w->shape.stages; ++s) {
      const LayerInfo info = w->shape.stage_info(c, s);
      w->stages[s].attn = random_attention_weights(c, info, seed + 1000 + info.index);
      w->stages[s].attn.prefix = "mtp." + std::to_string(s) + ".attn.";
      block(w->stages[s], w->shape.moe);
    }
    fill(w->main_proj.f32, d * T * d, 0, 1.0 / std::sqrt(double(T * d)));
    fill(w->main_norm, d, 1, 0.1);
    fill(w->norm, d, 1, 0.1);
    fill(w->markov_embed, V * r, 0, 1);
    fill(w->markov_head, V * r, 0, 1.0 / std::sqrt(double(r)));
    fill(w->confidence, d + r, 0, 1.0 / std::sqrt(double(d + r)));
    m->drafter_ = std::move(w);
  }
  return m;
}

}  // namespace dsv41
