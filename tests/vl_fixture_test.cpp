// Image tokens in the backbone against the PyTorch reference on tests/fixtures/vl-micro
// (reference/make_vl_fixture.py: the v41-micro text model with a random bias_vl, the vision-micro
// tower, a 35-token prompt holding the same 70×56 image twice, text after each span). Checks the
// engine's image rows (embedding replaced, bias_vl routing, Engram gate off and n-gram look-back
// stopped at span positions; model.md §3.1, §3.7, §3.8, §3.10), from the reference's span rows
// and end to end from a PNG, in one prefill, in chunks that cut the spans, and in greedy decode
// after the prompt (whose look-back starts inside the second span).
//
// Bounds: those of fixture_forward_test.cpp (the same engine and reference arithmetic; per row
// max|Δ| / max|ref|: median ≤ 1e-4, every row ≤ 2e-2, argmax equal unless a near-tie). Each
// image feature alone moves the logits by far more: with bias_vl zeroed the reference's logits
// move by 4.2, with the Engram gate left on at span rows by 6.2, with the look-back not stopped
// by 3.5, against a logit scale of 3.6 (measured with the reference when the fixture was made).
// From the PNG the span rows carry the C++ tower's float32 differences (≤ 1e-4 of their scale,
// vision_fixture_test.cpp), inside the same bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "format/config.h"
#include "model/model.h"
#include "runtime/image_input.h"
#include "runtime/prefill.h"
#include "runtime/sampling.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vl-micro";
const std::string kTextDir = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro";
constexpr double kMedianRowError = 1e-4;
constexpr double kMaxRowError = 2e-2;

double max_abs(std::span<const float> x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(double(v)));
  return m;
}

// Row-by-row comparison of [rows, V] logits (see the bounds above).
void expect_rows_close(std::span<const float> got, std::span<const float> want, int64_t V, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double scale = max_abs(want);
  std::vector<double> errors;
  for (size_t t = 0; t < want.size() / V; ++t) {
    double err = 0;
    for (int64_t v = 0; v < V; ++v) err = std::max(err, std::fabs(double(got[t * V + v]) - want[t * V + v]) / scale);
    const int32_t g = argmax_logits(got.subspan(t * V, V)), w = argmax_logits(want.subspan(t * V, V));
    if (g != w) {
      EXPECT_LE((double(want[t * V + w]) - want[t * V + g]) / scale, 2 * err) << what << " row " << t;
    }
    EXPECT_LE(err, kMaxRowError) << what << " row " << t;
    errors.push_back(err);
  }
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2, errors.end());
  EXPECT_LE(errors[errors.size() / 2], kMedianRowError) << what;
}

class VlFixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ref_ = new testing::GoldenFile(kDir + "/golden.safetensors"); }
  static void TearDownTestSuite() { delete ref_; }
  void SetUp() override {
    ASSERT_TRUE(ref_->ok()) << "cannot read " << kDir << "/golden.safetensors";
    auto m = Model::load(kDir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto e = Engine::create(std::make_unique<CpuBackend>(*model_), model_->engram_tables());
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(*e);
    const auto ids = ref_->get("vl.input_ids").i64;
    ids_.assign(ids.begin(), ids.end());
    for (int64_t t : ref_->get("vl.token_types").i64) types_.push_back(int8_t(t));
    rows_ = ref_->get("vl.image_rows").f32;
  }
  // Prefill of the fixture prompt with the given span rows: every row's logits.
  std::vector<float> prefill_all(std::span<const float> rows, int64_t chunk, SequenceId* out_id = nullptr) {
    auto id = engine_->add_sequence(int64_t(ids_.size()) + 8);
    EXPECT_TRUE(id.ok());
    PrefillOptions po;
    po.depth = PrefillDepth::kFull;
    po.chunk = chunk;
    po.all_logits = true;
    po.token_types = types_;
    po.image_embeddings = rows;
    auto r = prefill(*engine_, *id, ids_, po);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (out_id) *out_id = *id;
    return r.ok() ? r->all_logits : std::vector<float>{};
  }

  static testing::GoldenFile* ref_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> ids_;
  std::vector<int8_t> types_;
  std::vector<float> rows_;
};
testing::GoldenFile* VlFixture::ref_ = nullptr;

TEST_F(VlFixture, PrefillWithReferenceImageRowsMatchesReference) {
  const int64_t V = model_->vocab_size();
  for (int64_t chunk : {0, 3, 7}) {
    const std::vector<float> got = prefill_all(rows_, chunk);
    expect_rows_close(got, ref_->get("vl.logits").f32, V, "chunk " + std::to_string(chunk));
  }
}

TEST_F(VlFixture, GreedyDecodeAfterTheImagesMatchesReference) {
  const int64_t V = model_->vocab_size();
  SequenceId id = -1;
  const std::vector<float> all = prefill_all(rows_, 0, &id);
  ASSERT_FALSE(all.empty());
  const auto want = ref_->get("vl.generated").i64;
  const auto want_logits = ref_->get("vl.decode_logits").f32;
  std::vector<float> got(all.end() - V, all.end());
  std::vector<float> got_all;
  for (size_t step = 0; step < want.size(); ++step) {
    got_all.insert(got_all.end(), got.begin(), got.end());
    const int32_t next = argmax_logits(got);
    ASSERT_EQ(next, want[step]) << "step " << step;
    const int32_t tok = next;
    Segment s{id, int64_t(ids_.size() + step), std::span<const int32_t>(&tok, 1), LogitRows::kLast};
    const SegmentResult& r = engine_->forward(std::span<const Segment>(&s, 1)).front();
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    got.assign(r.logits, r.logits + V);
  }
  expect_rows_close(got_all, want_logits, V, "decode");
}

TEST_F(VlFixture, EndToEndFromAPngMatchesReference) {
  auto vm = load_vision_model(kDir, model_->config());
  ASSERT_TRUE(vm.ok()) << vm.status().to_string();
  RgbImage im{70, 56, {}};
  for (float v : ref_->get("image.pixels").f32) im.rgb.push_back(uint8_t(v));
  auto png = encode_png(im);
  ASSERT_TRUE(png.ok());
  for (bool fast : {true, false}) {
    CpuExec ex = model_->exec();
    ex.fast = fast;
    auto enc = encode_image(ex, **vm, *png, ImageLimits{}, "fixture.png");
    ASSERT_TRUE(enc.ok()) << enc.status().to_string();
    EXPECT_EQ(enc->grid.span_tokens(), 8);
    const std::vector<EncodedImage> images = {*enc, *enc};
    auto rows = image_rows(ids_, int32_t(model_->config().image_token_id), images);
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    EXPECT_EQ(rows->types, types_);
    ASSERT_EQ(rows->embeddings.size(), rows_.size());
    double err = 0;
    for (size_t i = 0; i < rows_.size(); ++i) err = std::max(err, std::fabs(double(rows->embeddings[i]) - rows_[i]));
    EXPECT_LE(err, 1e-4 * max_abs(rows_)) << (fast ? "fast" : "scalar");
    expect_rows_close(prefill_all(rows->embeddings, 0), ref_->get("vl.logits").f32, model_->vocab_size(),
                      fast ? "from png, fast tower" : "from png, scalar tower");
  }
}

// An image segment batched with a text decode step gives each the bits it gets alone (the
// batch's types and embedding rows are laid out at the right rows).
TEST_F(VlFixture, ImageRowsInAMixedBatchGiveTheSoloBits) {
  const int64_t V = model_->vocab_size();
  const int64_t head = 4;  // text prefix; the image segment is positions head … T−1
  const int64_t T = int64_t(ids_.size());
  ASSERT_EQ(std::count_if(types_.begin(), types_.begin() + head, [](int8_t t) { return t >= 0; }), 0);
  auto prefix = [&] {
    auto id = engine_->add_sequence(T + 2);
    EXPECT_TRUE(id.ok());
    Segment s{*id, 0, std::span<const int32_t>(ids_).first(head), LogitRows::kNone};
    EXPECT_TRUE(engine_->forward(std::span<const Segment>(&s, 1)).front().status.ok());
    return *id;
  };
  const SequenceId solo_img = prefix(), solo_txt = prefix(), mix_img = prefix(), mix_txt = prefix();
  auto image_segment = [&](SequenceId id) {
    Segment s{id, head, std::span<const int32_t>(ids_).subspan(head), LogitRows::kAll};
    s.token_types = std::span<const int8_t>(types_).subspan(head);
    s.image_embeddings = rows_;  // the prefix holds no span row
    return s;
  };
  const int32_t next = 7;
  auto text_segment = [&](SequenceId id) { return Segment{id, head, std::span<const int32_t>(&next, 1), LogitRows::kLast}; };
  auto run = [&](std::vector<Segment> segs) {
    std::vector<std::vector<float>> out;
    for (const SegmentResult& r : engine_->forward(segs)) {
      EXPECT_TRUE(r.status.ok()) << r.status.to_string();
      out.emplace_back(r.logits, r.logits + r.logit_rows * V);
    }
    return out;
  };
  const std::vector<float> want_img = run({image_segment(solo_img)})[0];
  const std::vector<float> want_txt = run({text_segment(solo_txt)})[0];
  const auto mixed = run({text_segment(mix_txt), image_segment(mix_img)});
  EXPECT_EQ(mixed[0], want_txt);
  EXPECT_EQ(mixed[1], want_img);
  expect_rows_close(std::span<const float>(want_img), std::span<const float>(ref_->get("vl.logits").f32).subspan(head * V),
                    V, "image segment after a text prefix");
}

TEST_F(VlFixture, BadImageRowsAreClearErrors) {
  auto id = engine_->add_sequence(64);
  ASSERT_TRUE(id.ok());
  auto run = [&](std::span<const int32_t> toks, std::span<const int8_t> types, std::span<const float> rows) {
    Segment s{*id, 0, toks, LogitRows::kLast};
    s.token_types = types;
    s.image_embeddings = rows;
    return engine_->forward(std::span<const Segment>(&s, 1)).front().status;
  };
  const int32_t img = int32_t(model_->config().image_token_id);
  const int64_t d = model_->config().hidden_size;
  const std::vector<float> one_row(d, 0.5f);
  const std::vector<int32_t> toks = {0, img, 5};
  // A span type on a text token.
  Status st = run(toks, std::vector<int8_t>{0, 1, -1}, std::vector<float>(2 * d));
  EXPECT_NE(st.message().find("must coincide"), std::string::npos) << st.to_string();
  // image_token_id typed as text.
  st = run(toks, std::vector<int8_t>{-1, -1, -1}, {});
  EXPECT_NE(st.message().find("must coincide"), std::string::npos) << st.to_string();
  // Embedding count.
  st = run(toks, std::vector<int8_t>{-1, 1, -1}, std::vector<float>(2 * d));
  EXPECT_NE(st.message().find("span rows"), std::string::npos) << st.to_string();
  st = run(toks, std::vector<int8_t>{-1, 1}, one_row);
  EXPECT_NE(st.message().find("token types for 3 tokens"), std::string::npos) << st.to_string();
  st = run(toks, std::vector<int8_t>{-1, 7, -1}, one_row);
  EXPECT_NE(st.message().find("token type 7"), std::string::npos) << st.to_string();
  // Nothing was appended by the refused segments; a good one runs.
  EXPECT_EQ(*engine_->length(*id), 0);
  EXPECT_TRUE(run(toks, std::vector<int8_t>{-1, 1, -1}, one_row).ok());
}

TEST_F(VlFixture, LivePrefixStopsBeforeTheFirstImage) {
  SequenceId id = -1;
  ASSERT_FALSE(prefill_all(rows_, 0, &id).empty());
  const auto first_image = std::find(types_.begin(), types_.end(), int8_t(0)) - types_.begin();
  const Engine::LivePrefix p = engine_->longest_live_prefix(ids_);
  EXPECT_EQ(p.sequence, id);
  EXPECT_EQ(p.length, first_image);
}

TEST(VlTextOnly, TextModelRefusesImages) {
  auto model = Model::load(kTextDir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto vm = load_vision_model(kTextDir, (*model)->config());
  ASSERT_FALSE(vm.ok());
  EXPECT_NE(vm.status().message().find("text only"), std::string::npos) << vm.status().to_string();
  auto engine = Engine::create(std::make_unique<CpuBackend>(**model), (*model)->engram_tables());
  ASSERT_TRUE(engine.ok());
  auto id = (*engine)->add_sequence(8);
  ASSERT_TRUE(id.ok());
  const std::vector<int32_t> toks = {0, 5};
  const std::vector<int8_t> types = {-1, 1};
  const std::vector<float> rows((*model)->config().hidden_size, 0.f);
  Segment s{*id, 0, toks, LogitRows::kLast};
  s.token_types = types;
  s.image_embeddings = rows;
  const Status st = (*engine)->forward(std::span<const Segment>(&s, 1)).front().status;
  EXPECT_NE(st.message().find("no vision tower"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace dsv41
