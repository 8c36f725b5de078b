// Bits per byte (runtime/bpb.h): the window plan against hand-written plans and the
// exactly-once rule; the library against a direct computation from Session logits on the f32
// golden fixture (one prefill, and explicit sliding windows); bad input.
#include "runtime/bpb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numbers>
#include <string>

#include "runtime/session.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

// ≈ 60 tokens of the tiny tokenizer, with a literal special-token string that must stay text.
const char* kText =
    "The quick brown fox jumps over the lazy dog. int main() { return 0; }\n"
    "Numbers 12345 and <｜end▁of▁sentence｜> are just text here.\n";

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "dsv41_bpb_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

BpbOptions opts(int64_t context, int64_t stride) {
  BpbOptions o;
  o.context = context;
  o.stride = stride;
  return o;
}

TEST(BpbPlan, HandWrittenPlans) {
  using W = ScoreWindow;
  EXPECT_EQ(plan_score_windows(10, opts(4, 2)).value(),
            (std::vector<W>{{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}}));
  EXPECT_EQ(plan_score_windows(7, opts(4, 3)).value(), (std::vector<W>{{0, 4, 1}, {3, 7, 4}}));
  EXPECT_EQ(plan_score_windows(3, opts(1024, 512)).value(), (std::vector<W>{{0, 3, 1}}));
  EXPECT_EQ(plan_score_windows(2, opts(2, 1)).value(), (std::vector<W>{{0, 2, 1}}));
  EXPECT_EQ(plan_score_windows(4, opts(2, 1)).value(), (std::vector<W>{{0, 2, 1}, {1, 3, 2}, {2, 4, 3}}));
  // The last window may be short: it is the first one reaching the end.
  EXPECT_EQ(plan_score_windows(9, opts(4, 3)).value(), (std::vector<W>{{0, 4, 1}, {3, 7, 4}, {6, 9, 7}}));
}

TEST(BpbPlan, EveryPositionButBosScoredExactlyOnceWithinContext) {
  for (int64_t n = 2; n <= 40; ++n)
    for (int64_t ctx = 2; ctx <= 12; ++ctx)
      for (int64_t stride = 1; stride < ctx; ++stride) {
        auto plan = plan_score_windows(n, opts(ctx, stride));
        ASSERT_TRUE(plan.ok()) << plan.status().to_string();
        std::vector<int> count(n, 0);
        for (const ScoreWindow& w : *plan) {
          ASSERT_LE(w.end - w.begin, ctx);
          ASSERT_GT(w.first_scored, w.begin);  // a scored position has its predecessor in the window
          for (int64_t t = w.first_scored; t < w.end; ++t) ++count[t];
        }
        EXPECT_EQ(count[0], 0);
        for (int64_t t = 1; t < n; ++t) ASSERT_EQ(count[t], 1) << n << " " << ctx << " " << stride << " t=" << t;
      }
}

TEST(BpbPlan, BadOptionsAreErrors) {
  EXPECT_FALSE(plan_score_windows(10, opts(4, 4)).ok());
  EXPECT_FALSE(plan_score_windows(10, opts(1, 1)).ok());
  EXPECT_FALSE(plan_score_windows(10, opts(4, 0)).ok());
  EXPECT_FALSE(plan_score_windows(1, opts(4, 2)).ok());
  ModelConfig c;
  c.max_position_embeddings = 4096;
  auto d = resolve_bpb_options(c, {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->context, 1024);
  EXPECT_EQ(d->stride, 512);
  c.max_position_embeddings = 100;
  EXPECT_EQ(resolve_bpb_options(c, {}).value().context, 100);
  EXPECT_EQ(resolve_bpb_options(c, opts(3, 0)).value().stride, 1);
  for (const BpbOptions& bad : {opts(1, 0), opts(-5, 0), opts(8, 8), opts(8, 9), opts(8, -1), opts(101, 0)}) {
    auto r = resolve_bpb_options(c, bad);
    ASSERT_FALSE(r.ok()) << bad.context << " " << bad.stride;
    EXPECT_NE(r.status().to_string().find("--"), std::string::npos) << r.status().to_string();
  }
}

TEST(BpbLogProb, MatchesClosedForm) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, -50.0f};
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(-50.0);
  EXPECT_NEAR(log_prob(logits, 0), 1.0 - std::log(z), 1e-14);
  EXPECT_NEAR(log_prob(logits, 3), -50.0 - std::log(z), 1e-12);
  // Large logits do not overflow (max subtracted first).
  const std::vector<float> big = {1e30f, 1e30f};
  EXPECT_NEAR(log_prob(big, 1), -std::log(2.0), 1e-14);
}

class BpbGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::golden_fixtures_present()) return;  // each test skips in SetUp
    model_ = Model::load(kDir).value().release();
    tok_ = new Tokenizer(Tokenizer::load(kDir + "/tokenizer.json").value());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
  }
  void SetUp() override { DSV41_SKIP_WITHOUT_GOLDEN(); }
  std::vector<int32_t> ids_of(const std::string& text) {
    TokenizerEncodeOptions no_special;
    no_special.match_special_tokens = false;
    std::vector<int32_t> ids = {static_cast<int32_t>(model_->config().bos_token_id)};
    auto enc = tok_->encode(text, no_special).value();
    ids.insert(ids.end(), enc.begin(), enc.end());
    return ids;
  }
  // −log2 p(ids[t] | ids[from..t)) for t in [first, end), from one fresh prefill of ids[from, end).
  double window_bits(const std::vector<int32_t>& ids, int64_t from, int64_t first, int64_t end) {
    auto session = Session::create(*model_, end - from).value();
    std::vector<float> logits;
    EXPECT_TRUE(session->prefill(std::span<const int32_t>(ids.data() + from, end - from), 0, &logits).ok());
    const int64_t V = model_->vocab_size();
    double bits = 0;
    for (int64_t t = first; t < end; ++t) {
      // Independent log-softmax: log of the probability itself, in long double.
      const float* row = logits.data() + (t - 1 - from) * V;
      long double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<long double>(row[v]));
      bits -= static_cast<double>(std::log2(std::exp(static_cast<long double>(row[ids[t]])) / z));
    }
    return bits;
  }
  static Model* model_;
  static Tokenizer* tok_;
};
Model* BpbGolden::model_ = nullptr;
Tokenizer* BpbGolden::tok_ = nullptr;

TEST_F(BpbGolden, OnePrefillMatchesDirectComputation) {
  const std::string path = write_temp("one.txt", kText);
  const std::vector<int32_t> ids = ids_of(kText);
  const int64_t N = static_cast<int64_t>(ids.size());
  ASSERT_GT(N, 20);
  // The literal special-token string was encoded as text, not as its id.
  EXPECT_EQ(std::count(ids.begin() + 1, ids.end(), static_cast<int32_t>(model_->config().eos_token_id)), 0);

  int64_t calls = 0, last_scored = 0;
  auto r = score_file_bpb(*model_, *tok_, path, resolve_bpb_options(model_->config(), {}).value(),
                          [&](int64_t scored, int64_t total, double) {
                            ++calls, last_scored = scored;
                            EXPECT_EQ(total, N - 1);
                          });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tokens, N - 1);
  EXPECT_EQ(r->bytes, static_cast<int64_t>(std::string(kText).size()));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(last_scored, N - 1);
  const double direct = window_bits(ids, 0, 1, N);
  EXPECT_NEAR(r->bits, direct, 1e-9 * direct);
  EXPECT_NEAR(r->bpb(), direct / r->bytes, 1e-9);
  // A tiny random-ish model is near uniform over 643 ids: ≈ log2(643) ≈ 9.3 bits per token.
  EXPECT_GT(r->bits / r->tokens, 1.0);
  std::remove(path.c_str());
}

TEST_F(BpbGolden, SlidingWindowsSumExplicitWindows) {
  const std::vector<int32_t> ids = ids_of(kText);
  const int64_t N = static_cast<int64_t>(ids.size());
  for (const BpbOptions& o : {opts(8, 3), opts(16, 8), opts(5, 4)}) {
    // By hand: windows start at 0, stride, …; each scores the positions not scored before it.
    std::vector<bool> done(N, false);
    done[0] = true;  // BOS
    double want = 0;
    int64_t scored = 0;
    for (int64_t b = 0; b < N; b += o.stride) {
      const int64_t e = std::min(b + o.context, N);
      int64_t first = e;
      for (int64_t t = b + 1; t < e; ++t)
        if (!done[t]) {
          first = std::min(first, t);
          done[t] = true;
          ++scored;
        }
      if (first < e) want += window_bits(ids, b, first, e);
      if (e == N) break;
    }
    ASSERT_EQ(scored, N - 1);
    auto got = score_token_bits(*model_, ids, o);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(got->tokens, N - 1);
    EXPECT_NEAR(got->bits, want, 1e-9 * want) << o.context << "/" << o.stride;
  }
  // Shorter context loses information: the windowed score differs from the full one.
  const double full = score_token_bits(*model_, ids, opts(1024, 512)).value().bits;
  EXPECT_NE(score_token_bits(*model_, ids, opts(4, 2)).value().bits, full);
}

TEST_F(BpbGolden, BadInputIsAClearError) {
  const BpbOptions o = resolve_bpb_options(model_->config(), {}).value();
  auto missing = score_file_bpb(*model_, *tok_, "/nonexistent/dir/x.txt", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().to_string().find("/nonexistent/dir/x.txt"), std::string::npos);
  const std::string empty = write_temp("empty.txt", "");
  auto e = score_file_bpb(*model_, *tok_, empty, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().to_string().find("empty"), std::string::npos) << e.status().to_string();
  const std::string bad_utf8 = write_temp("bad.txt", std::string("ok \xff\xfe bytes"));
  auto b = score_file_bpb(*model_, *tok_, bad_utf8, o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().to_string().find(bad_utf8), std::string::npos) << b.status().to_string();
  // Token ids outside the vocabulary, fewer than two ids.
  EXPECT_FALSE(score_token_bits(*model_, std::vector<int32_t>{0, 643}, o).ok());
  EXPECT_FALSE(score_token_bits(*model_, std::vector<int32_t>{0}, o).ok());
  std::remove(empty.c_str());
  std::remove(bad_utf8.c_str());
}

}  // namespace
}  // namespace dsv41
