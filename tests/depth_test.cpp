// Prefill depths (issue 10): `exact` equals `full` bit for bit (last logits, every window row,
// and every decode step after it), cold and after a global hit without window state, at hits on
// both sides of compressor group and page boundaries; `bounded` equals `full` when the prompt fits
// in the tail and costs the token-layers of replay_rule.h otherwise. The random model has window 5,
// 6 layers (decoder = layers 3–5, a ratio-1 source at 3, a ratio-2 source at 1), pages of 2
// records.
#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_backend.h"
#include "runtime/prefill.h"
#include "tests/test_models.h"

namespace dsv41 {
namespace {

std::unique_ptr<Engine> make_engine() { return testing::make_test_engine(); }
std::vector<int32_t> tokens(int n, uint32_t seed) { return testing::test_tokens(n, seed); }

struct DepthRun {
  PrefillResult prefill;
  std::vector<std::vector<float>> decode;  // logits of each decode step
  std::vector<std::vector<float>> windows; // every layer's window rows after the prefill
};

// Prefills `prompt` (the first h tokens as a hit without window state when h > 0), then decodes.
DepthRun run(const std::vector<int32_t>& prompt, int64_t h, PrefillDepth depth, int64_t chunk,
        const std::vector<int32_t>& next) {
  auto e = make_engine();
  SequenceId id = *e->add_sequence(128);
  bool windows = true;
  if (h > 0) {
    // The hit: a full prefill of the first h tokens in another sequence, then its global KV only.
    PrefillOptions full{PrefillDepth::kFull, 0, true};
    EXPECT_TRUE(prefill(*e, id, std::span<const int32_t>(prompt).subspan(0, h), full).ok());
    const SequenceId b = *e->fork_prefix(id, h);
    EXPECT_TRUE(e->remove_sequence(id).ok());
    id = b;
    windows = false;
  }
  DepthRun r;
  auto p = prefill(*e, id, prompt, PrefillOptions{depth, chunk, windows});
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return r;
  r.prefill = *p;
  for (int l = 0; l < e->cache(id)->num_layers(); ++l) r.windows.push_back(e->cache(id)->window_rows(l));
  for (int32_t t : next) {
    Segment s{id, *e->length(id), std::span<const int32_t>(&t, 1), LogitRows::kLast};
    const SegmentResult& res = e->forward(std::span<const Segment>(&s, 1)).front();
    EXPECT_TRUE(res.status.ok()) << res.status.to_string();
    if (res.status.ok()) r.decode.emplace_back(res.logits, res.logits + 89);
  }
  return r;
}

TEST(Depth, ExactEqualsFullColdAndChunked) {
  const auto next = tokens(6, 9);
  for (int N : {9, 14, 17, 30, 41}) {
    const auto prompt = tokens(N, 100 + N);
    const DepthRun full = run(prompt, 0, PrefillDepth::kFull, 0, next);
    for (int64_t chunk : {int64_t{0}, int64_t{4}, int64_t{7}}) {
      const DepthRun exact = run(prompt, 0, PrefillDepth::kExact, chunk, next);
      EXPECT_EQ(exact.prefill.last_logits, full.prefill.last_logits) << "N " << N << " chunk " << chunk;
      EXPECT_EQ(exact.windows, full.windows) << "N " << N;
      EXPECT_EQ(exact.decode, full.decode) << "N " << N;
      if (N > 13) {
        EXPECT_EQ(exact.prefill.effective, PrefillDepth::kExact);
        EXPECT_LT(exact.prefill.work.encoder + exact.prefill.work.decoder, full.prefill.work.full_depth);
      }
    }
  }
}

TEST(Depth, ExactAfterAHitWithoutWindowsEqualsAColdFullPrefill) {
  const auto next = tokens(5, 19);
  for (int N : {24, 33}) {
    const auto prompt = tokens(N, 200 + N);
    const DepthRun full = run(prompt, 0, PrefillDepth::kFull, 0, next);
    for (int64_t h : {6, 7, 8, 9, 12, 13, 20}) {  // odd and even: group and page boundaries
      if (h >= N) continue;
      const DepthRun exact = run(prompt, h, PrefillDepth::kExact, 5, next);
      EXPECT_EQ(exact.prefill.last_logits, full.prefill.last_logits) << "N " << N << " hit " << h;
      EXPECT_EQ(exact.windows, full.windows) << "N " << N << " hit " << h;
      EXPECT_EQ(exact.decode, full.decode) << "N " << N << " hit " << h;
      EXPECT_GT(exact.prefill.work.replay, 0) << "the encoder windows were rebuilt";
      // Full depth after the same hit replays the whole hit: also exact.
      const DepthRun full_hit = run(prompt, h, PrefillDepth::kFull, 5, next);
      EXPECT_EQ(full_hit.decode, full.decode) << "N " << N << " hit " << h;
    }
  }
}

TEST(Depth, BoundedEqualsFullWhenThePromptFitsInTheTail) {
  const auto next = tokens(4, 29);
  for (int N : {1, 3, 5}) {
    const auto prompt = tokens(N, 300 + N);
    const DepthRun full = run(prompt, 0, PrefillDepth::kFull, 0, next);
    const DepthRun bounded = run(prompt, 0, PrefillDepth::kBounded, 2, next);
    EXPECT_EQ(bounded.prefill.effective, PrefillDepth::kFull);
    EXPECT_EQ(bounded.decode, full.decode) << N;
  }
}

TEST(Depth, BoundedCostsTheEncoderAndTheTail) {
  const int N = 40, w = 5, L = 6, ds = 3;
  const auto prompt = tokens(N, 400);
  const auto next = tokens(3, 401);
  const DepthRun bounded = run(prompt, 0, PrefillDepth::kBounded, 8, next);
  EXPECT_EQ(bounded.prefill.effective, PrefillDepth::kBounded);
  EXPECT_EQ(bounded.prefill.work.encoder, N * ds + (N - w));  // + the decoder source's compressor rows
  EXPECT_EQ(bounded.prefill.work.decoder, w * (L - ds));
  EXPECT_EQ(bounded.prefill.work.full_depth, N * L);
  EXPECT_EQ(bounded.decode.size(), 3u);  // decoding continues after a bounded prefill
  // Bounded after a hit without windows replays the hit's last w positions in the encoder.
  const DepthRun hit = run(prompt, 20, PrefillDepth::kBounded, 8, next);
  EXPECT_EQ(hit.prefill.work.replay, w * ds + w);
  EXPECT_EQ(hit.decode.size(), 3u);
}

TEST(Depth, PrefillRejectsAPromptThatDoesNotContinueTheSequence) {
  auto e = make_engine();
  const SequenceId id = *e->add_sequence(64);
  const auto prompt = tokens(10, 5);
  ASSERT_TRUE(prefill(*e, id, std::span<const int32_t>(prompt).subspan(0, 6), {}).ok());
  auto other = prompt;
  other[2] = (other[2] + 1) % 89;
  EXPECT_FALSE(prefill(*e, id, other, {}).ok());
  EXPECT_FALSE(prefill(*e, id, std::span<const int32_t>(prompt).subspan(0, 6), {}).ok());
}

}  // namespace
}  // namespace dsv41
