// Sparse sink attention on the GPU against a float64 CPU reference built from the CPU record
// codecs (row_unpack) and the formula of model/attention.cpp: window not full, full and wrapped
// rings, fewer selected entries than top-k (−1 padded), head counts that are not multiples of
// 16, tiny (D 64, window 8, top-k 4) and real V4.1-Flash (64 × 512, window 128, top-k 512) shapes;
// and the paired head groups (cluster of two CTAs) against the unpaired kernel, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cuda/cuda_test_util.cuh"
#include "cache/records.h"

namespace dsv41::cuda {
namespace {

using test::DeviceBuffer;

struct Shape {
  int heads, head_dim, window, topk, entries;
  std::vector<int64_t> positions;  // one token (sequence) each
  int absent_every;                // every n-th top-k slot is −1 (0: none)
};

void run_case(const Shape& sh, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int T = static_cast<int>(sh.positions.size()), H = sh.heads, D = sh.head_dim, W = sh.window, K = sh.topk;
  const size_t wb = window_row_bytes(D), mb = main_row_bytes(D);

  // Per sequence: a ring of W window records and `entries` main records, packed by the CPU codecs.
  std::vector<uint8_t> rings(static_cast<size_t>(T) * W * wb), mains(static_cast<size_t>(T) * sh.entries * mb);
  std::vector<float> row(D);
  for (size_t r = 0; r < rings.size() / wb; ++r) {
    for (auto& v : row) v = normal(rng);
    window_row_pack(row.data(), D, rings.data() + r * wb);
  }
  for (size_t r = 0; r < mains.size() / mb; ++r) {
    for (auto& v : row) v = normal(rng);
    main_row_pack(row.data(), D, mains.data() + r * mb);
  }
  std::vector<float> q(static_cast<size_t>(T) * H * D), sink(H);
  for (auto& v : q) v = 2.0f * normal(rng);
  for (auto& v : sink) v = normal(rng);
  std::vector<int32_t> ids(static_cast<size_t>(T) * K, -1);
  for (int i = 0; i < T; ++i) {
    std::vector<int32_t> all(sh.entries);
    for (int e = 0; e < sh.entries; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    for (int j = 0; j < K && j < sh.entries; ++j)
      ids[i * K + j] = (sh.absent_every && j % sh.absent_every == 1) ? -1 : all[j];
  }

  // Reference (float64): keys = unpacked window rows of positions lo..t, then selected main rows.
  std::vector<double> want(q.size());
  std::vector<float> key(D);
  for (int i = 0; i < T; ++i) {
    const int64_t t = sh.positions[i], lo = std::max<int64_t>(0, t - W + 1);
    std::vector<std::vector<float>> keys;
    for (int64_t p = lo; p <= t; ++p) {
      row_unpack(RowKind::kWindow, rings.data() + (static_cast<size_t>(i) * W + p % W) * wb, D, key.data());
      keys.push_back(key);
    }
    for (int j = 0; j < K; ++j) {
      if (ids[i * K + j] < 0) continue;
      row_unpack(RowKind::kMain, mains.data() + (static_cast<size_t>(i) * sh.entries + ids[i * K + j]) * mb, D,
                 key.data());
      keys.push_back(key);
    }
    for (int h = 0; h < H; ++h) {
      const float* qh = q.data() + (static_cast<size_t>(i) * H + h) * D;
      std::vector<double> s(keys.size());
      double m = sink[h];
      for (size_t k = 0; k < keys.size(); ++k) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * keys[k][d];
        s[k] = dot / std::sqrt(static_cast<double>(D));
        m = std::max(m, s[k]);
      }
      double den = std::exp(sink[h] - m);
      for (auto& v : s) den += (v = std::exp(v - m));
      double* o = want.data() + (static_cast<size_t>(i) * H + h) * D;
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (size_t k = 0; k < keys.size(); ++k) acc += s[k] * keys[k][d];
        o[d] = acc / den;
      }
    }
  }

  DeviceBuffer<uint8_t> drings(rings), dmains(mains);
  std::vector<const uint8_t*> ring_ptrs(T), main_ptrs(T);
  for (int i = 0; i < T; ++i) {
    ring_ptrs[i] = drings.get() + static_cast<size_t>(i) * W * wb;
    main_ptrs[i] = dmains.get() + static_cast<size_t>(i) * sh.entries * mb;
  }
  DeviceBuffer<const uint8_t*> dring_ptrs(ring_ptrs), dmain_ptrs(main_ptrs);
  DeviceBuffer<float> dq(q), dsink(sink), dout(q.size());
  DeviceBuffer<int64_t> dpos(sh.positions);
  DeviceBuffer<int32_t> dids(ids);
  SparseAttentionParams p;
  p.tokens = T, p.heads = H, p.head_dim = D, p.window = W, p.topk = K;
  p.q = dq.get(), p.sink = dsink.get(), p.positions = dpos.get();
  p.window_rings = dring_ptrs.get(), p.main_rows = dmain_ptrs.get(), p.topk_ids = dids.get(), p.out = dout.get();
  DSV41_STATUS_OK(sparse_attention_decode(p, nullptr));
  DSV41_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = dout.to_host();
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "output " << i << " not written or not finite";
    max_abs = std::max(max_abs, std::fabs(got[i] - want[i]));
  }
  const double rel = test::rel_error(got, want);
  // bf16 probabilities in the value sum (as the reference kernel) dominate: ≈ 2^-9 per term.
  EXPECT_LT(rel, 4e-3) << "relative error " << rel << ", max abs " << max_abs;
  EXPECT_LT(max_abs, 3e-2) << "relative error " << rel;
}

TEST(SparseAttentionCuda, TinyWindowNotFullAndWrapped) {
  DSV41_REQUIRE_CUDA_DEVICE();
  run_case({4, 64, 8, 4, 9, {0, 3, 7, 8, 20}, 0}, 1);
}

TEST(SparseAttentionCuda, TinyFewerEntriesThanTopkAndPadded) {
  DSV41_REQUIRE_CUDA_DEVICE();
  run_case({5, 64, 8, 4, 3, {2, 9, 15}, 2}, 2);
}

TEST(SparseAttentionCuda, WindowOnly) {
  DSV41_REQUIRE_CUDA_DEVICE();
  run_case({16, 64, 8, 0, 1, {0, 5, 100}, 0}, 3);
}

TEST(SparseAttentionCuda, HeadDim512OddHeadsOddTopk) {
  DSV41_REQUIRE_CUDA_DEVICE();
  run_case({20, 512, 128, 33, 70, {0, 64, 127, 128, 1000}, 3}, 4);
}

TEST(SparseAttentionCuda, RealFlashGeometry) {
  DSV41_REQUIRE_CUDA_DEVICE();
  run_case({64, 512, 128, 512, 700, {5000, 131, 40}, 7}, 5);
}

// The paired head groups (a cluster of two CTAs sharing each tile's decode; D 512, an even number
// of 32-head groups) against the unpaired kernel, bit for bit: a head's output depends only on
// its own q and sink, so running heads [0, 32) and [32, H) as separate calls (one or an odd
// number of groups each: unpaired) must give the same bits as one call over all H heads.
std::vector<float> attention_of_heads(const std::vector<float>& q, const std::vector<float>& sink, int h_first,
                                      int h_count, int heads, const SparseAttentionParams& base) {
  const int T = base.tokens, D = base.head_dim;
  std::vector<float> qs(static_cast<size_t>(T) * h_count * D);
  for (int i = 0; i < T; ++i)
    std::copy_n(q.begin() + (static_cast<size_t>(i) * heads + h_first) * D, static_cast<size_t>(h_count) * D,
                qs.begin() + static_cast<size_t>(i) * h_count * D);
  const std::vector<float> ss(sink.begin() + h_first, sink.begin() + h_first + h_count);
  DeviceBuffer<float> dq(qs), dsink(ss), dout(qs.size());
  SparseAttentionParams p = base;
  p.heads = h_count, p.q = dq.get(), p.sink = dsink.get(), p.out = dout.get();
  const Status st = sparse_attention_decode(p, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  const cudaError_t err = cudaDeviceSynchronize();
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  return st.ok() && err == cudaSuccess ? dout.to_host() : std::vector<float>{};
}

void expect_paired_equals_unpaired(int heads, int topk, int entries, const std::vector<int64_t>& positions,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int T = static_cast<int>(positions.size()), D = 512, W = 128;
  const size_t wb = window_row_bytes(D), mb = main_row_bytes(D);
  std::vector<uint8_t> rings(static_cast<size_t>(T) * W * wb), mains(static_cast<size_t>(T) * entries * mb);
  std::vector<float> row(D);
  for (size_t r = 0; r < rings.size() / wb; ++r) {
    for (auto& v : row) v = normal(rng);
    window_row_pack(row.data(), D, rings.data() + r * wb);
  }
  for (size_t r = 0; r < mains.size() / mb; ++r) {
    for (auto& v : row) v = 3.0f * normal(rng);
    main_row_pack(row.data(), D, mains.data() + r * mb);
  }
  std::vector<float> q(static_cast<size_t>(T) * heads * D), sink(heads);
  for (auto& v : q) v = 2.0f * normal(rng);
  for (auto& v : sink) v = normal(rng);
  std::vector<int32_t> ids(static_cast<size_t>(T) * topk);
  std::uniform_int_distribution<int> pick(-1, entries - 1);  // −1: absent slots too
  for (auto& id : ids) id = pick(rng);
  DeviceBuffer<uint8_t> drings(rings), dmains(mains);
  std::vector<const uint8_t*> ring_ptrs(T), main_ptrs(T);
  for (int i = 0; i < T; ++i) {
    ring_ptrs[i] = drings.get() + static_cast<size_t>(i) * W * wb;
    main_ptrs[i] = dmains.get() + static_cast<size_t>(i) * entries * mb;
  }
  DeviceBuffer<const uint8_t*> dring_ptrs(ring_ptrs), dmain_ptrs(main_ptrs);
  DeviceBuffer<int64_t> dpos(positions);
  DeviceBuffer<int32_t> dids(ids);
  SparseAttentionParams base;
  base.tokens = T, base.head_dim = D, base.window = W, base.topk = topk;
  base.positions = dpos.get(), base.window_rings = dring_ptrs.get(), base.main_rows = dmain_ptrs.get();
  base.topk_ids = dids.get();
  const std::vector<float> all = attention_of_heads(q, sink, 0, heads, heads, base);  // paired
  const std::vector<float> first = attention_of_heads(q, sink, 0, 32, heads, base);   // one group
  const std::vector<float> rest = attention_of_heads(q, sink, 32, heads - 32, heads, base);
  ASSERT_EQ(all.size(), q.size());
  ASSERT_EQ(first.size() + rest.size(), q.size());
  for (int i = 0; i < T; ++i) {
    for (int h = 0; h < heads; ++h) {
      const float* want = h < 32 ? first.data() + (static_cast<size_t>(i) * 32 + h) * D
                                 : rest.data() + (static_cast<size_t>(i) * (heads - 32) + h - 32) * D;
      const float* got = all.data() + (static_cast<size_t>(i) * heads + h) * D;
      for (int d = 0; d < D; ++d) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[d]), std::bit_cast<uint32_t>(want[d]))
            << "token " << i << " head " << h << " channel " << d << ": paired " << got[d] << ", unpaired " << want[d];
      }
    }
  }
}

TEST(SparseAttentionCuda, PairedHeadGroupsEqualUnpairedBitForBit) {
  DSV41_REQUIRE_CUDA_DEVICE();
  // 64 heads (the real geometry: one pair), top-k 512 over 700 entries with absent slots; window
  // not full (position 40), full (131) and wrapped (5000); keys not a multiple of the tile (33).
  expect_paired_equals_unpaired(64, 512, 700, {5000, 131, 40}, 11);
  expect_paired_equals_unpaired(64, 33, 50, {0, 64, 127, 1000}, 12);
  // 40 heads: the pair's second CTA has 8 real heads and 24 padded rows.
  expect_paired_equals_unpaired(40, 100, 300, {7, 200}, 13);
  // 128 heads: two pairs per token (the unpaired side runs 32 and 96 heads: 1 and 3 groups).
  expect_paired_equals_unpaired(128, 64, 100, {300, 2}, 14);
}

TEST(SparseAttentionCudaArgs, RefusesUnbuiltHeadDim) {
  SparseAttentionParams p;
  p.tokens = 1, p.heads = 1, p.head_dim = 96, p.window = 4;
  float f = 0;
  int64_t pos = 0;
  const uint8_t* ring = nullptr;
  p.q = &f, p.sink = &f, p.positions = &pos, p.window_rings = &ring, p.out = &f;
  const Status s = sparse_attention_decode(p, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("96"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace dsv41::cuda
