#include "model/inventory.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kGolden = DSV41_GOLDEN_DIR;

TEST(Inventory, FamiliesFromReleaseNames) {
  EXPECT_EQ(weight_family_of("layers.3.ffn.experts.17.w2.weight"), WeightFamily::kExperts);
  EXPECT_EQ(weight_family_of("layers.3.ffn.shared_experts.w2.weight"), WeightFamily::kBackbone);
  EXPECT_EQ(weight_family_of("layers.1.engram.embed.weight"), WeightFamily::kEngram);
  EXPECT_EQ(weight_family_of("mtp.0.attn.wq_a.weight"), WeightFamily::kDrafter);
  EXPECT_EQ(weight_family_of("vision.blocks.0.attn.wqkv.weight"), WeightFamily::kVision);
  EXPECT_EQ(weight_family_of("image_newline"), WeightFamily::kVision);
  EXPECT_EQ(weight_family_of("head.weight"), WeightFamily::kBackbone);
}

// The checkpoint's own headers and the config's expectations count the same parameters, for
// both naming schemes.
TEST(Inventory, GoldenCheckpointMatchesConfigExpectation) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* sub : {"/v41-tiny-f32", "/v41-tiny-f32/official", "/v41-tiny-bf16"}) {
    SCOPED_TRACE(sub);
    Result<ModelConfig> config = load_model_config(kGolden + sub);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    Result<LayerPlan> plan = build_layer_plan(*config);
    ASSERT_TRUE(plan.ok());
    Result<WeightRegistry> weights = WeightRegistry::open(kGolden + sub);
    ASSERT_TRUE(weights.ok()) << weights.status().to_string();
    WeightInventory have = inventory_of(*weights);
    WeightInventory want = expected_inventory(*config, *plan);
    for (int i = 0; i < kNumWeightFamilies; ++i) {
      EXPECT_EQ(have.family[i].parameters, want.family[i].parameters) << weight_family_name(static_cast<WeightFamily>(i));
    }
    EXPECT_GT(have.family[static_cast<int>(WeightFamily::kExperts)].parameters, 0);
    EXPECT_GT(have.family[static_cast<int>(WeightFamily::kEngram)].parameters, 0);
    EXPECT_GT(have.total().bytes, 4 * have.total().parameters / 2);  // f32 or bf16 storage
  }
}

// model.md §1.2 / system.md §1: V4.1-Flash costs 890 B/token of global KV: 3 ratio-2 sources and
// one ratio-1 source, each (288 + 68) B per entry.
TEST(Inventory, FlashCacheBytes) {
  Result<ModelConfig> config = load_model_config(std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4.1-flash.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  Result<LayerPlan> plan = build_layer_plan(*config);
  ASSERT_TRUE(plan.ok());
  CacheBytes c = cache_bytes(*config, *plan);
  EXPECT_DOUBLE_EQ(c.global_per_token(), 890.0);
  EXPECT_DOUBLE_EQ(c.global_main_per_token, 288.0 * 2.5);
  EXPECT_EQ(c.window_per_sequence, 40 * 128 * 528);
  // Routed experts dominate the Flash backbone: 40 layers x 384 experts x 3 x 2304 x 5120.
  WeightInventory want = expected_inventory(*config, *plan);
  EXPECT_EQ(want.family[static_cast<int>(WeightFamily::kExperts)].parameters, 40LL * 384 * 3 * 2304 * 5120);
}

}  // namespace
}  // namespace dsv41
