// `dsv41 vision` end to end: the fixture image written as a PNG goes through decoding,
// preprocessing, tower and aligner, and the dumped stages equal the PyTorch reference's
// (tests/fixtures/vision-micro; bounds as in vision_fixture_test.cpp). Bad inputs fail with a
// message naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "base/file_io.h"
#include "format/image_decode.h"
#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

using testing::CliResult;
using testing::GoldenFile;
using testing::run_cli;
using testing::Stderr;

const std::string kFixture = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vision-micro";
const std::string kTextOnly = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro";

class CliVision : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("dsv41_cli_vision_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    ASSERT_TRUE(write_file_atomic(path(name), bytes).ok());
  }
  std::filesystem::path dir_;
};

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return err / scale;
}

TEST_F(CliVision, PngThroughTheTowerMatchesTheReference) {
  GoldenFile golden(kFixture + "/golden.safetensors");
  ASSERT_TRUE(golden.ok());
  RgbImage im{70, 56, {}};
  for (float v : golden.get("image.pixels").f32) im.rgb.push_back(uint8_t(v));
  auto png = encode_png(im);
  ASSERT_TRUE(png.ok());
  write("in.png", *png);
  for (const char* mode : {"", " --scalar", " --threads 2"}) {
    CliResult r = run_cli("vision -m " + kFixture + " --image " + path("in.png") + " --dump-out " + path("d.safetensors") +
                              mode,
                          Stderr::kMerge);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("70x56 -> 70x56 pixels, 5x4 patches, 2x2 tokens, prompt span 8"), std::string::npos) << r.out;
    GoldenFile got(path("d.safetensors"));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.get("vision.patches").f32, golden.get("vision.patches").f32) << mode;
    EXPECT_EQ(got.get("vision.vit").shape, (std::vector<int64_t>{20, 32}));
    EXPECT_LE(rel_error(got.get("vision.vit").f32, golden.get("vision.vit").f32), 1e-4) << mode;
    EXPECT_EQ(got.get("vision.aligner").shape, (std::vector<int64_t>{4, 16}));
    EXPECT_LE(rel_error(got.get("vision.aligner").f32, golden.get("vision.aligner").f32), 1e-4) << mode;
  }
}

TEST_F(CliVision, BadInputsAreClearErrors) {
  auto png = encode_png(RgbImage{4, 4, std::vector<uint8_t>(48, 9)});
  ASSERT_TRUE(png.ok());
  write("ok.png", *png);
  // A text-only model (no vision_config).
  CliResult text = run_cli("vision -m " + kTextOnly + " --image " + path("ok.png"), Stderr::kMerge);
  EXPECT_NE(text.code, 0);
  EXPECT_NE(text.out.find("takes text only"), std::string::npos) << text.out;
  // Not an image; truncated; over the pixel limit.
  write("x.gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0});
  CliResult gif = run_cli("vision -m " + kFixture + " --image " + path("x.gif"), Stderr::kMerge);
  EXPECT_NE(gif.code, 0);
  EXPECT_NE(gif.out.find("only PNG and JPEG"), std::string::npos) << gif.out;
  write("cut.png", std::vector<uint8_t>(png->begin(), png->begin() + long(png->size() / 2)));
  CliResult cut = run_cli("vision -m " + kFixture + " --image " + path("cut.png"), Stderr::kMerge);
  EXPECT_NE(cut.code, 0);
  EXPECT_NE(cut.out.find("cut.png"), std::string::npos) << cut.out;
  CliResult big = run_cli("vision -m " + kFixture + " --image " + path("ok.png") + " --max-image-pixels 15", Stderr::kMerge);
  EXPECT_NE(big.code, 0);
  EXPECT_NE(big.out.find("4x4 = 16 pixels"), std::string::npos) << big.out;
}

}  // namespace
}  // namespace dsv41
