// Parses config.json into a ModelConfig and validates it. Spec: model.md §1 (keys, defaults),
// §9.1 (HF spellings), golden/README.md (the flat config save_pretrained writes).
//
// Owns: the JSON boundary (every nlohmann exception is caught here and becomes a Status), the
// mapping from both config layouts to ModelConfig, and every value check that does not need the
// layer plan. Whether the schedule is executable (roles, sources, ratios) is the plan's to say:
// plan/layer_plan.h sits above this file and every consumer of a config builds its plan.
//
// Layouts:
//   composite (release):  {"model_type": "deepseek_v41", "text_config": {...}, "vision_config":
//                          {...} | null, "quantization_config": {...}, bos/eos/pad/image ids}
//   flat (save_pretrained): {"model_type": "deepseek_v41_text", <text keys>}
// Keys dsv41 does not use (layer_types, initializer_range, id2label, ...) are ignored.
#include "format/config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "format/record_layout.h"

namespace dsv41 {
namespace {

using json = nlohmann::json;

// config.json is a few KB; anything this large is not a config (and keeps fuzzing cheap).
constexpr size_t kMaxConfigBytes = size_t{16} << 20;
// Real configs nest 4 levels (text_config.rope_parameters.compress); a bound keeps hostile
// input from building deep trees.
constexpr int kMaxJsonDepth = 32;

// Bytes outside printable ASCII become \xNN so that messages are valid UTF-8 even when the
// input (echoed by nlohmann's "last read: ...") is not.
std::string printable(std::string_view text, size_t max_len = 200) {
  std::string out;
  for (size_t i = 0; i < text.size() && out.size() < max_len; ++i) {
    unsigned char ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  if (out.size() >= max_len) out += "...";
  return out;
}

const char* json_type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unexpected value";
  }
}

// "a string (\"abc\")" for scalars; only the type for containers (dumping them could be large).
std::string describe(const json& v) {
  std::string out = json_type_name(v);
  if (v.is_primitive() && !v.is_null()) out += " (" + printable(v.dump(), 60) + ")";
  return out;
}

// Whether JSON null counts as "absent" (HF writes null for unset optional values such as
// pad_token_id or text_config.dtype) or is a type error (null hidden_size is a broken config).
enum class Null { kError, kAbsent };

// The keys of one JSON object, read with their types checked. Messages name "<prefix><key>",
// e.g. "text_config.head_dim". Absent keys leave the output untouched (it holds the default).
class Fields {
 public:
  Fields(const json& obj, std::string prefix, std::string source)
      : obj_(obj), prefix_(std::move(prefix)), source_(std::move(source)) {}

  const std::string& prefix() const { return prefix_; }
  const std::string& source() const { return source_; }
  std::string name(std::string_view key) const { return prefix_ + std::string(key); }

  // The value of `key`, or nullptr when absent (or null and null counts as absent).
  const json* find(std::string_view key, Null null = Null::kError) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return nullptr;
    if (it->is_null() && null == Null::kAbsent) return nullptr;
    return &*it;
  }
  bool has(std::string_view key, Null null = Null::kAbsent) const { return find(key, null) != nullptr; }

  Status type_error(std::string_view key, const char* expected, const json& got) const {
    return corrupt(source_ + ": " + name(key) + ": expected " + expected + ", got " + describe(got));
  }

  Status read(std::string_view key, int64_t& out, Null null = Null::kError) const {
    const json* v = find(key, null);
    if (!v) return ok_status();
    return to_int64(*v, name(key), out);
  }
  Status read(std::string_view key, int& out, Null null = Null::kError) const {
    const json* v = find(key, null);
    if (!v) return ok_status();
    return to_int(*v, name(key), out);
  }
  Status read(std::string_view key, double& out, Null null = Null::kError) const {
    const json* v = find(key, null);
    if (!v) return ok_status();
    if (!v->is_number()) return type_error(key, "a number", *v);
    double d = v->get<double>();
    if (!std::isfinite(d)) return corrupt(source_ + ": " + name(key) + ": not a finite number");
    out = d;
    return ok_status();
  }
  Status read(std::string_view key, bool& out, Null null = Null::kError) const {
    const json* v = find(key, null);
    if (!v) return ok_status();
    if (!v->is_boolean()) return type_error(key, "a boolean", *v);
    out = v->get<bool>();
    return ok_status();
  }
  Status read(std::string_view key, std::string& out, Null null = Null::kError) const {
    const json* v = find(key, null);
    if (!v) return ok_status();
    if (!v->is_string()) return type_error(key, "a string", *v);
    out = v->get<std::string>();
    return ok_status();
  }
  Status read(std::string_view key, std::vector<int>& out) const {
    return read_list(key, out, [&](const json& e, const std::string& n, int& x) { return to_int(e, n, x); });
  }
  Status read(std::string_view key, std::vector<int64_t>& out) const {
    return read_list(key, out, [&](const json& e, const std::string& n, int64_t& x) { return to_int64(e, n, x); });
  }

  // A nested object: absent or null gives nullptr, anything but an object is an error.
  Result<const json*> object(std::string_view key) const {
    const json* v = find(key, Null::kAbsent);
    if (!v) return static_cast<const json*>(nullptr);
    if (!v->is_object()) return type_error(key, "an object", *v);
    return v;
  }

 private:
  Status to_int64(const json& v, const std::string& n, int64_t& out) const {
    if (!v.is_number_integer()) return corrupt(source_ + ": " + n + ": expected an integer, got " + describe(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return corrupt(source_ + ": " + n + ": integer " + v.dump() + " out of range");
    out = v.get<int64_t>();
    return ok_status();
  }
  Status to_int(const json& v, const std::string& n, int& out) const {
    int64_t wide = 0;
    DSV41_RETURN_IF_ERROR(to_int64(v, n, wide));
    if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max())
      return corrupt(source_ + ": " + n + ": integer " + std::to_string(wide) + " out of range");
    out = static_cast<int>(wide);
    return ok_status();
  }
  template <typename T, typename F>
  Status read_list(std::string_view key, std::vector<T>& out, F convert) const {
    const json* v = find(key);
    if (!v) return ok_status();
    if (!v->is_array()) return type_error(key, "an array of integers", *v);
    std::vector<T> values(v->size());
    for (size_t i = 0; i < v->size(); ++i)
      DSV41_RETURN_IF_ERROR(convert((*v)[i], name(key) + "[" + std::to_string(i) + "]", values[i]));
    out = std::move(values);
    return ok_status();
  }

  const json& obj_;
  std::string prefix_;
  std::string source_;
};

// A key that two spellings (engram_pad_id / engram_pad_token_id) or two places (top level and
// text_config of a composite config) may carry. Either one is taken; both present with different
// values is an error naming both, since silently preferring one could load the wrong model.
template <typename T>
Status read_either(const Fields& a, std::string_view key_a, const Fields& b, std::string_view key_b, T& out,
                   Null null = Null::kAbsent) {
  T va = out, vb = out;
  bool has_a = a.has(key_a, null), has_b = b.has(key_b, null);
  DSV41_RETURN_IF_ERROR(a.read(key_a, va, null));
  DSV41_RETURN_IF_ERROR(b.read(key_b, vb, null));
  if (has_a && has_b && !(va == vb))
    return corrupt(a.source() + ": " + a.name(key_a) + " and " + b.name(key_b) + " disagree");
  if (has_a) out = va;
  else if (has_b) out = vb;
  return ok_status();
}

// ---- value checks ---------------------------------------------------------------------------

class Checker {
 public:
  explicit Checker(const Fields& f) : f_(f) {}

  Status bad(std::string_view key, const std::string& problem) const {
    return corrupt(f_.source() + ": " + f_.name(key) + ": " + problem);
  }
  Status no_support(std::string_view key, const std::string& problem) const {
    return unsupported(f_.source() + ": " + f_.name(key) + ": " + problem);
  }
  template <typename T>
  Status positive(std::string_view key, T v) const {
    if (v > 0) return ok_status();
    return bad(key, "must be positive, got " + num(v));
  }
  template <typename T>
  Status non_negative(std::string_view key, T v) const {
    if (v >= 0) return ok_status();
    return bad(key, "must not be negative, got " + num(v));
  }
  Status token(std::string_view key, int64_t v, int64_t vocab) const {
    if (v >= 0 && v < vocab) return ok_status();
    return bad(key, "token id " + std::to_string(v) + " outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
  Status layer_ids(std::string_view key, const std::vector<int>& ids, int num_layers) const {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= num_layers)
        return bad(key, "layer " + std::to_string(ids[i]) + " (entry " + std::to_string(i) +
                            ") out of range [0, " + std::to_string(num_layers) + ") of num_hidden_layers");
    return ok_status();
  }
  Status one_of(std::string_view key, const std::string& v, std::initializer_list<const char*> allowed) const {
    std::string message = "\"";
    message += printable(v, 60);
    message += "\" is not supported (expected ";
    for (const char* a : allowed) {
      if (v == a) return ok_status();
      message += a;
      message += a == *(allowed.end() - 1) ? ")" : ", ";
    }
    return no_support(key, message);
  }

 private:
  template <typename T>
  static std::string num(T v) {
    std::ostringstream s;
    s << v;
    return s.str();
  }
  const Fields& f_;
};

// ---- the text config ------------------------------------------------------------------------

// RoPE keys. rope_scaling (absent or null: no YaRN) is the source of truth, as in the reference
// (model.md §9.1). transformers 5 also writes rope_parameters {main, compress}; when present it
// must agree with the legacy keys and fills them in when they are absent.
Status read_yarn(const Fields& f, std::string_view key, const json& obj, std::optional<YarnScaling>& out) {
  Fields y(obj, f.name(key) + ".", f.source());
  Checker chk(y);
  // HF writes "rope_type"; V4's release config spells it "type".
  const char* type_key = y.has("rope_type") || !y.has("type") ? "rope_type" : "type";
  if (!y.has(type_key)) return chk.bad(type_key, "missing");
  std::string type;
  DSV41_RETURN_IF_ERROR(y.read(type_key, type));
  if (type == "default") {
    out.reset();
    return ok_status();
  }
  DSV41_RETURN_IF_ERROR(chk.one_of(type_key, type, {"yarn", "default"}));
  YarnScaling yarn;
  DSV41_RETURN_IF_ERROR(y.read("factor", yarn.factor));
  DSV41_RETURN_IF_ERROR(y.read("beta_fast", yarn.beta_fast));
  DSV41_RETURN_IF_ERROR(y.read("beta_slow", yarn.beta_slow));
  DSV41_RETURN_IF_ERROR(y.read("original_max_position_embeddings", yarn.original_max_position_embeddings));
  DSV41_RETURN_IF_ERROR(chk.positive("factor", yarn.factor));
  DSV41_RETURN_IF_ERROR(chk.positive("beta_fast", yarn.beta_fast));
  DSV41_RETURN_IF_ERROR(chk.positive("beta_slow", yarn.beta_slow));
  DSV41_RETURN_IF_ERROR(chk.positive("original_max_position_embeddings", yarn.original_max_position_embeddings));
  // V4.1's YaRN is frequency-only (model.md §3.6); a temperature would change every logit.
  double temperature = 1.0;
  DSV41_RETURN_IF_ERROR(y.read("attention_factor", temperature, Null::kAbsent));
  if (temperature != 1.0)
    return chk.no_support("attention_factor", "a YaRN attention temperature is not supported (V4.1 YaRN is "
                                              "frequency-only)");
  out = yarn;
  return ok_status();
}

Status read_rope(const Fields& t, ModelConfig& c) {
  DSV41_RETURN_IF_ERROR(t.read("rope_theta", c.rope_theta));
  DSV41_RETURN_IF_ERROR(t.read("compress_rope_theta", c.compress_rope_theta));
  DSV41_ASSIGN_OR_RETURN(const json* scaling, t.object("rope_scaling"));
  c.rope_scaling.reset();
  if (scaling) DSV41_RETURN_IF_ERROR(read_yarn(t, "rope_scaling", *scaling, c.rope_scaling));

  DSV41_ASSIGN_OR_RETURN(const json* params, t.object("rope_parameters"));
  if (!params) return ok_status();
  Fields p(*params, t.name("rope_parameters") + ".", t.source());
  auto theta_from = [&](const Fields& sub, const char* legacy_key, double& theta) -> Status {
    if (!sub.has("rope_theta")) return ok_status();
    double v = 0;
    DSV41_RETURN_IF_ERROR(sub.read("rope_theta", v));
    if (!t.has(legacy_key)) theta = v;
    else if (v != theta)
      return corrupt(t.source() + ": " + sub.name("rope_theta") + " and " + t.name(legacy_key) + " disagree");
    return ok_status();
  };
  auto rotary_fraction = [&](const Fields& sub) -> Status {
    double fraction = 0;
    if (!sub.has("partial_rotary_factor")) return ok_status();
    DSV41_RETURN_IF_ERROR(sub.read("partial_rotary_factor", fraction));
    // HF rotates partial_rotary_factor·head_dim channels: that must be qk_rope_head_dim.
    if (std::fabs(fraction * c.head_dim - c.qk_rope_head_dim) > 1e-6)
      return corrupt(t.source() + ": " + sub.name("partial_rotary_factor") + ": " + std::to_string(fraction) +
                     " of head_dim is not qk_rope_head_dim");
    return ok_status();
  };
  DSV41_ASSIGN_OR_RETURN(const json* main, p.object("main"));
  if (main) {
    Fields m(*main, p.name("main") + ".", t.source());
    std::string type = "default";
    DSV41_RETURN_IF_ERROR(m.read("rope_type", type, Null::kAbsent));
    if (type != "default")
      return Checker(m).no_support("rope_type", "SWA-only layers use plain RoPE (model.md §3.6), got \"" +
                                                    printable(type, 40) + "\"");
    DSV41_RETURN_IF_ERROR(theta_from(m, "rope_theta", c.rope_theta));
    DSV41_RETURN_IF_ERROR(rotary_fraction(m));
  }
  DSV41_ASSIGN_OR_RETURN(const json* compress, p.object("compress"));
  if (compress) {
    Fields m(*compress, p.name("compress") + ".", t.source());
    DSV41_RETURN_IF_ERROR(theta_from(m, "compress_rope_theta", c.compress_rope_theta));
    DSV41_RETURN_IF_ERROR(rotary_fraction(m));
    std::optional<YarnScaling> yarn;
    DSV41_RETURN_IF_ERROR(read_yarn(p, "compress", *compress, yarn));
    if (!scaling) c.rope_scaling = yarn;
    else if (yarn != c.rope_scaling)
      return corrupt(t.source() + ": " + p.name("compress") + " and " + t.name("rope_scaling") + " disagree");
  }
  return ok_status();
}

Status read_text(const Fields& t, ModelConfig& c) {
  Checker chk(t);
  DSV41_RETURN_IF_ERROR(t.read("vocab_size", c.vocab_size));
  DSV41_RETURN_IF_ERROR(t.read("hidden_size", c.hidden_size));
  DSV41_RETURN_IF_ERROR(t.read("num_hidden_layers", c.num_hidden_layers));
  DSV41_RETURN_IF_ERROR(t.read("num_attention_heads", c.num_attention_heads));
  DSV41_RETURN_IF_ERROR(t.read("num_key_value_heads", c.num_key_value_heads));
  DSV41_RETURN_IF_ERROR(t.read("head_dim", c.head_dim));
  DSV41_RETURN_IF_ERROR(t.read("qk_rope_head_dim", c.qk_rope_head_dim));
  DSV41_RETURN_IF_ERROR(t.read("q_lora_rank", c.q_lora_rank));
  DSV41_RETURN_IF_ERROR(t.read("o_lora_rank", c.o_lora_rank));
  DSV41_RETURN_IF_ERROR(t.read("o_groups", c.o_groups));
  DSV41_RETURN_IF_ERROR(t.read("rms_norm_eps", c.rms_norm_eps));
  DSV41_RETURN_IF_ERROR(t.read("max_position_embeddings", c.max_position_embeddings));
  bool attention_bias = false;
  DSV41_RETURN_IF_ERROR(t.read("attention_bias", attention_bias));
  if (attention_bias) return chk.no_support("attention_bias", "true is not supported (V4.1 has no attention bias)");
  DSV41_RETURN_IF_ERROR(read_rope(t, c));

  DSV41_RETURN_IF_ERROR(t.read("n_routed_experts", c.n_routed_experts));
  DSV41_RETURN_IF_ERROR(t.read("n_shared_experts", c.n_shared_experts));
  DSV41_RETURN_IF_ERROR(t.read("num_experts_per_tok", c.num_experts_per_tok));
  DSV41_RETURN_IF_ERROR(t.read("moe_intermediate_size", c.moe_intermediate_size));
  DSV41_RETURN_IF_ERROR(t.read("scoring_func", c.scoring_func));
  DSV41_RETURN_IF_ERROR(t.read("topk_method", c.topk_method));
  DSV41_RETURN_IF_ERROR(t.read("norm_topk_prob", c.norm_topk_prob));
  DSV41_RETURN_IF_ERROR(t.read("routed_scaling_factor", c.routed_scaling_factor));
  DSV41_RETURN_IF_ERROR(t.read("gate_temp", c.gate_temp));
  DSV41_RETURN_IF_ERROR(t.read("swiglu_limit", c.swiglu_limit));
  DSV41_RETURN_IF_ERROR(t.read("hidden_act", c.hidden_act));

  DSV41_RETURN_IF_ERROR(t.read("sliding_window", c.sliding_window));
  DSV41_RETURN_IF_ERROR(t.read("compress_ratios", c.compress_ratios));
  DSV41_RETURN_IF_ERROR(t.read("kv_source_layer_ids", c.kv_source_layer_ids));
  DSV41_RETURN_IF_ERROR(t.read("index_source_layer_ids", c.index_source_layer_ids));
  DSV41_RETURN_IF_ERROR(t.read("index_n_heads", c.index_n_heads));
  DSV41_RETURN_IF_ERROR(t.read("index_head_dim", c.index_head_dim));
  DSV41_RETURN_IF_ERROR(t.read("index_topk", c.index_topk));
  DSV41_RETURN_IF_ERROR(t.read("candidate_source_layer_id", c.candidate_source_layer_id));
  DSV41_RETURN_IF_ERROR(t.read("candidate_topk_blocks", c.candidate_topk_blocks));
  DSV41_RETURN_IF_ERROR(t.read("candidate_block_size", c.candidate_block_size));

  DSV41_RETURN_IF_ERROR(t.read("hc_mult", c.hc_mult));
  DSV41_RETURN_IF_ERROR(t.read("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
  DSV41_RETURN_IF_ERROR(t.read("hc_eps", c.hc_eps));

  DSV41_RETURN_IF_ERROR(t.read("engram_layer_ids", c.engram_layer_ids));
  // As in the reference config class: no Engram layers and no table sizes given → no tables.
  if (t.has("engram_layer_ids") && c.engram_layer_ids.empty()) c.engram_num_embeddings.clear();
  DSV41_RETURN_IF_ERROR(t.read("engram_num_embeddings", c.engram_num_embeddings));
  DSV41_RETURN_IF_ERROR(t.read("engram_max_ngram_size", c.engram_max_ngram_size));
  DSV41_RETURN_IF_ERROR(t.read("engram_vocab_size", c.engram_vocab_size));
  DSV41_RETURN_IF_ERROR(t.read("engram_n_heads", c.engram_n_heads));
  DSV41_RETURN_IF_ERROR(t.read("engram_head_dim", c.engram_head_dim));
  // HF writes engram_pad_id, the release (and NeMo) engram_pad_token_id (model.md §9.1).
  DSV41_RETURN_IF_ERROR(read_either(t, "engram_pad_id", t, "engram_pad_token_id", c.engram_pad_id, Null::kError));
  DSV41_RETURN_IF_ERROR(t.read("engram_compressed_vocab_size", c.engram_compressed_vocab_size));

  DSV41_RETURN_IF_ERROR(t.read("num_nextn_predict_layers", c.num_nextn_predict_layers));
  DSV41_RETURN_IF_ERROR(t.read("dspark_block_size", c.dspark_block_size));
  DSV41_RETURN_IF_ERROR(t.read("dspark_noise_token_id", c.dspark_noise_token_id));
  DSV41_RETURN_IF_ERROR(t.read("dspark_target_layer_ids", c.dspark_target_layer_ids));
  DSV41_RETURN_IF_ERROR(t.read("dspark_markov_rank", c.dspark_markov_rank));
  DSV41_RETURN_IF_ERROR(t.read("dspark_n_routed_experts", c.dspark_n_routed_experts));
  DSV41_RETURN_IF_ERROR(t.read("dspark_num_experts_per_tok", c.dspark_num_experts_per_tok));
  return ok_status();
}

// Every check that needs only the values (the schedule is LayerPlan's). Messages name the key.
Status validate_text(const Fields& t, const ModelConfig& c) {
  Checker chk(t);
  DSV41_RETURN_IF_ERROR(chk.positive("vocab_size", c.vocab_size));
  DSV41_RETURN_IF_ERROR(chk.positive("hidden_size", c.hidden_size));
  DSV41_RETURN_IF_ERROR(chk.positive("num_hidden_layers", c.num_hidden_layers));
  DSV41_RETURN_IF_ERROR(chk.positive("num_attention_heads", c.num_attention_heads));
  DSV41_RETURN_IF_ERROR(chk.positive("head_dim", c.head_dim));
  DSV41_RETURN_IF_ERROR(chk.positive("qk_rope_head_dim", c.qk_rope_head_dim));
  DSV41_RETURN_IF_ERROR(chk.positive("q_lora_rank", c.q_lora_rank));
  DSV41_RETURN_IF_ERROR(chk.positive("o_lora_rank", c.o_lora_rank));
  DSV41_RETURN_IF_ERROR(chk.positive("o_groups", c.o_groups));
  DSV41_RETURN_IF_ERROR(chk.positive("rms_norm_eps", c.rms_norm_eps));
  DSV41_RETURN_IF_ERROR(chk.positive("max_position_embeddings", c.max_position_embeddings));
  DSV41_RETURN_IF_ERROR(chk.positive("rope_theta", c.rope_theta));
  DSV41_RETURN_IF_ERROR(chk.positive("compress_rope_theta", c.compress_rope_theta));
  // One shared latent serves as K and V of every head (MQA, model.md §3.4).
  if (c.num_key_value_heads != 1)
    return chk.no_support("num_key_value_heads", "must be 1 (one shared latent), got " +
                                                     std::to_string(c.num_key_value_heads));
  // Cache rows are whole codec blocks (cache/records.h, model.md §4): window and compressed KV
  // rows are head_dim wide, index keys and queries index_head_dim wide.
  for (RowKind kind : {RowKind::kWindow, RowKind::kMain})
    if (c.head_dim % row_block_channels(kind) != 0)
      return chk.bad("head_dim", std::to_string(c.head_dim) + " is not a multiple of " +
                                     std::to_string(row_block_channels(kind)) + " (the " + row_kind_name(kind) +
                                     " cache row block)");
  if (c.qk_rope_head_dim % 2 != 0)
    return chk.bad("qk_rope_head_dim", std::to_string(c.qk_rope_head_dim) + " is odd (RoPE rotates channel pairs)");
  if (c.qk_rope_head_dim > c.head_dim)
    return chk.bad("qk_rope_head_dim", std::to_string(c.qk_rope_head_dim) + " exceeds head_dim " +
                                           std::to_string(c.head_dim));
  if (c.num_attention_heads % c.o_groups != 0)
    return chk.bad("o_groups", "num_attention_heads " + std::to_string(c.num_attention_heads) +
                                   " is not divisible by o_groups " + std::to_string(c.o_groups));

  DSV41_RETURN_IF_ERROR(chk.positive("n_routed_experts", c.n_routed_experts));
  DSV41_RETURN_IF_ERROR(chk.positive("num_experts_per_tok", c.num_experts_per_tok));
  DSV41_RETURN_IF_ERROR(chk.positive("moe_intermediate_size", c.moe_intermediate_size));
  if (c.num_experts_per_tok > c.n_routed_experts)
    return chk.bad("num_experts_per_tok", std::to_string(c.num_experts_per_tok) + " exceeds n_routed_experts " +
                                              std::to_string(c.n_routed_experts));
  // Every V4.1 block has exactly one shared expert (`ffn.shared_experts`, model.md §2).
  if (c.n_shared_experts != 1)
    return chk.no_support("n_shared_experts", "must be 1, got " + std::to_string(c.n_shared_experts));
  DSV41_RETURN_IF_ERROR(chk.one_of("scoring_func", c.scoring_func, {"sqrtsoftplus", "softmax", "sigmoid"}));
  DSV41_RETURN_IF_ERROR(chk.one_of("topk_method", c.topk_method, {"noaux_tc"}));
  DSV41_RETURN_IF_ERROR(chk.one_of("hidden_act", c.hidden_act, {"silu"}));
  DSV41_RETURN_IF_ERROR(chk.positive("routed_scaling_factor", c.routed_scaling_factor));
  DSV41_RETURN_IF_ERROR(chk.positive("gate_temp", c.gate_temp));
  DSV41_RETURN_IF_ERROR(chk.positive("swiglu_limit", c.swiglu_limit));

  DSV41_RETURN_IF_ERROR(chk.positive("sliding_window", c.sliding_window));
  DSV41_RETURN_IF_ERROR(chk.positive("index_n_heads", c.index_n_heads));
  DSV41_RETURN_IF_ERROR(chk.positive("index_head_dim", c.index_head_dim));
  DSV41_RETURN_IF_ERROR(chk.positive("index_topk", c.index_topk));
  if (c.index_head_dim % row_block_channels(RowKind::kIndex) != 0)
    return chk.bad("index_head_dim", std::to_string(c.index_head_dim) + " is not a multiple of " +
                                         std::to_string(row_block_channels(RowKind::kIndex)) +
                                         " (the index cache row block)");
  // The indexer rotates the last qk_rope_head_dim channels of each index head too.
  if (c.qk_rope_head_dim > c.index_head_dim)
    return chk.bad("qk_rope_head_dim", std::to_string(c.qk_rope_head_dim) + " exceeds index_head_dim " +
                                           std::to_string(c.index_head_dim));

  DSV41_RETURN_IF_ERROR(chk.non_negative("num_nextn_predict_layers", c.num_nextn_predict_layers));
  // compress_ratios covers the backbone, then (optionally) the DSpark stages, which are SWA-only.
  const int L = c.num_hidden_layers;
  if (c.compress_ratios.size() < size_t(L))
    return chk.bad("compress_ratios", "has " + std::to_string(c.compress_ratios.size()) +
                                          " entries, fewer than num_hidden_layers " + std::to_string(L));
  if (c.compress_ratios.size() > size_t(L) + size_t(c.num_nextn_predict_layers))
    return chk.bad("compress_ratios", "has " + std::to_string(c.compress_ratios.size()) +
                                          " entries, more than num_hidden_layers + num_nextn_predict_layers (" +
                                          std::to_string(L) + " + " + std::to_string(c.num_nextn_predict_layers) + ")");
  for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
    int r = c.compress_ratios[i];
    if (r < 0) return chk.bad("compress_ratios", "entry " + std::to_string(i) + " is negative (" + std::to_string(r) + ")");
    if (i >= size_t(L) && r != 0)
      return chk.bad("compress_ratios", "entry " + std::to_string(i) + " belongs to a DSpark stage, which is "
                                        "SWA-only, but is " + std::to_string(r));
  }
  DSV41_RETURN_IF_ERROR(chk.layer_ids("kv_source_layer_ids", c.kv_source_layer_ids, L));
  DSV41_RETURN_IF_ERROR(chk.layer_ids("index_source_layer_ids", c.index_source_layer_ids, L));
  if (c.candidate_source_layer_id < -1 || c.candidate_source_layer_id >= L)
    return chk.bad("candidate_source_layer_id", "layer " + std::to_string(c.candidate_source_layer_id) +
                                                    " out of range [0, " + std::to_string(L) + ") (or -1 for none)");
  if (c.candidate_source_layer_id >= 0) {  // the pool's sizes matter only when a source builds it
    DSV41_RETURN_IF_ERROR(chk.positive("candidate_topk_blocks", c.candidate_topk_blocks));
    DSV41_RETURN_IF_ERROR(chk.positive("candidate_block_size", c.candidate_block_size));
  }

  DSV41_RETURN_IF_ERROR(chk.positive("hc_mult", c.hc_mult));
  DSV41_RETURN_IF_ERROR(chk.positive("hc_sinkhorn_iters", c.hc_sinkhorn_iters));
  DSV41_RETURN_IF_ERROR(chk.positive("hc_eps", c.hc_eps));

  DSV41_RETURN_IF_ERROR(chk.layer_ids("engram_layer_ids", c.engram_layer_ids, L));
  if (c.engram_num_embeddings.size() != c.engram_layer_ids.size())
    return chk.bad("engram_num_embeddings", "has " + std::to_string(c.engram_num_embeddings.size()) +
                                                " entries but engram_layer_ids has " +
                                                std::to_string(c.engram_layer_ids.size()));
  if (!c.engram_layer_ids.empty()) {  // the Engram keys matter only when a layer has Engram
    if (c.engram_max_ngram_size < 2)
      return chk.bad("engram_max_ngram_size", "must be at least 2, got " + std::to_string(c.engram_max_ngram_size));
    DSV41_RETURN_IF_ERROR(chk.positive("engram_vocab_size", c.engram_vocab_size));
    DSV41_RETURN_IF_ERROR(chk.positive("engram_n_heads", c.engram_n_heads));
    DSV41_RETURN_IF_ERROR(chk.positive("engram_head_dim", c.engram_head_dim));
    DSV41_RETURN_IF_ERROR(chk.positive("engram_compressed_vocab_size", c.engram_compressed_vocab_size));
    DSV41_RETURN_IF_ERROR(chk.token("engram_pad_id", c.engram_pad_id, c.vocab_size));
    // Each table is the concatenation of (max_ngram-1)·n_heads buckets whose sizes are distinct
    // primes above engram_vocab_size (model.md §3.8), so it has more rows than their product.
    // Compared in double: exact far beyond any real table size, and no int64 overflow.
    const double min_rows = double(c.engram_max_ngram_size - 1) * c.engram_n_heads * double(c.engram_vocab_size);
    for (size_t i = 0; i < c.engram_num_embeddings.size(); ++i)
      if (double(c.engram_num_embeddings[i]) <= min_rows)
        return chk.bad("engram_num_embeddings",
                       "entry " + std::to_string(i) + " (" + std::to_string(c.engram_num_embeddings[i]) +
                           " rows) is too small for " + std::to_string(c.engram_max_ngram_size - 1) + "x" +
                           std::to_string(c.engram_n_heads) + " prime buckets above engram_vocab_size");
  }

  if (c.num_nextn_predict_layers > 0) {  // the DSpark keys matter only when the drafter exists
    DSV41_RETURN_IF_ERROR(chk.positive("dspark_block_size", c.dspark_block_size));
    DSV41_RETURN_IF_ERROR(chk.token("dspark_noise_token_id", c.dspark_noise_token_id, c.vocab_size));
    DSV41_RETURN_IF_ERROR(chk.layer_ids("dspark_target_layer_ids", c.dspark_target_layer_ids, L));
    DSV41_RETURN_IF_ERROR(chk.positive("dspark_markov_rank", c.dspark_markov_rank));
    DSV41_RETURN_IF_ERROR(chk.positive("dspark_n_routed_experts", c.dspark_n_routed_experts));
    DSV41_RETURN_IF_ERROR(chk.positive("dspark_num_experts_per_tok", c.dspark_num_experts_per_tok));
    if (c.dspark_num_experts_per_tok > c.dspark_n_routed_experts)
      return chk.bad("dspark_num_experts_per_tok", std::to_string(c.dspark_num_experts_per_tok) +
                                                       " exceeds dspark_n_routed_experts " +
                                                       std::to_string(c.dspark_n_routed_experts));
  }
  return ok_status();
}

// Token ids, dtype and tie_word_embeddings: `top` is the file's top level, `text` the text
// config (the same object for a flat config).
Status read_shared(const Fields& top, const Fields& text, ModelConfig& c) {
  DSV41_RETURN_IF_ERROR(read_either(top, "bos_token_id", text, "bos_token_id", c.bos_token_id));
  DSV41_RETURN_IF_ERROR(read_either(top, "eos_token_id", text, "eos_token_id", c.eos_token_id));
  DSV41_RETURN_IF_ERROR(read_either(top, "pad_token_id", text, "pad_token_id", c.pad_token_id));
  DSV41_RETURN_IF_ERROR(read_either(top, "image_token_id", text, "image_token_id", c.image_token_id));
  DSV41_RETURN_IF_ERROR(read_either(top, "tie_word_embeddings", text, "tie_word_embeddings", c.tie_word_embeddings));
  // The composite config's text_config carries "dtype": null; older configs say torch_dtype.
  std::string dtype;
  DSV41_RETURN_IF_ERROR(read_either(top, "dtype", text, "dtype", dtype));
  std::string torch_dtype;
  DSV41_RETURN_IF_ERROR(read_either(top, "torch_dtype", text, "torch_dtype", torch_dtype));
  if (!dtype.empty() && !torch_dtype.empty() && dtype != torch_dtype)
    return corrupt(top.source() + ": dtype and torch_dtype disagree");
  if (!dtype.empty()) c.dtype = dtype;
  else if (!torch_dtype.empty()) c.dtype = torch_dtype;

  Checker chk(top);
  DSV41_RETURN_IF_ERROR(chk.one_of(dtype.empty() && !torch_dtype.empty() ? "torch_dtype" : "dtype", c.dtype,
                                   {"bfloat16", "float32", "float16"}));
  DSV41_RETURN_IF_ERROR(chk.token("bos_token_id", c.bos_token_id, c.vocab_size));
  DSV41_RETURN_IF_ERROR(chk.token("eos_token_id", c.eos_token_id, c.vocab_size));
  DSV41_RETURN_IF_ERROR(chk.token("pad_token_id", c.pad_token_id, c.vocab_size));
  // Not bounded by vocab_size: text-only checkpoints (the tiny fixtures) keep the release's id
  // with a small vocabulary; it matters only when a vision tower exists (checked there).
  DSV41_RETURN_IF_ERROR(chk.non_negative("image_token_id", c.image_token_id));
  return ok_status();
}

Status read_quantization(const Fields& top, const Fields& text, ModelConfig& c) {
  DSV41_ASSIGN_OR_RETURN(const json* obj, top.object("quantization_config"));
  if (!obj) return ok_status();
  Fields q(*obj, "quantization_config.", top.source());
  Checker chk(q);
  QuantizationConfig qc;
  DSV41_RETURN_IF_ERROR(q.read("quant_method", qc.quant_method));
  DSV41_RETURN_IF_ERROR(q.read("activation_scheme", qc.activation_scheme, Null::kAbsent));
  DSV41_RETURN_IF_ERROR(q.read("scale_fmt", qc.scale_fmt, Null::kAbsent));
  DSV41_RETURN_IF_ERROR(q.read("fmt", qc.fmt, Null::kAbsent));
  // expert_dtype sits in quantization_config in V4.1 (model.md §1.1); V4 had it beside the
  // text keys.
  DSV41_RETURN_IF_ERROR(read_either(q, "expert_dtype", text, "expert_dtype", qc.expert_dtype));
  if (!q.has("quant_method")) return chk.bad("quant_method", "missing");
  DSV41_RETURN_IF_ERROR(chk.one_of("quant_method", qc.quant_method, {"fp8"}));
  if (!qc.activation_scheme.empty()) DSV41_RETURN_IF_ERROR(chk.one_of("activation_scheme", qc.activation_scheme, {"dynamic"}));
  if (!qc.scale_fmt.empty()) DSV41_RETURN_IF_ERROR(chk.one_of("scale_fmt", qc.scale_fmt, {"ue8m0"}));
  if (!qc.fmt.empty()) DSV41_RETURN_IF_ERROR(chk.one_of("fmt", qc.fmt, {"e4m3"}));
  if (!qc.expert_dtype.empty()) DSV41_RETURN_IF_ERROR(chk.one_of("expert_dtype", qc.expert_dtype, {"fp4", "fp8"}));
  // Absent block size: 0 × 0, the weight loader then infers it from the scale shapes.
  std::vector<int> block;
  DSV41_RETURN_IF_ERROR(q.read("weight_block_size", block));
  if (q.has("weight_block_size")) {
    if (block.size() != 2 || block[0] <= 0 || block[1] <= 0)
      return chk.bad("weight_block_size", "expected two positive integers [rows, cols]");
    qc.weight_block_rows = block[0];
    qc.weight_block_cols = block[1];
  }
  c.quantization = qc;
  return ok_status();
}

Status read_vision(const Fields& top, ModelConfig& c) {
  DSV41_ASSIGN_OR_RETURN(const json* obj, top.object("vision_config"));
  if (!obj) return ok_status();  // null in text-only checkpoints
  Fields v(*obj, "vision_config.", top.source());
  Checker chk(v);
  VisionConfig vc;
  DSV41_RETURN_IF_ERROR(v.read("num_hidden_layers", vc.num_hidden_layers));
  DSV41_RETURN_IF_ERROR(v.read("hidden_size", vc.hidden_size));
  DSV41_RETURN_IF_ERROR(v.read("num_attention_heads", vc.num_attention_heads));
  DSV41_RETURN_IF_ERROR(v.read("intermediate_size", vc.intermediate_size));
  DSV41_RETURN_IF_ERROR(v.read("patch_size", vc.patch_size));
  DSV41_RETURN_IF_ERROR(v.read("downsample_ratio", vc.downsample_ratio));
  DSV41_RETURN_IF_ERROR(v.read("max_image_tokens", vc.max_image_tokens));
  DSV41_RETURN_IF_ERROR(v.read("min_pixels", vc.min_pixels));
  DSV41_RETURN_IF_ERROR(v.read("rope_theta", vc.rope_theta));
  if (v.has("max_wh_ratio")) {
    double r = 0;
    DSV41_RETURN_IF_ERROR(v.read("max_wh_ratio", r));
    DSV41_RETURN_IF_ERROR(chk.positive("max_wh_ratio", r));
    vc.max_wh_ratio = r;
  }
  DSV41_RETURN_IF_ERROR(chk.positive("num_hidden_layers", vc.num_hidden_layers));
  DSV41_RETURN_IF_ERROR(chk.positive("hidden_size", vc.hidden_size));
  DSV41_RETURN_IF_ERROR(chk.positive("num_attention_heads", vc.num_attention_heads));
  DSV41_RETURN_IF_ERROR(chk.positive("intermediate_size", vc.intermediate_size));
  DSV41_RETURN_IF_ERROR(chk.positive("patch_size", vc.patch_size));
  DSV41_RETURN_IF_ERROR(chk.positive("downsample_ratio", vc.downsample_ratio));
  DSV41_RETURN_IF_ERROR(chk.positive("max_image_tokens", vc.max_image_tokens));
  DSV41_RETURN_IF_ERROR(chk.positive("min_pixels", vc.min_pixels));
  DSV41_RETURN_IF_ERROR(chk.positive("rope_theta", vc.rope_theta));
  // 2-D RoPE splits each head into row and column halves of rotated pairs (model.md §3.10).
  if (vc.hidden_size % vc.num_attention_heads != 0 || (vc.hidden_size / vc.num_attention_heads) % 4 != 0)
    return chk.bad("num_attention_heads", "hidden_size " + std::to_string(vc.hidden_size) + " / " +
                                              std::to_string(vc.num_attention_heads) +
                                              " heads is not a head width divisible by 4");
  DSV41_RETURN_IF_ERROR(Checker(top).token("image_token_id", c.image_token_id, c.vocab_size));
  c.vision = vc;
  return ok_status();
}

Result<json> parse_json(const std::string& text, const std::string& source) {
  if (text.size() > kMaxConfigBytes)
    return out_of_range(source + ": " + std::to_string(text.size()) + " bytes is too large for a config (limit " +
                        std::to_string(kMaxConfigBytes) + ")");
  bool too_deep = false;
  json root;
  try {
    root = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) too_deep = true;
      return !too_deep;  // stop keeping values once too deep; the error is reported below
    });
  } catch (const json::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, ..." → drop the bracket tag.
    if (auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    return corrupt(source + ": invalid JSON: " + printable(what));
  }
  if (too_deep) return corrupt(source + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  return root;
}

Result<ModelConfig> parse_impl(const std::string& json_text, const std::string& source) {
  DSV41_ASSIGN_OR_RETURN(json root, parse_json(json_text, source));
  if (!root.is_object()) return corrupt(source + ": expected a JSON object, got " + describe(root));
  Fields top(root, "", source);

  ModelConfig c;
  c.source = source;
  DSV41_RETURN_IF_ERROR(top.read("model_type", c.model_type, Null::kAbsent));
  if (c.model_type.empty())
    return corrupt(source + ": model_type: missing (expected deepseek_v41 or deepseek_v41_text)");
  const bool composite = c.model_type == "deepseek_v41";
  if (!composite && c.model_type != "deepseek_v41_text")
    return unsupported(source + ": model_type: unknown model type \"" + printable(c.model_type, 80) +
                       "\" (dsv41 reads deepseek_v41 and deepseek_v41_text)");

  // A composite config without text_config means the default text config (as in HF).
  static const json kEmptyObject = json::object();
  const json* text_obj = &root;
  if (composite) {
    DSV41_ASSIGN_OR_RETURN(const json* t, top.object("text_config"));
    text_obj = t ? t : &kEmptyObject;
  }
  Fields text(*text_obj, composite ? "text_config." : "", source);
  if (composite) {
    std::string text_type;
    DSV41_RETURN_IF_ERROR(text.read("model_type", text_type, Null::kAbsent));
    if (!text_type.empty() && text_type != "deepseek_v41_text")
      return unsupported(source + ": text_config.model_type: unknown model type \"" + printable(text_type, 80) +
                         "\" (expected deepseek_v41_text)");
  }

  DSV41_RETURN_IF_ERROR(read_text(text, c));
  DSV41_RETURN_IF_ERROR(validate_text(text, c));
  DSV41_RETURN_IF_ERROR(read_shared(top, text, c));
  DSV41_RETURN_IF_ERROR(read_quantization(top, text, c));
  if (composite) DSV41_RETURN_IF_ERROR(read_vision(top, c));

  return c;
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  // Belt and braces: parse_impl converts every nlohmann exception it expects; anything else
  // (bad_alloc on absurd input) must not escape the library either.
  try {
    return parse_impl(json_text, source);
  } catch (const std::exception& e) {
    return corrupt(source + ": cannot parse config: " + printable(e.what()));
  }
}

Result<ModelConfig> load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "config.json";
  if (!fs::exists(file, ec)) return not_found(file.string() + ": no such file");
  if (!fs::is_regular_file(file, ec)) return io_error(file.string() + ": not a regular file");
  auto size = fs::file_size(file, ec);
  if (ec) return io_error(file.string() + ": cannot stat: " + ec.message());
  if (size > kMaxConfigBytes)
    return out_of_range(file.string() + ": " + std::to_string(size) + " bytes is too large for a config (limit " +
                        std::to_string(kMaxConfigBytes) + ")");
  std::ifstream in(file, std::ios::binary);
  if (!in) return io_error(file.string() + ": cannot open for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return io_error(file.string() + ": read failed");
  return parse_model_config(text, file.string());
}

}  // namespace dsv41
