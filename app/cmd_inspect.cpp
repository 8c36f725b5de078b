// dsv41 inspect MODEL_DIR | --config FILE
// What a model directory holds: config summary, layer plan, tensor inventory check against the
// plan, parameter counts and stored bytes per family, cache bytes per token by kind.
// With --config only, the counts come from the config (what a checkpoint must contain).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "app/command.h"
#include "app/option_checks.h"
#include "format/config.h"
#include "model/inventory.h"
#include "plan/layer_plan.h"
#include "model/weights.h"

namespace dsv41::app {
namespace {

std::string human_count(double n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) n /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f%s" : "%.0f%s", n, units[u]);
  return buf;
}

std::string human_bytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (n >= 1024 && u < 4) n /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", n, units[u]);
  return buf;
}

void print_config(const ModelConfig& c) {
  std::printf("config    %s (model_type %s)\n", c.source.c_str(), c.model_type.c_str());
  std::printf("  hidden %d, %d layers, %d heads x %d (rope %d), q_lora %d, o %d groups x %d\n", c.hidden_size,
              c.num_hidden_layers, c.num_attention_heads, c.head_dim, c.qk_rope_head_dim, c.q_lora_rank,
              c.o_groups, c.o_lora_rank);
  std::printf("  vocab %lld, window %d, index %d heads x %d top-%d, candidates %d blocks x %d\n",
              static_cast<long long>(c.vocab_size), c.sliding_window, c.index_n_heads, c.index_head_dim,
              c.index_topk, c.candidate_topk_blocks, c.candidate_block_size);
  std::printf("  MoE %d routed (top-%d, %s) + %d shared, width %d; mHC %d streams\n", c.n_routed_experts,
              c.num_experts_per_tok, c.scoring_func.c_str(), c.n_shared_experts, c.moe_intermediate_size,
              c.hc_mult);
  std::printf("  engram layers %zu, %d heads x %d, n-grams up to %d; drafter stages %d; vision %s\n",
              c.engram_layer_ids.size(), c.engram_n_heads, c.engram_head_dim, c.engram_max_ngram_size,
              c.num_nextn_predict_layers, c.vision ? "yes" : "no");
  if (c.quantization)
    std::printf("  quantization %s, blocks %dx%d, experts %s\n", c.quantization->quant_method.c_str(),
                c.quantization->weight_block_rows, c.quantization->weight_block_cols,
                c.quantization->expert_dtype.empty() ? "(dense format)" : c.quantization->expert_dtype.c_str());
}

void print_inventory(const WeightInventory& inv, bool with_bytes) {
  std::printf("\n%-16s %10s %14s%s\n", "family", "tensors", "parameters", with_bytes ? "          bytes" : "");
  auto row = [&](const char* name, const FamilyTotals& f) {
    std::printf("%-16s %10lld %14s", name, static_cast<long long>(f.tensors),
                human_count(static_cast<double>(f.parameters)).c_str());
    if (with_bytes) std::printf(" %14s", human_bytes(static_cast<double>(f.bytes)).c_str());
    std::printf("\n");
  };
  for (int i = 0; i < kNumWeightFamilies; ++i) row(weight_family_name(static_cast<WeightFamily>(i)), inv.family[i]);
  row("total", inv.total());
}

void print_cache(const CacheBytes& c) {
  std::printf("\ncache     global KV %.1f B/token (main rows %.1f + index keys %.1f); window rings %s per sequence\n",
              c.global_per_token(), c.global_main_per_token, c.global_index_per_token,
              human_bytes(static_cast<double>(c.window_per_sequence)).c_str());
}

void print_check(const WeightCheckReport& r) {
  std::printf("\ncheck     %s: %zu missing, %zu mismatched, %zu unexpected, %zu not verified (mtp/vision)\n",
              r.ok() ? "ok" : "FAILED", r.missing.size(), r.mismatched.size(), r.unexpected.size(),
              r.unchecked.size());
  auto list = [](const char* what, const std::vector<std::string>& v) {
    const size_t kShow = 20;
    for (size_t i = 0; i < v.size() && i < kShow; ++i) std::printf("  %s: %s\n", what, v[i].c_str());
    if (v.size() > kShow) std::printf("  ... and %zu more %s\n", v.size() - kShow, what);
  };
  list("missing", r.missing);
  list("mismatched", r.mismatched);
  list("unexpected", r.unexpected);
}

int run_inspect(int argc, char** argv) {
  CLI::App cli{"Show a model directory's config, layer plan, tensor check, parameters and cache costs"};
  std::string model_dir, config_path;
  cli.add_option("model_dir", model_dir, "model directory (config.json + safetensors)");
  cli.add_option("--config", config_path, "inspect a config.json alone (no weights)");
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  if (model_dir.empty() == config_path.empty()) {
    std::fprintf(stderr, "dsv41 inspect: give a model directory or --config FILE (one of them)\n");
    return 2;
  }
  const std::string cfg_source = config_path.empty() ? model_dir : config_path;
  Result<ModelConfig> config = load_model_config(cfg_source);
  if (!config.ok()) {
    std::fprintf(stderr, "dsv41 inspect: %s\n", config.status().to_string().c_str());
    return 1;
  }
  Result<LayerPlan> plan = build_layer_plan(*config);
  if (!plan.ok()) {
    std::fprintf(stderr, "dsv41 inspect: %s\n", plan.status().with_context(config->source).to_string().c_str());
    return 1;
  }
  print_config(*config);
  std::printf("\n%s", format_layer_plan(*plan).c_str());
  print_cache(cache_bytes(*config, *plan));
  if (!config_path.empty()) {
    std::printf("\nexpected tensors (from the config; DSpark and vision not counted yet):");
    print_inventory(expected_inventory(*config, *plan), false);
    return 0;
  }
  Result<WeightRegistry> weights = WeightRegistry::open(model_dir);
  if (!weights.ok()) {
    std::fprintf(stderr, "dsv41 inspect: %s\n", weights.status().to_string().c_str());
    return 1;
  }
  std::printf("\nweights   %s (%s names, %zu files)\n", weights->source().c_str(),
              naming_scheme_name(weights->scheme()), weights->tensor_set().num_files());
  WeightCheckReport report = weights->check_report(*config, *plan);
  print_check(report);
  print_inventory(inventory_of(*weights), true);
  return report.ok() ? 0 : 1;
}

const CommandRegistration kRegistration{
    {"inspect", "config summary, layer plan, tensor check, parameters and cache bytes of a model", run_inspect}};

}  // namespace
}  // namespace dsv41::app
