// Sparse sink attention on the GPU against a float64 CPU reference built from the CPU record
// codecs (row_unpack) and the formula of model/attention.cpp: window not full, full and wrapped
// rings, fewer selected entries than top-k (−1 padded), head counts that are not multiples of
// 16, tiny (D 64, window 8, top-k 4) and real V4.1-Flash (64 × 512, window 128, top-k 512) shapes.
#include <gtest/gtest.h>

#include <algorithm>
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
