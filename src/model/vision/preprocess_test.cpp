// The image plan against values computed by a Python transcription of the release's
// plan_image_grid / safe_resize / solve_resize_ratio (model.md §3.10), the span bound on many
// sizes, the bicubic resize's invariants and hand-checked arithmetic, and the patch layout.
#include "model/vision/preprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "base/numerics.h"
#include "model/vision/pillow_resize.h"

namespace dsv41 {
namespace {

TEST(VisionPlan, MatchesTheReleaseRule) {
  // (w, h) → (tower w, tower h, n_llm_h, n_llm_w, span), from the Python transcription.
  const std::tuple<int, int, int, int, int, int, int> cases[] = {
      {1024, 1024, 1036, 1036, 25, 25, 652}, {100, 100, 546, 546, 13, 13, 184},
      {4000, 3000, 1512, 1134, 27, 36, 1001}, {3000, 4000, 1134, 1512, 36, 27, 1010},
      {10000, 10, 17206, 28, 1, 410, 413},    {10, 10000, 28, 17206, 410, 1, 822},
      {1920, 1080, 1708, 966, 23, 41, 968},   {1, 1, 546, 546, 13, 13, 184},
      {7, 3001, 28, 11270, 269, 1, 540},      {5000, 1, 38472, 14, 1, 916, 919},
  };
  for (auto [w, h, gw, gh, lh, lw, span] : cases) {
    auto g = plan_image_grid(w, h, {});
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(std::tuple(g->width, g->height, g->n_llm_h, g->n_llm_w, g->span_tokens()), std::tuple(gw, gh, lh, lw, span))
        << w << "x" << h;
    EXPECT_EQ(g->n_vit_w * 14, g->width);
    EXPECT_EQ(g->n_vit_h * 14, g->height);
  }
  EXPECT_FALSE(plan_image_grid(0, 5, {}).ok());
}

TEST(VisionPlan, EverySizeFitsTheSpan) {
  for (int w = 1; w < 9000; w += 37)
    for (int h = 1; h < 9000; h += 211) {
      auto g = plan_image_grid(w, h, {});
      ASSERT_TRUE(g.ok()) << w << "x" << h;
      ASSERT_LE(g->span_tokens(), 1024) << w << "x" << h;
      ASSERT_GT(g->n_llm_h, 0);
      ASSERT_GT(g->n_llm_w, 0);
    }
}

RgbImage filled(int w, int h, uint8_t r, uint8_t g, uint8_t b) {
  RgbImage im{w, h, std::vector<uint8_t>(size_t(w) * h * 3)};
  for (size_t i = 0; i < im.rgb.size(); i += 3) im.rgb[i] = r, im.rgb[i + 1] = g, im.rgb[i + 2] = b;
  return im;
}

TEST(PillowResize, ConstantStaysConstantAndSameSizeIsACopy) {
  const RgbImage c = filled(13, 7, 10, 200, 255);
  for (auto [w, h] : {std::pair{13, 7}, {40, 21}, {5, 3}, {13, 30}, {2, 7}}) {
    RgbImage out = pillow_resize_bicubic(c, w, h);
    ASSERT_EQ(out.rgb.size(), size_t(w) * h * 3);
    for (int i = 0; i < w * h; ++i) {
      EXPECT_EQ(out.rgb[size_t(i) * 3], 10);
      EXPECT_EQ(out.rgb[size_t(i) * 3 + 1], 200);
      EXPECT_EQ(out.rgb[size_t(i) * 3 + 2], 255);
    }
  }
}

TEST(PillowResize, HandCheckedStep) {
  // A 4-pixel row 0,0,255,255 widened to 8, worked by hand. Output x=3: centre (3+0.5)·0.5 = 1.75,
  // taps at input 0..3 with offsets
  // (i − 1.75 + 0.5) = −1.25, −0.25, 0.75, 1.75 → bicubic weights −0.0703125, 0.8671875,
  // 0.2265625, −0.0234375 (sum 1); value 255·(0.2265625 − 0.0234375) = 51.80 → 52.
  RgbImage row{4, 1, {0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255}};
  RgbImage out = pillow_resize_bicubic(row, 8, 1);
  EXPECT_EQ(out.rgb[3 * 3], 52);
  // Overshoot is clamped: the step's far sides stay 0 and 255.
  EXPECT_EQ(out.rgb[0], 0);
  EXPECT_EQ(out.rgb[7 * 3], 255);
  // Mirror symmetry: x and 7−x add to 255.
  for (int x = 0; x < 8; ++x) EXPECT_EQ(out.rgb[size_t(x) * 3] + out.rgb[size_t(7 - x) * 3], 255) << x;
}

TEST(PillowResize, PadCentresOnGrey) {
  const RgbImage c = filled(100, 50, 0, 0, 0);
  auto out = pillow_pad(c, 56, 56, 127);
  ASSERT_TRUE(out.ok());
  // 100×50 fits as 56×28, centred: rows 14..41 black, the rest grey.
  for (int y = 0; y < 56; ++y) {
    const uint8_t want = (y >= 14 && y < 42) ? 0 : 127;
    EXPECT_EQ(out->rgb[(size_t(y) * 56 + 20) * 3], want) << y;
  }
}

TEST(VisionPreprocess, PatchLayoutAndValues) {
  // A 546×546 image (no resize: already the planned size) with distinct channels.
  RgbImage im{546, 546, std::vector<uint8_t>(size_t(546) * 546 * 3)};
  for (int y = 0; y < 546; ++y)
    for (int x = 0; x < 546; ++x) {
      uint8_t* p = im.rgb.data() + (size_t(y) * 546 + x) * 3;
      p[0] = uint8_t(x), p[1] = uint8_t(y), p[2] = uint8_t(x + y);
    }
  auto v = preprocess_image(im, {});
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->grid.n_vit_h, 39);
  ASSERT_EQ(v->patches.size(), size_t(39 * 39 * 3 * 14 * 14));
  auto value = [](uint8_t px) { return round_to_bf16((float(px) / 255.0f - 0.5f) / 0.5f); };
  // Patch (row 2, col 5), channel 1 (G = y), pixel (row 3, col 4): y = 2·14 + 3.
  const size_t patch = size_t(2 * 39 + 5);
  EXPECT_EQ(v->patches[patch * 588 + 1 * 196 + 3 * 14 + 4], value(uint8_t(31)));
  EXPECT_EQ(v->patches[patch * 588 + 0 * 196 + 3 * 14 + 4], value(uint8_t(74)));   // R = x = 5·14 + 4
  EXPECT_EQ(v->patches[patch * 588 + 2 * 196 + 3 * 14 + 4], value(uint8_t(105)));  // B = x + y
  EXPECT_EQ(value(0), -1.0f);
  EXPECT_EQ(value(255), 1.0f);
}

}  // namespace
}  // namespace dsv41
