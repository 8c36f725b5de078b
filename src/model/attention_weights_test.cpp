// Attention weights through the weight registry, both naming schemes of the golden fixture.
#include <gtest/gtest.h>

#include <string>

#include "format/config.h"
#include "model/attention.h"
#include "plan/layer_plan.h"
#include "model/weights.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kF32 = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

TEST(AttentionWeightsLoad, BothNamingSchemesGiveTheSameTensors) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto config = load_model_config(kF32);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto plan = build_layer_plan(*config);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto hf = WeightRegistry::open(kF32);
  auto official = WeightRegistry::open(kF32 + "/official");
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  ASSERT_TRUE(official.ok()) << official.status().to_string();
  for (const LayerInfo& layer : plan->layers) {
    auto a = load_attention_weights(*hf, *config, layer);
    auto b = load_attention_weights(*official, *config, layer);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_TRUE(check_attention_weights(*a, *config, layer).ok());
    EXPECT_EQ(a->wq_b, b->wq_b);
    EXPECT_EQ(a->wo_a, b->wo_a);
    EXPECT_EQ(a->attn_sink, b->attn_sink);
    EXPECT_EQ(a->compressor_wgate, b->compressor_wgate);
    EXPECT_EQ(a->indexer_weights_proj, b->indexer_weights_proj);
    EXPECT_EQ(a->compressor_wkv.empty(), layer.role != LayerRole::kFull) << layer.index;
    EXPECT_EQ(a->indexer_wq_b.empty(), layer.role != LayerRole::kFull && layer.role != LayerRole::kReindex);
  }
}

TEST(AttentionWeightsLoad, Bf16FixtureWidensExactly) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string bf16 = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-bf16";
  auto config = load_model_config(bf16);
  ASSERT_TRUE(config.ok());
  auto plan = build_layer_plan(*config);
  ASSERT_TRUE(plan.ok());
  auto reg = WeightRegistry::open(bf16);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  auto w = load_attention_weights(*reg, *config, plan->layers[6]);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->compressor_wgate.size(), 0u);  // ratio 1
  EXPECT_EQ(static_cast<int64_t>(w->wq_a.size()), int64_t{config->q_lora_rank} * config->hidden_size);
}

TEST(AttentionWeightsLoad, MissingTensorIsNamed) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto config = load_model_config(kF32);
  ASSERT_TRUE(config.ok());
  auto plan = build_layer_plan(*config);
  ASSERT_TRUE(plan.ok());
  auto reg = WeightRegistry::open(kF32);
  ASSERT_TRUE(reg.ok());
  // Claim layer 0 is a Full layer: its compressor tensors do not exist.
  LayerInfo fake = plan->layers[0];
  fake.role = LayerRole::kFull;
  fake.ratio = 2;
  auto w = load_attention_weights(*reg, *config, fake);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("layers.0.attn.compressor"), std::string::npos) << w.status().message();
}

}  // namespace
}  // namespace dsv41
