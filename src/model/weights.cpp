// Weight registry: naming-scheme mapping, the tensor list the layer plan implies (model.md §2),
// the checks against it, and float32 views through dequant.h.
#include "model/weights.h"

#include "model/dspark_weights.h"

#include <fmt/format.h>

#include <set>

namespace dsv41 {
namespace {

// mHC mixes: 2 + hc_mult rows of hc_mult coefficients (pre, post, residual), and one scale per
// part (model.md §3.3). These are the structure of H, not sizes of this model.
constexpr int64_t kHcScaleParts = 3;
constexpr int64_t kHcFixedRows = 2;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

bool is_hf_name(std::string_view n) { return starts_with(n, "model.") || starts_with(n, "lm_head."); }
bool is_release_name(std::string_view n) {
  return starts_with(n, "layers.") || n == "embed.weight" || n == "norm.weight" || starts_with(n, "head.");
}
// Families the registry does not verify yet (DSpark drafter, vision tower): reported, not errors.
bool is_unchecked_family(std::string_view n) {
  return starts_with(n, "mtp.") || starts_with(n, "vision.") || starts_with(n, "aligner.") || starts_with(n, "image_");
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// "x.weight" → "x.scale"; anything else has no companion.
std::string scale_name(std::string_view name) {
  if (!ends_with(name, ".weight")) return {};
  return std::string(name.substr(0, name.size() - 7)) + ".scale";
}

// Checks one present tensor (and its scale companion) against its expectation, appending to
// `missing` (a needed scale) and `mismatched` (one message per problem).
void check_one(const ExpectedTensor& e, const TensorView& w, const TensorView* scale, const std::string& sname,
               std::vector<std::string>& missing, std::vector<std::string>& mismatched) {
  auto bad = [&](const std::string& what) { mismatched.push_back(fmt::format("'{}': {}", e.name, what)); };
  const bool fp8 = w.dtype == DType::kF8E4M3;
  const bool fp4 = w.dtype == DType::kI8 || w.dtype == DType::kU8;
  const bool flt = is_float_dtype(w.dtype);
  bool dtype_ok = false, needs_scale = false;
  switch (e.storage) {
    case WeightStorage::kFloat: dtype_ok = flt; break;
    case WeightStorage::kMatrix: dtype_ok = flt || fp8; needs_scale = fp8; break;
    case WeightStorage::kExpert: dtype_ok = flt || fp8 || fp4; needs_scale = fp8 || fp4; break;
    case WeightStorage::kScaledTable: dtype_ok = flt || fp8; needs_scale = true; break;
  }
  if (!dtype_ok) {
    bad(fmt::format("dtype {} not allowed here", dtype_name(w.dtype)));
    return;
  }
  if (needs_scale && scale == nullptr) {
    missing.push_back(sname);
    return;
  }
  // A present companion is applied by load_f32 (also to a float weight, as in the HF Engram
  // table), so it is checked whenever this storage class allows scales.
  const bool scaled = scale != nullptr && e.storage != WeightStorage::kFloat;
  const std::vector<int64_t> shape = logical_shape(w, scaled ? scale : nullptr);
  if (shape != e.shape) {
    bad(fmt::format("shape {} (stored {} {}), expected {}", shape_str(shape), dtype_name(w.dtype), w.shape_string(),
                    shape_str(e.shape)));
    return;
  }
  if (!scaled) return;
  if (scale->shape.size() != 2 || shape.size() != 2) {
    bad(fmt::format("scale '{}' shape {} for weight {}: block scales need 2-D weight and scale", sname,
                    scale->shape_string(), shape_str(shape)));
    return;
  }
  if (scale->dtype != DType::kF8E8M0 && !is_float_dtype(scale->dtype)) {
    bad(fmt::format("scale '{}' dtype {}, expected F8_E8M0 or float", sname, dtype_name(scale->dtype)));
    return;
  }
  const int64_t rows = shape[0], cols = shape[1];
  if (fp4 || e.storage == WeightStorage::kScaledTable) {
    // Row-wise: one scale per row per kRowScaleCols columns.
    const std::vector<int64_t> want = {rows, (cols + kRowScaleCols - 1) / kRowScaleCols};
    if (scale->shape != want)
      bad(fmt::format("scale '{}' shape {}, expected {} (per row per 32 columns)", sname, scale->shape_string(),
                      shape_str(want)));
    return;
  }
  auto block = infer_scale_block(rows, cols, scale->shape[0], scale->shape[1], "scale '" + sname + "'");
  if (!block.ok()) bad(block.status().message());
}

}  // namespace

const char* naming_scheme_name(NamingScheme scheme) {
  return scheme == NamingScheme::kRelease ? "release" : "huggingface";
}

std::string LayerTensor::name() const { return fmt::format("layers.{}.{}", layer, role); }
std::string ExpertTensor::name() const { return fmt::format("layers.{}.ffn.experts.{}.{}.weight", layer, expert, proj); }

std::string to_release_name(std::string_view name) {
  std::string n(name);
  if (n == "lm_head.weight") return "head.weight";
  if (starts_with(n, "model.")) n = n.substr(6);
  if (ends_with(n, ".weight_scale_inv")) n = n.substr(0, n.size() - 17) + ".scale";
  return n;
}

namespace {

// One block's tensors under `prefix` ("layers.L." for the backbone, "mtp.s." for a DSpark stage):
// norms, mHC, attention (compressor and indexer by role), the MoE with `experts` routed experts,
// Engram where the layer has it.
void add_block_tensors(const ModelConfig& c, const LayerInfo& L, const std::string& prefix, int experts,
                       std::vector<ExpectedTensor>& out) {
  auto add = [&](std::string name, std::vector<int64_t> shape, WeightStorage s) {
    out.push_back({std::move(name), std::move(shape), s});
  };
  auto n = [&](std::string_view role) { return prefix + std::string(role); };
  const int64_t H = c.hidden_size;
  const int64_t hc = c.hc_mult;
  const int64_t mix = (kHcFixedRows + hc) * hc;           // 24 for hc_mult 4
  const int64_t q_heads_dim = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t o_rank = int64_t{c.o_groups} * c.o_lora_rank;
  const int64_t idx_dim = int64_t{c.index_n_heads} * c.index_head_dim;
  const int64_t shared_inter = int64_t{c.moe_intermediate_size} * c.n_shared_experts;
  const int64_t ngram_sizes = c.engram_max_ngram_size - 1;  // n = 2 … max
  using S = WeightStorage;
  add(n("attn_norm.weight"), {H}, S::kFloat);
  add(n("ffn_norm.weight"), {H}, S::kFloat);
  for (const char* site : {"attn", "ffn"}) {
    add(fmt::format("{}hc_{}_fn", prefix, site), {mix, hc * H}, S::kFloat);
    add(fmt::format("{}hc_{}_base", prefix, site), {mix}, S::kFloat);
    add(fmt::format("{}hc_{}_scale", prefix, site), {kHcScaleParts}, S::kFloat);
  }
  // Attention (every layer): low-rank Q, one shared KV latent, grouped low-rank output.
  add(n("attn.wq_a.weight"), {c.q_lora_rank, H}, S::kMatrix);
  add(n("attn.q_norm.weight"), {c.q_lora_rank}, S::kFloat);
  add(n("attn.wq_b.weight"), {q_heads_dim, c.q_lora_rank}, S::kMatrix);
  add(n("attn.wkv.weight"), {kv_dim, H}, S::kMatrix);
  add(n("attn.kv_norm.weight"), {c.head_dim}, S::kFloat);
  add(n("attn.wo_a.weight"), {o_rank, q_heads_dim / c.o_groups}, S::kMatrix);
  add(n("attn.wo_b.weight"), {H, o_rank}, S::kMatrix);
  add(n("attn.attn_sink"), {c.num_attention_heads}, S::kFloat);
  // Compressor and indexer keys: kv sources only; the gate only when entries pool >1 token.
  if (L.role == LayerRole::kFull) {
    add(n("attn.compressor.wkv.weight"), {c.head_dim, H}, S::kMatrix);
    if (L.ratio > 1) add(n("attn.compressor.wgate.weight"), {c.head_dim, H}, S::kMatrix);
    add(n("attn.compressor.norm.weight"), {c.head_dim}, S::kFloat);
    add(n("attn.indexer.wk.weight"), {c.index_head_dim, c.head_dim}, S::kMatrix);
    add(n("attn.indexer.k_norm.weight"), {c.index_head_dim}, S::kFloat);
  }
  // Indexer queries: every index source (Full and Reindex).
  if (L.role == LayerRole::kFull || L.role == LayerRole::kReindex) {
    add(n("attn.indexer.wq_b.weight"), {idx_dim, c.q_lora_rank}, S::kMatrix);
    add(n("attn.indexer.weights_proj.weight"), {c.index_n_heads, H}, S::kMatrix);
  }
  // MoE: router, shared expert(s), routed experts.
  add(n("ffn.gate.weight"), {experts, H}, S::kMatrix);
  add(n("ffn.gate.bias"), {experts}, S::kFloat);
  add(n("ffn.gate.bias_vl"), {experts}, S::kFloat);
  if (shared_inter > 0) {
    add(n("ffn.shared_experts.w1.weight"), {shared_inter, H}, S::kMatrix);
    add(n("ffn.shared_experts.w2.weight"), {H, shared_inter}, S::kMatrix);
    add(n("ffn.shared_experts.w3.weight"), {shared_inter, H}, S::kMatrix);
  }
  for (int j = 0; j < experts; ++j) {
    const std::string e = fmt::format("{}ffn.experts.{}.", prefix, j);
    add(e + "w1.weight", {c.moe_intermediate_size, H}, S::kExpert);
    add(e + "w2.weight", {H, c.moe_intermediate_size}, S::kExpert);
    add(e + "w3.weight", {c.moe_intermediate_size, H}, S::kExpert);
  }
  if (L.has_engram && L.engram_slot >= 0 && L.engram_slot < static_cast<int>(c.engram_num_embeddings.size())) {
    add(n("engram.embed.weight"), {c.engram_num_embeddings[L.engram_slot], c.engram_head_dim}, S::kScaledTable);
    add(n("engram.wkv.weight"), {(hc + 1) * H, ngram_sizes * c.engram_n_heads * c.engram_head_dim}, S::kMatrix);
    add(n("engram.q_weight"), {hc, H}, S::kFloat);
    add(n("engram.k_weight"), {hc, H}, S::kFloat);
  }
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c, const LayerPlan& plan) {
  std::vector<ExpectedTensor> out;
  const int64_t H = c.hidden_size;
  out.push_back({"embed.weight", {c.vocab_size, H}, WeightStorage::kMatrix});
  out.push_back({"norm.weight", {H}, WeightStorage::kFloat});
  if (!c.tie_word_embeddings) out.push_back({"head.weight", {c.vocab_size, H}, WeightStorage::kMatrix});
  for (const LayerInfo& L : plan.layers)
    add_block_tensors(c, L, fmt::format("layers.{}.", L.index), c.n_routed_experts, out);
  return out;
}

Result<std::vector<ExpectedTensor>> expected_drafter_tensors(const ModelConfig& c) {
  DSV41_ASSIGN_OR_RETURN(DrafterShape sh, DrafterShape::from_config(c));
  std::vector<ExpectedTensor> out;
  for (int s = 0; s < sh.stages; ++s)
    add_block_tensors(c, sh.stage_info(c, s), fmt::format("mtp.{}.", s), sh.moe.n_experts, out);
  const int64_t H = c.hidden_size, r = sh.markov_rank;
  const std::string last = fmt::format("mtp.{}.", sh.stages - 1);
  out.push_back({"mtp.0.main_proj.weight", {H, H * int64_t(sh.targets.size())}, WeightStorage::kMatrix});
  out.push_back({"mtp.0.main_norm.weight", {H}, WeightStorage::kFloat});
  out.push_back({last + "norm.weight", {H}, WeightStorage::kFloat});
  out.push_back({last + "markov_head.embed.weight", {c.vocab_size, r}, WeightStorage::kFloat});
  out.push_back({last + "markov_head.head.weight", {c.vocab_size, r}, WeightStorage::kFloat});
  out.push_back({last + "confidence_head.proj.weight", {1, H + r}, WeightStorage::kFloat});
  return out;
}

// ---- WeightRegistry -----------------------------------------------------------------------

Result<WeightRegistry> WeightRegistry::open(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(TensorSet set, TensorSet::open(path));
  return from_tensor_set(std::move(set));
}

Result<WeightRegistry> WeightRegistry::from_tensor_set(TensorSet set) {
  WeightRegistry r;
  std::string hf_example, release_example;
  for (const std::string& n : set.names()) {
    if (is_hf_name(n) && hf_example.empty()) hf_example = n;
    if (is_release_name(n) && release_example.empty()) release_example = n;
  }
  if (!hf_example.empty() && !release_example.empty())
    return corrupt(fmt::format("{}: mixes Hugging Face names ('{}') and release names ('{}')", set.source(),
                               hf_example, release_example));
  r.scheme_ = hf_example.empty() ? NamingScheme::kRelease : NamingScheme::kHuggingFace;
  for (const std::string& n : set.names()) {
    std::string rel = to_release_name(n);
    auto [it, inserted] = r.stored_name_.emplace(rel, n);
    if (!inserted)
      return corrupt(fmt::format("{}: tensors '{}' and '{}' both map to '{}'", set.source(), it->second, n, rel));
  }
  r.set_ = std::move(set);
  return r;
}

std::vector<std::string> WeightRegistry::names() const {
  std::vector<std::string> out;
  out.reserve(stored_name_.size());
  for (const auto& [rel, stored] : stored_name_) out.push_back(rel);
  return out;
}

const TensorView* WeightRegistry::find(std::string_view name) const {
  auto it = stored_name_.find(to_release_name(name));
  return it == stored_name_.end() ? nullptr : set_.find(it->second);
}

bool WeightRegistry::has(std::string_view name) const { return find(name) != nullptr; }

Result<TensorView> WeightRegistry::raw(std::string_view name) const {
  if (const TensorView* v = find(name)) return *v;
  return not_found(fmt::format("{}: no tensor '{}' ({} names)", source(), to_release_name(name),
                               naming_scheme_name(scheme_)));
}

const TensorView* WeightRegistry::scale_of(std::string_view name) const {
  const std::string s = scale_name(to_release_name(name));
  return s.empty() ? nullptr : find(s);
}

Result<FloatTensor> WeightRegistry::load_f32(std::string_view name) const {
  DSV41_ASSIGN_OR_RETURN(TensorView v, raw(name));
  return dequantize(v, scale_of(name));
}

Result<FloatTensor> WeightRegistry::load_rows_f32(std::string_view name, std::span<const int64_t> rows) const {
  DSV41_ASSIGN_OR_RETURN(TensorView v, raw(name));
  return dequantize_rows(v, scale_of(name), rows);
}

WeightCheckReport WeightRegistry::check_report(const ModelConfig& config, const LayerPlan& plan) const {
  WeightCheckReport rep;
  std::set<std::string> consumed;
  for (const ExpectedTensor& e : expected_tensors(config, plan)) {
    consumed.insert(e.name);
    const TensorView* w = find(e.name);
    if (w == nullptr) {
      rep.missing.push_back(e.name);
      continue;
    }
    const std::string sname = scale_name(e.name);
    const TensorView* scale = sname.empty() ? nullptr : find(sname);
    if (scale != nullptr && e.storage != WeightStorage::kFloat) consumed.insert(sname);
    check_one(e, *w, scale, sname, rep.missing, rep.mismatched);
  }
  for (const auto& [rel, stored] : stored_name_) {
    if (consumed.count(rel)) continue;
    (is_unchecked_family(rel) ? rep.unchecked : rep.unexpected).push_back(rel);
  }
  return rep;
}

Status WeightRegistry::check(const ModelConfig& config, const LayerPlan& plan) const {
  WeightCheckReport rep = check_report(config, plan);
  if (rep.ok()) return ok_status();
  // Long lists (a wrong checkpoint can miss 70k tensors) are cut to keep the message readable.
  constexpr size_t kShown = 40;
  auto list = [&](const char* what, const std::vector<std::string>& v) -> std::string {
    if (v.empty()) return {};
    std::string s = fmt::format("; {} {}: ", v.size(), what);
    for (size_t i = 0; i < v.size() && i < kShown; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > kShown) s += fmt::format(", ... and {} more", v.size() - kShown);
    return s;
  };
  std::string msg = fmt::format("{}: weights do not match the layer plan ({} names){}{}{}", source(),
                                naming_scheme_name(scheme_), list("missing", rep.missing),
                                list("mismatched", rep.mismatched), list("unexpected", rep.unexpected));
  return Status(rep.missing.empty() ? ErrorKind::kCorrupt : ErrorKind::kNotFound, msg);
}

}  // namespace dsv41
