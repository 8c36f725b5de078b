// The compressor's fast path (kernels/cpu/cpu_exec.h) against its scalar reference: the pooling
// bit for bit; whole steps to float rounding (the projections), ratio 1 and ratios ≥ 2 with the
// pending partial group carried across calls; any chunking of the tokens gives the same bits on
// either path. Boundary sizes: one token, odd counts, latent widths not multiples of 8.
#include "model/compressor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cache/page_pool.h"
#include "base/thread_pool.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm.h"

namespace dsv41 {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(CompressorFast, PoolingGivesTheReferenceBits) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  ThreadPool threads(3);  // 37 groups of 512 channels split over the pool
  CpuExec ex = CpuExec::serial();
  ex.pool = &threads;
  for (int r : {2, 3, 4})
    for (int64_t D : {1, 7, 8, 9, 16, 33, 512})
      for (int64_t groups : {1, 3, 37}) {
        std::mt19937 rng(static_cast<uint32_t>(r * 10000 + D * 10 + groups));
        auto a = random_vec(groups * r * D, rng), b = random_vec(groups * r * D, rng, 3.0f);
        if (D > 2) b[1] = b[D + 1];  // ties in the max
        std::vector<float> o1(groups * D), o2(groups * D, -1.0f);
        compressor_pool_reference(a.data(), b.data(), groups, r, D, o1.data());
        compressor_pool_fast(ex, a.data(), b.data(), groups, r, D, o2.data());
        EXPECT_TRUE(same_bits(o1, o2)) << "r " << r << " D " << D << " groups " << groups;
      }
}

struct CompressorSetup {
  ModelConfig config;
  AttentionWeights w;
  int64_t D;
  CompressorSetup(int64_t hidden, int64_t dim, std::mt19937& rng) : D(dim) {
    config.hidden_size = hidden;
    config.rms_norm_eps = 1e-6;
    const float sd = 1.0f / std::sqrt(float(hidden));
    w.compressor_wkv = random_vec(D * hidden, rng, sd);
    w.compressor_wgate = random_vec(D * hidden, rng, 2 * sd);
    w.compressor_norm = random_vec(D, rng, 0.2f);
    for (float& v : w.compressor_norm) v += 1.0f;
  }
};

struct FeedResult {
  std::vector<float> latents;  // every call's groups, concatenated
  int64_t groups = 0, pending = 0;
  std::vector<float> pending_kv, pending_gate;
};

// Feeds x [T, hidden] in calls of the given sizes (cycled) through a fresh cache.
FeedResult feed(const CompressorSetup& s, int r, const std::vector<float>& x, int64_t T, std::vector<int64_t> calls, bool fast) {
  PagePool pool(4096);
  KvSourceCache kv(0, r, s.D, 32, &pool, &pool, 8, 0);
  FeedResult run;
  int64_t done = 0;
  for (size_t i = 0; done < T; ++i) {
    const int64_t n = std::min(T - done, calls[i % calls.size()]);
    CompressedGroups out;
    const float* xs = x.data() + done * s.config.hidden_size;
    if (fast) {
      compressor_step_fast(CpuExec::serial(), s.config, s.w, kv, xs, n, out);
    } else {
      compressor_step_reference(s.config, s.w, kv, xs, n, out);
    }
    EXPECT_EQ(out.first_group, 0);  // nothing is published here, so the cache holds no entries
    run.latents.insert(run.latents.end(), out.latents.begin(), out.latents.end());
    run.groups += out.groups;
    done += n;
  }
  run.pending = kv.pending;
  run.pending_kv = kv.pending_kv;
  run.pending_gate = kv.pending_gate;
  return run;
}

// Tolerance of fast vs reference: the projections a, b are float GEMMs over `hidden` inputs (the
// reference sums in double), ≈ √hidden · 2⁻²⁴ relative (< 1e-6 here); a softmax over r values
// and an RMSNorm (outputs ≈ unit scale × norm weight) carry that through without amplification
// beyond a small factor, so 2e-5 · (1 + |v|) bounds them; a real fault (a lost pending token, a
// wrong group boundary) changes latents by ≳ 1e-1.
TEST(CompressorFast, StepsMatchReferenceAndIgnoreChunking) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  for (int r : {1, 2, 3})
    for (auto [hidden, D] : {std::pair<int64_t, int64_t>{9, 7}, {33, 17}, {64, 64}, {200, 512}}) {
      std::mt19937 rng(static_cast<uint32_t>(r * 1000 + hidden + D));
      CompressorSetup s(hidden, D, rng);
      const int64_t T = 23;  // odd: a partial group stays pending for r = 2 and 3
      auto x = random_vec(T * hidden, rng);
      const std::string where = "r " + std::to_string(r) + " hidden " + std::to_string(hidden) + " D " + std::to_string(D);
      const FeedResult ref = feed(s, r, x, T, {T}, false);
      const FeedResult fast = feed(s, r, x, T, {T}, true);
      EXPECT_EQ(ref.groups, T / r) << where;
      EXPECT_EQ(fast.groups, ref.groups) << where;
      EXPECT_EQ(fast.pending, r == 1 ? 0 : T % r) << where;
      EXPECT_EQ(fast.pending, ref.pending) << where;
      ASSERT_EQ(fast.latents.size(), ref.latents.size()) << where;
      for (size_t i = 0; i < ref.latents.size(); ++i)
        ASSERT_NEAR(fast.latents[i], ref.latents[i], 2e-5 * (1 + std::fabs(ref.latents[i]))) << where << " " << i;
      ASSERT_EQ(fast.pending_kv.size(), ref.pending_kv.size());
      for (size_t i = 0; i < ref.pending_kv.size(); ++i) {
        EXPECT_NEAR(fast.pending_kv[i], ref.pending_kv[i], 2e-5 * (1 + std::fabs(ref.pending_kv[i]))) << where;
        EXPECT_NEAR(fast.pending_gate[i], ref.pending_gate[i], 2e-5 * (1 + std::fabs(ref.pending_gate[i]))) << where;
      }
      // Pending groups across calls: token by token, odd chunks, chunks that end mid-group.
      for (const std::vector<int64_t>& calls : {std::vector<int64_t>{1}, {3, 5}, {2, 1, 4}}) {
        for (bool f : {false, true}) {
          const FeedResult one = f ? fast : ref;
          const FeedResult split = feed(s, r, x, T, calls, f);
          EXPECT_EQ(split.groups, one.groups) << where;
          EXPECT_TRUE(same_bits(split.latents, one.latents)) << where << (f ? " fast" : " reference");
          EXPECT_TRUE(same_bits(split.pending_kv, one.pending_kv) && same_bits(split.pending_gate, one.pending_gate))
              << where << (f ? " fast" : " reference");
        }
      }
    }
}

// A backend's decode batch: the projections of every token computed as one product over all the
// rows (gemm_f32, as the fast step computes them for its own rows), then fed in calls of a few
// tokens through compressor_step_projected: the same bits as compressor_step_fast on those rows.
TEST(CompressorFast, ProjectedStepsGiveTheFastStepBits) {
  if (!cpu_has_avx2_fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  for (int r : {1, 2, 3})
    for (auto [hidden, D] : {std::pair<int64_t, int64_t>{33, 17}, {256, 128}}) {
      std::mt19937 rng(static_cast<uint32_t>(r * 77 + hidden + D));
      CompressorSetup s(hidden, D, rng);
      const int64_t T = 11;
      auto x = random_vec(T * hidden, rng);
      const CpuExec ex = CpuExec::serial();
      std::vector<float> a(T * D), b(T * D);
      gemm_f32(ex, x.data(), T, hidden, s.w.compressor_wkv.data(), D, a.data());
      gemm_f32(ex, x.data(), T, hidden, s.w.compressor_wgate.data(), D, b.data());
      for (const std::vector<int64_t>& calls : {std::vector<int64_t>{1}, {2, 3}, {T}}) {
        const FeedResult want = feed(s, r, x, T, calls, true);
        PagePool pool(4096);
        KvSourceCache kv(0, r, D, 32, &pool, &pool, 8, 0);
        std::vector<float> latents;
        int64_t done = 0;
        for (size_t i = 0; done < T; ++i) {
          const int64_t n = std::min(T - done, calls[i % calls.size()]);
          CompressedGroups out;
          compressor_step_projected(ex, s.config, s.w, kv, a.data() + done * D, r >= 2 ? b.data() + done * D : nullptr,
                                    n, out);
          latents.insert(latents.end(), out.latents.begin(), out.latents.end());
          done += n;
        }
        const std::string where = "r " + std::to_string(r) + " hidden " + std::to_string(hidden) + " calls of " +
                                  std::to_string(calls[0]);
        EXPECT_TRUE(same_bits(latents, want.latents)) << where;
        EXPECT_EQ(kv.pending, want.pending) << where;
        EXPECT_TRUE(same_bits(kv.pending_kv, want.pending_kv) && same_bits(kv.pending_gate, want.pending_gate)) << where;
      }
    }
}

}  // namespace
}  // namespace dsv41
