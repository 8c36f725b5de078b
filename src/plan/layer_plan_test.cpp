// Tests for the layer plan: the tiny fixture's and V4.1-Flash's roles exactly as the golden
// README and model.md §3.4/§3.5 list them, and every inconsistent schedule rejected with a reason.
#include "plan/layer_plan.h"

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kGolden = DSV41_GOLDEN_DIR;
const std::string kFlashConfig = std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4.1-flash.json";

ModelConfig load(const std::string& path) {
  auto c = load_model_config(path);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

// One expected row: role, ratio, kv source, index source, candidate source, restricted, engram slot.
struct Row {
  LayerRole role;
  int ratio, kv, idx;
  bool cand, restricted;
  int engram;
};

void expect_plan(const LayerPlan& plan, const std::vector<Row>& rows, int decoder_start) {
  ASSERT_EQ(plan.layers.size(), rows.size());
  EXPECT_EQ(plan.decoder_start, decoder_start);
  for (size_t l = 0; l < rows.size(); ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const LayerInfo& got = plan.layers[l];
    const Row& want = rows[l];
    EXPECT_EQ(got.index, int(l));
    EXPECT_EQ(got.role, want.role) << layer_role_name(got.role);
    EXPECT_EQ(got.ratio, want.ratio);
    EXPECT_EQ(got.kv_source, want.kv);
    EXPECT_EQ(got.index_source, want.idx);
    EXPECT_EQ(got.candidate_source, want.cand);
    EXPECT_EQ(got.restricted_to_candidates, want.restricted);
    EXPECT_EQ(got.has_engram, want.engram >= 0);
    EXPECT_EQ(got.engram_slot, want.engram);
    EXPECT_EQ(got.half, int(l) >= decoder_start ? ModelHalf::kDecoder : ModelHalf::kEncoder);
    EXPECT_EQ(got.rope, want.ratio > 0 ? RopeKind::kCompress : RopeKind::kMain);
  }
}

constexpr LayerRole S = LayerRole::kSwaOnly, F = LayerRole::kFull, X = LayerRole::kReindex, U = LayerRole::kReuse;

// golden/README.md "The tiny config": 0-1 SWA only; 2 and 4 Full (ratio 2); 3, 5 Reuse;
// 6 Full (ratio 1, candidate source); 7, 9, 11 Reuse; 8, 10 Reindex (restricted); Engram 1, 4.
const std::vector<Row> kTinyRows = {
    {S, 0, -1, -1, false, false, -1}, {S, 0, -1, -1, false, false, 0}, {F, 2, 2, 2, false, false, -1},
    {U, 2, 2, 2, false, false, -1},   {F, 2, 4, 4, false, false, 1},   {U, 2, 4, 4, false, false, -1},
    {F, 1, 6, 6, true, false, -1},    {U, 1, 6, 6, false, false, -1},  {X, 1, 6, 8, false, true, -1},
    {U, 1, 6, 8, false, false, -1},   {X, 1, 6, 10, false, true, -1},  {U, 1, 6, 10, false, false, -1},
};

TEST(LayerPlanTest, TinyFixtureRoles) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* path : {"/v41-tiny-f32", "/v41-tiny-f32/official", "/v41-tiny-bf16"}) {
    SCOPED_TRACE(path);
    auto plan = build_layer_plan(load(kGolden + path));
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    expect_plan(*plan, kTinyRows, 6);
    EXPECT_DOUBLE_EQ(plan->global_entries_per_token(), 2.0);  // 1/2 + 1/2 + 1/1
  }
}

// model.md §3.4: SWA 0-1; Full 2, 8, 14 (ratio 2) and 20 (ratio 1, candidate source); Reindex
// 24, 28, 32, 36 (restricted); Reuse the rest. §3.5: decoder 20-39. Engram on 1 and 14.
TEST(LayerPlanTest, FlashRoles) {
  std::vector<Row> rows;
  int kv = -1, idx = -1;
  for (int l = 0; l < 40; ++l) {
    Row r{S, 0, -1, -1, false, false, -1};
    if (l >= 2) r.ratio = l < 20 ? 2 : 1;
    const bool full = l == 2 || l == 8 || l == 14 || l == 20;
    const bool reindex = l == 24 || l == 28 || l == 32 || l == 36;
    if (full) kv = idx = l;
    if (reindex) idx = l;
    if (l >= 2) {
      r.role = full ? F : reindex ? X : U;
      r.kv = kv;
      r.idx = idx;
    }
    r.cand = l == 20;
    r.restricted = reindex;
    r.engram = l == 1 ? 0 : l == 14 ? 1 : -1;
    rows.push_back(r);
  }
  // Spot-check the generated table against the spec's own wording.
  EXPECT_EQ(rows[7].kv, 2);
  EXPECT_EQ(rows[19].kv, 14);
  EXPECT_EQ(rows[39].kv, 20);
  EXPECT_EQ(rows[39].idx, 36);
  EXPECT_EQ(rows[23].idx, 20);

  auto plan = build_layer_plan(load(kFlashConfig));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  expect_plan(*plan, rows, 20);
  EXPECT_DOUBLE_EQ(plan->global_entries_per_token(), 2.5);  // 3 × 1/2 + 1

  // The default config is the Flash text config, so it plans the same way.
  auto defaults = build_layer_plan(ModelConfig{});
  ASSERT_TRUE(defaults.ok());
  expect_plan(*defaults, rows, 20);
}

TEST(LayerPlanTest, FormatIsAFixedWidthTable) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto plan = build_layer_plan(load(kGolden + "/v41-tiny-f32"));
  ASSERT_TRUE(plan.ok());
  std::string text = format_layer_plan(*plan);
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1 + 12 + 2u);
  for (int i = 1; i <= 12; ++i) EXPECT_EQ(lines[i].size(), lines[0].size()) << lines[i];
  EXPECT_NE(lines[0].find("role"), std::string::npos);
  EXPECT_NE(lines[1 + 8].find("Reindex"), std::string::npos);
  EXPECT_NE(lines[1 + 8].find("restricted"), std::string::npos);
  EXPECT_NE(lines[1 + 6].find("source"), std::string::npos);
  EXPECT_NE(lines[1 + 0].find("SWA-only"), std::string::npos);
  EXPECT_NE(lines[1 + 4].find("Full"), std::string::npos);
  EXPECT_NE(text.find("decoder starts at layer 6"), std::string::npos);
  EXPECT_NE(text.find("global compressed entries per token: 2"), std::string::npos);
}

TEST(LayerPlanTest, NoCandidateSourceAndNoCompression) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  ModelConfig c = load(kGolden + "/v41-tiny-f32");
  c.candidate_source_layer_id = -1;
  auto plan = build_layer_plan(c);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const LayerInfo& l : plan->layers) {
    EXPECT_FALSE(l.candidate_source);
    EXPECT_FALSE(l.restricted_to_candidates);
  }

  // A pure sliding-window model: every layer SWA-only, no CED split, no global cache.
  c.compress_ratios.assign(12, 0);
  c.kv_source_layer_ids.clear();
  c.index_source_layer_ids.clear();
  auto swa = build_layer_plan(c);
  ASSERT_TRUE(swa.ok()) << swa.status().to_string();
  EXPECT_EQ(swa->decoder_start, -1);
  EXPECT_EQ(swa->global_entries_per_token(), 0.0);
  for (const LayerInfo& l : swa->layers) {
    EXPECT_EQ(l.role, LayerRole::kSwaOnly);
    EXPECT_EQ(l.half, ModelHalf::kEncoder);
    EXPECT_EQ(l.rope, RopeKind::kMain);
  }
  EXPECT_NE(format_layer_plan(*swa).find("no encoder/decoder split"), std::string::npos);
}

// Each broken schedule (a change to the tiny config) and the words its reason must contain.
TEST(LayerPlanTest, RejectsInconsistentSchedules) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const ModelConfig tiny = load(kGolden + "/v41-tiny-f32");
  struct Case {
    const char* what;
    void (*edit)(ModelConfig&);
    const char* expect;
  } cases[] = {
      {"kv source with ratio 0", [](ModelConfig& c) { c.compress_ratios[2] = 0; },
       "kv_source_layer_ids: layer 2 has compress ratio 0"},
      {"index source with ratio 0", [](ModelConfig& c) { c.index_source_layer_ids = {1, 2, 4, 6, 8, 10}; },
       "index_source_layer_ids: layer 1 has compress ratio 0"},
      {"compressed layer before any Full layer", [](ModelConfig& c) { c.compress_ratios[1] = 2; },
       "compress_ratios: layer 1 (Reuse, ratio 2) has no earlier kv source"},
      {"Reuse layer after a Full layer of another ratio", [](ModelConfig& c) { c.compress_ratios[5] = 1; },
       "compress_ratios: layer 5 (Reuse, ratio 1) would read the cache of kv source 4, whose ratio is 2"},
      {"Reindex layer after a Full layer of another ratio",
       [](ModelConfig& c) {
         c.compress_ratios[5] = 1;
         c.index_source_layer_ids = {2, 4, 5, 6, 8, 10};
       },
       "index_source_layer_ids: layer 5 (Reindex, ratio 1) would read the cache of kv source 4, whose ratio is 2"},
      {"Reindex layer before any Full layer",
       [](ModelConfig& c) {
         c.compress_ratios[1] = 2;
         c.index_source_layer_ids = {1, 2, 4, 6, 8, 10};
       },
       "index_source_layer_ids: layer 1 (Reindex, ratio 2) has no earlier kv source"},
      {"kv source without its own indexer", [](ModelConfig& c) { c.index_source_layer_ids = {4, 6, 8, 10}; },
       "kv_source_layer_ids: layer 2 is not in index_source_layer_ids"},
      {"candidate source not a kv source", [](ModelConfig& c) { c.candidate_source_layer_id = 8; },
       "candidate_source_layer_id: layer 8 is not a kv source"},
      {"candidate source SWA-only", [](ModelConfig& c) { c.candidate_source_layer_id = 0; },
       "candidate_source_layer_id: layer 0 is not a kv source"},
      {"kv source after the candidate source", [](ModelConfig& c) { c.candidate_source_layer_id = 4; },
       "kv_source_layer_ids: layer 6 publishes a new cache after the candidate source (layer 4)"},
      {"candidate source out of range", [](ModelConfig& c) { c.candidate_source_layer_id = 12; },
       "candidate_source_layer_id: layer 12 out of range"},
      {"duplicate kv source", [](ModelConfig& c) { c.kv_source_layer_ids = {2, 2, 4, 6}; },
       "kv_source_layer_ids: layer 2 listed twice"},
      {"unsorted index sources", [](ModelConfig& c) { c.index_source_layer_ids = {2, 4, 6, 10, 8}; },
       "index_source_layer_ids: not in increasing order (layer 8 after 10)"},
      {"duplicate Engram layer", [](ModelConfig& c) { c.engram_layer_ids = {4, 4}; },
       "engram_layer_ids: layer 4 listed twice"},
      {"unsorted Engram layers", [](ModelConfig& c) { c.engram_layer_ids = {4, 1}; },
       "engram_layer_ids: not in increasing order"},
      {"layer id out of range", [](ModelConfig& c) { c.kv_source_layer_ids = {2, 4, 6, 12}; },
       "kv_source_layer_ids: layer 12 (entry 3) out of range"},
      {"negative layer id", [](ModelConfig& c) { c.engram_layer_ids = {-1, 4}; },
       "engram_layer_ids: layer -1 (entry 0) out of range"},
      {"compress_ratios too short", [](ModelConfig& c) { c.compress_ratios.resize(11); },
       "compress_ratios: has 11 entries, fewer than num_hidden_layers 12"},
      {"negative ratio", [](ModelConfig& c) { c.compress_ratios[3] = -2; }, "compress_ratios: entry 3 is negative"},
      {"no layers", [](ModelConfig& c) { c.num_hidden_layers = 0; }, "num_hidden_layers: must be positive"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    ModelConfig config = tiny;
    c.edit(config);
    auto plan = build_layer_plan(config);
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.status().message().find(c.expect), std::string::npos) << plan.status().message();
  }
}

}  // namespace
}  // namespace dsv41
