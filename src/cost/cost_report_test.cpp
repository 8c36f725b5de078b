// The `dsv41 cost` outputs: the JSON object (library function and the real binary) and the table.
#include "cost/cost_report.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost/v41_test_config.h"
#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

CostModel v41() {
  auto m = build_cost_model(test_v41_flash_config(), "v41-flash-test.json");
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? *m : CostModel{};
}

TEST(CostReport, JsonHasTheContractKeys) {
  const CostModel m = v41();
  CostQuery q;
  q.new_tokens = 100000;
  const auto text = format_cost_json(m, q);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["global_kv_bytes_per_token"].get<double>(), 890);
  EXPECT_EQ(j["global_entries_per_token"].get<double>(), 2.5);
  EXPECT_EQ(j["persistent_bytes_per_token"].get<double>(), 890);
  EXPECT_TRUE(j["persistent_definition"].is_string());
  ASSERT_TRUE(j["layers"].is_array());
  ASSERT_EQ(j["layers"].size(), 40u);
  double sum = 0;
  for (const auto& b : j["layers"]) sum += b.get<double>();
  EXPECT_EQ(sum, 890);
  EXPECT_EQ(j["layer_details"][20]["kind"], "Full");
  EXPECT_EQ(j["layer_details"][20]["global_bytes_per_token"].get<double>(), 356);
  EXPECT_EQ(j["prefill_token_layers"]["new_tokens"].get<int64_t>(), 100000);
  // token_layers is the replay rule's bounded count: the paper's N·L/2 + w·L/2 (paper_ced) plus
  // layer 20's compressor-only rows (N − w); it used to be the paper's formula alone.
  const auto& pre = j["prefill_token_layers"];
  EXPECT_EQ(pre["paper_ced"].get<double>(), 100000.0 * 20 + 128 * 20);
  EXPECT_EQ(pre["token_layers"].get<double>(), 100000.0 * 20 + (100000 - 128) + 128 * 20);
  EXPECT_EQ(pre["bounded"]["total"].get<double>(), pre["token_layers"].get<double>());
  EXPECT_EQ(pre["bounded"]["effective"], "bounded");
  EXPECT_EQ(pre["exact"]["effective"], "exact");
  EXPECT_EQ(pre["exact"]["decoder"].get<int64_t>(), 127 * 210 + 20);  // Σ_{k=1..20} (127k + 1)
  EXPECT_EQ(pre["full_depth"].get<double>(), 100000.0 * 40);
  // Every operation names its operands and the rate they run at.
  bool experts_seen = false;
  for (const auto& op : j["decode_flops"][0]["operations"]) {
    EXPECT_TRUE(op["a"].is_string() && op["b"].is_string() && op["rate"].is_string()) << op.dump();
    if (op["op"] == "routed experts") {
      experts_seen = true;
      EXPECT_EQ(op["a"], "FP4");
      EXPECT_EQ(op["b"], "FP8");
      EXPECT_EQ(op["rate"], "FP8");
      EXPECT_EQ(op["rate_weight"].get<double>(), 0.5);
    }
    if (op["op"] == "index scoring") {
      EXPECT_EQ(op["rate"], "FP4");
    }
  }
  EXPECT_TRUE(experts_seen);
  ASSERT_EQ(j["decode_flops"].size(), default_contexts().size());
  EXPECT_EQ(j["decode_flops"][0]["context"].get<int64_t>(), 4096);
  EXPECT_EQ(j["decode_flops"][6]["context"].get<int64_t>(), 1 << 20);
  EXPECT_DOUBLE_EQ(j["decode_flops"][3]["weighted"].get<double>(), decode_flops(m, 131072).weighted());
  EXPECT_GE(j["records"].size(), 3u);
}

TEST(CostReport, ParseTokenCount) {
  EXPECT_EQ(*parse_token_count("4096"), 4096);
  EXPECT_EQ(*parse_token_count("4K"), 4096);
  EXPECT_EQ(*parse_token_count("128k"), 131072);
  EXPECT_EQ(*parse_token_count("1M"), 1 << 20);
  EXPECT_EQ(*parse_token_count("65,536"), 65536);
  for (const char* bad : {"", "K", "0", "-5", "4G", "4KK", "1.5M", "abc", "99999999999999999999"})
    EXPECT_FALSE(parse_token_count(bad).ok()) << bad;
  EXPECT_EQ(parse_token_count("2000000M").status().kind(), ErrorKind::kOutOfRange);
}

TEST(CostReport, ExplicitContexts) {
  CostQuery q;
  q.contexts = {1000, 2000};
  const auto text = format_cost_json(v41(), q);
  ASSERT_TRUE(text.ok());
  const auto j = nlohmann::json::parse(*text);
  ASSERT_EQ(j["decode_flops"].size(), 2u);
  EXPECT_EQ(j["decode_flops"][1]["context"].get<int64_t>(), 2000);
}

TEST(CostReport, TableShowsTheFourCosts) {
  const auto table = format_cost_table(v41(), CostQuery{});
  ASSERT_TRUE(table.ok());
  const std::string& t = *table;
  // The prefill line (N = 64K): full depth, bounded (0.526 with layer 20's compressor-only rows;
  // the paper's formula, 0.501, beside it; this test pinned 0.501 before issue 10 item 7) and
  // exact (0.534). The operation table names operands and rates.
  for (const char* s : {"890 B/token", "2.5 cache entries/token", "0.526 × full depth", "0.501 × full depth",
                        "0.534 × full depth", "exact (pyramid)", "1M", "Reindex", "288 B", "68 B", "528 B",
                        "source:", "routed experts", "FP4 × FP8", "FP8 0.5", "index scoring", "FP4 × FP4", "FP4 0.25"})
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
}

TEST(CostReport, BinaryPrintsOneJsonObject) {
  const std::string config = std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4-flash.json";
  auto [status, out] = testing::run_cli(
      "cost --config " + config + " --json --context 4K --context 1048576 --new-tokens 5000",
      testing::Stderr::kInherit);
  ASSERT_EQ(status, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["global_kv_bytes_per_token"].get<double>(), 3514.25);
  EXPECT_EQ(j["decode_flops"].size(), 2u);
  EXPECT_EQ(j["prefill_token_layers"]["token_layers"].get<double>(), 5000.0 * 43);
  EXPECT_EQ(j["prefill_token_layers"]["exact"]["total"].get<double>(), 5000.0 * 43);  // V4: no CED

  auto [table_status, table] = testing::run_cli("cost --config " + config, testing::Stderr::kInherit);
  EXPECT_EQ(table_status, 0);
  EXPECT_NE(table.find("3,514.25 B/token"), std::string::npos) << table;
}

TEST(CostReport, BinaryReportsErrors) {
  auto [status, out] = testing::run_cli("cost --config /nonexistent.json", testing::Stderr::kMerge);
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("/nonexistent.json"), std::string::npos) << out;
  auto [bad_status, bad] = testing::run_cli("cost --config x.json --context 4G", testing::Stderr::kMerge);
  EXPECT_EQ(bad_status, 2);
  EXPECT_NE(bad.find("4G"), std::string::npos) << bad;
  auto [usage_status, usage] = testing::run_cli("cost", testing::Stderr::kMerge);
  EXPECT_NE(usage_status, 0);
  EXPECT_NE(usage.find("--config"), std::string::npos) << usage;
}

}  // namespace
}  // namespace dsv41
