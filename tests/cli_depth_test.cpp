// Prefill depth on the command line (issue 10 items 3–4, issue 11 item 5): `dsv41 logits --depth
// D --hit H` and `dsv41 run --depth D --cache-dir --telemetry`, end to end on the repository's
// dsv41-mini (so a plain clone runs them). The engine-level guarantees are tested in
// depth_test.cpp; here: the commands wire them up, write the rows each mode computes, and refuse
// bad combinations with a message that names the option.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/speed_bench.h"
#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kModel = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Per test: ctest runs the tests of this file in parallel processes.
std::string temp_file(const std::string& name) {
  return ::testing::TempDir() + "dsv41_cli_depth_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
         "_" + name;
}

// dsv41-mini: window 64, 12 layers; 700 positions reach well past the tail and the exact pyramid.
std::vector<int32_t> prompt_ids(int64_t n) { return speed_bench_prompt(8192, n, 7); }

struct Logits {
  testing::GoldenTensor last, all;
};

Logits run_logits(const std::string& ids, const std::string& extra) {
  const std::string out = temp_file("logits.safetensors");
  const testing::CliResult r =
      testing::run_cli("logits -m " + kModel + " --ids " + ids + " --out " + out + " " + extra, testing::Stderr::kMerge);
  EXPECT_EQ(r.code, 0) << extra << ": " << r.out;
  testing::GoldenFile f(out);
  Logits l{f.get("last_logits"), f.get("logits")};
  std::remove(out.c_str());
  return l;
}

TEST(CliDepth, LogitsExactEqualsFullAtEveryHit) {
  const std::vector<int32_t> ids = prompt_ids(700);
  const std::string text = join(ids);
  const Logits full = run_logits(text, "--depth full --chunk 128");
  ASSERT_EQ(full.all.shape, (std::vector<int64_t>{700, 8192}));
  ASSERT_EQ(full.last.shape, (std::vector<int64_t>{1, 8192}));
  // Hits on both sides of a ratio-2 group, a 256-row page and a 64-position window.
  for (int hit : {0, 255, 256, 257, 320, 511}) {
    const Logits exact = run_logits(text, "--depth exact --hit " + std::to_string(hit));
    EXPECT_EQ(exact.last.f32, full.last.f32) << "exact, hit " << hit;
    EXPECT_TRUE(exact.all.shape.empty()) << "exact on 700 positions computes only the pyramid";
  }
  // Full depth after a hit replays the whole hit: every row exists and equals the cold run's.
  const Logits full_hit = run_logits(text, "--depth full --hit 300");
  EXPECT_EQ(full_hit.all.f32, full.all.f32);
}

TEST(CliDepth, LogitsBoundedWritesTheLastRowAndEqualsFullInsideTheTail) {
  const std::vector<int32_t> ids = prompt_ids(700);
  const Logits full = run_logits(join(ids), "--depth full");
  const Logits bounded = run_logits(join(ids), "");  // bounded is the default
  ASSERT_EQ(bounded.last.shape, (std::vector<int64_t>{1, 8192}));
  EXPECT_TRUE(bounded.all.shape.empty());
  EXPECT_NE(bounded.last.f32, full.last.f32) << "bounded cuts the decoder's windows at the tail";
  const Logits bounded_hit = run_logits(join(ids), "--depth bounded --hit 400");
  ASSERT_EQ(bounded_hit.last.shape, (std::vector<int64_t>{1, 8192}));
  // A prompt inside the tail (≤ w = 64) runs full depth in every mode: all rows, same bits.
  const std::vector<int32_t> short_ids = prompt_ids(50);
  const Logits a = run_logits(join(short_ids), "--depth bounded");
  const Logits b = run_logits(join(short_ids), "--depth full");
  EXPECT_EQ(a.all.shape, (std::vector<int64_t>{50, 8192}));
  EXPECT_EQ(a.all.f32, b.all.f32);
  // --decode-from: the decoded rows exist at any depth; with a deep prompt, the last row only.
  const Logits decoded = run_logits(join(ids), "--depth exact --decode-from 650");
  EXPECT_EQ(decoded.last.f32, full.last.f32);
}

TEST(CliDepth, BadDepthOptionsNameTheOption) {
  const std::string ids = join(prompt_ids(20));
  const std::string out = " --out " + temp_file("bad.safetensors");
  struct Case {
    std::string args, says;
  } cases[] = {
      {"logits -m " + kModel + " --ids " + ids + out + " --hit 20", "--hit 20"},
      {"logits -m " + kModel + " --ids " + ids + out + " --hit 12 --decode-from 10", "--decode-from"},
      {"logits -m " + kModel + " --ids " + ids + out + " --depth deep", "--depth"},
      {"logits -m " + kModel + " --ids " + ids + out + " --dump topk --depth exact", "--depth full"},
      {"run -m " + kModel + " --ids " + ids + " -n 1 --depth shallow", "--depth"},
      {"run -m " + kModel + " --ids " + ids + " -n 1 --cache-chunk 255 --cache-dir " + temp_file("c"), "--cache-chunk"},
  };
  for (const Case& c : cases) {
    const testing::CliResult r = testing::run_cli(c.args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << ": " << r.out;
  }
}

nlohmann::json read_record(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return nlohmann::json::parse(line, nullptr, false);
}

std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

TEST(CliDepth, RunThroughTheCacheHitsOnTheSecondProcessAndExactMatchesCold) {
  const std::string dir = temp_file("cache");
  std::filesystem::remove_all(dir);
  const std::string ids = join(prompt_ids(600));
  const std::string base = "run -m " + kModel + " --ids " + ids + " -n 8 --ignore-eos --print-ids --no-echo";
  const testing::CliResult cold = testing::run_cli(base + " --depth full", testing::Stderr::kDiscard);
  ASSERT_EQ(cold.code, 0);
  EXPECT_NE(cold.out.find("token-layers: encoder"), std::string::npos) << cold.out;
  const std::string tel = temp_file("turn.json");
  const std::string cached = base + " --depth exact --cache-dir " + dir + " --cache-chunk 128 --telemetry " + tel;
  const testing::CliResult first = testing::run_cli(cached, testing::Stderr::kDiscard);
  ASSERT_EQ(first.code, 0) << first.out;
  nlohmann::json r1 = read_record(tel);
  ASSERT_TRUE(r1.is_object());
  EXPECT_EQ(r1["hit_tier"], "none");
  EXPECT_EQ(r1["prompt_tokens"], 600);
  EXPECT_GT(r1["ssd_written_bytes"].get<int64_t>(), 0);
  const testing::CliResult second = testing::run_cli(cached, testing::Stderr::kDiscard);
  ASSERT_EQ(second.code, 0) << second.out;
  nlohmann::json r2 = read_record(tel);
  EXPECT_EQ(r2["hit_tier"], "ssd");
  EXPECT_EQ(r2["global_hit_tokens"], 512);  // the whole 128-token chunks short of the last position
  EXPECT_EQ(r2["swa"], "replayed_exact");
  EXPECT_LT(r2["encoder_token_layers"].get<int64_t>() + r2["decoder_token_layers"].get<int64_t>(),
            r1["encoder_token_layers"].get<int64_t>() + r1["decoder_token_layers"].get<int64_t>());
  // Exact depth through a hit: the same greedy ids as the cold full-depth run.
  EXPECT_EQ(last_line(second.out), last_line(cold.out));
  EXPECT_EQ(last_line(first.out), last_line(cold.out));
  std::filesystem::remove_all(dir);
  std::remove(tel.c_str());
}

TEST(CliDepth, BenchTimesReturningTurnsAtBothDepths) {
  const testing::CliResult r = testing::run_cli(
      "bench -m " + kModel + " --contexts 300 --decode 0 --membw-mib 0 --depth full --returning 16 --json",
      testing::Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const auto& p = j["points"][0];
  EXPECT_EQ(p["depth"], "full");
  ASSERT_EQ(p["returning"].size(), 2u);
  EXPECT_EQ(p["returning"][0]["depth"], "bounded");
  EXPECT_EQ(p["returning"][1]["depth"], "exact");
  for (const auto& t : p["returning"]) {
    EXPECT_EQ(t["suffix_tokens"], 16);
    EXPECT_EQ(t["full_depth_token_layers"], 16 * 12);  // the new positions only
    EXPECT_GT(t["replay_token_layers"].get<int64_t>(), 0);  // the windows are rebuilt
    EXPECT_GT(t["seconds"].get<double>(), 0);
  }
  // Exact rebuilds every window exactly: it replays more than bounded's last w positions.
  EXPECT_GT(p["returning"][1]["replay_token_layers"].get<int64_t>(), p["returning"][0]["replay_token_layers"].get<int64_t>());
}

}  // namespace
}  // namespace dsv41
