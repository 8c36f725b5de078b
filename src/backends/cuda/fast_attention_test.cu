// The indexer-score and split sink-attention kernels (fast_attention.cu) against their simple
// bodies on random device inputs (each test skips without a CUDA device). Both kernels form every
// sum of the simple bodies over the same values in the same order, so the bound is 0: the fast
// results must be the simple ones' bits (−inf and NaN where they are). Shapes: mini-flash's
// geometry (32 × 128 indexer heads, 64 × 512 attention heads, window 128, top-k 512, packed
// records), entry counts and head counts off the kernels' tiles, entries hidden by the causal
// bound and by a candidate pool, prefill rows, absent top-k slots, windows cut at a floor, and a
// batch of segments of different shapes in one launch. The exception is the tensor-core
// attention (fast_attention_tc.cu, last test): fp32 sums, so a stated bound instead of bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_kernels_check.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;

// Runs `launch` with the fast kernels off, then on; the n floats at `out` must agree bit for bit,
// and the fast run must be `launches` launches.
void expect_same_bits(CudaExec& ex, const std::function<void()>& launch, const float* out, int64_t n,
                      const std::string& what, int64_t launches = 1) {
  kc::Dev<CudaExec> dev(ex);
  ex.set_fast_kernels(false);
  launch();
  const std::vector<float> want = dev.down(out, n);
  ex.set_fast_kernels(true);
  const std::vector<float> poison(static_cast<size_t>(n), 12345.0f);
  ex.upload(const_cast<float*>(out), poison.data(), n * int64_t(sizeof(float)));  // no stale pass
  const int64_t before = ex.counts().launches;
  launch();
  const std::vector<float> got = dev.down(out, n);
  ex.sync();
  ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
  EXPECT_EQ(ex.counts().launches - before, launches) << what;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    finite += std::isfinite(want[i]) ? 1 : 0;
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << what << " at " << i;
      continue;
    }
    ASSERT_EQ(kc::bits_of_floats({got[i]})[0], kc::bits_of_floats({want[i]})[0])
        << what << " at " << i << ": fast " << got[i] << " vs simple " << want[i];
  }
  EXPECT_GT(finite, 0) << what << ": nothing to compare";
}

// Indexer bodies made from `cases` by Inputs, launched as one Batched (the backend's form): each
// body's scores bit for bit against the simple kernel's.
template <class Inputs, class Case>
void expect_batched_index_bits(CudaExec& ex, kc::Dev<CudaExec>& dev, std::mt19937& rng, const std::vector<Case>& cases,
                               const std::string& what) {
  dk::Batched<dk::IndexScoreK> b;
  std::vector<Inputs> ins;
  ins.reserve(cases.size());
  int64_t total = 0;
  for (const Case& c : cases) {
    ins.emplace_back(dev, rng, c);
    b.count[b.n] = c.T * c.G;
    b.body[b.n++] = ins.back().k;
    total += c.T * c.G;
  }
  for (int j = 0; j < b.n; ++j)
    expect_same_bits(ex, [&] { ex.for_each(total, b); }, b.body[j].scores, b.count[j], what + ", body " + std::to_string(j));
}

struct IndexCase {
  int64_t T, G, nh, dh, start;
  int ratio;
  bool pool, records;
};

// One IndexScoreK on fresh random inputs (queries MXFP4 fake-quantised as the backend's are).
struct IndexInputs {
  dk::IndexScoreK k;
  IndexInputs(kc::Dev<CudaExec>& dev, std::mt19937& rng, const IndexCase& c) {
    const int nb = 3, bs = 4;
    auto q = kc::randn(rng, c.T * c.nh * c.dh);
    if (c.dh % 32 == 0) q = kc::cached(RowKind::kIndex, q, c.dh);
    const auto keys = kc::randn(rng, c.G * c.dh, 2.0f);
    std::vector<int32_t> kept(c.T * nb, -1);
    for (int64_t r = 0; r < c.T; ++r)
      for (int j = 0; j < nb - int(r % 2); ++j) kept[r * nb + j] = int32_t((r * 5 + j * 3) % (c.G / bs + 1));
    const dk::KeyRows rows = c.records ? dk::KeyRows::records(dev.up(kc::pack_rows(RowKind::kIndex, keys, c.dh)),
                                                              RowKind::kIndex, c.dh)
                                       : dk::KeyRows::floats(dev.up(keys), c.dh);
    k = dk::IndexScoreK{dev.up(q), dev.up(kc::randn(rng, c.T * c.nh)), rows, c.G, c.nh, c.dh, c.start, c.ratio,
                        float(1.0 / std::sqrt(double(c.dh))), c.pool ? dev.up(kept) : nullptr, nb, bs,
                        dev.template zeros<float>(c.T * c.G)};
  }
};

std::string index_name(const IndexCase& c) {
  return "indexer T" + std::to_string(c.T) + " G" + std::to_string(c.G) + " " + std::to_string(c.nh) + "x" +
         std::to_string(c.dh) + " start " + std::to_string(c.start) + " ratio " + std::to_string(c.ratio) +
         (c.pool ? " pool" : "") + (c.records ? " MXFP4" : " f32");
}

TEST(FastAttentionCuda, IndexScoresEqualSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(71);
  ex.set_integer_index(false);  // the double tiles (the integer kernel, the default: the next test)
  const std::vector<IndexCase> cases = {
      {1, 290, 32, 128, 579, 2, false, true},  // mini-flash decode: 290 entries (9 tiles, the last of 2)
      {1, 290, 32, 128, 400, 2, false, true},  // the newest 89 entries hidden by the causal bound
      {5, 64, 32, 128, 120, 1, true, true},    // prefill rows in a candidate pool
      {3, 1, 7, 32, 0, 1, false, true},        // one entry, heads off the 8 warps
      {2, 33, 64, 128, 70, 2, false, true},    // the real config's 64 heads
      {4, 45, 5, 40, 90, 2, true, false},      // float keys, dh off the MXFP4 blocks
  };
  for (const IndexCase& c : cases) {
    IndexInputs in(dev, rng, c);
    expect_same_bits(ex, [&] { ex.for_each(c.T * c.G, in.k); }, in.k.scores, c.T * c.G, index_name(c));
  }
  // The backend's form: several segments' bodies as one Batched launch.
  expect_batched_index_bits<IndexInputs, IndexCase>(ex, dev, rng, {cases[0], cases[2], cases[3], cases[1]}, "batched indexer");
}

// The integer tensor-core scores (index_scores_int.cu) on MXFP4 records, bit for bit against the
// simple body, including the inputs it must hand to the simple body's double chain: key blocks
// with a NaN scale or one near float's overflow, key and query blocks whose exponents span too far
// for an exact sum, a query head that is not MXFP4 at all, all-zero blocks; records in pages
// (last page first in memory) and the 17-byte records of dh 32 (unaligned words).
struct IntIndexCase {
  int64_t T, G, nh, dh, start;
  int ratio;
  bool pool, paged, hard;
};

struct IntIndexInputs {
  dk::IndexScoreK k;
  IntIndexInputs(kc::Dev<CudaExec>& dev, std::mt19937& rng, const IntIndexCase& c) {
    const int nb = 40, bs = 8;
    auto q = kc::cached(RowKind::kIndex, kc::randn(rng, c.T * c.nh * c.dh), c.dh);
    auto keys = kc::randn(rng, c.G * c.dh, 2.0f);
    if (c.hard) {
      const int64_t blocks = c.dh / 32;
      for (int64_t g = 0; g < c.G; ++g) {
        float* row = keys.data() + g * c.dh;
        const int64_t b = g % blocks;
        switch (g % 7) {
          case 1: row[b * 32 + 5] = NAN; break;                                         // scale byte 0xFF
          case 2: for (int i = 0; i < 32; ++i) row[b * 32 + i] *= 1.5e38f / 6.0f; break;  // byte 253
          case 3: for (int i = 0; i < 32; ++i) row[b * 32 + i] *= 1e12f; break;           // a 40-bit span
          case 4: for (int i = 0; i < 32; ++i) row[b * 32 + i] = 0.0f; break;             // a zero block
          default: break;
        }
      }
      for (int64_t r = 0; r < c.T; ++r)
        for (int64_t h = 0; h < c.nh; ++h) {
          float* qh = q.data() + (r * c.nh + h) * c.dh;
          if (h % 5 == 1) qh[3] = 0.3f;                                         // not an MXFP4 value
          if (h % 5 == 2) for (int i = 0; i < 32; ++i) qh[i] = 0.0f;           // a zero block
          if (h % 5 == 3) for (int i = 0; i < 32; ++i) qh[32 % c.dh + i] *= 0x1p-30f;  // span (with dh 32: scaled)
          if (h % 11 == 4) qh[c.dh - 1] = NAN;                                  // FakeQuant's NaN block
        }
    }
    std::vector<int32_t> kept(c.T * nb, -1);
    for (int64_t r = 0; r < c.T; ++r)
      for (int j = 0; j < nb - 3 * int(r % 3); ++j) kept[r * nb + j] = int32_t((r * 7 + j * 13) % (c.G / bs + 1));
    const std::vector<uint8_t> rec = kc::pack_rows(RowKind::kIndex, keys, c.dh);
    dk::KeyRows rows = dk::KeyRows::records(dev.up(rec), RowKind::kIndex, c.dh);
    if (c.paged) rows = kc::paged_records(dev, rec, RowKind::kIndex, c.dh, c.G, 3);  // pages of 8, last first
    k = dk::IndexScoreK{dev.up(q), dev.up(kc::randn(rng, c.T * c.nh)), rows, c.G, c.nh, c.dh, c.start, c.ratio,
                        float(1.0 / std::sqrt(double(c.dh))), c.pool ? dev.up(kept) : nullptr, nb, bs,
                        dev.template zeros<float>(c.T * c.G)};
  }
};

TEST(FastAttentionCuda, IntegerIndexScoresEqualSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(97);
  ex.set_integer_index(true);
  const std::vector<IntIndexCase> cases = {
      {1, 290, 32, 128, 579, 2, false, false, false},   // mini-flash decode (a part chunk)
      {1, 3000, 32, 128, 2999, 1, true, true, false},   // a pool over 12 chunks, paged
      {1, 700, 32, 128, 900, 2, false, false, true},    // the hard inputs
      {6, 520, 32, 128, 515, 1, false, true, true},     // prefill rows at the causal edge, paged, hard
      {3, 257, 64, 128, 600, 1, true, false, true},     // 64 heads, a pool, hard
      {2, 77, 16, 32, 200, 1, false, false, true},      // dh 32: 17-byte records
      {2, 300, 48, 96, 250, 2, false, true, false},     // three m tiles, three blocks
      {1, 600, 32, 128, 100, 2, false, false, false},   // only the first 50 entries visible
      {2, 5000, 32, 128, 4000, 1, false, false, false}, // 20 chunks a row, the last 4 past what it sees
      {2, 3000, 32, 128, 1000, 1, true, true, false},   // a pool partly past what the rows see
  };
  for (const IntIndexCase& c : cases) {
    IntIndexInputs in(dev, rng, c);
    const std::string what = "integer indexer T" + std::to_string(c.T) + " G" + std::to_string(c.G) + " " +
                             std::to_string(c.nh) + "x" + std::to_string(c.dh) + (c.pool ? " pool" : "") +
                             (c.paged ? " paged" : "") + (c.hard ? " hard" : "");
    ASSERT_TRUE(fast::index_int_fits(c.T * c.G, in.k)) << what;
    expect_same_bits(ex, [&] { ex.for_each(c.T * c.G, in.k); }, in.k.scores, c.T * c.G, what);
  }
  expect_batched_index_bits<IntIndexInputs, IntIndexCase>(ex, dev, rng, {cases[0], cases[3], cases[5], cases[1]},
                                            "batched integer indexer");
  // A block taking several chunks of its row (long decode rows do), the pool rows beside them.
  std::vector<IntIndexInputs> ins;
  dk::Batched<dk::IndexScoreK> b;
  int64_t total = 0;
  for (const IntIndexCase& c : {cases[8], cases[3], cases[7], cases[9], cases[2]}) {
    ins.emplace_back(dev, rng, c);
    b.count[b.n] = c.T * c.G;
    b.body[b.n++] = ins.back().k;
    total += c.T * c.G;
  }
  ex.set_fast_kernels(false);
  ex.for_each(total, b);
  std::vector<std::vector<float>> want;
  for (int j = 0; j < b.n; ++j) want.push_back(dev.down(b.body[j].scores, b.count[j]));
  for (const int per : {1, 2, 3, 7, 40}) {
    for (int j = 0; j < b.n; ++j) {
      const std::vector<float> poison(static_cast<size_t>(b.count[j]), 12345.0f);
      ex.upload(b.body[j].scores, poison.data(), b.count[j] * int64_t(sizeof(float)));
    }
    ex.sync();
    ASSERT_TRUE(fast::launch_index_int(b, {}, per)) << per;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int j = 0; j < b.n; ++j) {
      const std::vector<float> got = dev.down(b.body[j].scores, b.count[j]);
      for (int64_t i = 0; i < b.count[j]; ++i) {
        const float w = want[size_t(j)][size_t(i)], g = got[size_t(i)];
        const std::string at = "integer indexer, " + std::to_string(per) + " chunks a block, body " +
                               std::to_string(j) + " at " + std::to_string(i);
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(g)) << at;
          continue;
        }
        ASSERT_EQ(kc::bits_of_floats({g})[0], kc::bits_of_floats({w})[0]) << at;
      }
    }
  }
  ex.set_fast_kernels(true);
}

struct AttnCase {
  int64_t T, H, D, win, k, start, floor, G;
  bool ring;
  bool quantised = false;  // window rows FP8 fake-quantised, as the backend's are
};

// One attention job on fresh random inputs: window keys as float rows or as a ring of FP8
// records read in place, selected rows as NVFP4 records where D is whole blocks.
struct AttnInputs {
  dk::AttnBatch::Job job;
  AttnInputs(kc::Dev<CudaExec>& dev, std::mt19937& rng, const AttnCase& c) {
    const int64_t first = std::max(c.floor, c.start - (c.win - 1)), nkeys = c.start + c.T - first;
    const auto raw = kc::randn(rng, nkeys * c.D), q = kc::randn(rng, c.T * c.H * c.D, 0.3f);
    const auto keys = c.quantised ? kc::cached(RowKind::kWindow, raw, c.D) : raw;
    const auto main = kc::randn(rng, std::max<int64_t>(c.G, 1) * c.D);
    std::vector<int32_t> topk(std::max<int64_t>(c.T * c.k, 1), -1);
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.k && j < c.G + 5; ++j) topk[i * c.k + j] = (j % 7 == 3) ? -1 : int32_t((i * 13 + j * 5) % c.G);
    const int64_t L = c.win + c.k;
    const dk::KeyRows mains = c.D % 16 ? dk::KeyRows::floats(dev.up(main), c.D)
                                       : dk::KeyRows::records(dev.up(kc::pack_rows(RowKind::kMain, main, c.D)),
                                                              RowKind::kMain, c.D);
    dk::AttnGeom g{c.T, c.H, c.D, L, c.start, c.win, c.floor, first, c.k, dev.up(keys),
                   c.k ? mains : dk::KeyRows{}, c.k ? dev.up(topk) : nullptr};
    if (c.ring) {
      const int64_t slots = c.win + 3;
      std::vector<float> ring(slots * c.D, NAN);
      for (int64_t p = first; p < c.start; ++p)
        std::copy_n(keys.data() + (p - first) * c.D, c.D, ring.data() + (p % slots) * c.D);
      g.keys = nullptr;
      g.ring = c.D % 32 == 0 ? dk::KeyRows::records(dev.up(kc::pack_rows(RowKind::kWindow, ring, c.D)),
                                                    RowKind::kWindow, c.D)
                             : dk::KeyRows::floats(dev.up(ring), c.D);
      g.slots = slots;
      g.fresh = dev.up(std::vector<float>(keys.begin() + (c.start - first) * c.D, keys.end()));
    }
    job = {g, dev.up(q), dev.template zeros<float>(c.T * c.H * L), dev.template zeros<float>(c.T * c.H * c.D)};
  }
  // A batch of this case alone: its job, random sinks, the 1/√D scaling.
  dk::AttnBatch alone(kc::Dev<CudaExec>& dev, std::mt19937& rng, const AttnCase& c) const {
    dk::AttnBatch b;
    b.sink = dev.up(kc::randn(rng, c.H));
    b.scaling = float(1.0 / std::sqrt(double(c.D)));
    b.jobs[b.n++] = job;
    return b;
  }
};

std::string case_name(const AttnCase& c) {
  return "attention " + std::to_string(c.T) + "x" + std::to_string(c.H) + "x" + std::to_string(c.D) + " win " +
         std::to_string(c.win) + " k " + std::to_string(c.k) + " start " + std::to_string(c.start);
}

TEST(FastAttentionCuda, SplitSinkAttentionEqualsSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(72);
  // T, H, D, window, top-k, start, floor, main rows G, ring.
  const std::vector<AttnCase> alone = {
      {1, 64, 512, 128, 512, 383, 0, 190, true},  // mini-flash decode: 190 of 512 top-k rows present
      {1, 64, 512, 128, 512, 1500, 0, 900, true},  // every top-k slot present (bar the 7k+3 ones)
      {7, 5, 96, 16, 9, 40, 30, 12, false},       // prefill rows, heads off the tiles, a floor
      {2, 3, 33, 5, 0, 9, 0, 0, true},            // no top-k, D off the channel chunk
      {1, 1, 16, 6, 4, 0, 0, 3, false},           // the first position
      {40, 4, 128, 64, 64, 70, 0, 40, false},     // many rows
  };
  for (const AttnCase& c : alone) {
    AttnInputs in(dev, rng, c);
    const dk::AttnBatch b = in.alone(dev, rng, c);
    expect_same_bits(ex, [&] { ex.run_chain(b); }, in.job.o, c.T * c.H * c.D, case_name(c));
    // AttnChain (one segment) takes the same kernels.
    const dk::AttnChain chain = b.chain(0);
    expect_same_bits(ex, [&] { ex.run_chain(chain); }, in.job.o, c.T * c.H * c.D, "attention chain");
  }
  // A decode batch of AttnBatch::kMax (64) sequences of mini-flash's geometry at different positions, and a mixed
  // batch (different D, T, rings) in one launch pair.
  std::vector<AttnCase> decode;
  for (int j = 0; j < dk::AttnBatch::kMax; ++j) decode.push_back({1, 64, 512, 128, 512, 100 + 61 * j, 0, 20 + 30 * j, j % 3 != 0});
  const std::vector<AttnCase> mixed = {alone[2], {1, 5, 64, 16, 9, 300, 0, 150, true}, alone[3], alone[4]};
  for (const std::vector<AttnCase>& cases : {decode, mixed}) {
    dk::AttnBatch b;
    b.sink = dev.up(kc::randn(rng, cases[0].H));
    b.scaling = 0.07f;
    std::vector<AttnInputs> ins;
    ins.reserve(cases.size());
    for (AttnCase c : cases) {
      c.H = cases[0].H;
      ins.emplace_back(dev, rng, c);
      b.jobs[b.n++] = ins.back().job;
    }
    for (int j = 0; j < b.n; ++j)
      expect_same_bits(ex, [&] { ex.run_chain(b); }, b.jobs[j].o, b.jobs[j].g.T * b.jobs[j].g.H * b.jobs[j].g.D,
                       "attention batch of " + std::to_string(b.n) + ", job " + std::to_string(j));
  }
}

// Each job's outputs from the simple chain (fast kernels off), then the outputs poisoned and the
// fast kernels on, so that a fast run that skips an output cannot pass on stale values.
std::vector<std::vector<float>> simple_outputs_then_poison(CudaExec& ex, kc::Dev<CudaExec>& dev, const dk::AttnBatch& b) {
  ex.set_fast_kernels(false);
  ex.run_chain(b);
  std::vector<std::vector<float>> want;
  for (int j = 0; j < b.n; ++j) want.push_back(dev.down(b.jobs[j].o, b.jobs[j].g.T * b.jobs[j].g.H * b.jobs[j].g.D));
  ex.set_fast_kernels(true);
  for (int j = 0; j < b.n; ++j) {
    const std::vector<float> poison(want[size_t(j)].size(), 12345.0f);
    ex.upload(b.jobs[j].o, poison.data(), int64_t(poison.size() * sizeof(float)));
  }
  ex.sync();
  return want;
}

// The FP64-MMA attention (fast::launch_attn_mma, called directly: launch_chain takes it only
// with kMmaAttention on), the mixed pair (its logits kernel, then the split pair's softmax +
// values: kMmaLogits) and the probabilities path (the MMA logits, the softmax a warp per (row,
// head), the values over the listed present slots: launch_chain's first choice, kProbsValues)
// against the simple chain, bit for bit, at the
// shapes its tiles make boundaries: L = 1, L off the 32-slot logits tile and the 64-slot values
// tile, the window alone (no top-k), the window / selected boundary inside a 4-slot MMA step,
// heads off the 16-head group (5, 20, 33), D off the 4-channel step and the 32-channel chunk,
// many rows, a verify step (5 rows of one sequence) and a decode batch of AttnBatch::kMax sequences.
TEST(FastAttentionCuda, MmaSinkAttentionEqualsSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1606);
  enum class Pair { kMma, kMixed, kProbs, kSlots1, kSlots2, kSlots4 } pair = Pair::kMma;
  const auto check = [&](const dk::AttnBatch& b, const std::string& what) {
    const std::vector<std::vector<float>> want = simple_outputs_then_poison(ex, dev, b);
    if (pair == Pair::kMixed) {  // the MMA logits, then the split pair's softmax + values
      ASSERT_TRUE(fast::launch_attn_mma_logits(b)) << what;
      ASSERT_TRUE(fast::launch_attn_split_values(b)) << what;
    } else if (pair == Pair::kProbs) {  // the MMA logits, the probabilities, the values
      ASSERT_TRUE(fast::launch_attn_mma_logits(b)) << what;
      ASSERT_TRUE(fast::launch_attn_probs_values(b)) << what;
    } else if (pair >= Pair::kSlots1) {  // the MMA logits of 32 / 16 / 8 slots a block, the slot-split values
      const int parts = pair == Pair::kSlots1 ? 1 : pair == Pair::kSlots2 ? 2 : 4;
      ASSERT_TRUE(fast::launch_attn_mma_logits(b, 0, 32 / parts)) << what;
      ASSERT_TRUE(fast::launch_attn_slot_values(b, 0, parts)) << what;
    } else {
      ASSERT_TRUE(fast::launch_attn_mma(b)) << what;  // the legacy stream: ordered with ex's blocking stream
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
    // Slot-split values of 2 or 4 parts re-associate the double sums at 1 or 3 points: a float
    // may then differ by one ulp where the two double sums straddle a float rounding tie, which
    // the products' exactness makes rare (allowed: 1 element in 10^5, each one ulp; counted).
    const bool ties = pair == Pair::kSlots2 || pair == Pair::kSlots4;
    for (int j = 0; j < b.n; ++j) {
      const std::vector<float> got = dev.down(b.jobs[j].o, int64_t(want[size_t(j)].size()));
      int64_t finite = 0, tie = 0;
      for (size_t x = 0; x < got.size(); ++x) {
        const float w = want[size_t(j)][x];
        finite += std::isfinite(w) ? 1 : 0;
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(got[x])) << what << " job " << j << " at " << x;
          continue;
        }
        const uint32_t gb = kc::bits_of_floats({got[x]})[0], wb = kc::bits_of_floats({w})[0];
        if (ties && gb != wb && std::isfinite(w) && (gb ^ wb) < 0x80000000u && (gb > wb ? gb - wb : wb - gb) == 1) {
          ++tie;
          continue;
        }
        ASSERT_EQ(gb, wb) << what << " job " << j << " at " << x << ": fast " << got[x] << " vs simple " << w;
      }
      EXPECT_GT(finite, 0) << what << ": nothing to compare";
      EXPECT_LE(tie * 100000, int64_t(got.size())) << what << " job " << j << ": " << tie << " one-ulp differences";
      if (tie > 0) std::printf("%s job %d: %lld one-ulp differences of %zu\n", what.c_str(), j, (long long)tie, got.size());
    }
  };
  // T, H, D, window, top-k, start, floor, main rows G, ring.
  const std::vector<AttnCase> alone = {
      {1, 64, 512, 128, 512, 383, 0, 190, true},   // mini-flash decode: 190 of 512 top-k rows present
      {1, 64, 512, 128, 512, 1500, 0, 900, true},  // every top-k slot present (bar the 7k+3 ones)
      {5, 64, 512, 128, 512, 700, 0, 300, true},   // a verify step: 5 rows of one sequence
      {2, 64, 512, 128, 0, 300, 0, 0, true},       // the window alone
      {1, 16, 64, 1, 0, 5, 0, 0, false},           // L = 1
      {1, 1, 16, 6, 4, 0, 0, 3, false},            // the first position (one window key), one head
      {3, 20, 96, 13, 7, 50, 0, 30, false},        // L 20: off both tiles; nwin 13 inside a step
      {2, 33, 512, 37, 30, 90, 0, 40, true},       // 33 heads; L 67 (a second values tile of 3)
      {7, 5, 96, 16, 9, 40, 30, 12, false},        // prefill rows, a floor
      {2, 3, 33, 5, 0, 9, 0, 0, true},             // D 33: off the 4-channel step and the chunk
      {40, 4, 128, 64, 64, 70, 0, 40, false},      // many rows
      {2, 16, 64, 100, 200, 500, 0, 300, false},   // the window ends inside a listed 128-row tile
      {1, 8, 64, 128, 800, 2000, 0, 900, true},    // L 928: 29 of 32 slot groups, shared memory past 48 KiB
      {1, 64, 512, 128, 512, 60, 0, 30, true},     // window not full (61 keys), 30 main rows: last present 96
      {1, 64, 512, 128, 512, 127, 0, 1, true},     // window just full, 5 of 512 top-k slots present
      {1, 9, 64, 128, 880, 3000, 0, 1000, true},   // L 1,008: near the 1,024-slot limit, 9 heads
  };
  const char* const names[] = {"mma", "mixed", "probs", "slots1", "slots2", "slots4"};
  for (const Pair p : {Pair::kMma, Pair::kMixed, Pair::kProbs, Pair::kSlots1, Pair::kSlots2, Pair::kSlots4}) {
    pair = p;
    const std::string name = names[int(p)];
    for (const AttnCase& c : alone) {
      AttnInputs in(dev, rng, c);
      check(in.alone(dev, rng, c), name + " " + case_name(c));
    }
    std::vector<AttnCase> decode;
    for (int j = 0; j < dk::AttnBatch::kMax; ++j)
      decode.push_back({1, 64, 512, 128, 512, 100 + 61 * j, 0, 20 + 30 * j, j % 3 != 0});
    dk::AttnBatch b;
    b.sink = dev.up(kc::randn(rng, 64));
    b.scaling = 0.07f;
    std::vector<AttnInputs> ins;
    ins.reserve(decode.size());
    for (const AttnCase& c : decode) {
      ins.emplace_back(dev, rng, c);
      b.jobs[b.n++] = ins.back().job;
    }
    check(b, name + " attention, a decode batch of " + std::to_string(dk::AttnBatch::kMax));
  }
}

// The decode attention's kernels alone at mini-flash's geometry (64 heads × 512 channels, window
// 128, top-k 512; context 256: a ratio-1 layer with 256 main rows, and a window-only layer), one
// row and a decode batch of 8: each launch sequence timed over 200 runs on the legacy stream,
// the variants alternated three times. Not a correctness test (docs/BENCHMARKS.md).
TEST(FastAttentionCuda, DISABLED_DecodeAttentionTiming) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(1806);
  struct Variant {
    const char* name;
    std::function<bool(const dk::AttnBatch&)> run;
  };
  const std::vector<Variant> variants = {
      {"mma logits alone, slots by rows",
       [](const dk::AttnBatch& b) { return fast::launch_attn_mma_logits(b, 0, fast::attn_logit_slots(b)); }},
      {"mma logits alone, 32 slots (main)", [](const dk::AttnBatch& b) { return fast::launch_attn_mma_logits(b, 0, 32); }},
      {"mma logits alone, 16 slots", [](const dk::AttnBatch& b) { return fast::launch_attn_mma_logits(b, 0, 16); }},
      {"mma logits alone, 8 slots", [](const dk::AttnBatch& b) { return fast::launch_attn_mma_logits(b, 0, 8); }},
      {"split values alone (main)", [](const dk::AttnBatch& b) { return fast::launch_attn_split_values(b); }},
      {"probs + pv values alone", [](const dk::AttnBatch& b) { return fast::launch_attn_probs_values(b); }},
      {"slot values alone, auto parts", [](const dk::AttnBatch& b) { return fast::launch_attn_slot_values(b); }},
      {"slot values alone, 1 part", [](const dk::AttnBatch& b) { return fast::launch_attn_slot_values(b, 0, 1); }},
      {"slot values alone, 2 parts", [](const dk::AttnBatch& b) { return fast::launch_attn_slot_values(b, 0, 2); }},
      {"slot values alone, 4 parts", [](const dk::AttnBatch& b) { return fast::launch_attn_slot_values(b, 0, 4); }},
      {"main: mma logits + split values",
       [](const dk::AttnBatch& b) { return fast::launch_attn_mma_logits(b, 0, 32) && fast::launch_attn_split_values(b); }},
      {"new: mma logits by rows + slot values",
       [](const dk::AttnBatch& b) {
         return fast::launch_attn_mma_logits(b, 0, fast::attn_logit_slots(b)) && fast::launch_attn_slot_values(b);
       }},
  };
  // T, H, D, window, top-k, start, floor, main rows G, ring.
  const AttnCase ratio1 = {1, 64, 512, 128, 512, 256, 0, 256, true}, window = {1, 64, 512, 128, 0, 256, 0, 0, true};
  for (const AttnCase& layer : {ratio1, window}) {
    for (const int rows : {1, 8}) {
      dk::AttnBatch b;
      b.sink = dev.up(kc::randn(rng, 64));
      b.scaling = 0.044f;
      std::vector<AttnInputs> ins;
      ins.reserve(size_t(rows));
      for (int r = 0; r < rows; ++r) {
        AttnCase c = layer;
        c.start += 3 * r;
        ins.emplace_back(dev, rng, c);
        b.jobs[b.n++] = ins.back().job;
      }
      ASSERT_TRUE(fast::launch_attn_mma_logits(b));  // logits for the values-alone variants
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      std::vector<std::vector<float>> us(variants.size());
      for (int round = 0; round < 3; ++round) {
        for (size_t v = 0; v < variants.size(); ++v) {
          for (int w = 0; w < 5; ++w) ASSERT_TRUE(variants[v].run(b));
          constexpr int kRuns = 200;
          cudaEventRecord(e0, 0);
          for (int r = 0; r < kRuns; ++r) variants[v].run(b);
          cudaEventRecord(e1, 0);
          ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
          float ms = 0;
          cudaEventElapsedTime(&ms, e0, e1);
          us[v].push_back(1000.0f * ms / kRuns);
        }
      }
      for (size_t v = 0; v < variants.size(); ++v)
        std::printf("timing %s, %d row(s), auto: %d parts, %d slots: %-34s %7.2f %7.2f %7.2f us\n",
                    layer.k ? "ratio-1 layer" : "window layer", rows, fast::attn_slot_parts(b),
                    fast::attn_logit_slots(b), variants[v].name, us[v][0], us[v][1], us[v][2]);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
    }
  }
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// The tensor-core attention (fast::launch_attn_tensor, through launch_chain with `tensor` set)
// against the simple chain. Its sums are fp32 and its queries and probabilities carry ≈ 16
// significant bits (two bf16 parts), so the bound is not 0: |fast − simple| ≤ 2e-5 · (1 + |simple|)
// — about 20× the differences it shows (printed), and ≈ 10× below what one bf16 part of the
// queries or the probabilities gives. Window rows fake-quantised as the backend's (the kernel
// reads float rows as bf16: exact for those); head_dim 512 (the only one it takes): a decode row
// with absent top-k slots, every slot present, prefill rows with a floor and float window rows, no
// top-k with heads off the 32-head block, the first position, a 40-row chunk over a ring, and a
// decode batch of AttnBatch::kMax (64) sequences at different positions in one launch.
TEST(FastAttentionCuda, TensorSinkAttentionMatchesSimple) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(2705);
  const auto check = [&](dk::AttnBatch b, const std::string& what) {
    const std::vector<std::vector<float>> want = simple_outputs_then_poison(ex, dev, b);
    b.tensor = true;
    const int64_t before = ex.counts().launches;
    ex.run_chain(b);
    EXPECT_EQ(ex.counts().launches - before, 1) << what;
    double worst = 0;
    int64_t finite = 0;
    for (int j = 0; j < b.n; ++j) {
      const std::vector<float> got = dev.down(b.jobs[j].o, int64_t(want[size_t(j)].size()));
      ASSERT_TRUE(ex.status().ok()) << what << ": " << ex.status().to_string();
      for (size_t e = 0; e < got.size(); ++e) {
        const float w = want[size_t(j)][e];
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(got[e])) << what << " job " << j << " at " << e;
          continue;
        }
        finite += std::isfinite(w) ? 1 : 0;
        const double d = std::fabs(double(got[e]) - w);
        worst = std::max(worst, d / (1 + std::fabs(double(w))));
        ASSERT_LE(d, 2e-5 * (1 + std::fabs(double(w)))) << what << " job " << j << " at " << e << ": tensor " << got[e]
                                                         << " vs simple " << w;
      }
    }
    EXPECT_GT(finite, 0) << what;
    std::printf("%s: max |tensor - simple| / (1 + |simple|) = %.3g\n", what.c_str(), worst);
  };
  // T, H, D, window, top-k, start, floor, main rows G, ring, quantised.
  const std::vector<AttnCase> alone = {
      {1, 64, 512, 128, 512, 383, 0, 190, true, true},    // mini-flash decode: 190 of 512 top-k rows present
      {1, 64, 512, 128, 512, 1500, 0, 900, true, true},   // every top-k slot present (bar the 7k+3 ones)
      {7, 64, 512, 128, 512, 40, 30, 12, false, true},    // prefill rows, a floor, float window rows
      {3, 33, 512, 128, 0, 9, 0, 0, true, true},          // no top-k, heads off the 32-head block
      {1, 5, 512, 16, 9, 0, 0, 3, false, true},           // the first position
      {40, 64, 512, 128, 512, 700, 0, 300, true, true},   // a 40-row chunk over a ring
  };
  for (const AttnCase& c : alone) {
    AttnInputs in(dev, rng, c);
    check(in.alone(dev, rng, c), case_name(c));
  }
  dk::AttnBatch b;
  b.sink = dev.up(kc::randn(rng, 64));
  b.scaling = float(1.0 / std::sqrt(512.0));
  std::vector<AttnInputs> ins;
  ins.reserve(dk::AttnBatch::kMax);
  for (int j = 0; j < dk::AttnBatch::kMax; ++j) {
    ins.emplace_back(dev, rng, AttnCase{1, 64, 512, 128, 512, 100 + 61 * j, 0, 20 + 30 * j, j % 3 != 0, true});
    b.jobs[b.n++] = ins.back().job;
  }
  check(b, "tensor attention, decode batch of " + std::to_string(dk::AttnBatch::kMax));
  // Not taken where the head_dim is not 512: launch_chain falls back to the split kernels.
  const AttnCase other{1, 64, 128, 128, 64, 300, 0, 100, true, true};
  AttnInputs small(dev, rng, other);
  EXPECT_FALSE(fast::launch_attn_tensor(small.alone(dev, rng, other)));
  // Nor where a row has more slots than the kernel's slot table holds in shared memory (window 128
  // + top-k 8,192): the split kernels, the same outputs as the simple chain.
  const AttnCase wide{1, 64, 512, 128, 8192, 9000, 0, 8300, true, true};
  AttnInputs big(dev, rng, wide);
  EXPECT_FALSE(fast::launch_attn_tensor(big.alone(dev, rng, wide)));
}

}  // namespace
}  // namespace dsv41
