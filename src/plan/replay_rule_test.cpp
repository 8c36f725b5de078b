// The replay rule's per-layer ranges and token-layer counts (the formulas of replay_rule.h),
// on the V4.1-Flash plan and on a small plan.
#include "plan/replay_rule.h"

#include <gtest/gtest.h>

#include "format/config.h"

namespace dsv41 {
namespace {

LayerPlan flash_plan() {
  auto c = load_model_config(std::string(DSV41_SOURCE_DIR) + "/data/configs/deepseek-v4.1-flash.json");
  EXPECT_TRUE(c.ok());
  auto p = build_layer_plan(*c);
  EXPECT_TRUE(p.ok());
  return *p;
}

TEST(ReplayRule, ParsesDepthNames) {
  EXPECT_EQ(*parse_prefill_depth("bounded"), PrefillDepth::kBounded);
  EXPECT_EQ(*parse_prefill_depth("exact"), PrefillDepth::kExact);
  EXPECT_EQ(*parse_prefill_depth("full"), PrefillDepth::kFull);
  EXPECT_FALSE(parse_prefill_depth("deep").ok());
  EXPECT_STREQ(prefill_depth_name(PrefillDepth::kExact), "exact");
}

TEST(ReplayRule, FullDepthIsOneStepOfEveryLayer) {
  const LayerPlan p = flash_plan();
  auto plan = plan_prefill(p, 128, 4096, 0, false, PrefillDepth::kFull);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_TRUE(plan->steps[0].layers.empty());
  EXPECT_EQ(plan->work.full_depth, 4096 * 40);
  EXPECT_EQ(plan->work.encoder + plan->work.decoder, 4096 * 40);
}

TEST(ReplayRule, BoundedRunsTheDecoderOnTheLastWindowOnly) {
  const LayerPlan p = flash_plan();
  ASSERT_EQ(p.decoder_start, 20);
  const int64_t N = 4096, w = 128;
  auto plan = plan_prefill(p, w, N, 0, false, PrefillDepth::kBounded);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->effective, PrefillDepth::kBounded);
  ASSERT_EQ(plan->steps.size(), 1u);
  const auto& r = plan->steps[0].layers;
  for (int l = 0; l < 20; ++l) EXPECT_EQ(r[l].attend_from, 0) << l;
  EXPECT_EQ(r[20].input_from, 0);  // the decoder's global KV for every token
  for (int l = 20; l < 40; ++l) EXPECT_EQ(r[l].attend_from, N - w) << l;
  // system.md §1: N·L/2 + w·L/2 (+ the decoder source's compressor-only rows).
  EXPECT_EQ(plan->work.decoder, w * 20);
  EXPECT_EQ(plan->work.encoder, N * 20 + (N - w));
  EXPECT_EQ(plan->work.full_depth, N * 40);
  // A prompt no longer than the tail runs full depth.
  auto short_plan = plan_prefill(p, w, 100, 0, false, PrefillDepth::kBounded);
  EXPECT_EQ(short_plan->effective, PrefillDepth::kFull);
}

TEST(ReplayRule, ExactPyramidComesFromThePlan) {
  const LayerPlan p = flash_plan();
  const int64_t N = 16384, w = 128;
  auto plan = plan_prefill(p, w, N, 0, false, PrefillDepth::kExact);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->effective, PrefillDepth::kExact);
  const auto& r = plan->steps[0].layers;
  for (int l = 20; l < 40; ++l) EXPECT_EQ(r[l].attend_from, N - w - (39 - l) * (w - 1)) << l;
  EXPECT_EQ(N - r[20].attend_from, 20 * (w - 1) + 1);  // the V4.1 pyramid
  EXPECT_EQ(r[20].input_from, 0);
  // Short prompts: the pyramid reaches position 0, full depth.
  EXPECT_EQ(plan_prefill(p, w, 2000, 0, false, PrefillDepth::kExact)->effective, PrefillDepth::kFull);
}

TEST(ReplayRule, HitWithoutWindowsReplaysTheEncoder) {
  const LayerPlan p = flash_plan();
  const int64_t N = 8192, h = 4097, w = 128;  // h odd: the ratio-2 sources have a pending group
  auto bounded = plan_prefill(p, w, N, h, false, PrefillDepth::kBounded);
  ASSERT_TRUE(bounded.ok());
  ASSERT_EQ(bounded->steps.size(), 2u);
  EXPECT_TRUE(bounded->steps[0].replay);
  EXPECT_EQ(bounded->steps[0].begin, h - w);
  EXPECT_EQ(bounded->steps[0].end, h);
  EXPECT_EQ(bounded->work.replay, w * 20 + w);  // encoder layers + the decoder source's compressor
  auto exact = plan_prefill(p, w, N, h, false, PrefillDepth::kExact);
  ASSERT_TRUE(exact.ok());
  const auto& r = exact->steps[0].layers;
  // The decoder source (layer 20, ratio 1: no pending group) takes every new position: the top
  // encoder layer must be exact from h, so it runs from h − (w − 1); each layer below w − 1
  // earlier (the ratio-2 pending groups at h, position h − 1, are covered).
  EXPECT_EQ(r[20].input_from, h);
  EXPECT_EQ(r[19].attend_from, h - (w - 1));
  for (int l = 0; l < 19; ++l) EXPECT_EQ(r[l].attend_from, r[l + 1].attend_from - (w - 1)) << l;
  EXPECT_EQ(exact->steps[0].begin, r[0].attend_from);
  // With window state at h (a live sequence or a restored snapshot) nothing is replayed.
  auto live = plan_prefill(p, w, N, h, true, PrefillDepth::kBounded);
  ASSERT_EQ(live->steps.size(), 1u);
  EXPECT_EQ(live->work.replay, 0);
}

TEST(ReplayRule, RejectsImpossiblePrompts) {
  const LayerPlan p = flash_plan();
  EXPECT_FALSE(plan_prefill(p, 128, 10, 10, true, PrefillDepth::kBounded).ok());
  EXPECT_FALSE(plan_prefill(p, 128, 0, 0, true, PrefillDepth::kBounded).ok());
  EXPECT_FALSE(plan_prefill(p, 0, 10, 0, true, PrefillDepth::kBounded).ok());
  LayerPlan no_decoder = p;
  no_decoder.decoder_start = -1;
  EXPECT_EQ(plan_prefill(no_decoder, 128, 4096, 0, false, PrefillDepth::kBounded)->effective, PrefillDepth::kFull);
}

TEST(ReplayRule, APlanWithoutDecoderSaysWhyItRunsFull) {
  LayerPlan no_decoder = flash_plan();
  no_decoder.decoder_start = -1;
  for (PrefillDepth d : {PrefillDepth::kBounded, PrefillDepth::kExact}) {
    const std::string note = depth_fallback_note(no_decoder, d);
    EXPECT_NE(note.find("no decoder"), std::string::npos) << note;
    EXPECT_NE(note.find(prefill_depth_name(d)), std::string::npos) << note;
  }
  EXPECT_EQ(depth_fallback_note(no_decoder, PrefillDepth::kFull), "");
  EXPECT_EQ(depth_fallback_note(flash_plan(), PrefillDepth::kBounded), "");
}

}  // namespace
}  // namespace dsv41
