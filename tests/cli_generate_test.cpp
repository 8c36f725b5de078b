// `dsv41 generate` end to end (issue 9 item 7): the same ids with --parallel 1 and 8 on the
// embedded default model and the golden fixture, bad lines fail alone naming their id and line,
// bad options fail before the model loads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using testing::run_cli;
using testing::Stderr;

std::string write_requests(const std::string& body) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("dsv41_generate_" + std::to_string(getpid()) + ".jsonl")).string();
  std::ofstream(path) << body;
  return path;
}

const char* kRequests =
    "{\"id\": \"greedy\", \"prompt\": \"Python's asyncio module\", \"max_tokens\": 12}\n"
    "{\"id\": \"sampled\", \"prompt\": \"SELECT * FROM\", \"max_tokens\": 9, \"temperature\": 0.8, \"seed\": 3}\n"
    "{\"id\": \"ids\", \"prompt_ids\": [0, 100, 200, 300], \"max_tokens\": 7, \"ignore_eos\": true}\n"
    "\n"
    "{\"id\": \"unknown-key\", \"prompt\": \"x\", \"colour\": 3}\n"
    "{\"id\": \"bad-id\", \"prompt_ids\": [0, 999999]}\n"
    "{\"id\": \"nucleus\", \"prompt\": \"The Linux kernel\", \"max_tokens\": 11, \"temperature\": 0.7, "
    "\"top_p\": 0.9, \"seed\": 11}\n"
    "{\"id\": \"too-long\", \"prompt_ids\": [0, 5], \"max_tokens\": 100000}\n"
    "{\"id\": \"p2\", \"prompt\": \"Debian packages\", \"max_tokens\": 5, \"temperature\": 1.0, \"seed\": 5}\n";

void expect_parallel_invariant(const std::string& model) {
  const std::string req = write_requests(kRequests);
  const auto one = run_cli("generate -m " + model + " --requests " + req + " --parallel 1", Stderr::kDiscard);
  const auto eight = run_cli("generate -m " + model + " --requests " + req + " --parallel 8 --prefill-chunk 3",
                             Stderr::kDiscard);
  const auto merged = run_cli("generate -m " + model + " --requests " + req + " --parallel 3", Stderr::kMerge);
  std::filesystem::remove(req);
  EXPECT_EQ(one.code, 1) << "some requests fail";
  EXPECT_EQ(one.out, eight.out);
  EXPECT_NE(one.out.find("\"id\":\"greedy\",\"ids\":["), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("\"error\":\"unknown key \\\"colour\\\"\",\"id\":\"unknown-key\",\"line\":5"),
            std::string::npos)
      << one.out;
  EXPECT_NE(one.out.find("\"id\":\"bad-id\",\"line\":6"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("exceeds the context"), std::string::npos) << one.out;
  EXPECT_NE(merged.out.find("request \"too-long\" (line 8)"), std::string::npos) << merged.out;
  // Nine lines of output, one per non-blank input line, in input order.
  EXPECT_EQ(std::count(one.out.begin(), one.out.end(), '\n'), 8);
  EXPECT_LT(one.out.find("\"greedy\""), one.out.find("\"p2\""));
}

TEST(CliGenerate, DefaultModelSameIdsWhateverTheParallelism) {
  expect_parallel_invariant(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini");
}

TEST(CliGenerate, GoldenFixtureSameIdsWhateverTheParallelism) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (a plain clone has no ../shared)";
  expect_parallel_invariant(dir);
}

TEST(CliGenerate, BadOptionsFailBeforeTheModelLoads) {
  const std::string req = write_requests("{\"id\": \"a\", \"prompt\": \"x\"}\n");
  for (const char* bad : {"--parallel 0", "--parallel 100000", "--prefill-chunk 0", "--ctx -3"}) {
    const auto r = run_cli("generate -m /nonexistent --requests " + req + " " + bad, Stderr::kMerge);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_EQ(r.out.find("/nonexistent"), std::string::npos) << bad << ": " << r.out;
    EXPECT_NE(r.out.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << r.out;
  }
  const auto missing = run_cli("generate -m " + std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini --requests /nonexistent.jsonl",
                               Stderr::kMerge);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("/nonexistent.jsonl"), std::string::npos) << missing.out;
  std::filesystem::remove(req);
}

}  // namespace
}  // namespace dsv41
