// Image prompts through the server's engine thread (issue 16): a request carrying an ImagePrompt
// is served by serve_turn (no cache tiers needed) and decoded by the scheduler, in a batch with a
// text request; its greedy tokens are those of the same prompt served alone (serve_turn + decode
// on a fresh engine), and differ in their logprobs from the same ids with another image. The
// scheduler's own cold prefill refuses images clearly. (The HTTP side — data: URLs, placeholders —
// is format/image_data_url_test.cpp plus the manual check in docs/VISION.md.)
#include <gtest/gtest.h>

#include "backends/cpu/cpu_backend.h"
#include "format/image_decode.h"
#include "model/model.h"
#include "runtime/image_input.h"
#include "runtime/sampling.h"
#include "runtime/serve_turn.h"
#include "server/engine_loop.h"
#include "tests/golden_file.h"

namespace dsv41::server {
namespace {

const std::string kVl = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/vl-micro";

class ServerImage : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(kVl);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto vm = load_vision_model(kVl, model_->config());
    ASSERT_TRUE(vm.ok()) << vm.status().to_string();
    vision_ = std::move(*vm);
    dsv41::testing::GoldenFile g(kVl + "/golden.safetensors");
    ASSERT_TRUE(g.ok());
    for (float v : g.get("image.pixels").f32) pixels_.push_back(uint8_t(v));
  }
  std::unique_ptr<Engine> engine() {
    auto e = Engine::create(std::make_unique<CpuBackend>(*model_), model_->engram_tables());
    EXPECT_TRUE(e.ok());
    return std::move(*e);
  }
  // BOS, the image placeholder, a few text ids; placed with the image whose pixels are
  // pixels_ (inverted when `other`).
  GenerationRequest request(bool other) {
    std::vector<uint8_t> px = pixels_;
    if (other)
      for (auto& v : px) v = uint8_t(255 - v);
    auto png = encode_png(RgbImage{70, 56, px});
    EXPECT_TRUE(png.ok());
    auto im = encode_image(CpuExec::serial(), *vision_, *png, ImageLimits{}, "image");
    EXPECT_TRUE(im.ok()) << im.status().to_string();
    GenerationRequest r;
    r.prompt = {0, int32_t(model_->config().image_token_id), 79, 114, 114};
    auto placed = place_images(r.prompt, int32_t(model_->config().image_token_id), std::vector<EncodedImage>{*im});
    EXPECT_TRUE(placed.ok()) << placed.status().to_string();
    r.images = std::make_shared<const ImagePrompt>(std::move(*placed));
    r.max_tokens = 5;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    return r;
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<VisionModel> vision_;
  std::vector<uint8_t> pixels_;
};

// Greedy tokens (and each step's logits) of `r` served alone: serve_turn, then decode.
int64_t model_vocab(const Engine& e) { return e.config().vocab_size; }

std::vector<std::vector<float>> alone(Engine& e, const GenerationRequest& r, std::vector<int32_t>* ids) {
  ServeTurnOptions so;
  so.depth = r.depth;
  so.max_context = int64_t(r.prompt.size()) + r.max_tokens;
  so.images = r.images->marks;
  so.token_types = r.images->types;
  so.image_embeddings = r.images->embeddings;
  auto turn = serve_turn(e, ServeTurnTiers{}, r.prompt, so);
  EXPECT_TRUE(turn.ok()) << turn.status().to_string();
  std::vector<std::vector<float>> steps = {turn->last_logits};
  for (int64_t i = 0; i < r.max_tokens; ++i) {
    const int32_t next = argmax_logits(steps.back());
    ids->push_back(next);
    Segment s{turn->sequence, int64_t(r.prompt.size()) + i, std::span<const int32_t>(&next, 1), LogitRows::kLast};
    const SegmentResult& res = e.forward(std::span<const Segment>(&s, 1)).front();
    EXPECT_TRUE(res.status.ok());
    steps.emplace_back(res.logits, res.logits + model_vocab(e));
  }
  return steps;
}

TEST_F(ServerImage, ImageRequestsThroughTheLoopGiveTheirAloneTokens) {
  const GenerationRequest a = request(false), b = request(true);
  ASSERT_EQ(a.prompt, b.prompt);  // the same ids: only the image rows differ
  std::vector<int32_t> want_a, want_b;
  auto ea = engine(), eb = engine();
  const auto la = alone(*ea, a, &want_a), lb = alone(*eb, b, &want_b);
  EXPECT_NE(la[0], lb[0]);  // the image reaches the logits
  auto e = engine();
  LoopOptions lo;
  lo.scheduler.parallel = 3;
  lo.scheduler.max_context = 64;
  auto loop = EngineLoop::start(*e, lo, nullptr);
  ASSERT_TRUE(loop.ok()) << loop.status().to_string();
  std::vector<Job> jobs(3);
  jobs[0].request = a;
  jobs[1].request = b;
  jobs[2].request.prompt = {0, 79, 114, 114, 110};  // a text request in the same batch
  jobs[2].request.max_tokens = 5;
  jobs[2].request.ignore_eos = true;
  jobs[2].request.sampling.temperature = 0;
  auto ch = (*loop)->submit(std::move(jobs));
  ASSERT_TRUE(ch.ok());
  std::vector<ChoiceResult> results;
  std::vector<TokenEvent> tokens;
  while (results.size() < 3) (*ch)->wait(&tokens, &results, std::chrono::milliseconds(100));
  std::sort(results.begin(), results.end(), [](auto& x, auto& y) { return x.choice < y.choice; });
  ASSERT_TRUE(results[0].result.status.ok()) << results[0].result.status.to_string();
  EXPECT_EQ(results[0].result.ids, want_a);
  EXPECT_EQ(results[1].result.ids, want_b);
  EXPECT_TRUE(results[2].result.status.ok());
  EXPECT_EQ(results[2].result.ids.size(), 5u);
}

TEST_F(ServerImage, SchedulerColdPrefillRefusesImages) {
  auto e = engine();
  auto s = Scheduler::create(*e, SchedulerOptions{});
  ASSERT_TRUE(s.ok());
  const int64_t t = (*s)->submit(request(false));
  (*s)->run_to_completion();
  auto r = (*s)->take(t);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->status.ok());
  EXPECT_NE(r->status.message().find("through serve_turn"), std::string::npos) << r->status.to_string();
}

}  // namespace
}  // namespace dsv41::server
