// The backbone: loading every layer to float32 and the single-pass forward of model.md §3.2.
// See model.h.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "format/tokenizer.h"
#include "kernels/cpu/gemm.h"
#include "model/dequant.h"
#include "model/engram_token_map.h"
#include "model/rmsnorm.h"
#include "model/weights.h"
#include "model/weight_loading.h"

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
  EngramWeights w{engram_table.empty() ? nullptr : engram_table.data(), engram_rows,
                  weight_ref(engram_wkv, {}, engram_wkv_quant),
                  engram_q_weight.data(), engram_k_weight.data()};
  if (engram_table.empty() && engram_stored) {
    w.stored = &*engram_stored;
    w.stored_scale = engram_stored_scale;
  }
  return w;
}

namespace {

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
  {
    // The schedule is the plan's to check; its errors name the config file.
    Result<LayerPlan> plan = build_layer_plan(config_);
    if (!plan.ok()) return plan.status().with_context(config_.source);
    plan_ = std::move(*plan);
  }
  DSV41_ASSIGN_OR_RETURN(Rope rope, Rope::create(config_));
  rope_ = std::move(rope);
  mhc_ = MhcShape::from_config(config_);
  DSV41_ASSIGN_OR_RETURN(moe_, MoeShape::from_config(config_));
  engram_ = EngramShape::from_config(config_);
  return ok_status();
}

void Model::init_exec(const ModelLoadOptions& options) {
  const int threads = options.threads > 0 ? options.threads : hardware_threads();
  if (threads > 1) pool_ = std::make_unique<ThreadPool>(threads, options.pool_spin);
  exec_.pool = pool_.get();
  exec_.fast = !options.force_scalar && cpu_has_avx2_fma();
  exec_.isa = options.isa;
  exec_.profile = options.profile;
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
  auto add = [&b](const WeightMatrix& m) { (m.is_quant() ? b.stored : m.is_bf16() ? b.bf16 : b.f32) += m.bytes(); };
  auto quant = [](const QuantWeights& q) {  // codes + scales as stored
    if (!q.codes) return int64_t{0};
    const int64_t scale_rows = ((q.rows + q.row_phase - 1) >> q.block_rows_log2) + 1;
    return q.rows * q.row_bytes() + scale_rows * q.scale_cols;
  };
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
    for (const QuantWeights* q : {&a.quant_wq_a, &a.quant_wq_b, &a.quant_wkv, &a.quant_wo_a, &a.quant_wo_b,
                                  &a.quant_indexer_wq_b, &L.engram_wkv_quant})
      b.stored += quant(*q);
  }
  return b;
}

Model::HeldBytes Model::held_bytes() const {
  HeldBytes b;
  auto vec = [](const std::vector<float>& v) { return int64_t(v.size() * sizeof(float)); };
  auto h16 = [](const std::vector<uint16_t>& v) { return int64_t(v.size() * sizeof(uint16_t)); };
  auto stored_bytes = [](const QuantWeights& q) {  // codes + scales as stored
    if (!q.codes) return int64_t{0};
    const int64_t scale_rows = ((q.rows + q.row_phase - 1) >> q.block_rows_log2) + 1;
    return q.rows * q.row_bytes() + scale_rows * q.scale_cols;
  };
  b.embedding = vec(embed_);
  b.embedding_row = config_.hidden_size * int64_t(sizeof(float));
  b.dense = head_.bytes() + vec(final_norm_);
  for (const LayerWeights& L : layers_) {
    const AttentionWeights& a = L.attn;
    for (const std::vector<float>* f :
         {&a.wq_a, &a.q_norm, &a.wq_b, &a.wkv, &a.kv_norm, &a.wo_a, &a.wo_b, &a.attn_sink, &a.compressor_wkv,
          &a.compressor_wgate, &a.compressor_norm, &a.indexer_wk, &a.indexer_k_norm, &a.indexer_wq_b,
          &a.indexer_weights_proj, &L.attn_norm, &L.ffn_norm, &L.hc_attn_fn, &L.hc_attn_base, &L.hc_attn_scale,
          &L.hc_ffn_fn, &L.hc_ffn_base, &L.hc_ffn_scale, &L.gate, &L.gate_bias, &L.gate_bias_vl, &L.engram_wkv,
          &L.engram_q_weight, &L.engram_k_weight})
      b.dense += vec(*f);
    for (const std::vector<uint16_t>* h : {&a.bf16.wq_a, &a.bf16.wq_b, &a.bf16.wkv, &a.bf16.wo_a, &a.bf16.wo_b})
      b.dense += h16(*h);
    for (const QuantWeights* q : {&a.quant_wq_a, &a.quant_wq_b, &a.quant_wkv, &a.quant_wo_a, &a.quant_wo_b,
                                  &a.quant_indexer_wq_b, &L.engram_wkv_quant})
      b.dense += stored_bytes(*q);
    b.dense += L.shared.w1.bytes() + L.shared.w3.bytes() + L.shared.w2.bytes();
    for (const ExpertStore& e : L.experts) {
      const int64_t one = e.w1.bytes() + e.w3.bytes() + e.w2.bytes();
      if (one > 0) b.per_expert = one;  // (a model of one expert rank holds the others empty)
      b.routed += one;
    }
  }
  return b;
}


Status Model::load_layers(const std::string& dir, const ModelLoadOptions& options) {
  {
    DSV41_ASSIGN_OR_RETURN(WeightRegistry opened, WeightRegistry::open(dir));
    registry_ = std::make_unique<WeightRegistry>(std::move(opened));
  }
  // Views into the registry (the Engram tables) stay valid: it lives, unmoved, as long as the model.
  const WeightRegistry& reg = *registry_;
  DSV41_RETURN_IF_ERROR(reg.check(config_, plan_));
  if (options.expert_ranks < 1 || options.expert_rank < 0 || options.expert_rank >= options.expert_ranks)
    return invalid_argument(dir + ": expert rank " + std::to_string(options.expert_rank) + " of " +
                            std::to_string(options.expert_ranks));
  expert_rank_ = options.expert_rank;
  expert_ranks_ = options.expert_ranks;
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, V = c.vocab_size, hc = c.hc_mult;
  DSV41_RETURN_IF_ERROR(load_exact(reg, "embed.weight", V * d, embed_));
  DSV41_RETURN_IF_ERROR(load_exact(reg, "norm.weight", d, final_norm_));
  const bool bf16 = !options.f32_weights;
  const bool stored = options.weights == WeightHolding::kStored;
  DSV41_RETURN_IF_ERROR(load_matrix(reg, "head.weight", V * d, bf16, stored, head_));
  layers_.resize(c.num_hidden_layers);
  for (const LayerInfo& info : plan_.layers) {
    const int i = info.index;
    LayerWeights& L = layers_[i];
    DSV41_ASSIGN_OR_RETURN(L.attn, load_attention_weights(reg, c, info, stored));
    if (bf16) DSV41_RETURN_IF_ERROR(narrow_attention(reg, L.attn));
    DSV41_RETURN_IF_ERROR(load_block_weights(reg, c, lname(i, ""), moe_, bf16, stored, L, expert_rank_, expert_ranks_));
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
      {
        const std::string wkv = lname(i, "engram.wkv.weight");
        const int64_t numel = (hc + 1) * d * engram_.columns * engram_.head_dim;
        WeightMatrix m;
        DSV41_RETURN_IF_ERROR(load_matrix(reg, wkv, numel, false, stored, m));
        L.engram_wkv = std::move(m.f32);
        L.engram_wkv_quant = m.quant;
      }
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "engram.q_weight"), hc * d, L.engram_q_weight));
      DSV41_RETURN_IF_ERROR(load_exact(reg, lname(i, "engram.k_weight"), hc * d, L.engram_k_weight));
    }
  }
  DSV41_ASSIGN_OR_RETURN(drafter_, load_drafter_weights(reg, c, stored, bf16));
  if (!drafter_ && DrafterShape::configured(c))
    drafter_note_ = dir + ": the config describes a DSpark drafter but the checkpoint has no mtp.* tensors: DSpark off";
  return ok_status();
}

}  // namespace dsv41
