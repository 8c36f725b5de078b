// `dsv41 generate --cache-dir` end to end (issue 11 item 4): two processes in sequence on
// models/dsv41-mini with a 700-token prompt and chunks of 128: the first stores the prompt's
// chunks, the second hits the SSD store for the whole chunks of the shared prefix and (exact
// depth) generates the cold run's ids. Another chunk size or another model never hits.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using testing::run_cli;
using testing::Stderr;
namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("dsv41_serve_" + std::to_string(getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The "ids":[…] of the one output line.
std::string ids_of(const std::string& out) {
  const size_t a = out.find("\"ids\":[");
  return a == std::string::npos ? std::string() : out.substr(a, out.find(']', a) - a + 1);
}

TEST(CliServeTurn, SecondProcessHitsTheStoreAndGeneratesTheColdIds) {
  Scratch s;
  const std::string model = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  std::mt19937 rng(41);
  std::string ids = "0";
  for (int i = 1; i < 700; ++i) ids += "," + std::to_string(3 + rng() % 8000);
  const std::string req = s.path("req.jsonl");
  std::ofstream(req) << "{\"id\": \"long\", \"prompt_ids\": [" << ids << "], \"max_tokens\": 6, \"ignore_eos\": true}\n";
  const std::string common = "generate -m " + model + " --requests " + req + " --depth exact --ctx 1024 --threads 2";
  const std::string cache = " --cache-dir " + s.path("cache") + " --cache-chunk 128";

  const auto plain = run_cli(common, Stderr::kDiscard);
  const auto cold = run_cli(common + cache + " --telemetry " + s.path("t1.jsonl"), Stderr::kDiscard);
  const auto warm = run_cli(common + cache + " --telemetry " + s.path("t2.jsonl"), Stderr::kMerge);
  ASSERT_EQ(cold.code, 0) << cold.out;
  ASSERT_EQ(warm.code, 0) << warm.out;
  const std::string t1 = read_file(s.path("t1.jsonl")), t2 = read_file(s.path("t2.jsonl"));
  EXPECT_NE(t1.find("\"event\":\"SERVE_TURN\",\"prompt_tokens\":700,\"global_hit_tokens\":0,\"hit_tier\":\"none\""),
            std::string::npos) << t1;
  // The whole chunks of the prompt, short of its last position: (700 − 1) / 128 = 5 chunks.
  EXPECT_NE(t2.find("\"prompt_tokens\":700,\"global_hit_tokens\":640,\"hit_tier\":\"ssd\",\"swa\":\"replayed_exact\""),
            std::string::npos) << t2;
  EXPECT_FALSE(ids_of(cold.out).empty()) << cold.out;
  EXPECT_EQ(ids_of(warm.out), ids_of(cold.out));
  EXPECT_EQ(ids_of(plain.out), ids_of(cold.out));

  // Another chunk size: its own store, no hit.
  run_cli(common + " --cache-dir " + s.path("cache") + " --cache-chunk 64 --telemetry " + s.path("t3.jsonl"),
          Stderr::kDiscard);
  EXPECT_NE(read_file(s.path("t3.jsonl")).find("\"global_hit_tokens\":0,\"hit_tier\":\"none\""), std::string::npos);
  // Another model (the same weights, a config.json that differs by a byte: another fingerprint).
  fs::create_directories(s.path("other"));
  for (const auto& e : fs::directory_iterator(model))
    if (e.path().filename() != "config.json") fs::create_symlink(e.path(), s.dir / "other" / e.path().filename());
  std::ofstream(s.path("other/config.json")) << read_file(model + "/config.json") << "\n";
  const auto other = run_cli("generate -m " + s.path("other") + " --requests " + req +
                                 " --depth exact --ctx 1024 --threads 2" + cache + " --telemetry " + s.path("t4.jsonl"),
                             Stderr::kDiscard);
  EXPECT_EQ(other.code, 0);
  EXPECT_NE(read_file(s.path("t4.jsonl")).find("\"global_hit_tokens\":0,\"hit_tier\":\"none\""), std::string::npos);
  EXPECT_EQ(ids_of(other.out), ids_of(cold.out));
}

// Cached requests are decoded in the batch: a conversation of three requests, each extending the
// one before, plus an unrelated one, gives the same ids at --parallel 1 and 4 (exact depth) and the
// same as without the cache; the extending requests hit (engine tier when the earlier one is done).
TEST(CliServeTurn, CachedRequestsBatchAndMatchTheUncachedIds) {
  Scratch s;
  const std::string model = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  std::mt19937 rng(43);
  std::vector<std::string> prefixes;
  std::string ids = "0";
  for (int turn = 0; turn < 3; ++turn) {
    for (int i = 0; i < 150; ++i) ids += "," + std::to_string(3 + rng() % 8000);
    prefixes.push_back(ids);
  }
  const std::string req = s.path("req.jsonl");
  {
    std::ofstream f(req);
    for (int t = 0; t < 3; ++t)
      f << "{\"id\": \"t" << t << "\", \"prompt_ids\": [" << prefixes[t] << "], \"max_tokens\": 5, \"ignore_eos\": true}\n";
    f << "{\"id\": \"other\", \"prompt_ids\": [0, 5, 9, 77, 300], \"max_tokens\": 5, \"ignore_eos\": true}\n";
  }
  const std::string common = "generate -m " + model + " --requests " + req + " --depth exact --ctx 1024 --threads 2";
  auto lines = [](const std::string& out) {
    std::vector<std::string> v;
    std::stringstream ss(out);
    for (std::string l; std::getline(ss, l);) v.push_back(ids_of(l));
    return v;
  };
  const auto plain = run_cli(common + " --parallel 4", Stderr::kDiscard);
  const auto one = run_cli(common + " --parallel 1 --cache-dir " + s.path("c1") + " --cache-chunk 64 --telemetry " +
                               s.path("t1.jsonl"), Stderr::kDiscard);
  const auto four = run_cli(common + " --parallel 4 --cache-dir " + s.path("c4") + " --cache-chunk 64 --telemetry " +
                                s.path("t4.jsonl"), Stderr::kDiscard);
  ASSERT_EQ(one.code, 0) << one.out;
  ASSERT_EQ(four.code, 0) << four.out;
  ASSERT_EQ(lines(plain.out).size(), 4u);
  EXPECT_EQ(lines(one.out), lines(plain.out));
  EXPECT_EQ(lines(four.out), lines(plain.out));
  // Serially every extending request finds the one before it live in the engine; it shares that
  // request's prompt (not its answer), whose windows the DRAM pool snapshotted at the prompt's end.
  const std::string t1 = read_file(s.path("t1.jsonl"));
  EXPECT_NE(t1.find("\"prompt_tokens\":301,\"global_hit_tokens\":151,\"hit_tier\":\"engine\",\"swa\":\"restored\""),
            std::string::npos) << t1;
  EXPECT_NE(t1.find("\"prompt_tokens\":451,\"global_hit_tokens\":301,\"hit_tier\":\"engine\",\"swa\":\"restored\""),
            std::string::npos) << t1;
}

TEST(CliServeTurn, BadCacheOptionsFailBeforeTheModelLoads) {
  const auto odd = run_cli("generate -m /nonexistent --requests /dev/null --cache-dir /tmp/x --cache-chunk 127",
                           Stderr::kMerge);
  EXPECT_EQ(odd.code, 2);
  EXPECT_NE(odd.out.find("must be even"), std::string::npos) << odd.out;
  const auto tel = run_cli("generate -m /nonexistent --requests /dev/null --telemetry /tmp/x.jsonl", Stderr::kMerge);
  EXPECT_EQ(tel.code, 2);
  EXPECT_NE(tel.out.find("--telemetry needs --cache-dir"), std::string::npos) << tel.out;
}

}  // namespace
}  // namespace dsv41
