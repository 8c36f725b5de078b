// `dsv41 replay-ab` end to end on the embedded model: exact matches full (the check column is 0),
// bounded costs fewer token-layers, the KL is a number ≥ 0, bad options fail with their name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using testing::run_cli;
using testing::Stderr;

TEST(CliReplayAb, ExactMatchesFullAndBoundedIsCheaper) {
  const std::string model = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  const auto r = run_cli("replay-ab -m " + model + " --text " + model +
                             "/heldout/clang-14-doc.txt --lengths 450 --hits 0,200 --tokens 3 --prompts 1 --json",
                         Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["cases"].size(), 2u);
  for (const auto& c : j["cases"]) {
    EXPECT_EQ(c["full_vs_exact_max_abs_logit"].get<double>(), 0.0) << c.dump();
    EXPECT_GE(c["kl_mean"].get<double>(), 0.0);
    EXPECT_GE(c["kl_max"].get<double>(), c["kl_mean"].get<double>());
    auto total = [&](const char* k) {
      return c[k]["encoder_token_layers"].get<int64_t>() + c[k]["decoder_token_layers"].get<int64_t>() +
             c[k]["replay_token_layers"].get<int64_t>();
    };
    EXPECT_LT(total("bounded"), total("exact")) << c.dump();
    EXPECT_LT(total("exact"), total("full")) << c.dump();
  }
  EXPECT_GT(j["cases"][1]["bounded"]["replay_token_layers"].get<int64_t>(), 0) << "a hit replays the encoder";
}

TEST(CliReplayAb, BadOptionsNameTheOption) {
  const std::string model = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
  const auto r = run_cli("replay-ab -m " + model + " --text /nonexistent.txt --lengths 1", Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--lengths"), std::string::npos) << r.out;
  const auto missing = run_cli("replay-ab -m " + model + " --text /nonexistent.txt", Stderr::kMerge);
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.out.find("/nonexistent.txt"), std::string::npos) << missing.out;
}

}  // namespace
}  // namespace dsv41
