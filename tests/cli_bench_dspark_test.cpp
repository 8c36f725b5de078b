// `dsv41 bench --dspark` end to end on dsv41-mini (it ships its drafter): one row per (batch,
// mode) with the outputs checked equal to off's, the per-slot acceptance of the fixed-K runs, the
// calibration table from the K = block runs; the device emulation runs it too (the device drafter,
// and --host-drafter); bad options are errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

const std::string kMini = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";

std::string requests_file() {
  const std::string path = (std::filesystem::temp_directory_path() / "dsv41_cli_bench_dspark.jsonl").string();
  std::ofstream f(path);
  f << R"({"prompt": "The compiler checks each function before it emits code for it.", "max_tokens": 24})" << "\n"
    << R"({"prompt": "Once upon a time", "max_tokens": 24})" << "\n";
  return path;
}

nlohmann::json run_json(const std::string& extra) {
  const testing::CliResult r = testing::run_cli(
      "bench -m " + kMini + " --dspark --dspark-requests " + requests_file() + " --dspark-rounds 1 --json" + extra,
      testing::Stderr::kDiscard);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("outputs: every mode equal to off, token for token"), std::string::npos) << r.out;
  const size_t at = r.out.rfind("\n{");
  if (at == std::string::npos) return {};
  return nlohmann::json::parse(r.out.substr(at + 1), nullptr, false);
}

TEST(CliBenchDspark, EveryModeAndBatchWithAcceptanceAndCalibration) {
  if (!std::filesystem::exists(kMini + "/config.json")) GTEST_SKIP() << kMini << " is absent";
  const nlohmann::json j = run_json(" --dspark-batches 1,2 --dspark-modes off,2,5,auto");
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["runs"].size(), 8u);
  for (const auto& run : j["runs"]) {
    EXPECT_GT(run["tok_s"].get<double>(), 0) << run;
    if (run["mode"] == "off") {
      EXPECT_EQ(run["drafting_steps"].get<int64_t>(), 0) << run;
      EXPECT_GT(run["forward_ms_plain_step"].get<double>(), 0) << run;
      EXPECT_TRUE(run["forward_ms_drafting_step"].is_null()) << run;
    } else if (run["mode"] != "auto") {
      EXPECT_GT(run["drafting_steps"].get<int64_t>(), 0) << run;
      // Every decode step of a fixed K drafts (the requests leave room for it but near their end).
      EXPECT_GT(run["forward_ms_drafting_step"].get<double>(), 0) << run;
      // All K slots listed; slot 1 is judged at every drafting step, later ones may be unknown (null)
      // when no step reached them.
      ASSERT_EQ(run["slot_acceptance"].size(), size_t(std::stoi(run["mode"].get<std::string>()))) << run;
      EXPECT_TRUE(run["slot_acceptance"][0].is_number()) << run;
      for (const auto& a : run["slot_acceptance"])
        if (!a.is_null()) EXPECT_TRUE(a.get<double>() >= 0 && a.get<double>() <= 1) << run;
    }
  }
  ASSERT_TRUE(j.contains("calibration"));
  int64_t drafts = 0;
  for (const auto& b : j["calibration"]) drafts += b["drafts"].get<int64_t>();
  EXPECT_GT(drafts, 0);
  EXPECT_GE(j["ece"].get<double>(), 0);
}

TEST(CliBenchDspark, DeviceEmulationWithTheDeviceAndTheHostDrafter) {
  if (!std::filesystem::exists(kMini + "/config.json")) GTEST_SKIP() << kMini << " is absent";
  for (const std::string drafter : {"", " --host-drafter", " --dspark-no-graph", " --dspark-fewer-draft-kernels false",
                                    " --dspark-verify-graphs-by-sequences false"}) {
    const nlohmann::json j =
        run_json(" --backend device-emulation --dspark-batches 2 --dspark-modes off,3 --dspark-max-tokens 8" + drafter);
    ASSERT_TRUE(j.is_object()) << drafter;
    EXPECT_EQ(j["drafter"], drafter == " --host-drafter" ? "host" : "device");
    EXPECT_EQ(j["draft_graph"], drafter.empty() || drafter == " --dspark-fewer-draft-kernels false" ||
                                    drafter == " --dspark-verify-graphs-by-sequences false")
        << drafter;
    EXPECT_EQ(j["verify_graphs_by_sequences"], drafter != " --dspark-verify-graphs-by-sequences false") << drafter;
    EXPECT_EQ(j["fewer_draft_kernels"], drafter != " --dspark-fewer-draft-kernels false") << drafter;
    ASSERT_EQ(j["runs"].size(), 2u);
    EXPECT_GT(j["runs"][1]["drafting_steps"].get<int64_t>(), 0);
  }
}

// --dspark-queue cycles the file's two 24-token requests to five, all through the batch's slots:
// every run generates 5 × 24 tokens (a closed batch of the file's requests would generate 48).
TEST(CliBenchDspark, AQueueCyclesTheRequestsThroughTheSlots) {
  if (!std::filesystem::exists(kMini + "/config.json")) GTEST_SKIP() << kMini << " is absent";
  const nlohmann::json j = run_json(" --dspark-batches 2 --dspark-modes off,3 --dspark-queue 5");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["requests"].get<int64_t>(), 5);
  EXPECT_TRUE(j["queue"].get<bool>());
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) EXPECT_EQ(run["tokens"].get<int64_t>(), 5 * 24) << run;
}

// --dspark-warm passes the requests once untimed through the same engine and scheduler: the run's
// tokens, drafting steps and trace are the timed pass's alone (a greedy fixed-K run drafts the
// same steps cold and warm, so the counts match a cold run's exactly).
TEST(CliBenchDspark, AWarmRunReportsItsTimedPassOnly) {
  if (!std::filesystem::exists(kMini + "/config.json")) GTEST_SKIP() << kMini << " is absent";
  const std::string trace = (std::filesystem::temp_directory_path() / "dsv41_cli_bench_dspark_warm.jsonl").string();
  const nlohmann::json cold = run_json(" --dspark-batches 2 --dspark-modes off,3");
  const nlohmann::json warm = run_json(" --dspark-batches 2 --dspark-modes off,3 --dspark-warm --dspark-trace " + trace);
  ASSERT_TRUE(cold.is_object());
  ASSERT_TRUE(warm.is_object());
  EXPECT_FALSE(cold["warm"].get<bool>());
  EXPECT_TRUE(warm["warm"].get<bool>());
  EXPECT_TRUE(cold["profile"].get<bool>()) << "each run's shapes profiled before it is timed, by default";
  const nlohmann::json unprofiled = run_json(" --dspark-batches 2 --dspark-modes off,3 --dspark-profile false");
  ASSERT_TRUE(unprofiled.is_object());
  EXPECT_FALSE(unprofiled["profile"].get<bool>());
  EXPECT_EQ(unprofiled["runs"][1]["drafting_steps"], cold["runs"][1]["drafting_steps"]) << "the same greedy steps";
  ASSERT_EQ(warm["runs"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(warm["runs"][i]["tokens"].get<int64_t>(), 48) << warm["runs"][i];
    EXPECT_EQ(warm["runs"][i]["drafting_steps"], cold["runs"][i]["drafting_steps"]) << warm["runs"][i];
    EXPECT_EQ(warm["runs"][i]["accepted_per_verify_step"], cold["runs"][i]["accepted_per_verify_step"]);
  }
  // The trace holds the timed pass's steps: 24 emitting steps of off at batch 2 (its first token
  // from the prefill), not 48.
  std::ifstream in(trace);
  int64_t off_steps = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"mode\":\"off\"") != std::string::npos) ++off_steps;
  EXPECT_EQ(off_steps, 24);
}

// auto starts from the model's measured maps (dsv41-mini ships dspark_calibration.json) unless
// told otherwise; --dspark-calibration-out writes the maps a run fitted, which load as a start.
TEST(CliBenchDspark, TheCalibrationStartsFromTheModelsFileOrAsAsked) {
  if (!std::filesystem::exists(kMini + "/dspark_calibration.json")) GTEST_SKIP() << "no calibration file";
  const std::string fitted = (std::filesystem::temp_directory_path() / "dsv41_cli_bench_fitted.json").string();
  std::filesystem::remove(fitted);
  const nlohmann::json shipped = run_json(" --dspark-batches 2 --dspark-modes off,5 --dspark-calibration-out " + fitted);
  ASSERT_TRUE(shipped.is_object());
  EXPECT_EQ(shipped["calibration_start"], kMini + "/dspark_calibration.json");
  std::ifstream in(fitted);
  const nlohmann::json maps = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(maps.is_object()) << fitted;
  EXPECT_EQ(maps["slots"].size(), 5u);
  const nlohmann::json from_fitted = run_json(" --dspark-batches 2 --dspark-modes off,auto --dspark-calibration " + fitted);
  EXPECT_EQ(from_fitted["calibration_start"], fitted);
  // From the identity, and with a shape's first two steps unstored (--dspark-cost-unstored-steps
  // 2): outputs still equal to off's (run_json checks).
  const nlohmann::json none =
      run_json(" --dspark-batches 2 --dspark-modes off,auto --dspark-calibration none --dspark-cost-unstored-steps 2");
  EXPECT_EQ(none["calibration_start"], "none");
  EXPECT_EQ(none["cost_unstored_steps"], 2);
  EXPECT_EQ(from_fitted["cost_unstored_steps"], 1);
  const testing::CliResult r = testing::run_cli(
      "bench -m " + kMini + " --dspark --dspark-requests " + requests_file() + " --dspark-calibration /nonexistent.json",
      testing::Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--dspark-calibration"), std::string::npos) << r.out;
  std::filesystem::remove(fitted);
}

TEST(CliBenchDspark, BadOptionsAreErrors) {
  if (!std::filesystem::exists(kMini + "/config.json")) GTEST_SKIP() << kMini << " is absent";
  // Each with a readable requests file, so that the error is the bad option's (named), not the
  // default requests path's (relative to the working directory).
  const std::string requests = " --dspark-requests " + requests_file();
  for (const std::string& args : {" --dspark-modes 4,off", " --dspark-modes off,x", " --dspark-batches 0",
                                  " --dspark-rounds 0", " --dspark-modes off,9", " --dspark-auto-plan even",
                                  " --dspark-auto-plain-samples 33", " --dspark-queue -1",
                                  " --dspark-down-expand-rows -1"}) {
    const testing::CliResult r =
        testing::run_cli("bench -m " + kMini + " --dspark" + requests + args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args << ": " << r.out;
    const std::string option = args.substr(1, args.find(' ', 1) - 1);
    EXPECT_NE(r.out.find(option), std::string::npos) << args << ": " << r.out;
  }
  const testing::CliResult missing =
      testing::run_cli("bench -m " + kMini + " --dspark --dspark-requests /nonexistent.jsonl", testing::Stderr::kMerge);
  EXPECT_NE(missing.code, 0) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent.jsonl"), std::string::npos) << missing.out;
  // A draft length beyond the drafter's block is refused before any round runs.
  const testing::CliResult r =
      testing::run_cli("bench -m " + kMini + " --dspark --dspark-modes off,9", testing::Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--dspark-modes"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("round 1"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dsv41
