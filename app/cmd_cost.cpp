// `dsv41 cost --config FILE [--context N ...] [--new-tokens N] [--json]`: the four costs of
// system.md §1 (global KV, persistent bytes, prefill token-layers at full / bounded / exact depth,
// decode FLOPs with each operation's operand pair) from a config.json alone, for DeepSeek LLM,
// V2/V3, V3.2, V4 and V4.1 configs.
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app/command.h"
#include "app/option_checks.h"
#include "cost/cost_model.h"
#include "cost/cost_report.h"

namespace dsv41::app {
namespace {

// What parse_token_count accepts (cost/cost_report.h).
constexpr const char* kTokenCountRange = "1 to 2^40 tokens, written like 4096, 4K or 1M";

int run_cost(int argc, char** argv) {
  CLI::App cli{"Cache bytes, prefill and decode cost of a DeepSeek config (no weights needed)"};
  std::string config_path;
  std::vector<std::string> context_texts;
  std::string new_tokens_text = "64K";
  int64_t checkpoint_interval = CostOptions{}.swa_checkpoint_interval;
  bool json = false;
  cli.add_option("--config", config_path, "config.json of the model (or a model directory's config.json)")->required();
  cli.add_option("--context", context_texts,
                 "decode context length(s) in tokens, e.g. 8192 or 8K or 1M (default 4K 16K 64K 128K 256K 512K 1M)");
  cli.add_option("--new-tokens", new_tokens_text, "uncached prompt tokens for the prefill cost (e.g. 100000, 64K)")
      ->capture_default_str();
  cli.add_option("--swa-checkpoint-interval", checkpoint_interval,
                 "V4 only: tokens between persisted SWA checkpoints")
      ->check(in_range<int64_t>(1, kMaxTokens))
      ->capture_default_str();
  cli.add_flag("--json", json, "print one JSON object instead of the table");
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  CostQuery query;
  for (const auto& text : context_texts) {
    auto n = parse_token_count(text);
    if (!n.ok()) {
      std::fprintf(stderr, "dsv41 cost: --context: %s (accepted range %s)\n", n.status().to_string().c_str(),
                   kTokenCountRange);
      return 2;
    }
    query.contexts.push_back(*n);
  }
  auto new_tokens = parse_token_count(new_tokens_text);
  if (!new_tokens.ok()) {
    std::fprintf(stderr, "dsv41 cost: --new-tokens: %s (accepted range %s)\n", new_tokens.status().to_string().c_str(),
                 kTokenCountRange);
    return 2;
  }
  query.new_tokens = *new_tokens;
  std::string path = config_path;
  if (path.size() < 5 || path.substr(path.size() - 5) != ".json") path += "/config.json";
  CostOptions options;
  options.swa_checkpoint_interval = checkpoint_interval;
  auto model = load_cost_model(path, options);
  if (!model.ok()) {
    std::fprintf(stderr, "dsv41 cost: %s\n", model.status().to_string().c_str());
    return 1;
  }
  const Result<std::string> out = json ? format_cost_json(*model, query) : format_cost_table(*model, query);
  if (!out.ok()) {
    std::fprintf(stderr, "dsv41 cost: %s\n", out.status().to_string().c_str());
    return 1;
  }
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

const CommandRegistration kRegistration{
    {"cost", "cache bytes/token, prefill and decode cost of a config (system.md §1)", run_cost}};

}  // namespace
}  // namespace dsv41::app
