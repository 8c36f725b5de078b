// Generation detection and the generic evaluation of a CostModel: totals, prefill token-layers,
// decode FLOPs at a context. Spec: system.md §1.
#include "cost/cost_model.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost/generations.h"
#include "format/config.h"
#include "plan/layer_plan.h"

namespace dsv41 {

const char* generation_name(Generation g) {
  switch (g) {
    case Generation::kDeepSeekLlm: return "DeepSeek LLM (dense GQA/MHA)";
    case Generation::kDeepSeekMla: return "DeepSeek-V2/V3 (MLA)";
    case Generation::kDeepSeekV32: return "DeepSeek-V3.2 (MLA + FP8 lightning indexer)";
    case Generation::kDeepSeekV4: return "DeepSeek-V4 (per-layer CSA/HCA caches)";
    case Generation::kDeepSeekV41: return "DeepSeek-V4.1 (shared caches, CED)";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kBf16: return "BF16";
    case Precision::kFp8: return "FP8";
    case Precision::kFp4: return "FP4";
  }
  return "?";
}

double precision_weight(Precision p) {
  switch (p) {
    case Precision::kBf16: return 1.0;
    case Precision::kFp8: return 0.5;
    case Precision::kFp4: return 0.25;
  }
  return 1.0;
}

// The wider operand sets the rate: the enum runs from widest (BF16) to narrowest (FP4).
Precision Operands::rate() const { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

std::string Operands::name() const { return fmt::format("{} × {}", precision_name(a), precision_name(b)); }

void OpLedger::add(const std::string& op, Operands operands, double flops) {
  switch (operands.rate()) {
    case Precision::kBf16: by_rate.bf16 += flops; break;
    case Precision::kFp8: by_rate.fp8 += flops; break;
    case Precision::kFp4: by_rate.fp4 += flops; break;
  }
  for (OpFlops& o : ops)
    if (o.op == op && o.operands == operands) {
      o.flops += flops;
      return;
    }
  ops.push_back({op, operands, flops});
}

OpLedger& OpLedger::operator+=(const OpLedger& other) {
  for (const OpFlops& o : other.ops) add(o.op, o.operands, o.flops);
  return *this;
}

double CostModel::global_kv_bytes_per_token() const {
  double sum = 0;
  for (const auto& l : layers) sum += l.global_bytes_per_token;
  return sum;
}

double CostModel::global_entries_per_token() const {
  double sum = 0;
  for (const auto& l : layers)
    if (l.ratio > 0 && l.main_record_bytes > 0) sum += 1.0 / l.ratio;
  return sum;
}

double CostModel::window_bytes_per_sequence() const {
  double sum = 0;
  for (const auto& l : layers) sum += double(l.window_rows) * l.window_row_bytes;
  return sum;
}

double token_layers_total(const TokenLayers& t) { return double(t.encoder + t.decoder + t.replay); }

Result<PrefillCost> prefill_cost(const CostModel& m, int64_t n) {
  if (n < 1) return invalid_argument(fmt::format("prefill of {} new tokens: need at least one", n));
  PrefillCost p;
  p.new_tokens = n;
  const int layers = int(m.layers.size());
  p.full_depth = double(n) * layers;
  if (!m.ced) {
    // No decoder to bound: every depth runs every layer on every new token.
    p.bounded = p.exact = count_token_layers({}, layers, -1, 0, n, false);
  } else {
    // A cold prompt (no hit): the replay rule's bounded and exact plans, as the engine runs them.
    DSV41_ASSIGN_OR_RETURN(PrefillPlan bounded,
                           plan_prefill(m.plan, m.window, n, 0, false, PrefillDepth::kBounded));
    DSV41_ASSIGN_OR_RETURN(PrefillPlan exact, plan_prefill(m.plan, m.window, n, 0, false, PrefillDepth::kExact));
    p.bounded = bounded.work;
    p.bounded_effective = bounded.effective;
    p.exact = exact.work;
    p.exact_effective = exact.effective;
    // The paper's formula, for comparison: it leaves out the decoder source's compressor-only
    // rows (its norm + wkv + index-key wk on the N − w positions outside the tail), which the
    // replay rule counts as token-layers of the encoder.
    p.paper_ced = double(n) * m.decoder_start + double(std::min<int64_t>(n, m.window)) * (layers - m.decoder_start);
  }
  p.token_layers = token_layers_total(p.bounded);
  p.encoder_part = double(p.bounded.encoder);
  p.decoder_part = double(p.bounded.decoder);
  return p;
}

DecodeFlops decode_flops(const CostModel& m, int64_t context) {
  DecodeFlops out;
  out.context = context;
  OpLedger attention, indexer;
  for (const auto& l : m.layers) {
    out.ops += l.weight_flops;
    const ContextWork& w = l.work;
    const int64_t entries = w.ratio > 0 ? context / w.ratio : 0;  // floor(C / r) visible entries
    double read = w.window > 0 ? double(std::min(context, w.window)) : 0.0;
    if (w.ratio > 0) read += double(w.topk > 0 ? std::min(w.topk, entries) : entries);
    if (w.heads > 0) attention.add("attention core", Operands{}, double(w.heads) * w.flops_per_head_entry * read);
    if (w.index_scan_cap != 0) {
      const int64_t scanned = w.index_scan_cap > 0 ? std::min(w.index_scan_cap, entries) : entries;
      indexer.add("index scoring", w.index_operands,
                  double(w.index_heads) * w.flops_per_index_head_entry * double(scanned));
    }
  }
  out.ops += m.head_flops;
  out.weights = out.ops.by_rate;
  out.attention = attention.by_rate;
  out.indexer = indexer.by_rate;
  out.ops += attention;
  out.ops += indexer;
  out.total = out.ops.by_rate;
  return out;
}

namespace {

std::string architectures_of(const nlohmann::json& j) {
  if (!j.contains("architectures") || !j["architectures"].is_array()) return "";
  std::string s;
  for (const auto& a : j["architectures"]) {
    if (!a.is_string()) continue;
    if (!s.empty()) s += ',';
    s += a.get_ref<const std::string&>();
  }
  return s;
}

bool has_arch(const std::string& archs, const char* name) { return archs.find(name) != std::string::npos; }

}  // namespace

Result<CostModel> build_cost_model(const std::string& text, const std::string& source, const CostOptions& options) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return corrupt(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (!j.is_object()) return corrupt(fmt::format("{}: config must be a JSON object", source));
  std::string model_type;
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string())
      return invalid_argument(fmt::format("{}: key 'model_type' must be a string, got {}", source, j["model_type"].dump()));
    model_type = j["model_type"].get<std::string>();
  }
  const std::string archs = architectures_of(j);
  const bool has_indexer = j.contains("index_topk") && !j["index_topk"].is_null();

  Result<CostModel> model = internal_error("unreached");
  try {
    if (model_type == "deepseek_v41" || model_type == "deepseek_v41_text" || has_arch(archs, "DeepseekV41")) {
      DSV41_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(text, source));
      Result<LayerPlan> plan = build_layer_plan(config);
      if (!plan.ok()) return plan.status().with_context(source);
      model = cost_internal::build_v41_cost(config, *plan);
    } else if (model_type == "deepseek_v4" || has_arch(archs, "DeepseekV4ForCausalLM")) {
      model = cost_internal::build_v4_cost(j, source, options);
    } else if (model_type == "deepseek_v32" || has_arch(archs, "DeepseekV32") ||
               ((model_type == "deepseek_v3" || model_type == "deepseek_v2") && has_indexer)) {
      model = cost_internal::build_mla_cost(j, source, /*v32=*/true);
    } else if (model_type == "deepseek_v3" || model_type == "deepseek_v2" || has_arch(archs, "DeepseekV3") ||
               has_arch(archs, "DeepseekV2")) {
      model = cost_internal::build_mla_cost(j, source, /*v32=*/false);
    } else if (model_type == "llama" || model_type == "deepseek" || has_arch(archs, "LlamaForCausalLM") ||
               has_arch(archs, "DeepseekForCausalLM")) {
      model = cost_internal::build_dense_attention_cost(j, source);
    } else {
      return unsupported(fmt::format(
          "{}: unknown model_type '{}' (architectures [{}]); the cost calculator knows llama / deepseek (DeepSeek "
          "LLM, DeepSeek-MoE), deepseek_v2 / deepseek_v3 (MLA), deepseek_v32, deepseek_v4, deepseek_v41 / "
          "deepseek_v41_text",
          source, model_type, archs));
    }
  } catch (const nlohmann::json::exception& e) {  // a key of an unexpected JSON type slipped through
    return invalid_argument(fmt::format("{}: {}", source, e.what()));
  }
  if (!model.ok()) return model;
  if (model->model_type.empty()) model->model_type = model_type;
  if (model->layers.empty()) return invalid_argument(fmt::format("{}: config has no layers", source));
  return model;
}

Result<CostModel> load_cost_model(const std::string& path, const CostOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("{}: cannot open config", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error(fmt::format("{}: read failed", path));
  return build_cost_model(ss.str(), path, options);
}

}  // namespace dsv41
