// `dsv41 bench` end to end on the f32 golden fixture: the JSON has one point per context with
// the decode roofline fields, the table mode prints one row per context; bad options are an
// error with a non-zero exit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

TEST(CliBench, JsonHasOnePointPerContextWithTheRoofline) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const testing::CliResult r = testing::run_cli(
      "bench -m " + kDir + " --contexts 8,40 --decode 3 --membw-mib 4 --membw-passes 1 --json", testing::Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_GT(j["decode_weights"]["params"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["decode_weights"]["engine_bytes"].get<double>(), 4 * j["decode_weights"]["params"].get<double>());
  EXPECT_GT(j["read_bandwidth"]["best"].get<double>(), 0);
  ASSERT_EQ(j["points"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto& p = j["points"][i];
    EXPECT_EQ(p["context"].get<int64_t>(), i == 0 ? 8 : 40);
    EXPECT_EQ(p["decode_tokens"].get<int64_t>(), 3);
    EXPECT_EQ(p["positions"].get<int64_t>(), p["context"].get<int64_t>() + 3);
    EXPECT_GT(p["cache"]["total"].get<int64_t>(), 0);
    EXPECT_GT(p["read_bandwidth_at_decode"].get<double>(), 0);
    EXPECT_GT(p["floor_f32_tokens_per_s"].get<double>(), 0);
  }
}

TEST(CliBench, TableHasARowPerContext) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const testing::CliResult r =
      testing::run_cli("bench -m " + kDir + " --contexts 8,16 --decode 2 --membw-mib 0", testing::Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\n      8 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n     16 "), std::string::npos) << r.out;
}

TEST(CliBench, BadOptionsAreErrors) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* args : {" --contexts 0", " --contexts 8 --decode -1", " --membw-mib 1", " --membw-mib -3",
                           " --contexts 8 --membw-passes 0"}) {
    const testing::CliResult r = testing::run_cli("bench -m " + kDir + args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find("dsv41 bench:"), std::string::npos) << args << ": " << r.out;
  }
  EXPECT_NE(testing::run_cli("bench -m /nonexistent", testing::Stderr::kDiscard).code, 0);
  // A device backend runs the context sweep and --dspark only: refused with the others, not ignored.
  for (const char* args : {" --backend device-emulation --batches 1", " --backend cuda --tiers 64 --cache-dir /tmp",
                           " --backend bogus --contexts 8"}) {
    const testing::CliResult r = testing::run_cli("bench -m " + kDir + args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find("--backend"), std::string::npos) << args << ": " << r.out;
  }
}

// `--backend cuda` where no GPU can be used (this machine: built with or without CUDA): a clear
// error naming the backend before any work, not a table of zeros.
TEST(CliBench, CudaWithoutADeviceFailsNamingIt) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is present: the sweep would run";
  for (const char* membw : {"", " --membw-mib 0"}) {
    const testing::CliResult r =
        testing::run_cli("bench -m " + kDir + " --contexts 8 --decode 2 --backend cuda" + membw, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << membw << ": " << r.out;
    EXPECT_TRUE(r.out.find("--backend cuda") != std::string::npos || r.out.find("cuda backend") != std::string::npos)
        << membw << ": " << r.out;
    EXPECT_EQ(r.out.find("context prefill tok/s"), std::string::npos) << membw << ": " << r.out;
  }
}

// The context sweep on a device backend (emulated on the CPU): the same table, no host roofline.
TEST(CliBench, ContextSweepOnADeviceBackend) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const testing::CliResult r = testing::run_cli("bench -m " + kDir + " --contexts 8 --decode 2 --backend device-emulation --json",
                                                testing::Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["points"].size(), 1u);
  EXPECT_EQ(j["points"][0]["decode_tokens"], 2);
  EXPECT_FALSE(j.contains("read_bandwidth"));
}

}  // namespace
}  // namespace dsv41
