// Images through `dsv41 logits --image` and `dsv41 run --image` (issue 16) on
// tests/fixtures/vl-micro (reference/make_vl_fixture.py): the fixture prompt's ids with its image
// as a PNG give the reference's logits (bounds of vl_fixture_test.cpp), `--dump vision` writes the
// image's stages, a span of the wrong length or a text-only model is a clear error, and `run`
// places the image before the text and generates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "base/file_io.h"
#include "format/image_decode.h"
#include "runtime/token_ids.h"
#include "tests/cli_runner.h"
#include "tests/golden_file.h"

#include <nlohmann/json.hpp>

namespace dsv41 {
namespace {

using testing::CliResult;
using testing::GoldenFile;
using testing::run_cli;
using testing::Stderr;

const std::string kVl = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vl-micro";
const std::string kTextOnly = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro";

class CliImagePrompt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("dsv41_cli_image_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    golden_ = std::make_unique<GoldenFile>(kVl + "/golden.safetensors");
    ASSERT_TRUE(golden_->ok());
    RgbImage im{70, 56, {}};
    for (float v : golden_->get("image.pixels").f32) im.rgb.push_back(uint8_t(v));
    auto png = encode_png(im);
    ASSERT_TRUE(png.ok());
    ASSERT_TRUE(write_file_atomic(path("im.png"), *png).ok());
    for (int64_t t : golden_->get("vl.input_ids").i64) ids_.push_back(int32_t(t));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string ids_text(const std::vector<int32_t>& ids) const { return format_token_ids(ids); }
  std::filesystem::path dir_;
  std::unique_ptr<GoldenFile> golden_;
  std::vector<int32_t> ids_;
};

TEST_F(CliImagePrompt, LogitsWithImagesMatchTheReference) {
  const std::string img = " --image " + path("im.png");
  for (const std::string extra : {"", " --chunk 5", " --decode-from 30"}) {
    CliResult r = run_cli("logits -m " + kVl + " --ids " + ids_text(ids_) + img + img + " --depth full --out " +
                              path("l.safetensors") + extra + " --dump vision --dump-out " + path("v.safetensors"),
                          Stderr::kMerge);
    ASSERT_EQ(r.code, 0) << r.out;
    GoldenFile got(path("l.safetensors"));
    ASSERT_TRUE(got.ok());
    const auto g = got.get("logits").f32, w = golden_->get("vl.logits").f32;
    ASSERT_EQ(g.size(), w.size()) << extra;
    double err = 0, scale = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      err = std::max(err, std::fabs(double(g[i]) - w[i]));
      scale = std::max(scale, std::fabs(double(w[i])));
    }
    EXPECT_LE(err / scale, 2e-2) << extra;  // every row within vl_fixture_test's per-row bound
    GoldenFile vision(path("v.safetensors"));
    ASSERT_TRUE(vision.ok()) << extra;
    EXPECT_EQ(vision.get("vision.patches").shape, (std::vector<int64_t>{20, 3, 14, 14}));
    EXPECT_EQ(vision.get("vision.vit").shape, (std::vector<int64_t>{20, 32}));
    EXPECT_EQ(vision.get("vision.aligner").shape, (std::vector<int64_t>{4, 16}));
    EXPECT_TRUE(vision.get("vision.1.aligner").present());
  }
}

// After a global hit that ends inside the first span (15) or after it (20), --depth exact
// replays the windows over the image rows: the last row is the reference's.
TEST_F(CliImagePrompt, HitsThatCutTheImagesReplayThemExactly) {
  const std::string img = " --image " + path("im.png");
  const auto w = golden_->get("vl.logits").f32;
  const size_t V = w.size() / ids_.size();
  for (const std::string hit : {"15", "20"}) {
    CliResult r = run_cli("logits -m " + kVl + " --ids " + ids_text(ids_) + img + img + " --hit " + hit +
                              " --depth exact --out " + path("h.safetensors"),
                          Stderr::kMerge);
    ASSERT_EQ(r.code, 0) << r.out;
    GoldenFile got(path("h.safetensors"));
    const auto g = got.get("last_logits").f32;
    ASSERT_EQ(g.size(), V);
    double err = 0, scale = 0;
    for (size_t v = 0; v < V; ++v) {
      err = std::max(err, std::fabs(double(g[v]) - w[w.size() - V + v]));
      scale = std::max(scale, std::fabs(double(w[w.size() - V + v])));
    }
    EXPECT_LE(err / scale, 1e-4) << "--hit " << hit;  // measured 6e-7
  }
}

TEST_F(CliImagePrompt, SpanOfTheWrongLengthOrNoVisionIsAClearError) {
  std::vector<int32_t> short_span = ids_;
  const int32_t img = 305;  // the fixture's image_token_id (<｜deepseek_image｜>)
  short_span.erase(std::find(short_span.begin(), short_span.end(), img));  // first span: 7 positions
  CliResult r = run_cli("logits -m " + kVl + " --ids " + ids_text(short_span) + " --image " + path("im.png") +
                            " --image " + path("im.png") + " --out " + path("l.safetensors"),
                        Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("needs a span of 8 image tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hold 7"), std::string::npos) << r.out;
  // Image tokens without --image.
  r = run_cli("logits -m " + kVl + " --ids " + ids_text(ids_) + " --out " + path("l.safetensors"), Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("all 0 image(s) are placed"), std::string::npos) << r.out;
  // A text-only model.
  r = run_cli("logits -m " + kTextOnly + " --ids 0,5,6 --image " + path("im.png") + " --out " + path("l.safetensors"),
              Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("takes text only"), std::string::npos) << r.out;
  r = run_cli("run -m " + kTextOnly + " -p hello -n 2 --image " + path("im.png"), Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("takes text only"), std::string::npos) << r.out;
}

TEST_F(CliImagePrompt, RunPlacesTheImageAndGenerates) {
  // The image before the text (no placeholder given) and an explicit placeholder before the same
  // text are one prompt: the same greedy tokens.
  CliResult a = run_cli("run -m " + kVl + " -p 'Look at this' -n 4 --ignore-eos --print-ids --image " + path("im.png"),
                        Stderr::kDiscard);
  ASSERT_EQ(a.code, 0) << a.out;
  CliResult b = run_cli("run -m " + kVl + " -p '<｜deepseek_image｜>Look at this' -n 4 --ignore-eos --print-ids --image " +
                            path("im.png"),
                        Stderr::kDiscard);
  ASSERT_EQ(b.code, 0) << b.out;
  auto last_line = [](const std::string& s) {
    std::string t = s;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    return t.substr(t.rfind('\n') + 1);
  };
  const std::string ids_a = last_line(a.out);
  EXPECT_EQ(ids_a, last_line(b.out));
  EXPECT_EQ(std::count(ids_a.begin(), ids_a.end(), ','), 3) << a.out;
  // The prompt held the span: 1 BOS + 8 image positions + the text's tokens.
  EXPECT_NE(a.out.find("prefill: 19 tokens"), std::string::npos) << a.out;
  // Two placeholders for one image: an error naming both counts.
  CliResult c = run_cli("run -m " + kVl + " -p '<｜deepseek_image｜><｜deepseek_image｜>x' -n 1 --image " + path("im.png"),
                        Stderr::kMerge);
  EXPECT_NE(c.code, 0);
  EXPECT_NE(c.out.find("2 image placeholder(s)"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("1 image(s) were given"), std::string::npos) << c.out;
}

// The SSD prefix cache keys each image by its content (issue 16): a prompt differing only in
// the image's bytes shares the chunks before the image and none after; the same image hits on;
// a hit (windows replayed exactly across the image positions: --depth exact computes full
// depth's function) generates what the cold run does.
TEST_F(CliImagePrompt, CacheKeysTellImagesApart) {
  RgbImage other{70, 56, {}};
  for (float v : golden_->get("image.pixels").f32) other.rgb.push_back(uint8_t(255 - int(v)));
  auto png = encode_png(other);
  ASSERT_TRUE(png.ok());
  ASSERT_TRUE(write_file_atomic(path("other.png"), *png).ok());
  // BOS + 10 text tokens, the span at 11..18, one more token: 20 positions, chunks of 4.
  auto run = [&](const std::string& image, const std::string& cache, const std::string& tag) {
    const std::string cmd = "run -m " + kVl + " -p 'Look at this<｜deepseek_image｜>.' -n 3 --ignore-eos --print-ids --depth exact --image " +
                            path(image) + (cache.empty() ? "" : " --cache-dir " + path(cache) + " --cache-chunk 4") +
                            " --telemetry " + path(tag + ".json");
    CliResult r = run_cli(cmd, Stderr::kDiscard);
    EXPECT_EQ(r.code, 0) << r.out;
    std::string t = r.out;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    auto tele = read_file(path(tag + ".json"));
    EXPECT_TRUE(tele.ok());
    const auto j = nlohmann::json::parse(tele.ok() ? *tele : std::string("{}"));
    return std::make_pair(t.substr(t.rfind('\n') + 1), j.value("global_hit_tokens", int64_t(-1)));
  };
  const auto cold_a = run("im.png", "", "cold_a");
  const auto cold_b = run("other.png", "", "cold_b");
  EXPECT_EQ(run("im.png", "store", "a1").second, 0);
  const auto b = run("other.png", "store", "b");
  EXPECT_EQ(b.second, 8);             // chunks [0, 4) and [4, 8): text before the image
  EXPECT_EQ(b.first, cold_b.first);   // after an 8-token hit: what the cold run generates
  const auto a2 = run("im.png", "store", "a2");
  EXPECT_EQ(a2.second, 16);           // (20 − 1) / 4 whole chunks: the image's chunks hit too
  EXPECT_EQ(a2.first, cold_a.first);
}

}  // namespace
}  // namespace dsv41
