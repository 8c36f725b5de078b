// Attention on random weights at shapes unlike the fixtures (ratio 3 and 1, window 5, 4 heads in
// 2 groups): chunked prefill (odd sizes) and token-by-token decode against one prefill, a dense
// from-the-definition reference for SWA layers across the window boundary, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "cache/sequence_cache.h"
#include "model/attention.h"
#include "testing/random_model.h"
#include "model/rmsnorm.h"
#include "model/rope.h"

namespace dsv41 {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.source = "small-test-config";
  c.hidden_size = 48;
  c.num_hidden_layers = 7;
  c.num_attention_heads = 4;
  c.head_dim = 64;
  c.qk_rope_head_dim = 16;
  c.q_lora_rank = 24;
  c.o_groups = 2;
  c.o_lora_rank = 16;
  c.rms_norm_eps = 1e-6;
  c.sliding_window = 5;
  //               0  1  2  3  4  5  6
  c.compress_ratios = {0, 3, 3, 1, 1, 1, 1};
  c.kv_source_layer_ids = {1, 3};
  c.index_source_layer_ids = {1, 3, 5};
  c.candidate_source_layer_id = 3;
  c.candidate_block_size = 2;
  c.candidate_topk_blocks = 2;
  c.index_n_heads = 4;
  c.index_head_dim = 32;
  c.index_topk = 3;
  c.engram_layer_ids.clear();  // no Engram, no DSpark in this attention-only model
  c.engram_num_embeddings.clear();
  c.dspark_target_layer_ids.clear();
  c.num_nextn_predict_layers = 0;
  return c;
}

LayerPlan small_plan(const ModelConfig& c) {
  auto plan = build_layer_plan(c);
  if (!plan.ok()) ADD_FAILURE() << plan.status().to_string();
  return plan.ok() ? *plan : LayerPlan{};
}

struct Model {
  ModelConfig config = small_config();
  LayerPlan plan = small_plan(config);
  Rope rope = Rope::create(config).value();
  std::vector<AttentionWeights> weights;
  Model() {
    for (const LayerInfo& l : plan.layers) weights.push_back(random_attention_weights(config, l, 11));
  }
  explicit Model(const ModelConfig& c) : config(c), plan(small_plan(c)), rope(Rope::create(c).value()) {
    for (const LayerInfo& l : plan.layers) weights.push_back(random_attention_weights(config, l, 11));
  }
};

// Independent inputs per layer and token: [layers][L, hidden].
std::vector<std::vector<float>> random_inputs(const ModelConfig& c, int64_t L, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<std::vector<float>> x(c.num_hidden_layers, std::vector<float>(L * c.hidden_size));
  for (auto& v : x)
    for (auto& e : v) e = nd(rng);
  return x;
}

struct ChainRun {
  std::vector<std::vector<float>> out;            // [layers][L, hidden]
  std::vector<std::vector<int32_t>> topk;         // [layers][L, index_topk] (latest top-k seen by the layer)
  std::unique_ptr<SequenceCache> cache;
};

ChainRun run(const Model& m, const std::vector<std::vector<float>>& x, int64_t L, const std::vector<int64_t>& chunks,
             int threads = 0, ThreadPool* pool = nullptr, CpuIsa isa = CpuIsa::kAvx512) {
  const ModelConfig& c = m.config;
  ChainRun r;
  r.cache = std::move(SequenceCache::create(c, m.plan, std::max<int64_t>(256, L)).value());
  AttentionOptions options{threads};
  options.exec.pool = pool;
  options.exec.isa = isa;
  r.out.assign(c.num_hidden_layers, std::vector<float>(L * c.hidden_size));
  r.topk.assign(c.num_hidden_layers, std::vector<int32_t>(L * c.index_topk, -2));
  SharedAttentionState shared;
  int64_t pos = 0;
  for (size_t ci = 0; pos < L; ++ci) {
    const int64_t T = std::min(chunks[ci % chunks.size()], L - pos);
    shared.begin_forward(pos, T);
    for (const LayerInfo& l : m.plan.layers) {
      Status st = attention_forward(c, l, m.weights[l.index], m.rope, shared, *r.cache,
                                    x[l.index].data() + pos * c.hidden_size, T, pos,
                                    r.out[l.index].data() + pos * c.hidden_size, options);
      EXPECT_TRUE(st.ok()) << st.to_string();
      if (l.ratio > 0 && shared.index_layer >= 0)
        std::copy(shared.topk.begin(), shared.topk.end(), r.topk[l.index].begin() + pos * c.index_topk);
    }
    pos += T;
  }
  EXPECT_EQ(r.cache->length(), L);
  return r;
}

void expect_same(const ChainRun& a, const ChainRun& b, const Model& m, const char* what) {
  const ModelConfig& c = m.config;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    for (size_t i = 0; i < a.out[l].size(); ++i)
      ASSERT_NEAR(a.out[l][i], b.out[l][i], 1e-5f * std::max(1.0f, std::fabs(a.out[l][i])))
          << what << " layer " << l << " element " << i;
    EXPECT_EQ(a.topk[l], b.topk[l]) << what << " layer " << l;
    const KvSourceCache* ka = a.cache->kv_source(l);
    const KvSourceCache* kb = b.cache->kv_source(l);
    ASSERT_EQ(ka == nullptr, kb == nullptr);
    if (!ka) continue;
    ASSERT_EQ(ka->entries(), kb->entries()) << what << " layer " << l;
    ASSERT_EQ(ka->pending, kb->pending) << what << " layer " << l;
    for (int64_t g = 0; g < ka->entries(); ++g) {
      EXPECT_EQ(0, std::memcmp(ka->main.row(g), kb->main.row(g), ka->main.record_bytes())) << what << " entry " << g;
      EXPECT_EQ(0, std::memcmp(ka->index.row(g), kb->index.row(g), ka->index.record_bytes())) << what << " key " << g;
    }
  }
}

TEST(Attention, ChunkedAndDecodeEqualOnePrefill) {
  Model m;
  for (int64_t L : {1, 2, 3, 4, 5, 6, 13, 29}) {
    auto x = random_inputs(m.config, L, static_cast<uint32_t>(100 + L));
    ChainRun one = run(m, x, L, {L});
    expect_same(one, run(m, x, L, {1}), m, "token-by-token");
    expect_same(one, run(m, x, L, {1, 3, 7}), m, "chunks 1,3,7");
    expect_same(one, run(m, x, L, {4, 2}), m, "chunks 4,2");
    // The ratio-3 compressor keeps the trailing partial group pending.
    EXPECT_EQ(one.cache->kv_source(1)->entries(), L / 3);
    EXPECT_EQ(one.cache->kv_source(1)->pending, L % 3);
    EXPECT_EQ(one.cache->kv_source(3)->entries(), L);
  }
}

TEST(Attention, ThreadCountDoesNotChangeResults) {
  Model m;
  const int64_t L = 17;
  auto x = random_inputs(m.config, L, 42);
  ChainRun one = run(m, x, L, {L}, 1);
  for (int threads : {2, 3, 7}) {
    ChainRun r = run(m, x, L, {L}, threads);
    for (int l = 0; l < m.config.num_hidden_layers; ++l) EXPECT_EQ(one.out[l], r.out[l]) << threads << " threads, layer " << l;
    ChainRun d = run(m, x, L, {1}, threads);  // one token: threads split the heads
    ChainRun d1 = run(m, x, L, {1}, 1);
    for (int l = 0; l < m.config.num_hidden_layers; ++l) EXPECT_EQ(d1.out[l], d.out[l]) << threads << " threads, layer " << l;
  }
}

// A long prefill on a pool with the automatic split (threads = 0): 4 ranges a thread, run as
// threads free up, against one range on the caller.
TEST(Attention, PoolSplitOfALongPrefillDoesNotChangeResults) {
  Model m;
  const int64_t L = 1500;  // enough work a token for the automatic split to thread
  auto x = random_inputs(m.config, L, 43);
  ChainRun one = run(m, x, L, {L}, 1);
  for (int n : {2, 3}) {
    ThreadPool pool(n);
    ChainRun r = run(m, x, L, {L}, 0, &pool);
    for (int l = 0; l < m.config.num_hidden_layers; ++l) EXPECT_EQ(one.out[l], r.out[l]) << n << " threads, layer " << l;
  }
}

// `--isa amx` (gemm_amx.h, attention_amx.h): with 32 heads a prompt's sink attention runs on the
// tiles, its products too; against the vector paths the layers agree to float rounding. Layer 0
// (window only) is compared tightly; the others go through the indexer's top-k, where a score
// that moves by a rounding may pick another entry, so they are only checked finite.
TEST(Attention, AmxTilesAgreeWithTheVectorPaths) {
  if (!cpu_has_amx()) GTEST_SKIP() << "no AMX here: " << amx_unavailable_reason();
  ModelConfig c = small_config();
  c.num_attention_heads = 32;
  const Model m(c);
  const int64_t L = 40;  // ≥ kAmxMinRows tokens in the call
  auto x = random_inputs(m.config, L, 47);
  ThreadPool pool(3);
  ChainRun vec = run(m, x, L, {L}, 0, &pool, CpuIsa::kAvx512);
  ChainRun amx = run(m, x, L, {L}, 0, &pool, CpuIsa::kAmx);
  double scale = 0, diff = 0;
  for (size_t i = 0; i < vec.out[0].size(); ++i) {
    scale = std::max(scale, std::fabs(double(vec.out[0][i])));
    diff = std::max(diff, std::fabs(double(vec.out[0][i]) - amx.out[0][i]));
  }
  EXPECT_GT(diff, 0.0) << "the tiles did not run";
  EXPECT_LE(diff, 1e-5 * scale) << "layer 0: max |amx - avx512| " << diff << " of max |out| " << scale;
  for (int l = 1; l < c.num_hidden_layers; ++l)
    for (float v : amx.out[l]) ASSERT_TRUE(std::isfinite(v)) << "layer " << l;
}

TEST(Attention, AllocatorAgreesWithSizingPlan) {
  Model m;
  for (int64_t L : {1, 7, 29}) {
    auto x = random_inputs(m.config, L, 5);
    CacheOptions opt;
    ChainRun r = run(m, x, L, {L});
    auto plan_bytes = plan_cache_bytes(m.config, m.plan, L, opt);
    ASSERT_TRUE(plan_bytes.ok());
    const CacheFootprint used = r.cache->bytes_in_use();
    EXPECT_EQ(used.window, plan_bytes->window);
    EXPECT_EQ(used.main, plan_bytes->main);
    EXPECT_EQ(used.index, plan_bytes->index);
    // window: 7 layers × 5 slots × (64 + 2) bytes.
    EXPECT_EQ(used.window, 7 * 5 * 66);
  }
}

// Sink attention from the definition for an SWA-only layer: every position's K=V row computed
// directly, window positions max(0, t−w+1)…t, dense softmax with the sink, inverse RoPE, grouped
// output projection via explicit block-diagonal indexing.
// extra(t) gives the compressed entries (dequantised rows, [n, head_dim]) query t also attends.
std::vector<float> dense_reference(const Model& m, const LayerInfo& layer, const AttentionWeights& w, const float* x,
                                   int64_t L, const std::function<std::vector<float>(int64_t)>& extra) {
  const RopeKind kind = layer.rope;
  const ModelConfig& c = m.config;
  const int64_t hid = c.hidden_size, H = c.num_attention_heads, D = c.head_dim, ql = c.q_lora_rank;
  const int64_t win = c.sliding_window;
  auto matvec = [](const std::vector<float>& W, const float* v, int64_t out, int64_t in, float* y) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += double(W[o * in + i]) * v[i];
      y[o] = float(s);
    }
  };
  std::vector<float> kv(L * D), q(L * H * D);
  for (int64_t t = 0; t < L; ++t) {
    std::vector<float> cq(ql);
    matvec(w.wq_a, x + t * hid, ql, hid, cq.data());
    rmsnorm_row(cq.data(), ql, w.q_norm.data(), c.rms_norm_eps, cq.data());
    matvec(w.wq_b, cq.data(), H * D, ql, q.data() + t * H * D);
    for (int64_t h = 0; h < H; ++h) m.rope.apply(kind, q.data() + (t * H + h) * D, D, t);
    matvec(w.wkv, x + t * hid, D, hid, kv.data() + t * D);
    rmsnorm_row(kv.data() + t * D, D, w.kv_norm.data(), c.rms_norm_eps, kv.data() + t * D);
    m.rope.apply(kind, kv.data() + t * D, D, t);
    row_fake_quant(RowKind::kWindow, kv.data() + t * D, D);
  }
  std::vector<float> out(L * hid);
  const int64_t hpg = H / c.o_groups;
  for (int64_t t = 0; t < L; ++t) {
    std::vector<float> o(H * D, 0.f);
    // All keys: every earlier position (masked outside the window), then the compressed ones.
    std::vector<float> keys(kv.begin(), kv.begin() + (t + 1) * D);
    const std::vector<float> more = extra(t);
    keys.insert(keys.end(), more.begin(), more.end());
    const int64_t nk = static_cast<int64_t>(keys.size()) / D;
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> s;
      double mx = w.attn_sink[h];
      for (int64_t p = 0; p < nk; ++p) {
        if (p <= t && p < t - win + 1) { s.push_back(-INFINITY); continue; }
        double d = 0;
        for (int64_t i = 0; i < D; ++i) d += double(q[(t * H + h) * D + i]) * keys[p * D + i];
        s.push_back(d / std::sqrt(double(D)));
        mx = std::max(mx, s.back());
      }
      double den = std::exp(w.attn_sink[h] - mx);
      for (double v : s) den += std::exp(v - mx);
      for (int64_t p = 0; p < nk; ++p)
        for (int64_t i = 0; i < D; ++i) o[h * D + i] += float(std::exp(s[p] - mx) / den * keys[p * D + i]);
      m.rope.apply(kind, o.data() + h * D, D, t, /*inverse=*/true);
    }
    std::vector<float> mid(c.o_groups * c.o_lora_rank, 0.f);
    for (int64_t g = 0; g < c.o_groups; ++g)
      for (int64_t r = 0; r < c.o_lora_rank; ++r) {
        double s = 0;
        for (int64_t j = 0; j < hpg * D; ++j) s += double(w.wo_a[(g * c.o_lora_rank + r) * hpg * D + j]) * o[g * hpg * D + j];
        mid[g * c.o_lora_rank + r] = float(s);
      }
    matvec(w.wo_b, mid.data(), hid, c.o_groups * c.o_lora_rank, out.data() + t * hid);
  }
  return out;
}

TEST(Attention, SwaLayerMatchesDenseReferenceAcrossWindowBoundary) {
  Model m;
  const int64_t w = m.config.sliding_window;
  for (int64_t L : {w - 1, w, w + 1, 3 * w + 2}) {
    auto x = random_inputs(m.config, L, static_cast<uint32_t>(7 * L));
    const std::vector<float> want = dense_reference(m, m.plan.layers[0], m.weights[0], x[0].data(), L,
                                                    [](int64_t) { return std::vector<float>{}; });
    for (std::vector<int64_t> chunks : {std::vector<int64_t>{L}, {1}, {2, 5}}) {
      ChainRun r = run(m, x, L, chunks);
      for (int64_t i = 0; i < L * m.config.hidden_size; ++i)
        ASSERT_NEAR(r.out[0][i], want[i], 2e-5f * std::max(1.0f, std::fabs(want[i]))) << "L=" << L << " i=" << i;
    }
  }
}

TEST(Attention, CompressedLayersMatchDenseReferenceOverSelectedEntries) {
  // Every compressed layer (Full, Reuse, Reindex; ratios 3 and 1) against the dense definition,
  // given the entries its top-k selected (top-k and entries themselves are checked against the
  // golden fixture elsewhere).
  Model m;
  const ModelConfig& c = m.config;
  const int64_t L = 23;
  auto x = random_inputs(c, L, 99);
  ChainRun r = run(m, x, L, {L});
  for (const LayerInfo& l : m.plan.layers) {
    if (l.ratio == 0) continue;
    const KvSourceCache* kv = r.cache->kv_source(l.kv_source);
    ASSERT_NE(kv, nullptr);
    int selected = 0;
    auto extra = [&](int64_t t) {
      std::vector<float> rows;
      for (int j = 0; j < c.index_topk; ++j) {
        const int32_t g = r.topk[l.index][t * c.index_topk + j];
        if (g < 0) continue;
        EXPECT_LT(g, (t + 1) / l.ratio) << "layer " << l.index << " t=" << t << " selected an invisible entry";
        std::vector<float> row(c.head_dim);
        kv->read_main(g, row.data());
        rows.insert(rows.end(), row.begin(), row.end());
        ++selected;
      }
      return rows;
    };
    const std::vector<float> want = dense_reference(m, l, m.weights[l.index], x[l.index].data(), L, extra);
    EXPECT_GT(selected, 0) << "layer " << l.index;
    for (int64_t i = 0; i < L * c.hidden_size; ++i)
      ASSERT_NEAR(r.out[l.index][i], want[i], 2e-5f * std::max(1.0f, std::fabs(want[i])))
          << "layer " << l.index << " i=" << i;
  }
}

TEST(Attention, RejectsBadCallsWithoutTouchingState) {
  Model m;
  const ModelConfig& c = m.config;
  auto cache = std::move(SequenceCache::create(c, m.plan, 8).value());
  auto x = random_inputs(c, 9, 3);
  std::vector<float> out(9 * c.hidden_size);
  SharedAttentionState shared;
  shared.begin_forward(0, 2);
  const LayerInfo& l0 = m.plan.layers[0];
  // Wrong start position.
  Status st = attention_forward(c, l0, m.weights[0], m.rope, shared, *cache, x[0].data(), 2, 1, out.data());
  EXPECT_EQ(st.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(cache->window(0).length(), 0);
  // Zero tokens.
  EXPECT_FALSE(attention_forward(c, l0, m.weights[0], m.rope, shared, *cache, x[0].data(), 0, 0, out.data()).ok());
  // Past the context.
  shared.begin_forward(0, 9);
  st = attention_forward(c, l0, m.weights[0], m.rope, shared, *cache, x[0].data(), 9, 0, out.data());
  EXPECT_EQ(st.kind(), ErrorKind::kOutOfRange);
  EXPECT_EQ(cache->window(0).length(), 0);
  // Weights of another layer.
  shared.begin_forward(0, 2);
  EXPECT_FALSE(attention_forward(c, l0, m.weights[1], m.rope, shared, *cache, x[0].data(), 2, 0, out.data()).ok());
  // A Reuse layer without its kv source published in this forward.
  const LayerInfo& l2 = m.plan.layers[2];
  ASSERT_EQ(l2.role, LayerRole::kReuse);
  st = attention_forward(c, l2, m.weights[2], m.rope, shared, *cache, x[2].data(), 2, 0, out.data());
  EXPECT_EQ(st.kind(), ErrorKind::kInternal);
  EXPECT_EQ(cache->window(2).length(), 0);
}

TEST(Attention, WeightCheckNamesTheTensor) {
  Model m;
  AttentionWeights w = m.weights[1];
  EXPECT_TRUE(check_attention_weights(w, m.config, m.plan.layers[1]).ok());
  w.compressor_wgate.pop_back();
  Status st = check_attention_weights(w, m.config, m.plan.layers[1]);
  EXPECT_NE(st.message().find("layers.1.attn.compressor.wgate.weight"), std::string::npos) << st.message();
  w = m.weights[3];  // ratio 1: no wgate
  w.compressor_wgate.assign(m.config.head_dim * m.config.hidden_size, 0.f);
  st = check_attention_weights(w, m.config, m.plan.layers[3]);
  EXPECT_NE(st.message().find("compressor.wgate.weight' is present"), std::string::npos) << st.message();
  w = m.weights[0];
  w.wq_b.clear();
  st = check_attention_weights(w, m.config, m.plan.layers[0]);
  EXPECT_EQ(st.kind(), ErrorKind::kNotFound);
  EXPECT_NE(st.message().find("layers.0.attn.wq_b.weight"), std::string::npos);
}

}  // namespace
}  // namespace dsv41
