// The C++ preprocessing, vision tower and aligner against the PyTorch reference on the
// repository's fixture tests/fixtures/vision-micro (reference/make_vision_fixture.py: random
// weights, width 32, 2 layers, one 70×56 image).
//
// Bounds. Patches: bit-exact (the same float32 formula, then BF16 rounding; the image is already
// the planned size, so no resize is involved). Tower and aligner: both sides compute in float32
// from the same BF16/F32 weights and differ only in summation order (the C++ reference sums in
// double), ~1e-6 of the output scale after two blocks; the bound max|Δ| ≤ 1e-4 · max|ref| is 100×
// that and far below what any real mistake gives (a wrong RoPE pairing, unfold order or GELU
// form moves outputs by 1e-2 or more of the scale; checked by hand while writing this).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "format/config.h"
#include "format/safetensors.h"
#include "model/vision/preprocess.h"
#include "model/vision/vision_tower.h"
#include "model/vision/vision_weights.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

using testing::GoldenFile;
using testing::GoldenTensor;

const std::string kDir = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vision-micro";
constexpr double kRelBound = 1e-4;

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return err / scale;
}

struct Fixture {
  ModelConfig config;
  GoldenFile golden{kDir + "/golden.safetensors"};
};

Fixture load() {
  Fixture f;
  auto c = load_model_config(kDir + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c.ok()) f.config = *c;
  EXPECT_TRUE(f.golden.ok());
  return f;
}

TEST(VisionFixture, PreprocessingGivesTheReferencePatches) {
  Fixture f = load();
  ASSERT_TRUE(f.config.vision.has_value());
  const GoldenTensor px = f.golden.get("image.pixels");
  ASSERT_EQ(px.shape, (std::vector<int64_t>{56, 70, 3}));
  RgbImage im{70, 56, {}};
  for (float v : px.f32) im.rgb.push_back(uint8_t(v));
  auto in = preprocess_image(im, preprocess_config(*f.config.vision));
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  EXPECT_EQ(in->grid.n_vit_h, 4);
  EXPECT_EQ(in->grid.n_vit_w, 5);
  EXPECT_EQ(in->grid.span_tokens(), 2 * 3 + 2);
  EXPECT_EQ(in->patches, f.golden.get("vision.patches").f32);
}

TEST(VisionFixture, TowerAndAlignerMatchTheReference) {
  Fixture f = load();
  ASSERT_TRUE(f.config.vision.has_value());
  auto ts = TensorSet::open(kDir + "/model.safetensors");
  ASSERT_TRUE(ts.ok()) << ts.status().to_string();
  auto w = load_vision_weights(*ts, *f.config.vision, f.config.hidden_size);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const std::vector<float> patches = f.golden.get("vision.patches").f32;
  std::vector<float> block0;
  const std::vector<float> vit = vit_forward_reference(*w, patches, 4, 5, &block0);
  const GoldenTensor want_vit = f.golden.get("vision.vit");
  ASSERT_EQ(vit.size(), want_vit.f32.size());
  EXPECT_LE(rel_error(block0, f.golden.get("vision.block0").f32), kRelBound);
  EXPECT_LE(rel_error(vit, want_vit.f32), kRelBound);
  const std::vector<float> tokens = aligner_forward_reference(*w, vit, 4, 5);
  const GoldenTensor want_tok = f.golden.get("vision.aligner");
  ASSERT_EQ(want_tok.shape, (std::vector<int64_t>{4, 16}));
  ASSERT_EQ(tokens.size(), want_tok.f32.size());
  EXPECT_LE(rel_error(tokens, want_tok.f32), kRelBound);
  // The bound is not vacuous: the aligner of slightly different features is far outside it.
  std::vector<float> nudged = vit;
  nudged[0] += 0.05f;
  EXPECT_GT(rel_error(aligner_forward_reference(*w, nudged, 4, 5), want_tok.f32), 10 * kRelBound);
}

TEST(VisionFixture, TextOnlyWeightsAreRefusedClearly) {
  Fixture f = load();
  ASSERT_TRUE(f.config.vision.has_value());
  auto text_only = TensorSet::open(std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro/model.safetensors");
  ASSERT_TRUE(text_only.ok());
  auto w = load_vision_weights(*text_only, *f.config.vision, f.config.hidden_size);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("no vision tower"), std::string::npos) << w.status().message();
  // A tower whose config disagrees with the stored shapes names the tensor.
  VisionConfig wider = *f.config.vision;
  wider.intermediate_size += 1;
  auto ts = TensorSet::open(kDir + "/model.safetensors");
  ASSERT_TRUE(ts.ok());
  auto bad = load_vision_weights(*ts, wider, f.config.hidden_size);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vision.blocks.0.mlp.w1.weight"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace dsv41
