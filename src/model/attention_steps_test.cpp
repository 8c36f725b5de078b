// Sparse sink attention with windows cut at a start position (issue 9 item 5) against a scalar
// reference that builds each query's key list explicitly: window keys [max(s, t − w + 1), t]
// followed by the selected compressed entries, softmax with the sink in the denominator, in
// double. Random queries, window rows and compressed entries; cut positions before, inside and
// after the window; segments of 1 and several tokens.
#include "model/attention_steps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cache/records.h"

namespace dsv41 {
namespace {

struct AttnSetup {
  ModelConfig config;
  AttentionWeights w;
  Rope rope;
};

AttnSetup make_setup() {
  ModelConfig c;
  c.hidden_size = 32;
  c.num_attention_heads = 3;
  c.head_dim = 32;
  c.qk_rope_head_dim = 8;
  c.sliding_window = 6;
  c.index_topk = 3;
  c.compress_ratios = {0};
  c.num_hidden_layers = 1;
  c.kv_source_layer_ids = {};
  c.index_source_layer_ids = {};
  auto rope = Rope::create(c);
  EXPECT_TRUE(rope.ok()) << rope.status().to_string();
  AttnSetup s{c, {}, std::move(*rope)};
  s.w.attn_sink = {0.3f, -0.7f, 1.1f};
  return s;
}

// The reference: o[T, H, D] for queries q at positions start…, window rows by position (dequantised
// values of every position < start+T), selected entries sel[T][k] rows (already dequantised).
std::vector<float> reference(const AttnSetup& s, const std::vector<std::vector<float>>& window_by_pos,
                             const std::vector<std::vector<std::vector<float>>>& sel, const std::vector<float>& q,
                             int64_t cut, int64_t start, int64_t T) {
  const int64_t H = s.config.num_attention_heads, D = s.config.head_dim, w = s.config.sliding_window;
  std::vector<float> o(T * H * D);
  for (int64_t i = 0; i < T; ++i) {
    const int64_t t = start + i;
    std::vector<const std::vector<float>*> keys;
    for (int64_t p = std::max(cut, t - w + 1); p <= t; ++p) keys.push_back(&window_by_pos[p]);
    for (const auto& e : sel[i]) keys.push_back(&e);
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (i * H + h) * D;
      std::vector<double> logit(keys.size());
      double m = s.w.attn_sink[h];
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += double(qh[d]) * (*keys[j])[d];
        logit[j] = dot / std::sqrt(double(D));
        m = std::max(m, logit[j]);
      }
      double denom = std::exp(s.w.attn_sink[h] - m);
      for (double& l : logit) denom += (l = std::exp(l - m));
      std::vector<float> acc(D);
      for (size_t j = 0; j < keys.size(); ++j)
        for (int64_t d = 0; d < D; ++d) acc[d] += static_cast<float>(logit[j] / denom * (*keys[j])[d]);
      std::vector<float> cs(4), sn(4);
      s.rope.cos_sin(RopeKind::kMain, t, cs.data(), sn.data());
      rope_rotate(acc.data(), D, 8, cs.data(), sn.data(), true);
      std::copy(acc.begin(), acc.end(), o.begin() + (i * H + h) * D);
    }
  }
  return o;
}

TEST(SparseSinkAttention, WindowsCutAtAStartMatchTheExplicitlyMaskedReference) {
  AttnSetup s = make_setup();
  const int64_t H = 3, D = 32, w = 6, k = 3;
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0, 1);
  auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = nd(rng);
  };
  for (int64_t start : {0, 3, 9, 14})
    for (int64_t cut : {int64_t{0}, std::max<int64_t>(0, start - 2), start})
      for (int64_t T : {1, 4}) {
        if (cut > start) continue;
        // Window rows of every position (as the ring's records decode them).
        std::vector<std::vector<float>> by_pos(start + T, std::vector<float>(D));
        for (auto& r : by_pos) {
          fill(r);
          row_fake_quant(RowKind::kWindow, r.data(), D);
        }
        WindowRing ring(w, w + 2, D);
        ring.restart(cut);
        for (int64_t p = cut; p < start; ++p) ring.push(by_pos[p].data());
        std::vector<float> chunk(T * D);
        for (int64_t i = 0; i < T; ++i) std::copy(by_pos[start + i].begin(), by_pos[start + i].end(), chunk.begin() + i * D);
        // A small compressed cache and a top-k with −1 padding.
        PagePool pool(4 * main_row_bytes(D)), ipool(4 * index_row_bytes(32));
        KvSourceCache kv(0, 2, D, 32, &pool, &ipool, 4);
        std::vector<std::vector<float>> entries(5, std::vector<float>(D));
        for (auto& e : entries) {
          fill(e);
          row_pack(RowKind::kMain, e.data(), D, kv.main.append());
          row_unpack(RowKind::kMain, kv.main.row(kv.main.size() - 1), D, e.data());
        }
        std::vector<int32_t> topk(T * k, -1);
        std::vector<std::vector<std::vector<float>>> sel(T);
        for (int64_t i = 0; i < T; ++i)
          for (int j = 0; j < static_cast<int>(i % 3) + 1; ++j) {
            topk[i * k + j] = static_cast<int32_t>((i + 2 * j) % 5);
            sel[i].push_back(entries[topk[i * k + j]]);
          }
        std::vector<float> q(T * H * D);
        fill(q);
        std::vector<int64_t> positions(T);
        for (int64_t i = 0; i < T; ++i) positions[i] = start + i;
        RopeRows rope_rows;
        rope_rows.compute(s.rope, RopeKind::kMain, positions.data(), T);
        std::vector<float> got(T * H * D);
        sparse_sink_attention(s.config, s.w, ring, chunk.data(), &kv, topk.data(), q.data(), rope_rows, 0, T, start,
                              got.data());
        const std::vector<float> want = reference(s, by_pos, sel, q, cut, start, T);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i])))
              << "start " << start << " cut " << cut << " T " << T << " element " << i;
      }
}

}  // namespace
}  // namespace dsv41
