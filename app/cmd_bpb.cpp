// `dsv41 bpb`: bits per byte of text files under a model (issue 5 item 5). Scoring rule and
// windows: runtime/bpb.h.
//   dsv41 bpb -m DIR FILE... [--context N] [--stride S] [--per-file] [--json]
// stdout: `bpb <value> tokens <n> bytes <n>` over all files (with --per-file a
// `file <path> bpb <value> tokens <n> bytes <n>` line per file before it), or one JSON object
// with --json. stderr: progress (file, tokens scored, running bpb estimate, tok/s).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/command.h"
#include "app/load_options.h"
#include "app/option_checks.h"
#include "format/tokenizer.h"
#include "model/model.h"
#include "runtime/bpb.h"

namespace dsv41::app {
namespace {

struct FileScore {
  std::string path;
  BpbTotals totals;
};

int bpb_main(int argc, char** argv) {
  CLI::App cli{"Bits per byte of text files under a model (sliding-window scoring)"};
  std::string dir;
  std::vector<std::string> files;
  BpbOptions options;
  bool per_file = false, json = false, quiet = false;
  cli.add_option("-m,--model", dir, "model directory (config.json, safetensors, tokenizer.json)")->required();
  cli.add_option("files", files, "text files (UTF-8)")->required();
  cli.add_option("--context", options.context, "window length in tokens (default min(max context, 1024))")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_option("--stride", options.stride, "window advance in tokens (default context / 2)")
      ->check(in_range<int64_t>(0, kMaxTokens));
  cli.add_flag("--per-file", per_file, "also print one line per file");
  cli.add_flag("--json", json, "print the results as one JSON object");
  cli.add_flag("-q,--quiet", quiet, "no progress on stderr");
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "dsv41 bpb: %s\n", s.to_string().c_str());
    return 1;
  };
  // Cheap checks before the (slow) model load.
  if (options.context != 0 && options.context < 2)
    return fail(invalid_argument("--context must be ≥ 2, got " + std::to_string(options.context)));
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  if (!tok.ok()) return fail(tok.status());
  auto model = Model::load(dir, load_options_from_env());
  if (!model.ok()) return fail(model.status());
  auto resolved = resolve_bpb_options((*model)->config(), options);
  if (!resolved.ok()) return fail(resolved.status());

  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens_before = 0;  // scored in earlier files, for tok/s
  std::vector<FileScore> scores;
  BpbTotals all;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& path = files[f];
    // The running bpb spreads the file's bytes evenly over its tokens: an estimate until the end.
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);  // errors are reported by score_file_bpb
    const int64_t file_bytes = ec ? 0 : static_cast<int64_t>(size);
    bool progress_shown = false;
    auto progress = [&](int64_t scored, int64_t total, double bits) {
      if (quiet) return;
      progress_shown = true;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double bytes_done = static_cast<double>(file_bytes) * scored / std::max<int64_t>(total, 1);
      std::fprintf(stderr, "\r[%zu/%zu] %s: %lld/%lld tokens, bpb ≈ %.4f, %.1f tok/s   ", f + 1, files.size(),
                   path.c_str(), static_cast<long long>(scored), static_cast<long long>(total),
                   bytes_done > 0 ? bits / bytes_done : 0.0, (tokens_before + scored) / std::max(s, 1e-9));
      std::fflush(stderr);
    };
    auto r = score_file_bpb(**model, *tok, path, *resolved, progress);
    if (progress_shown) std::fprintf(stderr, "\n");
    if (!r.ok()) return fail(r.status());
    tokens_before += r->tokens;
    all += *r;
    scores.push_back({path, *r});
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json) {
    nlohmann::json j;
    j["bpb"] = all.bpb();
    j["bits"] = all.bits;
    j["tokens"] = all.tokens;
    j["bytes"] = all.bytes;
    j["context"] = resolved->context;
    j["stride"] = resolved->stride;
    j["seconds"] = seconds;
    j["files"] = nlohmann::json::array();
    for (const FileScore& s : scores)
      j["files"].push_back(
          {{"path", s.path}, {"bpb", s.totals.bpb()}, {"bits", s.totals.bits}, {"tokens", s.totals.tokens},
           {"bytes", s.totals.bytes}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (per_file)
    for (const FileScore& s : scores)
      std::printf("file %s bpb %.6f tokens %lld bytes %lld\n", s.path.c_str(), s.totals.bpb(),
                  static_cast<long long>(s.totals.tokens), static_cast<long long>(s.totals.bytes));
  std::printf("bpb %.6f tokens %lld bytes %lld\n", all.bpb(), static_cast<long long>(all.tokens),
              static_cast<long long>(all.bytes));
  if (!quiet)
    std::fprintf(stderr, "context %lld, stride %lld; %lld tokens in %.2f s (%.1f tok/s)\n",
                 static_cast<long long>(resolved->context), static_cast<long long>(resolved->stride),
                 static_cast<long long>(all.tokens), seconds, all.tokens / std::max(seconds, 1e-9));
  return 0;
}

const CommandRegistration kRegistration({"bpb", "bits per byte of text files (sliding-window scoring)", bpb_main});

}  // namespace
}  // namespace dsv41::app
