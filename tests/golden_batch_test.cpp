// The golden fixture's four prompts prefilled together in ONE engine batch, then decoded together
// (issue 9 acceptance): prefill logits of every row and the greedy continuation with its decode
// logits against the golden reference, within the README's bounds (argmax equal, max |Δ| ≤ 2e-2),
// and bit-identical to the same sequences run one at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "runtime/sampling.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

std::string prefix(int s) { return "s" + std::to_string(s) + "."; }

TEST(GoldenBatch, FourPromptsPrefilledAndDecodedInOneBatch) {
  const std::string dir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << dir << " is absent (a plain clone has no ../shared)";
  testing::GoldenFile g(dir + "/golden.safetensors");
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = (*model)->vocab_size();
  auto make = [&] {
    auto e = Engine::create(std::make_unique<CpuBackend>(**model), (*model)->engram_tables());
    EXPECT_TRUE(e.ok());
    return std::move(*e);
  };
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 4; ++s) {
    const auto ids = g.get(prefix(s) + "input_ids").i64;
    prompts.emplace_back(ids.begin(), ids.end());
  }
  // Alone: every prefill row and the decode logits, one sequence per engine.
  std::vector<std::vector<float>> alone_prefill(4), alone_decode(4);
  for (int s = 0; s < 4; ++s) {
    auto e = make();
    const SequenceId id = *e->add_sequence(128);
    Segment seg{id, 0, prompts[s], LogitRows::kAll};
    const SegmentResult& r = e->forward(std::span<const Segment>(&seg, 1)).front();
    ASSERT_TRUE(r.status.ok());
    alone_prefill[s].assign(r.logits, r.logits + r.logit_rows * V);
  }
  auto e = make();
  std::vector<SequenceId> ids;
  std::vector<Segment> segs;
  for (int s = 0; s < 4; ++s) {
    ids.push_back(*e->add_sequence(128));
    segs.push_back({ids[s], 0, prompts[s], LogitRows::kAll});
  }
  const auto& r = e->forward(segs);
  std::vector<int32_t> next(4);
  for (int s = 0; s < 4; ++s) {
    ASSERT_TRUE(r[s].status.ok()) << r[s].status.to_string();
    const std::vector<float> got(r[s].logits, r[s].logits + r[s].logit_rows * V);
    EXPECT_EQ(got, alone_prefill[s]) << "s" << s << ": the batch changed the bits";
    const auto want = g.get(prefix(s) + "logits").f32;
    ASSERT_EQ(got.size(), want.size());
    double max_abs = 0;
    for (size_t t = 0; t * V < got.size(); ++t) {
      EXPECT_EQ(argmax_logits({got.data() + t * V, size_t(V)}), argmax_logits({want.data() + t * V, size_t(V)}))
          << "s" << s << " row " << t;
      for (int64_t v = 0; v < V; ++v) max_abs = std::max(max_abs, std::fabs(double(got[t * V + v]) - want[t * V + v]));
    }
    EXPECT_LE(max_abs, 2e-2) << "s" << s;
    next[s] = argmax_logits({got.data() + got.size() - V, size_t(V)});
  }
  // The greedy continuations, all four sequences decoded together.
  std::vector<std::vector<int64_t>> generated(4);
  std::vector<double> decode_max(4, 0.0);
  for (int step = 0;; ++step) {
    bool any = false;
    segs.clear();
    std::vector<int> who;
    for (int s = 0; s < 4; ++s) {
      const auto want = g.get(prefix(s) + "generated").i64;
      if (static_cast<int>(generated[s].size()) >= static_cast<int>(want.size())) continue;
      generated[s].push_back(next[s]);
      if (generated[s].size() == want.size()) continue;
      segs.push_back({ids[s], *e->length(ids[s]), std::span<const int32_t>(&next[s], 1), LogitRows::kLast});
      who.push_back(s);
      any = true;
    }
    if (!any) break;
    const auto& d = e->forward(segs);
    for (size_t i = 0; i < who.size(); ++i) {
      const int s = who[i];
      ASSERT_TRUE(d[i].status.ok());
      const auto want_logits = g.get(prefix(s) + "decode_logits").f32;
      const size_t k = generated[s].size();  // decode step k predicts generated[k]
      for (int64_t v = 0; v < V; ++v)
        decode_max[s] = std::max(decode_max[s], std::fabs(double(d[i].logits[v]) - want_logits[k * V + v]));
      next[s] = argmax_logits({d[i].logits, size_t(V)});
    }
  }
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(generated[s], g.get(prefix(s) + "generated").i64) << "s" << s;
    EXPECT_LE(decode_max[s], 2e-2) << "s" << s << " decode_logits";
  }
}

}  // namespace
}  // namespace dsv41
