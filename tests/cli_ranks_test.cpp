// `--ranks N` on run and bench (issue 17 item 2; serve's is tests/server/ranks_http.test.mjs, generate's
// tests/cli_generate_test.cpp): the ranks give one engine's text, greedy, sampled and with
// DSpark; bench measures the batched decode over them; what does not run across ranks yet is
// refused, naming it, before any model loads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using testing::run_cli;
using testing::Stderr;

const std::string kMini = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";

// The generated text and the ids line (the speed lines between them differ run to run).
std::string text_and_ids(const std::string& out) {
  const size_t speed = out.find("\nprefill:");
  const size_t ids = out.rfind('\n', out.size() - 2);
  return out.substr(0, speed) + "|" + (ids == std::string::npos ? "" : out.substr(ids + 1));
}

TEST(CliRanks, RunOverRanksPrintsOneEnginesText) {
  for (const std::string flags : {"-n 12", "-n 12 --temp 0.8 --seed 5", "-n 12 --dspark 2", "-n 0"}) {
    const std::string args = "run -m " + kMini + " -p 'Once upon a time' --print-ids --threads 2 " + flags;
    const auto one = run_cli(args, Stderr::kDiscard);
    ASSERT_EQ(one.code, 0) << args << ": " << one.out;
    for (const char* ranks : {" --ranks 2", " --ranks 3"}) {
      const auto r = run_cli(args + ranks, Stderr::kMerge);
      ASSERT_EQ(r.code, 0) << args << ranks << ": " << r.out;
      EXPECT_NE(r.out.find("expert-parallel ranks"), std::string::npos) << r.out;
      const auto plain = run_cli(args + ranks, Stderr::kDiscard);
      EXPECT_EQ(text_and_ids(plain.out), text_and_ids(one.out)) << args << ranks;
    }
  }
}

// The golden fixture (the independent implementation's model; CliRun ties one engine's `run` to
// its generated ids): over 2 and 3 ranks, `run` prints one engine's text and ids.
TEST(CliRanks, GoldenFixtureRunOverRanksPrintsOneEnginesIds) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (a plain clone has no ../shared)";
  const std::string args = "run -m " + dir + " --ids 0,17,42,99,7,3 -n 10 --ignore-eos --print-ids --threads 2";
  const auto one = run_cli(args, Stderr::kDiscard);
  ASSERT_EQ(one.code, 0) << one.out;
  for (const char* ranks : {" --ranks 2", " --ranks 3"}) {
    const auto r = run_cli(args + ranks, Stderr::kDiscard);
    ASSERT_EQ(r.code, 0) << ranks << ": " << r.out;
    EXPECT_EQ(text_and_ids(r.out), text_and_ids(one.out)) << ranks;
  }
}

TEST(CliRanks, BenchMeasuresTheBatchedDecodeOverRanks) {
  const auto r = run_cli("bench -m " + kMini + " --batches 1,3 --batch-context 8 --batch-steps 2 --ranks 2 --threads 2 --json",
                         Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["ranks"], 2);
  ASSERT_EQ(j["batches"].size(), 2u);
  EXPECT_EQ(j["batches"][1]["batch"], 3);
  for (const auto& p : j["batches"]) {
    EXPECT_GT(p["decode_tok_s"].get<double>(), 0.0);
    EXPECT_GT(p["exchange_calls"].get<int64_t>(), 0) << "the exchanges are timed";
    EXPECT_GT(p["exchange_bytes_sent"].get<int64_t>(), 0);
    EXPECT_GT(p["exchange_seconds_max_rank"].get<double>(), 0.0);
  }
}

TEST(CliRanks, WhatDoesNotRunAcrossRanksIsRefusedBeforeTheModelLoads) {
  const std::pair<const char*, const char*> cases[] = {
      {"run -m /nonexistent -p hi --ranks 2 --dump all", "not across ranks yet"},
      {"run -m /nonexistent -p hi --ranks 2 --cache-dir /tmp/dsv41-unused", "not across ranks yet"},
      {"run -m /nonexistent -p hi --ranks 2 --backend cuda", "runs the cpu backend or device-emulation"},
      {"bench -m /nonexistent --ranks 2", "batched decode (--batches) only"},
      {"bench -m /nonexistent --ranks 2 --batches 1 --dspark", "batched decode (--batches) only"},
      {"serve -m /nonexistent --ranks 2 --cache-dir /tmp/dsv41-unused", "not served across ranks"},
      {"serve -m /nonexistent --ranks 65", "--ranks"},
  };
  for (const auto& [args, why] : cases) {
    const auto r = run_cli(args, Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find(why), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("/nonexistent"), std::string::npos) << args << ": the model was looked at: " << r.out;
  }
}

}  // namespace
}  // namespace dsv41
