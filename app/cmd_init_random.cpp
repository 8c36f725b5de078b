// dsv41 init-random --config FILE --out DIR [--seed S] [--shard-mb N] [--dtype bf16|f32] [--force]
// Writes a complete random-weight model directory (config.json, release-named sharded safetensors
// in the release dtypes, index, tokenizer.json) for tests and benchmarks of any shape, then
// re-opens it and checks every tensor against the layer plan. See model/random_init.h.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "app/command.h"
#include "app/option_checks.h"
#include "testing/random_init.h"

namespace dsv41::app {
namespace {

int run_init_random(int argc, char** argv) {
  CLI::App cli{"Write a random-weight model directory for a config (tests, benchmarks)"};
  std::string config_path, out_dir, dtype = "bf16";
  uint64_t seed = 0;
  int64_t shard_mb = 1024;
  bool force = false;
  cli.add_option("--config", config_path, "config.json to build the model for")->required();
  cli.add_option("--out", out_dir, "output model directory (must be empty or absent)")->required();
  cli.add_option("--seed", seed, "random seed (same seed, same bytes)")->check(in_range<uint64_t>(0, kMaxSeed));
  // Up to 1 TiB per shard: more than any checkpoint here needs in one file.
  cli.add_option("--shard-mb", shard_mb, "target shard size in MiB")->check(in_range<int64_t>(1, int64_t{1} << 20));
  cli.add_option("--dtype", dtype, "float format for configs without quantization_config")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cli.add_flag("--force", force, "write into a non-empty directory (old shards are removed)");
  int threads = 0;
  cli.add_option("--threads", threads, "tensors drawn at once (0 = one per core; the bytes do not depend on it)")
      ->check(in_range(0, 4096));
  name_parse_errors(cli);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return cli.exit(e);
  }
  RandomInitOptions opt;
  opt.seed = seed;
  opt.shard_bytes = shard_mb << 20;
  opt.force = force;
  opt.float32 = dtype == "f32";
  opt.threads = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  opt.progress = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  Result<RandomInitReport> rep = write_random_model(config_path, out_dir, opt);
  if (!rep.ok()) {
    std::fprintf(stderr, "dsv41 init-random: %s\n", rep.status().to_string().c_str());
    return 1;
  }
  std::printf("wrote %s: %lld tensors, %.1f MiB in %d shard(s), seed %llu; checked against the layer plan: ok\n",
              out_dir.c_str(), static_cast<long long>(rep->tensors), rep->bytes / 1048576.0, rep->shards,
              static_cast<unsigned long long>(seed));
  return 0;
}

const CommandRegistration kRegistration{
    {"init-random", "write a random-weight model directory (any config) for tests and benchmarks", run_init_random}};

}  // namespace
}  // namespace dsv41::app
