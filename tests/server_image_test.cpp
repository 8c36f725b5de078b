// Image prompts through the scheduler and the server's engine thread (issue 16): a request
// carrying an ImagePrompt is prefilled chunk by chunk in the batch (chunks carry their span rows),
// beside another image request and a text one, with and without the cache tiers; its greedy tokens
// (and every logit row) are those of the same prompt served alone (serve_turn + decode on a fresh
// engine), and differ from the same ids with another image. Rows that do not fit fail clearly. The server's VisionEncoder (its own pool,
// one image at a time) gives the serial tower's bits, serves concurrent callers, and goes on after
// a caller gives up. (The HTTP side — data: URLs, placeholders —
// is format/image_data_url_test.cpp plus the manual check in docs/VISION.md.)
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <tuple>
#include <cstring>
#include <random>
#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "format/image_decode.h"
#include "model/model.h"
#include "runtime/image_input.h"
#include "runtime/sampling.h"
#include "runtime/serve_turn.h"
#include "store/dram_pool.h"
#include "store/ssd_store.h"
#include "store/store_test_util.h"
#include "server/engine_loop.h"
#include "server/vision_encoder.h"
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

// Submits `requests` as the choices of one channel and waits for all of them (choice order).
std::vector<ChoiceResult> through_loop(EngineLoop& loop, const std::vector<GenerationRequest>& requests) {
  std::vector<Job> jobs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) jobs[i].request = requests[i];
  auto ch = loop.submit(std::move(jobs));
  EXPECT_TRUE(ch.ok());
  std::vector<ChoiceResult> results;
  std::vector<TokenEvent> tokens;
  while (ch.ok() && results.size() < requests.size()) (*ch)->wait(&tokens, &results, std::chrono::milliseconds(100));
  std::sort(results.begin(), results.end(), [](auto& x, auto& y) { return x.choice < y.choice; });
  return results;
}

GenerationRequest text_request() {
  GenerationRequest r;
  r.prompt = {0, 79, 114, 114, 110};
  r.max_tokens = 5;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

// Image prompts prefill in the batch (chunks of 3 cut the 8-position span; 512: one chunk),
// beside another image request and a text one, and give the tokens of serve_turn alone.
TEST_F(ServerImage, ImageRequestsThroughTheLoopGiveTheirAloneTokens) {
  const GenerationRequest a = request(false), b = request(true);
  ASSERT_EQ(a.prompt, b.prompt);  // the same ids: only the image rows differ
  std::vector<int32_t> want_a, want_b;
  auto ea = engine(), eb = engine();
  const auto la = alone(*ea, a, &want_a), lb = alone(*eb, b, &want_b);
  EXPECT_NE(la[0], lb[0]);  // the image reaches the logits
  for (int64_t chunk : {3, 512}) {
    auto e = engine();
    LoopOptions lo;
    lo.scheduler.parallel = 3;
    lo.scheduler.max_context = 64;
    lo.scheduler.prefill_chunk = chunk;
    lo.scheduler.max_prefill_tokens = 2 * chunk;
    auto loop = EngineLoop::start(*e, lo, nullptr);
    ASSERT_TRUE(loop.ok()) << loop.status().to_string();
    const auto results = through_loop(**loop, {a, b, text_request()});
    ASSERT_EQ(results.size(), 3u);
    ASSERT_TRUE(results[0].result.status.ok()) << results[0].result.status.to_string();
    EXPECT_EQ(results[0].result.ids, want_a) << "chunk " << chunk;
    EXPECT_EQ(results[1].result.ids, want_b) << "chunk " << chunk;
    EXPECT_TRUE(results[2].result.status.ok());
    EXPECT_EQ(results[2].result.ids.size(), 5u);
  }
}

// The scheduler's own prefill of an image prompt, chunk by chunk in the batch: every logit row
// it samples from is bitwise the one serve_turn + decode gives alone.
TEST_F(ServerImage, SchedulerPrefillsImagesInTheBatchWithTheAloneLogits) {
  const GenerationRequest a = request(false), b = request(true);
  std::vector<int32_t> want_a, want_b;
  auto ea = engine(), eb = engine();
  const auto la = alone(*ea, a, &want_a), lb = alone(*eb, b, &want_b);
  auto e = engine();
  SchedulerOptions so;
  so.parallel = 3;
  so.max_context = 64;
  so.prefill_chunk = 3;
  so.max_prefill_tokens = 5;  // one chunk of one request per step: the others wait their turn
  auto s = Scheduler::create(*e, so);
  ASSERT_TRUE(s.ok());
  std::map<int64_t, std::vector<std::vector<float>>> seen;
  (*s)->on_token([&](int64_t ticket, int32_t, std::span<const float> logits) {
    seen[ticket].emplace_back(logits.begin(), logits.end());
  });
  const int64_t tt = (*s)->submit(text_request()), ta = (*s)->submit(a), tb = (*s)->submit(b);
  (*s)->run_to_completion();
  for (auto [ticket, want, logits] : {std::tuple{ta, &want_a, &la}, std::tuple{tb, &want_b, &lb}}) {
    auto r = (*s)->take(ticket);
    ASSERT_TRUE(r.has_value());
    ASSERT_TRUE(r->status.ok()) << r->status.to_string();
    EXPECT_EQ(r->ids, *want);
    ASSERT_EQ(seen[ticket].size(), want->size());
    for (size_t k = 0; k < want->size(); ++k) EXPECT_EQ(seen[ticket][k], (*logits)[k]) << "ticket " << ticket << " step " << k;
  }
  EXPECT_TRUE((*s)->take(tt)->status.ok());
}

// Types and rows that do not fit the prompt fail that request, naming the problem; the others run.
TEST_F(ServerImage, ImageRowsThatDoNotFitThePromptFailTheirRequestOnly) {
  auto e = engine();
  auto s = Scheduler::create(*e, SchedulerOptions{});
  ASSERT_TRUE(s.ok());
  GenerationRequest short_types = request(false), text_typed = request(false), few_rows = request(false);
  auto edit = [](GenerationRequest& r, auto&& change) {
    ImagePrompt im = *r.images;
    change(im);
    r.images = std::make_shared<const ImagePrompt>(std::move(im));
  };
  edit(short_types, [](ImagePrompt& im) { im.types.pop_back(); });
  edit(text_typed, [](ImagePrompt& im) { im.types.back() = 0; });  // a text position typed as span
  edit(few_rows, [](ImagePrompt& im) { im.embeddings.resize(im.embeddings.size() - 1); });
  const int64_t t1 = (*s)->submit(short_types), t2 = (*s)->submit(text_typed), t3 = (*s)->submit(few_rows),
                t4 = (*s)->submit(request(false));
  (*s)->run_to_completion();
  const std::pair<int64_t, const char*> bad[] = {
      {t1, "11 token types for a prompt of 12"}, {t2, "position 11 holds token 114 with type 0"}, {t3, "span rows"}};
  for (const auto& [t, words] : bad) {
    auto r = (*s)->take(t);
    ASSERT_TRUE(r.has_value());
    EXPECT_FALSE(r->status.ok());
    EXPECT_NE(r->status.message().find(words), std::string::npos) << r->status.to_string();
  }
  EXPECT_TRUE((*s)->take(t4)->status.ok());
}

// With the cache tiers (SSD chunks of 4, DRAM snapshots, engine tier): an image prompt is opened
// through them and prefilled in the batch; the same prompt again hits the stored chunks (the
// windows replayed over the image rows) and the same ids with another image hits nothing past
// the image. Every answer is the one served alone.
TEST_F(ServerImage, CachedImageTurnsThroughTheLoop) {
  const GenerationRequest a = request(false), b = request(true);
  std::vector<int32_t> want_a, want_b;
  auto ea = engine(), eb = engine();
  alone(*ea, a, &want_a);
  alone(*eb, b, &want_b);
  store_test::ScratchDir dir;
  SsdStoreOptions sso;
  sso.identity = store_test::test_identity(4);
  auto store = SsdStore::open(dir.path, sso);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  DramPool dram;
  ServeTurnTiers tiers{store->get(), &dram, *sso.identity, true};
  auto e = engine();
  LoopOptions lo;
  lo.scheduler.parallel = 2;
  lo.scheduler.max_context = 64;
  lo.scheduler.prefill_chunk = 3;
  lo.scheduler.max_prefill_tokens = 6;
  lo.tiers = &tiers;
  lo.sync_store = true;
  lo.live_turns = 2;
  auto loop = EngineLoop::start(*e, lo, nullptr);
  ASSERT_TRUE(loop.ok());
  for (int round = 0; round < 2; ++round) {
    const auto r = through_loop(**loop, {a});
    ASSERT_EQ(r.size(), 1u);
    ASSERT_TRUE(r[0].result.status.ok()) << r[0].result.status.to_string();
    EXPECT_EQ(r[0].result.ids, want_a) << "round " << round;
    ASSERT_TRUE(r[0].turn.has_value());
    if (round == 1) {
      EXPECT_GE(r[0].turn->global_hit_tokens, 8) << "the stored chunks of the same prompt";
    }
  }
  const auto rb = through_loop(**loop, {b});
  ASSERT_TRUE(rb[0].result.status.ok()) << rb[0].result.status.to_string();
  EXPECT_EQ(rb[0].result.ids, want_b);
  ASSERT_TRUE(rb[0].turn.has_value());
  EXPECT_LE(rb[0].turn->global_hit_tokens, 1) << "another image: no chunk past the image's start";
}

// A random RGB image as PNG bytes.
std::vector<uint8_t> random_png(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  RgbImage im{w, h, std::vector<uint8_t>(size_t(w) * h * 3)};
  for (auto& v : im.rgb) v = uint8_t(rng());
  auto png = encode_png(im);
  EXPECT_TRUE(png.ok());
  return *png;
}

// Every stage of `got` has the bits of the serial tower's `want`.
void expect_same_bits(const EncodedImage& got, const EncodedImage& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.grid.span_tokens(), want.grid.span_tokens());
  EXPECT_EQ(got.content, want.content);
  ASSERT_EQ(got.vit.size(), want.vit.size());
  EXPECT_EQ(std::memcmp(got.vit.data(), want.vit.data(), got.vit.size() * sizeof(float)), 0) << got.name;
  ASSERT_EQ(got.span_rows.size(), want.span_rows.size());
  EXPECT_EQ(std::memcmp(got.span_rows.data(), want.span_rows.data(), got.span_rows.size() * sizeof(float)), 0) << got.name;
}

TEST_F(ServerImage, VisionEncoderGivesTheSerialTowersBits) {
  const std::vector<std::vector<uint8_t>> files = {random_png(70, 56, 1), random_png(300, 200, 2), random_png(31, 95, 3)};
  for (int threads : {1, 2, 3, 5}) {
    VisionEncoder enc(*vision_, threads);
    EXPECT_EQ(enc.threads(), threads);
    std::vector<ImageInput> in;
    for (size_t i = 0; i < files.size(); ++i) in.push_back({"image " + std::to_string(i + 1), files[i]});
    auto got = enc.encode(in, [] { return false; });
    ASSERT_TRUE(got.has_value());
    ASSERT_TRUE(got->ok()) << got->status().to_string();
    ASSERT_EQ((*got)->size(), files.size());
    for (size_t i = 0; i < files.size(); ++i) {
      auto want = encode_image(CpuExec::serial(), *vision_, files[i], ImageLimits{}, "image " + std::to_string(i + 1));
      ASSERT_TRUE(want.ok());
      expect_same_bits((**got)[i], *want);
    }
  }
}

TEST_F(ServerImage, VisionEncoderServesConcurrentCallersAndNamesBadImages) {
  VisionEncoder enc(*vision_, 2);
  const auto a = random_png(200, 150, 4), b = random_png(90, 120, 5);
  std::optional<Result<std::vector<EncodedImage>>> ra, rb;
  std::thread ta([&] { ra = enc.encode({{"a", a}, {"b", b}}, [] { return false; }); });
  std::thread tb([&] { rb = enc.encode({{"b", b}}, [] { return false; }); });
  ta.join();
  tb.join();
  ASSERT_TRUE(ra && rb && ra->ok() && rb->ok());
  auto want_b = encode_image(CpuExec::serial(), *vision_, b, ImageLimits{}, "b");
  ASSERT_TRUE(want_b.ok());
  expect_same_bits((**ra)[1], *want_b);
  expect_same_bits((**rb)[0], *want_b);
  // A truncated file fails its request with an error naming the image; the encoder goes on.
  std::vector<uint8_t> cut(a.begin(), a.begin() + long(a.size() / 2));
  auto bad = enc.encode({{"image 1", a}, {"image 2", cut}}, [] { return false; });
  ASSERT_TRUE(bad.has_value());
  ASSERT_FALSE(bad->ok());
  EXPECT_NE(bad->status().message().find("image 2"), std::string::npos) << bad->status().to_string();
  auto again = enc.encode({{"b", b}}, [] { return false; });
  ASSERT_TRUE(again && again->ok());
  EXPECT_EQ(enc.counts().encoded, 6);
}

TEST_F(ServerImage, AVisionEncoderCallerThatGivesUpIsSkippedAndTheRestGoOn) {
  VisionEncoder enc(*vision_, 2);
  const auto big = random_png(700, 560, 6), small = random_png(70, 56, 7);
  std::optional<Result<std::vector<EncodedImage>>> first;
  std::atomic<bool> queued{false};
  std::thread t([&] {
    queued = true;
    first = enc.encode({{"big 1", big}, {"big 2", big}, {"big 3", big}}, [] { return false; });
  });
  while (!queued) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Behind the big images (on a loaded machine perhaps not): given up at once.
  auto gone = enc.encode({{"gone 1", small}, {"gone 2", small}}, [] { return true; }, std::chrono::milliseconds(1));
  // nullopt, unless the worker ran both before this thread could ask (then they are fine).
  EXPECT_TRUE(!gone.has_value() || gone->ok());
  t.join();
  ASSERT_TRUE(first && first->ok()) << (first ? first->status().to_string() : "none");
  auto after = enc.encode({{"after", small}}, [] { return false; });
  ASSERT_TRUE(after && after->ok());
  auto want = encode_image(CpuExec::serial(), *vision_, small, ImageLimits{}, "after");
  ASSERT_TRUE(want.ok());
  expect_same_bits((**after)[0], *want);
  // Every image was either run or skipped; the given-up ones may have run (then dropped).
  const VisionEncoder::Counts c = enc.counts();
  EXPECT_EQ(c.encoded + c.skipped, 6);
  EXPECT_GE(c.encoded, 4);
}

}  // namespace
}  // namespace dsv41::server
