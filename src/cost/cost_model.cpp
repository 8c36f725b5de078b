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

void add_matvec(PrecisionFlops& f, Precision p, double params) {
  const double flops = 2.0 * params;
  switch (p) {
    case Precision::kBf16: f.bf16 += flops; break;
    case Precision::kFp8: f.fp8 += flops; break;
    case Precision::kFp4: f.fp4 += flops; break;
  }
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

PrefillCost prefill_cost(const CostModel& m, int64_t n) {
  PrefillCost p;
  p.new_tokens = n;
  const double layers = double(m.layers.size());
  p.full_depth = double(n) * layers;
  if (!m.ced) {
    p.token_layers = p.full_depth;  // every uncached token runs every layer
    return p;
  }
  // CED (system.md §1): N·L_enc + w·L_dec — the decoder replays only the last w prompt tokens
  // (all of them when N < w).
  p.encoder_part = double(n) * m.decoder_start;
  p.decoder_part = double(std::min<int64_t>(n, m.window)) * (layers - m.decoder_start);
  p.token_layers = p.encoder_part + p.decoder_part;
  return p;
}

DecodeFlops decode_flops(const CostModel& m, int64_t context) {
  DecodeFlops out;
  out.context = context;
  for (const auto& l : m.layers) {
    out.weights += l.weight_flops;
    const ContextWork& w = l.work;
    const int64_t entries = w.ratio > 0 ? context / w.ratio : 0;  // floor(C / r) visible entries
    double read = w.window > 0 ? double(std::min(context, w.window)) : 0.0;
    if (w.ratio > 0) read += double(w.topk > 0 ? std::min(w.topk, entries) : entries);
    out.attention.bf16 += double(w.heads) * w.flops_per_head_entry * read;
    if (w.index_scan_cap != 0) {
      const int64_t scanned = w.index_scan_cap > 0 ? std::min(w.index_scan_cap, entries) : entries;
      const double f = double(w.index_heads) * w.flops_per_index_head_entry * double(scanned);
      switch (w.index_precision) {
        case Precision::kBf16: out.indexer.bf16 += f; break;
        case Precision::kFp8: out.indexer.fp8 += f; break;
        case Precision::kFp4: out.indexer.fp4 += f; break;
      }
    }
  }
  out.weights += m.head_flops;
  out.total = out.weights;
  out.total += out.attention;
  out.total += out.indexer;
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
