#include "model/indexer.h"

#include "kernels/cpu/index_score.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <limits>
#include <vector>

namespace dsv41 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(IndexerTopk, LargestAscendingTiesToLowerIndexAndPadding) {
  const std::vector<float> s = {0.5f, 2.0f, -kInf, 2.0f, 1.0f, 2.0f};
  std::vector<int32_t> out(3);
  select_topk(s.data(), 6, 3, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3, 5}));
  out.assign(2, 0);
  select_topk(s.data(), 6, 2, out.data());  // three-way tie at 2.0: the two lowest indices
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3}));
  // Fewer finite scores than k: −inf picks are dropped, the row is −1 padded.
  const std::vector<float> few = {-kInf, 3.0f, -kInf};
  out.assign(4, 0);
  select_topk(few.data(), 3, 4, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, -1, -1, -1}));
}

// The selection against the definition (a full sort by value then index) on random rows full of
// ties, −inf and NaN (NaN counts as −inf: never picked), for every k around the row's size.
TEST(IndexerTopk, SelectionEqualsSortingOnRandomRows) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t G = trial % 10 == 0 ? 1000 + static_cast<int64_t>(rng() % 1000) : 1 + static_cast<int64_t>(rng() % 90);
    std::vector<float> s(static_cast<size_t>(G));
    for (auto& v : s) {
      const uint32_t u = rng() % 10;
      v = u == 0 ? -kInf : u == 1 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(rng() % 7) - 3.0f;
    }
    for (int k : {1, 2, 7, static_cast<int>(G) - 1, static_cast<int>(G), static_cast<int>(G) + 3}) {
      if (k < 1) continue;
      std::vector<int32_t> idx(static_cast<size_t>(G));
      std::iota(idx.begin(), idx.end(), 0);
      auto key = [&](int32_t i) { return std::isnan(s[i]) ? -kInf : s[i]; };
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
      std::vector<int32_t> want;
      for (int64_t j = 0; j < std::min<int64_t>(k, G); ++j)
        if (key(idx[j]) > -kInf) want.push_back(idx[j]);
      std::sort(want.begin(), want.end());
      want.resize(static_cast<size_t>(k), -1);
      std::vector<int32_t> got(static_cast<size_t>(k), 99);
      select_topk(s.data(), G, k, got.data());
      EXPECT_EQ(got, want) << "G " << G << " k " << k;
    }
  }
}

TEST(IndexerCandidates, PinsTheNewestVisibleBlockAndDropsUnreachable) {
  // 7 entries in blocks of 2 (last block padded): block maxima 5, 1, 9, −inf.
  const std::vector<float> s = {5.0f, 1.0f, 0.5f, 1.0f, 9.0f, 2.0f, -kInf};
  std::vector<int32_t> kept(2);
  // visible = 5 → newest visible entry 4 is in block 2 (pinned); best other block: 0.
  select_candidate_blocks(s.data(), 7, 5, 2, 2, kept.data());
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 2}));
  // visible = 7: the newest visible entry 6 sits in block 3, whose only score is −inf; the pin
  // keeps it anyway, and the other pick is block 2 (max 9).
  select_candidate_blocks(s.data(), 7, 7, 2, 2, kept.data());
  EXPECT_EQ(kept, (std::vector<int32_t>{2, 3}));
  // Nothing visible: nothing pinned, −inf blocks never kept.
  const std::vector<float> none(4, -kInf);
  kept.assign(3, 0);
  select_candidate_blocks(none.data(), 4, 0, 2, 3, kept.data());
  EXPECT_EQ(kept, (std::vector<int32_t>{-1, -1, -1}));
}

TEST(IndexerScores, VisibilityFollowsGroupEnds) {
  ModelConfig c;
  c.index_n_heads = 1;
  c.index_head_dim = 32;
  PagePool main_pool(1 << 12), index_pool(1 << 12);
  for (int ratio : {1, 2, 3}) {
    KvSourceCache kv(0, ratio, 32, 32, &main_pool, &index_pool, 8);
    std::vector<float> key(32, 1.0f);
    const int64_t G = 4;
    for (int g = 0; g < G; ++g) index_row_pack(key.data(), 32, kv.index.append());
    const int64_t T = G * ratio;
    std::vector<float> q(T * 32, 1.0f), w(T, 1.0f), scores(T * G);
    indexer_scores(c, kv, G, ratio, q.data(), w.data(), 0, T, 0, scores.data());
    for (int64_t t = 0; t < T; ++t)
      for (int64_t g = 0; g < G; ++g) {
        const bool visible = g < (t + 1) / ratio;
        EXPECT_EQ(std::isinf(scores[t * G + g]), !visible) << "r=" << ratio << " t=" << t << " g=" << g;
        // ReLU(32) · 32^-1/2 · 1: every visible score is √32.
        if (visible) {
          EXPECT_NEAR(scores[t * G + g], std::sqrt(32.0f), 1e-5f);
        }
      }
  }
}

TEST(IndexerScores, PoolOnlyScoringEqualsFullScoringMasked) {
  ModelConfig c;
  c.index_n_heads = 3;
  c.index_head_dim = 64;
  PagePool main_pool(1 << 14), index_pool(1 << 14);
  KvSourceCache kv(0, 1, 32, 64, &main_pool, &index_pool, 16);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t G = 37, T = 5, start = 32;  // rows see 33..37 entries
  std::vector<float> key(64);
  for (int64_t g = 0; g < G; ++g) {
    for (auto& v : key) v = nd(rng);
    index_row_pack(key.data(), 64, kv.index.append());
  }
  std::vector<float> q(T * 3 * 64), w(T * 3), full(T * G), pooled(G);
  for (auto& v : q) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  indexer_scores(c, kv, G, 1, q.data(), w.data(), 0, T, start, full.data());
  const int bs = 4, nb = 5;
  for (int64_t i = 0; i < T; ++i) {
    std::vector<int32_t> kept(nb);
    select_candidate_blocks(full.data() + i * G, G, (start + i + 1) / 1, bs, nb, kept.data());
    indexer_scores_in_pool(c, kv, G, 1, q.data(), w.data(), i, start, kept.data(), nb, bs, pooled.data());
    for (int64_t g = 0; g < G; ++g) {
      const bool in_pool = std::find(kept.begin(), kept.end(), static_cast<int32_t>(g / bs)) != kept.end();
      const float want = in_pool ? full[i * G + g] : -kInf;
      EXPECT_EQ(pooled[g], want) << "row " << i << " entry " << g;
    }
  }
}

// The tiled scoring on every ISA: each visible (row, entry) score has the bits of
// index_score_reference on the unpacked key, the rest −inf; rows from before the first entry to
// past the last, more rows than one tile call takes, partial key tiles, ratio 2.
TEST(IndexerScores, TiledScoringEqualsTheDefinitionOnEveryIsa) {
  ModelConfig c;
  c.index_n_heads = 3;
  c.index_head_dim = 64;
  PagePool main_pool(1 << 14), index_pool(1 << 14);
  const int ratio = 2;
  KvSourceCache kv(0, ratio, 32, 64, &main_pool, &index_pool, 16);
  std::mt19937 rng(8);
  std::normal_distribution<float> nd;
  const int64_t G = 45, T = 100, start = 0;  // row t sees ⌊(t+1)/2⌋ entries: 0 … 45 (capped)
  std::vector<float> key(64);
  for (int64_t g = 0; g < G; ++g) {
    for (auto& v : key) v = nd(rng);
    index_row_pack(key.data(), 64, kv.index.append());
  }
  std::vector<float> q(T * 3 * 64), w(T * 3);
  for (auto& v : q) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  for (int64_t i = 0; i < T * 3; ++i) row_fake_quant(RowKind::kIndex, q.data() + i * 64, 64);
  const float scale = 0.125f;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa > cpu_best_isa()) continue;
    std::vector<float> scores(T * G);
    indexer_scores(c, kv, G, ratio, q.data(), w.data(), 0, T, start, scores.data(), nullptr, isa);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < G; ++g) {
        const float got = scores[t * G + g];
        if (g >= (t + 1) / ratio) {
          EXPECT_EQ(got, -kInf) << cpu_isa_name(isa) << " t " << t << " g " << g;
          continue;
        }
        kv.read_index(g, key.data());
        const float want = index_score_reference(q.data() + t * 3 * 64, w.data() + t * 3, 3, 64, key.data(), scale);
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << cpu_isa_name(isa) << " t " << t << " g " << g;
      }
    }
  }
}

}  // namespace
}  // namespace dsv41
