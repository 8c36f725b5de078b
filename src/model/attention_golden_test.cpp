// Layer-isolated golden checks of the attention side: each layer runs on the exact golden input
// (RMSNorm_attn of the previous layer's golden streams collapsed with its golden `pre`), and its
// caches, indexer scores, candidate pool and top-k are compared with the f32 fixture
// (golden/README.md tolerances). Prefill in one chunk, in odd chunks and token by token must all
// match. Layers 1 and 4 (and 5, which reads 4's cache) need Engram's input and are not isolated here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cache/sequence_cache.h"
#include "model/attention.h"
#include "model/attention_test_support.h"
#include "model/rmsnorm.h"
#include "model/rope.h"

namespace dsv41 {
namespace {

using testing::StTensor;

const std::string kFixture = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

struct Fixture {
  ModelConfig config;
  LayerPlan plan;
  std::map<std::string, StTensor> model, golden;
  bool ok = false;
};

const Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    fx->model = testing::read_safetensors(kFixture + "/model.safetensors");
    fx->golden = testing::read_safetensors(kFixture + "/golden.safetensors");
    if (fx->model.empty() || fx->golden.empty()) return fx;
    auto config = load_model_config(kFixture);
    if (!config.ok()) return fx;
    fx->config = *config;
    auto plan = build_layer_plan(fx->config);
    if (!plan.ok()) return fx;
    fx->plan = *plan;
    fx->ok = true;
    return fx;
  }();
  return *f;
}

std::vector<float> model_tensor(const std::string& name) {
  auto it = fixture().model.find("model." + name);
  return it == fixture().model.end() ? std::vector<float>{} : it->second.f32();
}

AttentionWeights golden_weights(int layer) {
  const std::string p = "layers." + std::to_string(layer) + ".attn.";
  AttentionWeights w;
  w.layer = layer;
  w.wq_a = model_tensor(p + "wq_a.weight");
  w.q_norm = model_tensor(p + "q_norm.weight");
  w.wq_b = model_tensor(p + "wq_b.weight");
  w.wkv = model_tensor(p + "wkv.weight");
  w.kv_norm = model_tensor(p + "kv_norm.weight");
  w.wo_a = model_tensor(p + "wo_a.weight");
  w.wo_b = model_tensor(p + "wo_b.weight");
  w.attn_sink = model_tensor(p + "attn_sink");
  w.compressor_wkv = model_tensor(p + "compressor.wkv.weight");
  w.compressor_wgate = model_tensor(p + "compressor.wgate.weight");
  w.compressor_norm = model_tensor(p + "compressor.norm.weight");
  w.indexer_wk = model_tensor(p + "indexer.wk.weight");
  w.indexer_k_norm = model_tensor(p + "indexer.k_norm.weight");
  w.indexer_wq_b = model_tensor(p + "indexer.wq_b.weight");
  w.indexer_weights_proj = model_tensor(p + "indexer.weights_proj.weight");
  return w;
}

std::string key(int s, int layer, const std::string& what) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "s%d.layer%02d.%s", s, layer, what.c_str());
  return buf;
}

// The golden attention input of `layer` for sequence s: [L, hidden].
std::vector<float> attention_input(int s, int layer) {
  const Fixture& fx = fixture();
  const int64_t hidden = fx.config.hidden_size;
  char name[32];
  std::snprintf(name, sizeof name, "s%d.input_ids", s);
  const auto ids = fx.golden.at(name).i64();
  const int64_t L = static_cast<int64_t>(ids.size());
  std::vector<float> x(static_cast<size_t>(L * hidden));
  if (layer == 0) {  // one-hot initial mix: stream 0 = the embedding
    const auto embed = model_tensor("embed.weight");
    for (int64_t t = 0; t < L; ++t)
      std::copy(embed.begin() + ids[t] * hidden, embed.begin() + (ids[t] + 1) * hidden, x.begin() + t * hidden);
  } else {
    const auto streams = fx.golden.at(key(s, layer - 1, "streams")).f32();  // [L, hc, hidden]
    const auto pre = fx.golden.at(key(s, layer - 1, "pre")).f32();          // [L, hc]
    const int64_t hc = fx.golden.at(key(s, layer - 1, "pre")).shape[1];
    for (int64_t t = 0; t < L; ++t)
      for (int64_t d = 0; d < hidden; ++d) {
        float acc = 0;
        for (int64_t j = 0; j < hc; ++j) acc += pre[t * hc + j] * streams[(t * hc + j) * hidden + d];
        x[t * hidden + d] = acc;
      }
  }
  const auto norm = model_tensor("layers." + std::to_string(layer) + ".attn_norm.weight");
  rmsnorm_rows(x.data(), L, hidden, norm.data(), fx.config.rms_norm_eps, x.data());
  return x;
}

// What one run over the prompt produced, per layer of the chain.
struct LayerRecord {
  std::vector<int32_t> topk;          // [L, index_topk]
  std::vector<float> scores;          // [L, G]  (−inf where not eligible)
  std::vector<uint8_t> candidates;    // [L, G]
};

struct RunResult {
  std::map<int, LayerRecord> layers;
  std::unique_ptr<SequenceCache> cache;
};

// Runs the chain of layers over sequence s in chunks of the given sizes (cycled).
RunResult run_chain(int s, const std::vector<int>& chain, const std::vector<int64_t>& chunks) {
  const Fixture& fx = fixture();
  const ModelConfig& cfg = fx.config;
  const int64_t hidden = cfg.hidden_size;
  std::map<int, std::vector<float>> inputs;
  std::map<int, AttentionWeights> weights;
  for (int l : chain) {
    inputs[l] = attention_input(s, l);
    weights[l] = golden_weights(l);
    EXPECT_TRUE(check_attention_weights(weights[l], cfg, fx.plan.layers[l]).ok())
        << check_attention_weights(weights[l], cfg, fx.plan.layers[l]).to_string();
  }
  const int64_t L = static_cast<int64_t>(inputs[chain[0]].size()) / hidden;
  auto rope = Rope::create(cfg);
  EXPECT_TRUE(rope.ok());
  RunResult res;
  res.cache = std::move(SequenceCache::create(cfg, fx.plan, 4096).value());
  for (int l : chain) {
    res.layers[l].topk.assign(static_cast<size_t>(L * cfg.index_topk), -1);
    const int r = fx.plan.layers[l].ratio;
    const int64_t G = r > 0 ? L / r : 0;
    res.layers[l].scores.assign(static_cast<size_t>(L * G), -std::numeric_limits<float>::infinity());
    res.layers[l].candidates.assign(static_cast<size_t>(L * G), 0);
  }
  SharedAttentionState shared;
  shared.record_trace = true;
  std::vector<float> out;
  int64_t pos = 0;
  for (size_t ci = 0; pos < L; ++ci) {
    const int64_t T = std::min(chunks[ci % chunks.size()], L - pos);
    shared.begin_forward(pos, T);
    for (int l : chain) {
      const LayerInfo& info = fx.plan.layers[l];
      out.assign(static_cast<size_t>(T * hidden), 0.f);
      Status st = attention_forward(cfg, info, weights[l], *rope, shared, *res.cache, inputs[l].data() + pos * hidden,
                                    T, pos, out.data());
      EXPECT_TRUE(st.ok()) << st.to_string();
      for (float v : out) EXPECT_TRUE(std::isfinite(v));
      LayerRecord& rec = res.layers[l];
      if (info.ratio > 0 && shared.index_layer >= 0)
        std::copy(shared.topk.begin(), shared.topk.end(), rec.topk.begin() + pos * cfg.index_topk);
      const bool index_source = info.role == LayerRole::kFull || info.role == LayerRole::kReindex;
      const int64_t G = info.ratio > 0 ? L / info.ratio : 0;
      if (index_source && shared.index_layer == l) {
        const int64_t Gc = shared.entries;
        for (int64_t i = 0; i < T; ++i)
          for (int64_t g = 0; g < Gc; ++g) {
            rec.scores[(pos + i) * G + g] = shared.trace_index_scores[i * Gc + g];
            if (info.candidate_source) rec.candidates[(pos + i) * G + g] = shared.trace_candidates[i * Gc + g];
          }
      }
    }
    pos += T;
  }
  return res;
}

// |a−b| ≤ atol except for a few elements allowed one grid step apart (quantiser flips).
void expect_close_with_flips(const std::vector<float>& got, const std::vector<float>& want, float atol,
                             int max_flips, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= atol)) ++bad;
  EXPECT_LE(bad, max_flips) << what << ": " << bad << " of " << got.size() << " elements differ";
}

void check_against_golden(int s, const std::vector<int>& chain, const RunResult& res, const std::string& mode) {
  const Fixture& fx = fixture();
  const ModelConfig& cfg = fx.config;
  for (int l : chain) {
    const LayerInfo& info = fx.plan.layers[l];
    const std::string where = mode + " s" + std::to_string(s) + " layer " + std::to_string(l);
    // Window KV kept after the prompt: the last min(L, w−1) positions.
    const auto& wk = fx.golden.at(key(s, l, "window_kv"));
    const int64_t n = wk.shape[0];
    ASSERT_EQ(n, std::min<int64_t>(res.cache->window(l).length(), cfg.sliding_window - 1)) << where;
    const std::vector<float> got = res.cache->window_rows(l);
    expect_close_with_flips(got, wk.f32(), 1e-5f, 2, where + " window_kv");

    if (info.role == LayerRole::kFull && fx.golden.count(key(s, l, "compressed_kv"))) {
      const KvSourceCache* kv = res.cache->kv_source(l);
      const auto& ck = fx.golden.at(key(s, l, "compressed_kv"));
      const auto& ik = fx.golden.at(key(s, l, "index_keys"));
      ASSERT_EQ(kv->entries(), ck.shape[0]) << where;
      const std::vector<float> m = res.cache->main_rows(l), ix = res.cache->index_rows(l);
      expect_close_with_flips(m, ck.f32(), 1e-5f, 3, where + " compressed_kv");
      expect_close_with_flips(ix, ik.f32(), 1e-5f, 3, where + " index_keys");
    }
    if (fx.golden.count(key(s, l, "topk"))) {
      const auto want = fx.golden.at(key(s, l, "topk")).i64();
      const auto& got = res.layers.at(l).topk;
      ASSERT_EQ(got.size(), want.size()) << where;
      int diff = 0;
      for (size_t i = 0; i < want.size(); ++i) diff += got[i] != want[i];
      EXPECT_EQ(diff, 0) << where << " topk";
    }
    if (fx.golden.count(key(s, l, "index_scores"))) {
      const auto want = fx.golden.at(key(s, l, "index_scores")).f32();
      const auto& got = res.layers.at(l).scores;
      ASSERT_EQ(got.size(), want.size()) << where;
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::isinf(want[i]) || std::isinf(got[i])) {
          bad += !(got[i] == want[i]);
        } else {
          bad += !(std::fabs(got[i] - want[i]) <= 1e-4f * std::max(1.0f, std::fabs(want[i])));
        }
      }
      EXPECT_EQ(bad, 0) << where << " index_scores";
    }
    if (fx.golden.count(key(s, l, "candidates"))) {
      const auto& t = fx.golden.at(key(s, l, "candidates"));
      const auto& got = res.layers.at(l).candidates;
      ASSERT_EQ(got.size(), t.bytes.size()) << where;
      // The reference's pool also marks the not-yet-visible tail of the pinned block, which
      // depends on how wide the score row was (the whole prompt in one prefill, the entries so far
      // in a chunk). Visible entries must agree in every mode; all entries in one prefill.
      const int64_t G = t.shape[1];
      int diff = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const int64_t row = static_cast<int64_t>(i) / G, g = static_cast<int64_t>(i) % G;
        if (mode != "prefill" && g >= (row + 1) / info.ratio) continue;
        diff += got[i] != t.bytes[i];
      }
      EXPECT_EQ(diff, 0) << where << " candidates";
    }
  }
}

const std::vector<std::vector<int>> kChains = {{0}, {2, 3}, {6, 7, 8, 9, 10, 11}};

TEST(AttentionGolden, RopeTablesMatch) {
  const Fixture& fx = fixture();
  ASSERT_TRUE(fx.ok) << "golden fixture not readable at " << kFixture;
  auto rope = Rope::create(fx.config);
  ASSERT_TRUE(rope.ok()) << rope.status().to_string();
  const auto main = fx.golden.at("rope.main.inv_freq").f32();
  const auto comp = fx.golden.at("rope.compress.inv_freq").f32();
  ASSERT_EQ(rope->inv_freq(RopeKind::kMain).size(), main.size());
  ASSERT_EQ(rope->inv_freq(RopeKind::kCompress).size(), comp.size());
  for (size_t i = 0; i < main.size(); ++i) {
    EXPECT_NEAR(rope->inv_freq(RopeKind::kMain)[i], main[i], 2e-7 * main[i]) << i;
    EXPECT_NEAR(rope->inv_freq(RopeKind::kCompress)[i], comp[i], 2e-7 * comp[i]) << i;
  }
}

TEST(AttentionGolden, OnePrefillMatchesFixture) {
  ASSERT_TRUE(fixture().ok);
  for (int s = 0; s < 4; ++s)
    for (const auto& chain : kChains) {
      RunResult r = run_chain(s, chain, {1 << 20});
      check_against_golden(s, chain, r, "prefill");
    }
}

TEST(AttentionGolden, OddChunksMatchFixture) {
  ASSERT_TRUE(fixture().ok);
  for (int s = 1; s < 4; ++s)
    for (const auto& chain : kChains) {
      RunResult r = run_chain(s, chain, {3, 1, 7, 5});
      check_against_golden(s, chain, r, "chunks");
    }
}

TEST(AttentionGolden, TokenByTokenMatchesFixture) {
  ASSERT_TRUE(fixture().ok);
  for (int s = 1; s < 4; ++s)
    for (const auto& chain : kChains) {
      RunResult r = run_chain(s, chain, {1});
      check_against_golden(s, chain, r, "decode");
    }
}

}  // namespace
}  // namespace dsv41
