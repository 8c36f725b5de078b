// The backbone: loading every layer to float32 and the single-pass forward of model.md §3.2.
// See model.h.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "format/tokenizer.h"
#include "kernels/cpu/gemm.h"
#include "model/dequant.h"
#include "model/engram_token_map.h"
#include "model/rmsnorm.h"
#include "model/weights.h"

namespace dsv41 {

MoeWeights LayerWeights::moe() const {
  MoeWeights w;
  w.gate = gate.data();
  w.bias = gate_bias.empty() ? nullptr : gate_bias.data();
  w.bias_vl = gate_bias_vl.empty() ? nullptr : gate_bias_vl.data();
  w.experts.reserve(experts.size());
  for (const ExpertStore& e : experts) w.experts.push_back(e.view());
  w.shared = shared.view();
  return w;
}

EngramWeights LayerWeights::engram() const {
  EngramWeights w{engram_table.empty() ? nullptr : engram_table.data(), engram_rows, engram_wkv.data(),
                  engram_q_weight.data(), engram_k_weight.data()};
  if (engram_table.empty() && engram_stored) {
    w.stored = &*engram_stored;
    w.stored_scale = engram_stored_scale;
  }
  return w;
}

namespace {

// A float32 tensor with an exact element count (the registry's check() already verified
// shapes; this guards the pointer arithmetic below against a registry/plan mismatch).
Status load_exact(const WeightRegistry& reg, const std::string& name, int64_t numel, std::vector<float>& out) {
  DSV41_ASSIGN_OR_RETURN(FloatTensor t, reg.load_f32(name));
  if (t.numel() != numel)
    return corrupt(reg.source() + ": tensor '" + name + "' has " + std::to_string(t.numel()) +
                   " elements, the config implies " + std::to_string(numel));
  out = std::move(t.data);
  return ok_status();
}

std::string lname(int layer, const std::string& role) { return "layers." + std::to_string(layer) + "." + role; }

// A weight matrix: bf16 when allowed, the checkpoint stores it narrower than F32, and every
// value is bf16-exact (checked by make_weight_matrix); else float32.
Status load_matrix(const WeightRegistry& reg, const std::string& name, int64_t numel, bool allow_bf16,
                   WeightMatrix& out) {
  std::vector<float> values;
  DSV41_RETURN_IF_ERROR(load_exact(reg, name, numel, values));
  DSV41_ASSIGN_OR_RETURN(TensorView raw, reg.raw(name));
  out = make_weight_matrix(std::move(values), allow_bf16 && raw.dtype != DType::kF32);
  return ok_status();
}

// Moves each of the five big attention projections into its bf16 holding when load_matrix's rule
// allows it (the float32 vector is left empty).
Status narrow_attention(const WeightRegistry& reg, AttentionWeights& w) {
  struct Proj {
    const char* suffix;
    std::vector<float>* f32;
    std::vector<uint16_t>* bf16;
  };
  const Proj projs[] = {{"wq_a.weight", &w.wq_a, &w.bf16.wq_a},
                        {"wq_b.weight", &w.wq_b, &w.bf16.wq_b},
                        {"wkv.weight", &w.wkv, &w.bf16.wkv},
                        {"wo_a.weight", &w.wo_a, &w.bf16.wo_a},
                        {"wo_b.weight", &w.wo_b, &w.bf16.wo_b}};
  for (const Proj& p : projs) {
    DSV41_ASSIGN_OR_RETURN(TensorView raw, reg.raw(lname(w.layer, std::string("attn.") + p.suffix)));
    WeightMatrix m = make_weight_matrix(std::move(*p.f32), raw.dtype != DType::kF32);
    *p.f32 = std::move(m.f32);
    *p.bf16 = std::move(m.bf16);
  }
  return ok_status();
}

// Every `layers.i.attn.*` tensor the checkpoint has, into AttentionWeights; check_attention_weights
// (attention.h) then verifies that exactly the layer role's tensors are there with the right sizes.
// (attention.h also declares load_attention_weights; it was not implemented on the attention
// branch when this was written, so the model does its own loading through the registry.)
Result<AttentionWeights> load_attention(const WeightRegistry& reg, const LayerInfo& info) {
  AttentionWeights w;
  w.layer = info.index;
  struct Entry {
    const char* suffix;
    std::vector<float> AttentionWeights::*field;
  };
  static const Entry kEntries[] = {
      {"wq_a.weight", &AttentionWeights::wq_a},
      {"q_norm.weight", &AttentionWeights::q_norm},
      {"wq_b.weight", &AttentionWeights::wq_b},
      {"wkv.weight", &AttentionWeights::wkv},
      {"kv_norm.weight", &AttentionWeights::kv_norm},
      {"wo_a.weight", &AttentionWeights::wo_a},
      {"wo_b.weight", &AttentionWeights::wo_b},
      {"attn_sink", &AttentionWeights::attn_sink},
      {"compressor.wkv.weight", &AttentionWeights::compressor_wkv},
      {"compressor.wgate.weight", &AttentionWeights::compressor_wgate},
      {"compressor.norm.weight", &AttentionWeights::compressor_norm},
      {"indexer.wk.weight", &AttentionWeights::indexer_wk},
      {"indexer.k_norm.weight", &AttentionWeights::indexer_k_norm},
      {"indexer.wq_b.weight", &AttentionWeights::indexer_wq_b},
      {"indexer.weights_proj.weight", &AttentionWeights::indexer_weights_proj},
  };
  for (const Entry& e : kEntries) {
    const std::string name = lname(info.index, std::string("attn.") + e.suffix);
    if (!reg.has(name)) continue;
    DSV41_ASSIGN_OR_RETURN(FloatTensor t, reg.load_f32(name));
    w.*e.field = std::move(t.data);
  }
  return w;
}

// The Engram token map from the tokenizer (model.md §3.8): each id decoded alone plus its raw
// token string for partial-byte tokens.
Result<std::vector<int64_t>> engram_token_map_from(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  std::vector<std::string> decoded(n), raw(n);
  for (int32_t id = 0; id < n; ++id) {
    decoded[id] = std::string(tok.decode_token(id));
    if (auto r = tok.id_to_token(id)) raw[id] = std::string(*r);
  }
  return build_engram_token_map(decoded, raw).ids;
}

}  // namespace

Status Model::init_common() {
  DSV41_ASSIGN_OR_RETURN(plan_, build_layer_plan(config_));
  DSV41_ASSIGN_OR_RETURN(Rope rope, Rope::create(config_));
  rope_ = std::move(rope);
  mhc_ = MhcShape::from_config(config_);
  DSV41_ASSIGN_OR_RETURN(moe_, MoeShape::from_config(config_));
  engram_ = EngramShape::from_config(config_);
  return ok_status();
}

void Model::init_exec(const ModelLoadOptions& options) {
  const int threads = options.threads > 0 ? options.threads : hardware_threads();
  if (threads > 1) pool_ = std::make_unique<ThreadPool>(threads);
  exec_.pool = pool_.get();
  exec_.fast = !options.force_scalar && cpu_has_avx2_fma();
}

Result<std::unique_ptr<Model>> Model::load(const std::string& dir, const ModelLoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->init_exec(options);
  DSV41_ASSIGN_OR_RETURN(m->config_, load_model_config(dir));
  DSV41_RETURN_IF_ERROR(m->init_common());
  if (!m->config_.engram_layer_ids.empty()) {
    DSV41_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(dir + "/tokenizer.json"));
    DSV41_ASSIGN_OR_RETURN(std::vector<int64_t> map, engram_token_map_from(tok));
    if (static_cast<int64_t>(map.size()) < m->config_.vocab_size)
      return invalid_argument(dir + "/tokenizer.json: " + std::to_string(map.size()) +
                              " token ids, fewer than vocab_size " + std::to_string(m->config_.vocab_size));
    map.resize(m->config_.vocab_size);  // the first vocab_size entries form the lookup
    auto tables = build_engram_hash_tables(m->config_, std::move(map));
    if (!tables.ok()) return tables.status().with_context(dir + "/tokenizer.json");
    m->engram_tables_ = std::move(tables).value();
  }
  DSV41_RETURN_IF_ERROR(m->load_layers(dir, options));
  return m;
}

Model::MatrixBytes Model::matrix_bytes() const {
  MatrixBytes b;
  auto add = [&b](const WeightMatrix& m) { (m.is_bf16() ? b.bf16 : b.f32) += m.bytes(); };
  add(head_);
  for (const LayerWeights& L : layers_) {
    for (const ExpertStore& e : L.experts) {
      add(e.w1);
      add(e.w3);
      add(e.w2);
    }
    add(L.shared.w1);
    add(L.shared.w3);
    add(L.shared.w2);
    const AttentionWeights& a = L.attn;
    for (const std::vector<float>* f : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_a, &a.wo_b})
      b.f32 += int64_t(f->size() * sizeof(float));
    for (const std::vector<uint16_t>* h : {&a.bf16.wq_a, &a.bf16.wq_b, &a.bf16.wkv, &a.bf16.wo_a, &a.bf16.wo_b})
      b.bf16 += int64_t(h->size() * sizeof(uint16_t));
  }
  return b;
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
  std::mt19937_64 rng(seed);
  auto fill = [&](std::vector<float>& v, int64_t n, double mean, double stddev) {
    std::normal_distribution<double> dist(mean, stddev);
    v.resize(n);
    for (float& x : v) x = static_cast<float>(dist(rng));
  };
  const int64_t d = c.hidden_size, V = c.vocab_size, hc = c.hc_mult, mix = (2 + hc) * hc;
  const double sd = 1.0 / std::sqrt(double(d));
  fill(m->embed_, V * d, 0, 1);
  fill(m->final_norm_, d, 1, 0.1);
  fill(m->head_.f32, V * d, 0, sd);
  m->layers_.resize(c.num_hidden_layers);
  for (const LayerInfo& info : m->plan_.layers) {
    LayerWeights& L = m->layers_[info.index];
    L.attn = random_attention_weights(c, info, seed + 1000 + info.index);
    fill(L.attn_norm, d, 1, 0.1);
    fill(L.ffn_norm, d, 1, 0.1);
    fill(L.hc_attn_fn, mix * hc * d, 0, 1.0 / std::sqrt(double(hc * d)));
    fill(L.hc_attn_base, mix, 0, 0.5);
    fill(L.hc_attn_scale, 3, 1, 0.2);
    fill(L.hc_ffn_fn, mix * hc * d, 0, 1.0 / std::sqrt(double(hc * d)));
    fill(L.hc_ffn_base, mix, 0, 0.5);
    fill(L.hc_ffn_scale, 3, 1, 0.2);
    fill(L.gate, c.n_routed_experts * d, 0, sd);
    fill(L.gate_bias, c.n_routed_experts, 0, 0.1);
    fill(L.gate_bias_vl, c.n_routed_experts, 0, 0.1);
    L.experts.resize(c.n_routed_experts);
    auto expert = [&](ExpertStore& e, int64_t inter) {
      fill(e.w1.f32, inter * d, 0, 2 * sd);
      fill(e.w3.f32, inter * d, 0, 2 * sd);
      fill(e.w2.f32, d * inter, 0, 1.0 / std::sqrt(double(inter)));
    };
    for (ExpertStore& e : L.experts) expert(e, m->moe_.inter);
    if (m->moe_.has_shared) expert(L.shared, m->moe_.shared_inter);
    if (info.has_engram) {
      L.engram_rows = c.engram_num_embeddings[info.engram_slot];
      fill(L.engram_table, L.engram_rows * m->engram_.head_dim, 0, 1);
      const int64_t in = m->engram_.columns * m->engram_.head_dim;
      fill(L.engram_wkv, (hc + 1) * d * in, 0, 1.0 / std::sqrt(double(in)));
      fill(L.engram_q_weight, hc * d, 1, 0.2);
      fill(L.engram_k_weight, hc * d, 1, 0.2);
    }
  }
  return m;
}

Status Model::load_layers(const std::string& dir, const ModelLoadOptions& options) {
  {
    DSV41_ASSIGN_OR_RETURN(WeightRegistry opened, WeightRegistry::open(dir));
    registry_ = std::make_unique<WeightRegistry>(std::move(opened));
  }
  // Views into the registry (the Engram tables) stay valid: it lives, unmoved, as long as the model.
  const WeightRegistry& reg = *registry_;
  DSV41_RETURN_IF_ERROR(reg.check(config_, plan_));
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, V = c.vocab_size, hc = c.hc_mult, mix = (2 + hc) * hc;
  DSV41_RETURN_IF_ERROR(load_exact(reg, "embed.weight", V * d, embed_));
  DSV41_RETURN_IF_ERROR(load_exact(reg, "norm.weight", d, final_norm_));
  const bool bf16 = !options.f32_weights;
  DSV41_RETURN_IF_ERROR(load_matrix(reg, "head.weight", V * d, bf16, head_));
  layers_.resize(c.num_hidden_layers);
  for (const LayerInfo& info : plan_.layers) {
    const int i = info.index;
    LayerWeights& L = layers_[i];
    DSV41_ASSIGN_OR_RETURN(L.attn, load_attention(reg, info));
    DSV41_RETURN_IF_ERROR(check_attention_weights(L.attn, c, info));
    if (bf16) DSV41_RETURN_IF_ERROR(narrow_attention(reg, L.attn));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "attn_norm.weight"), d, L.attn_norm));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "ffn_norm.weight"), d, L.ffn_norm));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "hc_attn_fn"), mix * hc * d, L.hc_attn_fn));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "hc_attn_base"), mix, L.hc_attn_base));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "hc_attn_scale"), 3, L.hc_attn_scale));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "hc_ffn_fn"), mix * hc * d, L.hc_ffn_fn));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "hc_ffn_base"), mix, L.hc_ffn_base));
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "hc_ffn_scale"), 3, L.hc_ffn_scale));
    const int64_t E = c.n_routed_experts, inter = moe_.inter, sinter = moe_.shared_inter;
    DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "ffn.gate.weight"), E * d, L.gate));
    if (reg.has(lname(i, "ffn.gate.bias")))
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "ffn.gate.bias"), E, L.gate_bias));
    if (reg.has(lname(i, "ffn.gate.bias_vl")))
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "ffn.gate.bias_vl"), E, L.gate_bias_vl));
    L.experts.resize(E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = lname(i, "ffn.experts." + std::to_string(e) + ".");
      DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w1.weight", inter * d, bf16, L.experts[e].w1));
      DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w3.weight", inter * d, bf16, L.experts[e].w3));
      DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w2.weight", d * inter, bf16, L.experts[e].w2));
    }
    if (moe_.has_shared) {
      const std::string p = lname(i, "ffn.shared_experts.");
      DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w1.weight", sinter * d, bf16, L.shared.w1));
      DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w3.weight", sinter * d, bf16, L.shared.w3));
      DSV41_RETURN_IF_ERROR(load_matrix(reg, p + "w2.weight", d * sinter, bf16, L.shared.w2));
    }
    if (info.has_engram) {
      // Widening the whole table is only practical for small checkpoints (the release's two
      // tables are ~98 GB each in FP8): by default the rows are dequantised from the mapping at
      // each lookup (engram.h). check() above verified the shape and the scale companion.
      const int64_t rows = c.engram_num_embeddings[info.engram_slot];
      const std::string table = lname(i, "engram.embed.weight");
      if (options.widen_engram_tables) {
        DSV41_RETURN_IF_ERROR(load_exact(reg, table, rows * engram_.head_dim, L.engram_table));
      } else {
        DSV41_ASSIGN_OR_RETURN(TensorView stored, reg.raw(table));
        const TensorView* scale = reg.scale_of(table);
        // Dequantising one row up front checks the storage format (FP8 without a scale, a
        // scale that fits no block) at load, as widening would, not at the first lookup.
        if (stored.shape.size() != 2 || stored.shape[0] != rows)
          return corrupt(reg.source() + ": tensor '" + table + "' has shape " + stored.shape_string() +
                         ", the config implies " + std::to_string(rows) + " rows");
        const int64_t probe = 0;
        if (rows > 0)
          DSV41_RETURN_IF_ERROR(dequantize_rows(stored, scale, std::span<const int64_t>(&probe, 1)).status());
        L.engram_stored = std::move(stored);
        L.engram_stored_scale = scale;
      }
      L.engram_rows = rows;
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "engram.wkv.weight"),
                                       (hc + 1) * d * engram_.columns * engram_.head_dim, L.engram_wkv));
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "engram.q_weight"), hc * d, L.engram_q_weight));
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "engram.k_weight"), hc * d, L.engram_k_weight));
    }
  }
  return ok_status();
}

Result<SequenceState> Model::new_sequence(int64_t max_context) const {
  SequenceState s;
  DSV41_ASSIGN_OR_RETURN(s.cache, SequenceCache::create(config_, plan_, max_context));
  if (engram_tables_) s.hasher = std::make_unique<EngramHasher>(&*engram_tables_);
  return s;
}

Status Model::begin_chunk(SequenceState& seq, const int32_t* tokens, int64_t T, Chunk& chunk, std::vector<float>& x,
                          std::vector<float>& p) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, hc = c.hc_mult, V = c.vocab_size;
  if (T < 1) return invalid_argument("forward: no tokens");
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= V)
      return invalid_argument("token id " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
                              " outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  const int64_t start = seq.length();
  if (start + T > seq.cache->max_context())
    return out_of_range("sequence of " + std::to_string(start + T) + " tokens exceeds the context of " +
                        std::to_string(seq.cache->max_context()));
  chunk = Chunk{};
  chunk.start = start;
  chunk.tokens = T;
  // Engram row ids for the chunk: [T, engram layers, columns].
  const int n_engram = engram_tables_ ? engram_tables_->layers() : 0;
  if (n_engram > 0) {
    chunk.saved_history = seq.hasher->history();
    chunk.engram_rows.resize(T * n_engram * engram_.columns);
    DSV41_RETURN_IF_ERROR(seq.hasher->hash(tokens, T, chunk.engram_rows.data()));
  }
  chunk.shared.begin_forward(start, T);
  // X [T, hc, d]: hc copies of the embedding row; carried mix p [T, hc] one-hot.
  std::vector<float> e(T * d);
  for (int64_t t = 0; t < T; ++t) std::copy_n(embed_.data() + int64_t(tokens[t]) * d, d, e.data() + t * d);
  x.resize(T * hc * d);
  p.resize(T * hc);
  mhc_init_streams(mhc_, e.data(), T, x.data());
  mhc_initial_pre(mhc_, T, p.data());
  return ok_status();
}

Status Model::layer_forward(int layer, SequenceState& seq, Chunk& chunk, float* x, float* p,
                            ForwardTrace* trace) const {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, hc = c.hc_mult, T = chunk.tokens;
  const LayerInfo& info = plan_.layers[layer];
  const LayerWeights& L = layers_[layer];
  const int cols = engram_.columns;
  auto restore = [&] {
    if (seq.hasher) seq.hasher->set_history(chunk.saved_history);
  };
  if (info.has_engram) {
    const int n_engram = engram_tables_->layers();
    std::vector<int64_t> rows(T * cols);
    for (int64_t t = 0; t < T; ++t)
      std::copy_n(chunk.engram_rows.data() + (t * n_engram + info.engram_slot) * cols, cols, rows.data() + t * cols);
    Status s = engram_forward(exec_, engram_, L.engram(), rows.data(), T, x);
    if (!s.ok()) {
      // A table row that cannot be decoded (a NaN scale in the mapped checkpoint: the rows are
      // only read when looked up) after earlier layers have taken this chunk into their caches.
      restore();
      return s.with_context("layer " + std::to_string(layer) + " engram (the sequence must be reset)");
    }
  }
  std::vector<float> pre_a(T * hc), post_a(T * hc), comb_a(T * hc * hc);
  std::vector<float> pre_b(T * hc), post_b(T * hc), comb_b(T * hc * hc);
  std::vector<float> h(T * d), a(T * d), x2(T * hc * d);
  std::vector<int32_t> experts(T * moe_.top_k);
  std::vector<float> weights(T * moe_.top_k);
  // Attention site: coefficients from X, input collapsed with the carried (previous site's) mix.
  mhc_coefficients(exec_, mhc_, L.mhc_attn(), x, T, pre_a.data(), post_a.data(), comb_a.data());
  mhc_collapse(exec_, mhc_, x, p, T, h.data());
  rmsnorm_rows(h.data(), T, d, L.attn_norm.data(), c.rms_norm_eps, h.data());
  AttentionOptions attn_options;
  attn_options.exec = exec_;
  Status s = attention_forward(c, info, L.attn, *rope_, chunk.shared, *seq.cache, h.data(), T, chunk.start, a.data(),
                               attn_options);
  if (!s.ok()) {
    // Only an internal inconsistency gets here (inputs were validated in begin_chunk); the
    // cache may hold part of this chunk, so the caller must reset the sequence.
    restore();
    return s.with_context("layer " + std::to_string(layer) + " attention (the sequence must be reset)");
  }
  mhc_expand(exec_, mhc_, a.data(), x, post_a.data(), comb_a.data(), T, x2.data());
  // FFN site: coefficients from X', input collapsed with this block's attention-site pre.
  mhc_coefficients(exec_, mhc_, L.mhc_ffn(), x2.data(), T, pre_b.data(), post_b.data(), comb_b.data());
  mhc_collapse(exec_, mhc_, x2.data(), pre_a.data(), T, h.data());
  rmsnorm_rows(h.data(), T, d, L.ffn_norm.data(), c.rms_norm_eps, h.data());
  moe_forward(exec_, moe_, L.moe(), h.data(), T, nullptr, a.data(), experts.data(), weights.data());
  mhc_expand(exec_, mhc_, a.data(), x2.data(), post_b.data(), comb_b.data(), T, x);
  std::copy(pre_b.begin(), pre_b.end(), p);  // the carried mix for the next site
  if (trace) {
    trace->streams.emplace_back(x, x + T * hc * d);
    trace->pre.push_back(pre_b);
    trace->router_experts.push_back(experts);
    trace->router_weights.push_back(weights);
    trace->topk.push_back(info.ratio > 0 ? chunk.shared.topk : std::vector<int32_t>{});
    // The shared state holds this layer's scores only if this layer ran the indexer.
    const bool indexed = chunk.shared.index_layer == layer && !chunk.shared.trace_index_scores.empty();
    trace->index_scores.push_back(indexed ? chunk.shared.trace_index_scores : std::vector<float>{});
    trace->candidates.push_back(indexed && chunk.shared.candidate_layer == layer ? chunk.shared.trace_candidates
                                                                                 : std::vector<uint8_t>{});
  }
  return ok_status();
}

void Model::finish_chunk(const Chunk& chunk, const float* x, const float* p, int64_t logit_rows, float* hidden,
                         float* logits) const {
  const int64_t d = config_.hidden_size, T = chunk.tokens;
  // Final collapse with the last FFN-site pre, final norm, head (fp32 logits).
  mhc_collapse(exec_, mhc_, x, p, T, hidden);
  rmsnorm_rows(hidden, T, d, final_norm_.data(), config_.rms_norm_eps, hidden);
  if (logit_rows > 0)
    matmul(exec_, hidden + (T - logit_rows) * d, logit_rows, d, head_.ref(), config_.vocab_size, logits);
}

Status Model::forward(SequenceState& seq, const int32_t* tokens, int64_t T, int64_t logit_rows, float* logits,
                      ForwardTrace* trace) const {
  if (logit_rows < 0 || logit_rows > T) return invalid_argument("forward: logit_rows outside 0..T");
  Chunk chunk;
  std::vector<float> x, p;
  DSV41_RETURN_IF_ERROR(begin_chunk(seq, tokens, T, chunk, x, p));
  if (trace) {
    *trace = ForwardTrace{};
    trace->engram_rows = chunk.engram_rows;
    chunk.shared.record_trace = true;  // index scores and candidate pools, [T, entries] each
  }
  for (const LayerInfo& info : plan_.layers)
    DSV41_RETURN_IF_ERROR(layer_forward(info.index, seq, chunk, x.data(), p.data(), trace));
  std::vector<float> hidden(T * config_.hidden_size);
  finish_chunk(chunk, x.data(), p.data(), logit_rows, hidden.data(), logits);
  if (trace) trace->final_hidden = std::move(hidden);
  return ok_status();
}

}  // namespace dsv41
