// The indexer's selections by filter and refine (index_refine.cu) against the exact scores'
// selections (dk::IndexSelectChain's simple path: the integer kernel's scores, the block maxima,
// the radix top-k — each the simple bodies' bits, their own tests say so): the same top-k ids and
// candidate blocks on every row, on rows long enough that the band is a small part of them, on rows
// that tie at the k-th score (every key repeated), on inputs the bound cannot cover (key blocks with
// a NaN or near-overflow scale, spans too wide, a query head off the MXFP4 grid, all-zero blocks),
// prefill rows at the causal edge, paged records, 8 and 64 heads, dh 32 / 64 / 128, several jobs
// in one chain and a chain of 40. Where a row keeps fewer than k fast scores every entry it sees is scored again, so
// there the refined scores must be the exact ones bit for bit. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/cuda_test_util.cuh"
#include "backends/cuda/device_kernels_check.h"
#include "backends/cuda/index_exact.h"

namespace dsv41 {
namespace {

namespace kc = kernel_checks;
using Chain = dk::IndexSelectChain;

struct RefineCase {
  int64_t T, G, nh, dh, start;
  int ratio, k;
  int bs, nb;      // candidate blocks (nb 0: not a candidate source)
  int repeat;      // every key repeated this often (exact ties), 1: none
  bool hard, paged;
  float spread;    // the keys' scale
  int block_span = 0;  // key blocks scaled by 2^(0 … block_span): past 3, outside the fused form
};

std::string name_of(const RefineCase& c) {
  return "T" + std::to_string(c.T) + " G" + std::to_string(c.G) + " " + std::to_string(c.nh) + "x" +
         std::to_string(c.dh) + " k" + std::to_string(c.k) + (c.nb ? " nb" + std::to_string(c.nb) : "") +
         (c.repeat > 1 ? " ties" : "") + (c.hard ? " hard" : "") + (c.paged ? " paged" : "");
}

// One job's device inputs and outputs.
struct RefineJob {
  Chain::Job job{};
  RefineJob(kc::Dev<CudaExec>& dev, std::mt19937& rng, const RefineCase& c) {
    auto q = kc::cached(RowKind::kIndex, kc::randn(rng, c.T * c.nh * c.dh), c.dh);
    const int64_t distinct = (c.G + c.repeat - 1) / c.repeat;
    auto base = kc::randn(rng, distinct * c.dh, c.spread);
    std::uniform_int_distribution<int> binades(0, c.block_span);
    for (int64_t b = 0; c.block_span > 0 && b < distinct * c.dh / 32; ++b) {
      const float f = std::ldexp(1.0f, binades(rng));
      for (int i = 0; i < 32; ++i) base[size_t(b * 32 + i)] *= f;
    }
    std::vector<float> keys(size_t(c.G * c.dh));
    for (int64_t g = 0; g < c.G; ++g)
      for (int64_t i = 0; i < c.dh; ++i) keys[size_t(g * c.dh + i)] = base[size_t((g % distinct) * c.dh + i)];
    if (c.hard) {
      kc::harden_index_keys(keys, c.G, c.dh);
      for (int64_t r = 0; r < c.T; ++r) {
        float* qh = q.data() + (r * c.nh + (r % c.nh)) * c.dh;
        if (r % 3 == 1) qh[3] = 0.3f;                                // not an MXFP4 value: the row unknown
        if (r % 3 == 2) for (int i = 0; i < 32; ++i) qh[i] = 0.0f;  // a zero block
      }
    }
    const std::vector<uint8_t> rec = kc::pack_rows(RowKind::kIndex, keys, c.dh);
    dk::KeyRows rows = dk::KeyRows::records(dev.up(rec), RowKind::kIndex, c.dh);
    if (c.paged) rows = kc::paged_records(dev, rec, RowKind::kIndex, c.dh, c.G, 3);  // pages of 8, last first
    job.score = dk::IndexScoreK{dev.up(q), dev.up(kc::randn(rng, c.T * c.nh)), rows, c.G, c.nh, c.dh, c.start,
                                c.ratio, float(1.0 / std::sqrt(double(c.dh))), nullptr, 0, 0,
                                dev.template zeros<float>(c.T * c.G)};
    job.rows = c.T;
    job.topk = dev.template zeros<int32_t>(c.T * c.k);
    job.topk_scratch = dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(c.T, c.G, c.k));
    job.work = dev.template zeros<float>(c.T * Chain::kWorkFloats);
    if (c.nb > 0) {
      job.bs = c.bs;
      job.nb = c.nb;
      job.blocks = (c.G + c.bs - 1) / c.bs;
      job.bmax = dev.template zeros<float>(c.T * job.blocks);
      job.candidates = dev.template zeros<int32_t>(c.T * c.nb);
      job.cand_scratch = dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(c.T, job.blocks, c.nb));
    }
  }
};

// The cases' jobs (appended to `jobs`, which must outlive the chain) as one chain.
Chain chain_of(kc::Dev<CudaExec>& dev, std::mt19937& rng, const std::vector<RefineCase>& cases,
               std::vector<RefineJob>& jobs) {
  Chain chain;
  for (const RefineCase& c : cases) {
    jobs.emplace_back(dev, rng, c);
    chain.k = c.k;
    chain.jobs[chain.n++] = jobs.back().job;
  }
  return chain;
}

struct Outputs {
  std::vector<std::vector<int32_t>> topk, candidates;
  std::vector<std::vector<float>> scores, work;
};

Outputs run(CudaExec& ex, kc::Dev<CudaExec>& dev, const Chain& chain) {
  ex.run_chain(chain);
  ex.sync();
  Outputs o;
  for (int j = 0; j < chain.n; ++j) {
    const Chain::Job& J = chain.jobs[j];
    o.topk.push_back(dev.down(J.topk, J.rows * chain.k));
    o.candidates.push_back(J.blocks > 0 ? dev.down(J.candidates, J.rows * J.nb) : std::vector<int32_t>{});
    o.scores.push_back(dev.down(J.score.scores, J.rows * J.score.G));
    o.work.push_back(dev.down(J.work, J.rows * Chain::kWorkFloats));
  }
  return o;
}

// Runs the chain exactly (refine off) and by filter and refine; the selections must be equal.
// *rescored: the entries scored again over all rows.
void check_chain(CudaExec& ex, kc::Dev<CudaExec>& dev, std::mt19937& rng, const std::vector<RefineCase>& cases,
                 int64_t* rescored) {
  std::vector<RefineJob> jobs;
  const Chain chain = chain_of(dev, rng, cases, jobs);
  std::string what;
  for (const RefineCase& c : cases) what += (what.empty() ? "" : " + ") + name_of(c);
  ex.set_index_refine(false);
  const Outputs want = run(ex, dev, chain);
  const int64_t before = ex.counts().index_refine;
  ex.set_index_refine(true, 1);
  const Outputs got = run(ex, dev, chain);
  EXPECT_EQ(ex.counts().index_refine, before + 1) << what << ": filter and refine did not run";
  *rescored = 0;
  for (int j = 0; j < chain.n; ++j) {
    const RefineCase& c = cases[size_t(j)];
    for (int64_t r = 0; r < c.T; ++r) {
      const std::string at = what + ", job " + std::to_string(j) + " row " + std::to_string(r);
      for (int i = 0; i < c.k; ++i)
        ASSERT_EQ(got.topk[size_t(j)][size_t(r * c.k + i)], want.topk[size_t(j)][size_t(r * c.k + i)])
            << at << ": top-k slot " << i;
      for (int i = 0; i < c.nb; ++i)
        ASSERT_EQ(got.candidates[size_t(j)][size_t(r * c.nb + i)], want.candidates[size_t(j)][size_t(r * c.nb + i)])
            << at << ": candidate slot " << i;
      uint32_t n = 0;
      std::memcpy(&n, &got.work[size_t(j)][size_t(r * Chain::kWorkFloats + 3)], 4);
      *rescored += n;
      if (got.work[size_t(j)][size_t(r * Chain::kWorkFloats + 5)] != 0.0f) std::printf("  %s: exact row\n", at.c_str());
      const bool short_row = got.topk[size_t(j)][size_t(r * c.k + c.k - 1)] < 0;  // fewer than k: all scored again
      if (!short_row) continue;
      for (int64_t g = 0; g < c.G; ++g) {
        const float w = want.scores[size_t(j)][size_t(r * c.G + g)], s = got.scores[size_t(j)][size_t(r * c.G + g)];
        if (std::isnan(w)) {
          ASSERT_TRUE(std::isnan(s)) << at << " entry " << g;
          continue;
        }
        ASSERT_EQ(kc::bits_of_floats({s})[0], kc::bits_of_floats({w})[0]) << at << " entry " << g << ": " << s << " vs " << w;
      }
    }
  }
}

// A chain of 40 jobs (more than a Batched of exact scores holds, and than 16 — the chains' size
// before session 52): decode and two-row jobs of different lengths, a candidate source two jobs in
// three (so more selections than a TopkBatch unit holds), paged records, the hard inputs, and keys
// the fast form cannot take (rows for the integer kernel) in jobs 7, 20 and 33 — in each Batched
// part of the exact fallback.
std::vector<RefineCase> many_jobs() {
  std::vector<RefineCase> jobs;
  for (int j = 0; j < 40; ++j) {
    const int64_t T = 1 + j % 2, G = 3000 + 97 * j;
    const bool candidates = j % 3 != 0;
    jobs.push_back({T, G, 32, 128, G - T, 1, 256, candidates ? 8 : 0, candidates ? 32 : 0, 1, j % 5 == 4, j % 4 == 1,
                    2.0f, j % 13 == 7 ? 7 : 0});
  }
  return jobs;
}

// The chains both scorers' tests run: ratio 2 in pages, ties, the hard inputs, prefill rows at the
// causal edge, rows shorter than k, dh 32 / 64 / 96, 8 and 16 heads, keys outside the fused form,
// several jobs in one chain.
std::vector<std::vector<RefineCase>> refine_chains() {
  return {
      {{1, 9000, 32, 128, 17999, 2, 512, 0, 0, 1, false, true, 2.0f}},                      // ratio 2, paged
      {{1, 6000, 32, 128, 5999, 1, 512, 8, 64, 6, false, false, 2.0f}},                    // ties at the k-th
      {{3, 5000, 32, 128, 4998, 1, 512, 8, 64, 1, true, false, 2.0f}},                     // the hard inputs
      {{6, 4100, 64, 128, 4094, 1, 300, 4, 40, 1, false, true, 7.0f}},                     // prefill at the edge
      {{2, 700, 8, 64, 699, 1, 512, 0, 0, 1, false, false, 2.0f}},                         // fewer than k: all again
      {{2, 3000, 16, 32, 2999, 1, 128, 32, 16, 1, true, false, 2.0f}},                     // dh 32 (17-byte records)
      {{3, 3000, 8, 64, 2999, 1, 128, 8, 16, 1, true, true, 2.0f}},   // 8 heads: no integer kernel, a lane an entry
      {{2, 6000, 32, 128, 5999, 1, 512, 8, 64, 1, false, false, 2.0f, 7},  // key blocks 7 binades apart: the
       {1, 6000, 32, 128, 5999, 1, 512, 8, 64, 1, false, true, 2.0f, 0}},  // pre-check's rows beside a plain one
      {{2, 5000, 16, 64, 4999, 1, 256, 0, 0, 1, false, false, 2.0f, 7}},   // the same, 2-block records
      {{1, 5000, 32, 128, 4999, 1, 512, 8, 64, 1, false, false, 2.0f},                     // three jobs in one chain
       {2, 3000, 32, 128, 2999, 1, 512, 0, 0, 3, false, true, 2.0f},
       {1, 400, 32, 128, 399, 1, 512, 8, 64, 1, false, false, 2.0f}},
      {{2, 8000, 32, 96, 5000, 1, 256, 2, 100, 1, false, false, 0.5f}},                    // entries past what the rows see
      many_jobs(),
  };
}

// The same plus a chain of 64 heads at mini-flash's widths (the scorer's widest warpgroup MMA).
std::vector<std::vector<RefineCase>> refine_chains_and_64_heads() {
  std::vector<std::vector<RefineCase>> chains = refine_chains();
  chains.push_back({{2, 20000, 64, 128, 19999, 1, 512, 8, 64, 1, false, false, 2.0f}});
  return chains;
}

TEST(IndexRefineCuda, SelectionsEqualTheExactScores) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  ex.set_topk_hints(true);  // the floors of the second selections, a sampled floor for long rows
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(131);
  //                   T  G       nh  dh   start  ratio k    bs nb  rep hard   paged  spread
  const RefineCase decode{1, 20000, 32, 128, 19999, 1, 512, 8, 64, 1, false, false, 2.0f};  // mini-flash widths
  int64_t rescored = 0;
  check_chain(ex, dev, rng, {decode}, &rescored);
  if (::testing::Test::HasFatalFailure()) return;
  std::printf("filter and refine: %lld of %lld entries scored again (top 512 and 64 blocks of 8)\n",
              static_cast<long long>(rescored), static_cast<long long>(decode.G));
  EXPECT_LT(rescored, decode.G / 4) << "the band is most of the row: the bound is far looser than it should be";
  const std::vector<std::vector<RefineCase>> chains = refine_chains();
  for (const bool warpgroup : {false, true}) {
    ex.set_index_warpgroup(warpgroup);  // the fast scores on each warp's MMAs, then on warpgroup MMAs
    for (const auto& c : chains) {
      check_chain(ex, dev, rng, c, &rescored);
      std::printf("  %s%s: %lld scored again\n", c[0].hard ? "hard" : "case", warpgroup ? " (warpgroup)" : "",
                  static_cast<long long>(rescored));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  ASSERT_TRUE(ex.status().ok()) << ex.status().to_string();
}

// The fast scorer on warpgroup MMAs writes the same fast scores (bit for bit; NaN where unknown)
// and the same β and unknown counts as the one on each warp's MMAs, on every case above: heads 8 …
// 64 (the warpgroup MMA's columns past nh zero), dh 32 … 128, paged records, rows longer than a
// tile's multiple, entries past what a row sees, the hard keys and queries.
TEST(IndexRefineCuda, WarpgroupScoresEqualWarpScores) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(977);
  std::vector<std::vector<RefineCase>> chains = refine_chains_and_64_heads();
  chains.push_back({{1, 4099, 24, 128, 4098, 1, 512, 0, 0, 1, true, true, 2.0f}});  // 24 heads: 3 of 8 tiles
  for (const auto& cases : chains) {
    std::vector<RefineJob> jobs;
    Chain chain = chain_of(dev, rng, cases, jobs);
    std::vector<std::vector<float>> scores[2], work[2];
    for (const bool warpgroup : {false, true}) {
      chain.warpgroup = warpgroup;
      ASSERT_TRUE(fast::launch_fast_scores(chain)) << name_of(cases[0]);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int j = 0; j < chain.n; ++j) {
        scores[warpgroup].push_back(dev.down(chain.jobs[j].score.scores, chain.jobs[j].rows * chain.jobs[j].score.G));
        work[warpgroup].push_back(dev.down(chain.jobs[j].work, chain.jobs[j].rows * Chain::kWorkFloats));
      }
    }
    for (int j = 0; j < chain.n; ++j) {
      const std::string at = name_of(cases[size_t(j)]) + ", job " + std::to_string(j);
      const std::vector<float>&want = scores[0][size_t(j)], &got = scores[1][size_t(j)];
      int64_t known = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << at << " score " << i << ": " << got[i] << ", unknown on warp MMAs";
          continue;
        }
        known += std::isfinite(want[i]) ? 1 : 0;
        ASSERT_EQ(kc::bits_of_floats({got[i]})[0], kc::bits_of_floats({want[i]})[0])
            << at << " score " << i << ": " << got[i] << " vs " << want[i];
      }
      if (!cases[size_t(j)].hard && cases[size_t(j)].block_span <= dk::kIndexFusedSpan)  // (else mostly unknown)
        EXPECT_GT(known, int64_t(want.size()) / 2) << at << ": too few known scores to compare";
      for (int64_t r = 0; r < chain.jobs[j].rows; ++r)
        for (const int w : {2, 4})  // β (float bits), the unknown count
          ASSERT_EQ(kc::bits_of_floats({work[1][size_t(j)][size_t(r * Chain::kWorkFloats + w)]})[0],
                    kc::bits_of_floats({work[0][size_t(j)][size_t(r * Chain::kWorkFloats + w)]})[0])
              << at << " row " << r << " work float " << w;
    }
  }
}


// Every known fast score lies within its row's β of the exact score (the integer kernel's, the
// simple body's bits), with either scorer: the bound the band's cuts rest on, checked on the GPU
// entry by entry (the selection test above only sees its consequences). Rows the bound cannot cover
// stay unknown (NaN) and are not compared; some rows must have known scores for the test to mean
// anything.
TEST(IndexRefineCuda, FastScoresLieWithinBetaOfTheExactScores) {
  DSV41_REQUIRE_CUDA_DEVICE();
  CudaExec ex;
  kc::Dev<CudaExec> dev(ex);
  std::mt19937 rng(4099);
  const std::vector<std::vector<RefineCase>> chains = refine_chains_and_64_heads();
  int64_t compared = 0;
  for (const auto& cases : chains) {
    std::vector<RefineJob> jobs;
    Chain chain = chain_of(dev, rng, cases, jobs);
    ex.set_index_refine(false);
    const Outputs exact = run(ex, dev, chain);  // every score exact
    for (const bool warpgroup : {false, true}) {
      chain.warpgroup = warpgroup;
      ASSERT_TRUE(fast::launch_fast_scores(chain)) << name_of(cases[0]);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int j = 0; j < chain.n; ++j) {
        const Chain::Job& J = chain.jobs[j];
        const std::vector<float> fast = dev.down(J.score.scores, J.rows * J.score.G);
        const std::vector<float> work = dev.down(J.work, J.rows * Chain::kWorkFloats);
        for (int64_t r = 0; r < J.rows; ++r) {
          const float beta = work[size_t(r * Chain::kWorkFloats + 2)];  // (a float's bits, by atomicMax)
          for (int64_t g = 0; g < J.score.G; ++g) {
            const float f = fast[size_t(r * J.score.G + g)], x = exact.scores[size_t(j)][size_t(r * J.score.G + g)];
            if (std::isnan(f) || !std::isfinite(f) || !std::isfinite(x)) continue;
            ++compared;
            ASSERT_LE(std::fabs(double(f) - double(x)), double(beta))
                << name_of(cases[size_t(j)]) << (warpgroup ? " (warpgroup)" : "") << ", job " << j << " row " << r
                << " entry " << g << ": fast " << f << ", exact " << x << ", β " << beta;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 100000) << "too few known fast scores to compare";
}

}  // namespace
}  // namespace dsv41
