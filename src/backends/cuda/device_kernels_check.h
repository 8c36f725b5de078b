// Checks of every device kernel body (device_kernels.h) against the CPU engine's scalar references
// (or, for attention and indexer scores, a float64 loop written here) on fresh random inputs at
// odd shapes, run through an executor: HostExec in the CPU build (device_kernels_test.cpp), CudaExec
// on a GPU (cuda_backend_test.cu). Test support only (header-only, uses GoogleTest).
// Tolerances: the references sum in double like the kernels, in the same order, so results agree
// to the last float bit up to FMA contraction (the GPU fuses multiply-adds) and the GPU's expf
// (≤ 2 ulp): 1e-5 relative (or absolute near 0). Selections (top-k, candidate blocks, router) are
// compared exactly; their inputs are made on the host, so they are the same bits on both sides.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/device_kernels.h"
#include "base/numerics.h"
#include "cache/records.h"
#include "kernels/cpu/gemm.h"
#include "model/compressor.h"
#include "model/engram.h"
#include "model/indexer.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/rmsnorm.h"
#include "model/rope.h"

namespace dsv41::kernel_checks {

// Device copies through the executor, freed at the end of the check.
template <class Exec>
class Dev {
 public:
  explicit Dev(Exec& ex) : ex_(ex) {}
  ~Dev() {
    for (void* p : owned_) ex_.release(p);
  }
  template <typename T>
  T* up(const std::vector<T>& v) {
    T* p = static_cast<T*>(ex_.alloc(int64_t(v.size() * sizeof(T))));
    owned_.push_back(p);
    ex_.upload(p, v.data(), int64_t(v.size() * sizeof(T)));
    return p;
  }
  template <typename T>
  T* zeros(int64_t n) {
    return up(std::vector<T>(static_cast<size_t>(n), T{}));
  }
  template <typename T>
  std::vector<T> down(const T* p, int64_t n) {
    std::vector<T> v(static_cast<size_t>(n));
    ex_.download(v.data(), p, n * int64_t(sizeof(T)));
    return v;
  }
  Exec& ex() { return ex_; }

 private:
  Exec& ex_;
  std::vector<void*> owned_;
};

inline std::vector<float> randn(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rel * std::max(1.0, std::fabs(double(want[i])));
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " at " << i;
    } else {
      ASSERT_LE(std::fabs(double(got[i]) - want[i]), tol) << what << " at " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

constexpr double kRel = 1e-5;

template <class Exec>
void check_gemm(Exec& ex) {
  std::mt19937 rng(11);
  Dev<Exec> dev(ex);
  const int64_t rows = 5, in = 37, out = 19;
  const auto x = randn(rng, rows * in), w = randn(rng, out * in);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
  std::vector<float> want(rows * out), got;
  gemm_f32_reference(x.data(), rows, in, w.data(), out, want.data());
  float* y = dev.template zeros<float>(rows * out);
  ex.for_each(rows * out, dk::GemmK{dev.up(x), in, {dev.up(w), nullptr}, in, out, y, out});
  expect_close(dev.down(y, rows * out), want, kRel, "gemm f32");
  gemm_bf16w_reference(x.data(), rows, in, wb.data(), out, want.data());
  ex.for_each(rows * out, dk::GemmK{dev.up(x), in, {nullptr, dev.up(wb)}, in, out, y, out});
  expect_close(dev.down(y, rows * out), want, kRel, "gemm bf16");
  // Strided rows (a column slice of x, every other row of y): the attention output's groups.
  const int64_t xs = in + 3, ys = 2 * out;
  const auto xw = randn(rng, rows * xs);
  std::vector<float> xc(rows * in);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(xw.data() + r * xs + 3, in, xc.data() + r * in);
  gemm_f32_reference(xc.data(), rows, in, w.data(), out, want.data());
  float* y2 = dev.template zeros<float>(rows * ys);
  ex.for_each(rows * out, dk::GemmK{dev.up(xw) + 3, xs, {dev.up(w), nullptr}, in, out, y2 + out, ys});
  const auto g2 = dev.down(y2, rows * ys);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < ys; ++o) {
      if (o < out) {
        ASSERT_EQ(g2[r * ys + o], 0.0f) << "wrote outside its rows";
      } else {
        ASSERT_NEAR(g2[r * ys + o], want[r * out + o - out], kRel * std::max(1.0f, std::fabs(want[r * out + o - out])));
      }
    }
}

template <class Exec>
void check_rmsnorm_rope(Exec& ex) {
  std::mt19937 rng(12);
  Dev<Exec> dev(ex);
  const int64_t rows = 7, n = 96;
  const auto x = randn(rng, rows * n, 3.0f), w = randn(rng, n);
  std::vector<float> want(rows * n);
  rmsnorm_rows(x.data(), rows, n, w.data(), 1e-6, want.data());
  float* dx = dev.up(x);
  ex.for_each(rows, dk::RmsNormK{dx, n, dev.up(w), 1e-6f, dx});  // in place, as the backend does
  expect_close(dev.down(dx, rows * n), want, kRel, "rmsnorm");
  // RoPE over 3 heads of 40 channels, rope dim 16, forward and inverse, per-row tables.
  const int64_t heads = 3, dim = 40;
  const int rd = 16;
  const auto v = randn(rng, rows * heads * dim);
  const auto cs = randn(rng, rows * rd / 2), sn = randn(rng, rows * rd / 2);
  for (bool inverse : {false, true}) {
    std::vector<float> ref = v;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < heads; ++h)
        rope_rotate(ref.data() + (r * heads + h) * dim, dim, rd, cs.data() + r * rd / 2, sn.data() + r * rd / 2, inverse);
    float* dv = dev.up(v);
    ex.for_each(rows * heads * rd / 2, dk::RopeK{dv, heads, dim, rd, dev.up(cs), dev.up(sn), 0, inverse});
    expect_close(dev.down(dv, rows * heads * dim), ref, kRel, inverse ? "rope inverse" : "rope");
  }
}

template <class Exec>
void check_mhc(Exec& ex) {
  std::mt19937 rng(13);
  Dev<Exec> dev(ex);
  MhcShape s;
  s.hc = 4;
  s.dim = 24;
  s.sinkhorn_iters = 20;
  const int64_t T = 6, flat = s.hc * s.dim, mix = s.mix_width();
  const auto x = randn(rng, T * flat), fn = randn(rng, mix * flat, 0.1f), base = randn(rng, mix);
  const std::vector<float> scale = {0.7f, 1.3f, 0.9f};
  std::vector<float> pre(T * s.hc), post(T * s.hc), comb(T * s.hc * s.hc);
  mhc_coefficients_reference(s, {fn.data(), base.data(), scale.data()}, x.data(), T, pre.data(), post.data(), comb.data());
  float* dx = dev.up(x);
  float* r = dev.template zeros<float>(T);
  float* m = dev.template zeros<float>(T * mix);
  float *dpre = dev.template zeros<float>(T * s.hc), *dpost = dev.template zeros<float>(T * s.hc);
  float* dcomb = dev.template zeros<float>(T * s.hc * s.hc);
  ex.run_chain(dk::MhcCoeffChain{
      dk::MhcRsqrtK{dx, flat, s.norm_eps, r}, dk::MhcMixK{dx, r, dev.up(fn), flat, mix, m},
      dk::MhcFinishK{m, dev.up(base), dev.up(scale), s.hc, s.sinkhorn_iters, s.hc_eps, dpre, dpost, dcomb}, T});
  expect_close(dev.down(dpre, T * s.hc), pre, 1e-4, "mhc pre");
  expect_close(dev.down(dpost, T * s.hc), post, 1e-4, "mhc post");
  expect_close(dev.down(dcomb, T * s.hc * s.hc), comb, 1e-4, "mhc comb (Sinkhorn)");
  // Collapse and expand on the reference's coefficients: the same float operations.
  std::vector<float> y(T * s.dim), out(T * flat);
  const auto a = randn(rng, T * s.dim);
  mhc_collapse_reference(s, x.data(), pre.data(), T, y.data());
  mhc_expand_reference(s, a.data(), x.data(), post.data(), comb.data(), T, out.data());
  float* dy = dev.template zeros<float>(T * s.dim);
  float* dout = dev.template zeros<float>(T * flat);
  ex.for_each(T * s.dim, dk::MhcCollapseK{dx, dev.up(pre), nullptr, s.hc, s.dim, dy});
  ex.for_each(T * flat, dk::MhcExpandK{dev.up(a), dx, dev.up(post), dev.up(comb), s.hc, s.dim, dout});
  expect_close(dev.down(dy, T * s.dim), y, kRel, "mhc collapse");
  expect_close(dev.down(dout, T * flat), out, kRel, "mhc expand");
}

template <class Exec>
void check_pool(Exec& ex) {
  std::mt19937 rng(14);
  Dev<Exec> dev(ex);
  for (int r : {2, 4}) {
    const int64_t groups = 5, D = 33;
    const auto a = randn(rng, groups * r * D), b = randn(rng, groups * r * D, 4.0f);
    std::vector<float> want(groups * D);
    compressor_pool_reference(a.data(), b.data(), groups, r, D, want.data());
    float* out = dev.template zeros<float>(groups * D);
    ex.for_each(groups * D, dk::PoolK{dev.up(a), dev.up(b), r, D, out});
    expect_close(dev.down(out, groups * D), want, kRel, "compressor pool");
  }
}

// The batched compressor's bodies against what the per-segment path runs, bit for bit: SplitPoolK
// (pending rows apart from the new ones) against PoolK over the rows gathered; StridedRowsK against
// the rows picked on the host. (PackK, which appends the new entries: check_record_codecs.)
template <class Exec>
void check_compress_bodies(Exec& ex) {
  std::mt19937 rng(23);
  Dev<Exec> dev(ex);
  const int64_t D = 32;
  for (int r : {1, 2, 4, 7}) {
    for (int64_t P : {int64_t(0), int64_t(1), int64_t(r - 1)}) {
      if (P >= r) continue;
      const int64_t T = 3 * r + 2 - P, groups = (P + T) / r;
      const auto a = randn(rng, (P + T) * D), b = randn(rng, (P + T) * D, 4.0f);
      float* want = dev.template zeros<float>(groups * D);
      float* got = dev.template zeros<float>(groups * D);
      const float* da = dev.up(a);
      const float* db = dev.up(b);
      ex.for_each(groups * D, dk::PoolK{da, db, r, D, want});
      ex.for_each(groups * D, dk::SplitPoolK{da, db, P, da + P * D, db + P * D, r, D, got});
      ASSERT_EQ(dev.down(got, groups * D), dev.down(want, groups * D)) << "split pool r " << r << " P " << P;
    }
  }
  const int64_t stride = 5, width = 3, n = 4;
  const auto src = randn(rng, (n - 1) * stride + width);
  std::vector<float> want;
  for (int64_t i = 0; i < n; ++i) want.insert(want.end(), src.begin() + i * stride, src.begin() + i * stride + width);
  float* got = dev.template zeros<float>(n * width);
  ex.for_each(n * width, dk::StridedRowsK{dev.up(src), stride, width, got});
  ASSERT_EQ(dev.down(got, n * width), want) << "strided rows";
}

// Top-k (and candidate blocks) equal to indexer.h's selections: ties, −inf, fewer entries than k.
template <class Exec>
void check_selection(Exec& ex) {
  std::mt19937 rng(15);
  Dev<Exec> dev(ex);
  const int64_t rows = 4, G = 203;
  std::vector<float> v(rows * G);
  std::uniform_int_distribution<int> coarse(0, 20);
  for (float& x : v) x = float(coarse(rng)) * 0.25f;  // many ties
  for (int64_t g = 0; g < G; g += 7) v[g] = -INFINITY;
  for (int64_t g = 0; g < G; ++g) v[3 * G + g] = g < 150 ? -INFINITY : v[3 * G + g];  // 53 visible
  for (int k : {4, 64, 256}) {
    std::vector<int32_t> want(rows * k);
    for (int64_t r = 0; r < rows; ++r) select_topk(v.data() + r * G, G, k, want.data() + r * k);
    int32_t* out = dev.template zeros<int32_t>(rows * k);
    uint8_t* mark = dev.template zeros<uint8_t>(rows * G);
    const float* dv = dev.up(v);
    ex.for_each(rows * k, dk::FillK<int32_t>{out, -1});
    ex.for_each(rows * G, dk::RankMarkK{dv, G, std::min<int64_t>(k, G), mark});
    ex.for_each(rows * G, dk::RankPlaceK{mark, G, k, out});
    ASSERT_EQ(dev.down(out, rows * k), want) << "top-k " << k;
  }
  // Candidate blocks: block maxima with the newest visible block pinned, top nb of them.
  const int bs = 16, nb = 5, ratio = 2;
  const int64_t blocks = (G + bs - 1) / bs, start = 300;
  std::vector<int32_t> want(rows * nb);
  for (int64_t r = 0; r < rows; ++r)
    select_candidate_blocks(v.data() + r * G, G, (start + r + 1) / ratio, bs, nb, want.data() + r * nb);
  float* bmax = dev.template zeros<float>(rows * blocks);
  ex.for_each(rows * blocks, dk::BlockMaxK{dev.up(v), G, blocks, start, bs, ratio, bmax});
  int32_t* out = dev.template zeros<int32_t>(rows * nb);
  uint8_t* mark = dev.template zeros<uint8_t>(rows * blocks);
  ex.for_each(rows * nb, dk::FillK<int32_t>{out, -1});
  ex.for_each(rows * blocks, dk::RankMarkK{bmax, blocks, std::min<int64_t>(nb, blocks), mark});
  ex.for_each(rows * blocks, dk::RankPlaceK{mark, blocks, nb, out});
  ASSERT_EQ(dev.down(out, rows * nb), want) << "candidate blocks";
}

// One score row of the top-k checks, by pattern: 0 gaussian; 1 heavy ties (8 values, −inf every
// 5th); 2 all −inf; 3 only ±0 and ±1; 4 NaN of both signs and ±inf among gaussian values; 5 three
// finite values, the rest −inf; 6 ±(1 + up to 300 ulps), ties on the low bits; 7 subnormals and ±0.
inline void topk_row(std::mt19937& rng, int pattern, float* row, int64_t size) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 7), ulps(0, 300);
  for (int64_t g = 0; g < size; ++g) {
    float v = normal(rng);
    switch (pattern) {
      case 1: v = g % 5 == 4 ? -INFINITY : float(small(rng)) * 0.5f; break;
      case 2: v = -INFINITY; break;
      case 3: v = (small(rng) & 1 ? -1.0f : 1.0f) * float(small(rng) < 6 ? 0 : 1); break;
      case 4:
        if (g % 7 == 3) {
          const uint32_t nan = small(rng) & 1 ? 0xFFC00000u : 0x7FC00001u;  // −NaN, +NaN
          std::memcpy(&v, &nan, sizeof v);
        }
        if (g % 11 == 5) v = small(rng) & 1 ? INFINITY : -INFINITY;
        break;
      case 5: v = g % (size / 3 + 1) == 1 ? v : -INFINITY; break;
      case 6: {
        const uint32_t bits = 0x3F800000u + uint32_t(ulps(rng)) + (small(rng) & 1 ? 0x80000000u : 0u);
        std::memcpy(&v, &bits, sizeof v);
        break;
      }
      case 7: {
        const uint32_t bits = uint32_t(ulps(rng) % 4) + (small(rng) & 1 ? 0x80000000u : 0u);
        std::memcpy(&v, &bits, sizeof v);
        break;
      }
      default: break;
    }
    row[g] = v;
  }
}

// dk::TopkBatch against select_topk (indexer.h), ids bit for bit, on units of jobs of mixed shapes
// (rows of different lengths and widths in one launch: n < k, n = k, n = k + 1, one entry), every
// row pattern of topk_row; with long_rows (the fast path: the simple one is quadratic) also
// 16K, 32K, 64K and 64K + 1 entries (16 chunks, and 17: two groups), 300K and 200K + 1 (groups of
// 16 chunks and a part group), rows of 1 and 2 chunks ± 1, and a prefill-like job of many rows
// of several chunks beside decode rows; a unit of kMax jobs. `launches`: what one unit must cost
// on this executor (the simple path 3 for each Batched of up to 16 jobs, the fast one 1: so a fast
// executor that fell back would fail).
template <class Exec>
void check_topk_batch(Exec& ex, bool long_rows, int64_t launches) {
  struct Shape {
    int64_t rows, size;
    int width;
  };
  const std::vector<Shape> small = {{3, 5, 8},       {2, 1, 4},    {2, 64, 64}, {2, 65, 64},
                                    {8, 203, 16},    {3, 700, 256}, {2, 257, 256}, {2, 255, 256}};
  const std::vector<Shape> large = {{1, 16384, 512}, {1, 32768, 512}, {1, 65537, 512}, {1, 4096, 512},
                                    {1, 4097, 512},  {2, 4095, 2048}, {2, 2049, 2048}, {24, 9000, 512},
                                    {1, 20000, 2048}, {3, 513, 512},  {3, 512, 512},  {3, 511, 512},
                                    {16, 12289, 512}, {2, 8192, 512}, {1, 8193, 4}};
  const std::vector<Shape> longer = {{1, 65536, 512}, {1, 300000, 512}, {2, 200001, 2048}, {3, 9000, 512}};
  std::vector<std::vector<Shape>> units = {small};
  if (long_rows) units.push_back(large), units.push_back(longer);
  // A full unit (kMax jobs: a 64-sequence chain's selections of one kind), each launch finding its
  // blocks' jobs by the unit's plan: the small shapes in turn; with long_rows rows of several chunks,
  // a sampled floor (compacted), groups and one-chunk rows among them.
  const std::vector<Shape> mix = long_rows ? std::vector<Shape>{{1, 700, 64},     {2, 5000, 256},    {1, 9000, 512},
                                                                {1, 40000, 512},  {1, 65537, 2048},  {3, 255, 256}}
                                           : small;
  std::vector<Shape> full;
  for (int j = 0; j < dk::TopkBatch::kMax; ++j) full.push_back(mix[size_t(j) % mix.size()]);
  units.push_back(full);
  std::mt19937 rng(31);
  for (size_t u = 0; u < units.size(); ++u) {
    ASSERT_LE(units[u].size(), size_t(dk::TopkBatch::kMax)) << "unit " << u;
    Dev<Exec> dev(ex);
    dk::TopkBatch unit;
    std::vector<std::vector<int32_t>> want;
    for (const Shape& s : units[u]) {
      std::vector<float> v(size_t(s.rows * s.size));
      std::vector<int32_t> w(size_t(s.rows * s.width));
      for (int64_t r = 0; r < s.rows; ++r) {
        topk_row(rng, int((r + 3 * unit.n) % 8), v.data() + r * s.size, s.size);
        select_topk(v.data() + r * s.size, s.size, s.width, w.data() + r * s.width);
      }
      want.push_back(w);
      unit.jobs[unit.n++] = {dev.up(v), s.rows, s.size, s.width, dev.template zeros<int32_t>(s.rows * s.width),
                             dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(s.rows, s.size, s.width))};
    }
    const int64_t before = ex.counts().launches;
    ex.run_chain(unit);
    // (the simple path's three launches for each Batched of jobs)
    const int64_t parts = (unit.n + dk::Batched<dk::RankMarkK>::kMax - 1) / dk::Batched<dk::RankMarkK>::kMax;
    ASSERT_EQ(ex.counts().launches - before, launches == 1 ? 1 : launches * parts) << "unit " << u;
    for (int j = 0; j < unit.n; ++j) {
      const dk::TopkBatch::Job& J = unit.jobs[j];
      const std::vector<int32_t> got = dev.down(J.out, J.rows * J.width);
      for (int64_t r = 0; r < J.rows; ++r)
        ASSERT_TRUE(std::equal(got.begin() + r * J.width, got.begin() + (r + 1) * J.width,
                               want[j].begin() + r * J.width))
            << "unit " << u << " job " << j << " (" << J.rows << " × " << J.size << ", width " << J.width
            << ") row " << r << " pattern " << (r + 3 * j) % 8;
    }
  }
}

// Runs `unit` (one unit's cost on this executor: `launches`) and compares every job's out with
// want's, row by row; note(r) adds to a failing row's message.
template <class Exec, class Note>
void expect_topk_unit(Exec& ex, Dev<Exec>& dev, const dk::TopkBatch& unit,
                      const std::vector<std::vector<int32_t>>& want, int64_t launches, Note note) {
  const int64_t before = ex.counts().launches;
  ex.run_chain(unit);
  ASSERT_EQ(ex.counts().launches - before, launches);
  for (int j = 0; j < unit.n; ++j) {
    const dk::TopkBatch::Job& J = unit.jobs[j];
    const std::vector<int32_t> got = dev.down(J.out, J.rows * J.width);
    for (int64_t r = 0; r < J.rows; ++r)
      ASSERT_TRUE(std::equal(got.begin() + r * J.width, got.begin() + (r + 1) * J.width, want[j].begin() + r * J.width))
          << "job " << j << " (" << J.rows << " × " << J.size << ", width " << J.width << ", pool " << J.nb << " × "
          << J.bs << (J.floor ? ", floors" : "") << ") row " << r << note(r);
  }
}

// The hints of dk::TopkBatch::Job (a pool, a floor) change no output: jobs with them against
// select_topk over the whole row, ids bit for bit. Pooled rows (−inf outside their pool): pools with
// padding, a kept last block that the row ends inside, a pool shorter than the width, a pool no
// shorter than its row (read as a row); floors (interleaved, stride 3): the smallest value kept
// (ties at the floor), one ulp below it, far below, −inf, NaN, and above every value of an empty
// row; a pooled row with a floor. long_rows (the fast path) adds a 300K row with a 16384-entry pool
// and 64K rows with floors. `launches`: one unit's cost on this executor (check_topk_batch).
template <class Exec>
void check_topk_hints(Exec& ex, bool long_rows, int64_t launches) {
  struct Shape {
    int64_t rows, size;
    int width, nb, bs;  // nb = 0: no pool
    bool floors;
  };
  std::vector<Shape> shapes = {{3, 1000, 16, 20, 8, false}, {3, 1003, 16, 20, 8, false}, {2, 500, 64, 5, 8, false},
                               {2, 100, 16, 20, 8, false},  {6, 700, 32, 0, 0, true},    {6, 9, 4, 0, 0, true},
                               {6, 1003, 16, 30, 8, true}};
  if (long_rows) {
    shapes.push_back({2, 300000, 512, 2048, 8, false});
    shapes.push_back({6, 65536, 512, 0, 0, true});
    shapes.push_back({6, 70001, 2048, 0, 0, true});
  }
  std::mt19937 rng(43);
  Dev<Exec> dev(ex);
  dk::TopkBatch unit;
  std::vector<std::vector<int32_t>> want;
  for (const Shape& s : shapes) {
    const int64_t blocks = s.nb > 0 ? (s.size + s.bs - 1) / s.bs : 0;
    std::vector<float> v(size_t(s.rows * s.size)), floors(size_t(s.rows * 3), 0.0f);
    std::vector<int32_t> kept(size_t(s.rows * std::max(s.nb, 1)), -1), w(size_t(s.rows * s.width));
    for (int64_t r = 0; r < s.rows; ++r) {
      float* row = v.data() + r * s.size;
      topk_row(rng, int((r + unit.n) % 8 == 2 ? 0 : (r + unit.n) % 8), row, s.size);
      if (s.nb > 0) {  // a pool of blocks in ascending order (the last block among them), −1 padded
        std::vector<int32_t> pick;
        for (int64_t b = blocks - 1; b >= 0 && int(pick.size()) < s.nb - int(r % 2); --b)
          if (b == blocks - 1 || rng() % 3 == 0) pick.push_back(int32_t(b));
        std::sort(pick.begin(), pick.end());
        std::copy(pick.begin(), pick.end(), kept.begin() + r * s.nb);
        std::vector<char> in(size_t(s.size), 0);
        for (int32_t b : pick)
          for (int64_t g = int64_t(b) * s.bs; g < std::min(s.size, int64_t(b + 1) * s.bs); ++g) in[size_t(g)] = 1;
        for (int64_t g = 0; g < s.size; ++g) row[g] = in[size_t(g)] ? row[g] : -INFINITY;
      }
      if (s.floors && r % 6 == 5) std::fill(row, row + s.size, -INFINITY);
      int32_t* out = w.data() + r * s.width;
      select_topk(row, s.size, s.width, out);
      float least = INFINITY;  // the smallest value kept
      for (int i = 0; i < s.width && out[i] >= 0; ++i) least = std::min(least, row[out[i]]);
      const float by_case[6] = {least, std::nextafter(least, -INFINITY), least - 1000.0f, -INFINITY, NAN, 3.0f};
      floors[size_t(r * 3)] = by_case[r % 6];
    }
    want.push_back(w);
    dk::TopkBatch::Job J{dev.up(v), s.rows, s.size, s.width, dev.template zeros<int32_t>(s.rows * s.width),
                         dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(s.rows, s.size, s.width))};
    if (s.nb > 0) J.kept = dev.up(kept), J.nb = s.nb, J.bs = s.bs;
    if (s.floors) J.floor = dev.up(floors), J.floor_stride = 3;
    unit.jobs[unit.n++] = J;
  }
  expect_topk_unit(ex, dev, unit, want, launches, [](int64_t) { return ""; });
}

// The done hint of dk::TopkBatch::Job: the fast path (`fast`) leaves a row marked done as it is
// (here its out prefilled with −7, which no selection writes) and selects every other row as
// select_topk does; the simple path ignores the mark (every row select_topk's). Shapes for each of
// the fast path's routes: one chunk, a pool, a floor, and on the fast path chunks and a merge, a
// floor over chunks (compaction), a sampled floor, groups of chunks. Marks at a stride of 2, every
// other row.
template <class Exec>
void check_topk_done(Exec& ex, bool fast, int64_t launches) {
  struct Shape {
    int64_t rows, size;
    int width, nb, bs;  // nb = 0: no pool
    bool floors;
  };
  std::vector<Shape> shapes = {{4, 1000, 16, 0, 0, false}, {4, 3000, 16, 50, 8, false}, {4, 1200, 16, 0, 0, true}};
  if (fast) {  // (rows of several chunks: the simple path is quadratic)
    shapes.push_back({4, 20000, 64, 0, 0, false}), shapes.push_back({4, 20000, 64, 0, 0, true});
    shapes.push_back({4, 70000, 512, 0, 0, false}), shapes.push_back({2, 65540, 2048, 0, 0, false});
  }
  std::mt19937 rng(47);
  Dev<Exec> dev(ex);
  dk::TopkBatch unit;
  std::vector<std::vector<int32_t>> want;
  for (const Shape& s : shapes) {
    std::vector<float> v(size_t(s.rows * s.size)), floors(size_t(s.rows), -INFINITY), done(size_t(s.rows * 2), 0.0f);
    std::vector<int32_t> kept(size_t(s.rows * std::max(s.nb, 1)), -1), w(size_t(s.rows * s.width)),
        prefill(size_t(s.rows * s.width), 0);
    const int64_t blocks = s.nb > 0 ? (s.size + s.bs - 1) / s.bs : 0;
    for (int64_t r = 0; r < s.rows; ++r) {
      float* row = v.data() + r * s.size;
      topk_row(rng, int((r + unit.n) % 8), row, s.size);
      if (s.nb > 0) {  // blocks 0, 2, 4, … of the row (ascending), the rest −inf
        for (int i = 0; i < s.nb && 2 * i < blocks; ++i) kept[size_t(r * s.nb + i)] = 2 * i;
        for (int64_t g = 0; g < s.size; ++g) row[g] = (g / s.bs) % 2 == 0 && g / s.bs < 2 * s.nb ? row[g] : -INFINITY;
      }
      int32_t* out = w.data() + r * s.width;
      select_topk(row, s.size, s.width, out);
      if (s.floors) floors[size_t(r)] = out[s.width - 1] >= 0 ? row[out[s.width - 1]] - 1.0f : -INFINITY;
      done[size_t(2 * r)] = r % 2 == 1 ? 1.0f : 0.0f;
      if (fast && r % 2 == 1) {  // what the fast path must leave there
        std::fill(out, out + s.width, -7);
        std::fill(prefill.begin() + r * s.width, prefill.begin() + (r + 1) * s.width, -7);
      }
    }
    want.push_back(w);
    dk::TopkBatch::Job J{dev.up(v), s.rows, s.size, s.width, dev.up(prefill),
                         dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(s.rows, s.size, s.width))};
    if (s.nb > 0) J.kept = dev.up(kept), J.nb = s.nb, J.bs = s.bs;
    if (s.floors) J.floor = dev.up(floors), J.floor_stride = 1;
    J.done = dev.up(done), J.done_stride = 2;
    unit.jobs[unit.n++] = J;
  }
  expect_topk_unit(ex, dev, unit, want, launches,
                   [fast](int64_t r) { return r % 2 == 1 && fast ? " (done: left as it was)" : ""; });
}

template <class Exec>
void check_moe(Exec& ex) {
  std::mt19937 rng(16);
  Dev<Exec> dev(ex);
  MoeShape s;
  s.dim = 40;
  s.inter = 24;
  s.shared_inter = 24;
  s.n_experts = 6;
  s.top_k = 2;
  s.routed_scaling_factor = 1.5f;
  s.swiglu_limit = 1.0f;  // small, so that the clamps act
  s.gate_temp = 1.3f;
  const int64_t T = 5;
  const auto x = randn(rng, T * s.dim), gate = randn(rng, s.n_experts * s.dim, 0.3f), bias = randn(rng, s.n_experts, 0.1f);
  std::vector<std::vector<float>> w1, w3, w2;
  for (int e = 0; e <= s.n_experts; ++e) {
    w1.push_back(randn(rng, s.inter * s.dim, 0.3f));
    w3.push_back(randn(rng, s.inter * s.dim, 0.3f));
    w2.push_back(randn(rng, s.dim * s.inter, 0.3f));
  }
  for (ScoringFunc scoring : {ScoringFunc::kSqrtSoftplus, ScoringFunc::kSoftmax, ScoringFunc::kSigmoid}) {
    s.scoring = scoring;
    MoeWeights w;
    w.gate = gate.data();
    w.bias = bias.data();
    std::vector<dk::ExpertW> table;
    for (int e = 0; e < s.n_experts; ++e) {
      w.experts.push_back({w1[e].data(), w3[e].data(), w2[e].data()});
      table.push_back({{dev.up(w1[e]), nullptr}, {dev.up(w3[e]), nullptr}, {dev.up(w2[e]), nullptr}});
    }
    w.shared = {w1[s.n_experts].data(), w3[s.n_experts].data(), w2[s.n_experts].data()};
    const std::vector<dk::ExpertW> shared = {
        {{dev.up(w1[s.n_experts]), nullptr}, {dev.up(w3[s.n_experts]), nullptr}, {dev.up(w2[s.n_experts]), nullptr}}};
    std::vector<float> y(T * s.dim), weights(T * s.top_k);
    std::vector<int32_t> experts(T * s.top_k);
    moe_forward_reference(s, w, x.data(), T, nullptr, y.data(), experts.data(), weights.data());
    const float* dx = dev.up(x);
    float* logits = dev.template zeros<float>(T * s.n_experts);
    int32_t* dexp = dev.template zeros<int32_t>(T * s.top_k);
    float* dw = dev.template zeros<float>(T * s.top_k);
    ex.for_each(T * s.n_experts, dk::GemmK{dx, s.dim, {dev.up(gate), nullptr}, s.dim, s.n_experts, logits, s.n_experts});
    ex.for_each(T * s.n_experts, dk::ScaleK{logits, s.gate_temp, true});
    ex.for_each(T, dk::RouteK{logits, dev.up(bias), s.n_experts, s.top_k, dk::Scoring(int(scoring)), true,
                              s.routed_scaling_factor, dexp, dw});
    ASSERT_EQ(dev.down(dexp, T * s.top_k), experts) << "router choices";
    expect_close(dev.down(dw, T * s.top_k), weights, kRel, "router weights");
    float* h = dev.template zeros<float>(T * s.top_k * s.inter);
    float* hs = dev.template zeros<float>(T * s.shared_inter);
    float* dy = dev.template zeros<float>(T * s.dim);
    const dk::ExpertW* dt = dev.up(table);
    const dk::ExpertW* ds = dev.up(shared);
    ex.for_each(T * s.top_k * s.inter, dk::ExpertUpK{dx, dt, dexp, dw, s.top_k, s.dim, s.inter, s.swiglu_limit, h});
    ex.for_each(T * s.shared_inter, dk::ExpertUpK{dx, ds, nullptr, nullptr, 1, s.dim, s.shared_inter, s.swiglu_limit, hs});
    ex.for_each(T * s.dim, dk::ExpertDownK{dt, dexp, s.top_k, s.dim, s.inter, h, ds, s.shared_inter, hs, dy});
    expect_close(dev.down(dy, T * s.dim), y, kRel, "experts");
  }
}

template <class Exec>
void check_engram(Exec& ex) {
  std::mt19937 rng(17);
  Dev<Exec> dev(ex);
  EngramShape s;
  s.hc = 4;
  s.dim = 32;
  s.columns = 3;
  s.head_dim = 8;
  s.eps = 1e-6f;
  const int64_t T = 4, rows = 50, in = s.columns * s.head_dim, out = (s.hc + 1) * s.dim;
  const auto table = randn(rng, rows * s.head_dim), wkv = randn(rng, out * in, 0.2f);
  const auto qw = randn(rng, s.hc * s.dim), kw = randn(rng, s.hc * s.dim), x = randn(rng, T * s.hc * s.dim);
  std::vector<int64_t> ids(T * s.columns);
  for (auto& i : ids) i = std::uniform_int_distribution<int64_t>(0, rows - 1)(rng);
  EngramWeights w;
  w.table = table.data();
  w.rows = rows;
  w.wkv = wkv.data();
  w.q_weight = qw.data();
  w.k_weight = kw.data();
  std::vector<float> want = x, r(T * in);
  ASSERT_TRUE(engram_forward_reference(s, w, ids.data(), T, want.data()).ok());
  ASSERT_TRUE(engram_gather_reference(s, w, ids.data(), T, r.data()).ok());
  float* dx = dev.up(x);
  float* kv = dev.template zeros<float>(T * out);
  float* gate = dev.template zeros<float>(T * s.hc);
  ex.for_each(T * out, dk::GemmK{dev.up(r), in, {dev.up(wkv), nullptr}, in, out, kv, out});
  ex.for_each(T * s.hc, dk::EngramGateK{dx, kv, dev.up(qw), dev.up(kw), s.hc, s.dim, s.eps, gate});
  ex.for_each(T * s.hc * s.dim, dk::EngramWriteK{dx, kv, gate, s.hc, s.dim});
  expect_close(dev.down(dx, T * s.hc * s.dim), want, kRel, "engram");
}

// Rows of `width` channels (blocks of blk) that stress the record codecs: random rows at scales
// 1e-9 … 1e4 (subnormal scales included), rows of E4M3 / E2M1 ties (k/512, grid midpoints times a
// power of two), all-zero and signed-zero blocks, NaN / ±Inf in one block of a row, huge values,
// subnormal inputs.
inline std::vector<float> fake_quant_inputs(std::mt19937& rng, int64_t width, int64_t blk) {
  std::vector<float> x;
  for (float scale : {1e-9f, 1e-6f, 1e-4f, 0.01f, 0.09f, 0.3f, 1.0f, 7.0f, 100.0f, 1e4f}) {
    const auto r = randn(rng, width * 3, scale);
    x.insert(x.end(), r.begin(), r.end());
  }
  std::uniform_int_distribution<int> code(0, 1023), exp(-12, 6);
  for (int row = 0; row < 6; ++row)  // ties and grid points of both formats at random exponents
    for (int64_t c = 0; c < width; ++c) {
      const float base = (c % 2 ? 0.25f : 1.0f / 512.0f) * float(code(rng) % (c % 2 ? 25 : 1024));
      x.push_back(std::ldexp(c % 3 ? base : -base, exp(rng)));
    }
  std::vector<float> special(static_cast<size_t>(width * 6), 0.0f);
  special[width] = -0.0f;  // row 1: signed zeros
  for (int64_t c = 0; c < width; ++c) special[width + c] = c % 2 ? -0.0f : 0.0f;
  special[2 * width + 3] = NAN;                                            // row 2: NaN in block 0
  special[3 * width + blk + 1] = INFINITY;                                 // row 3: +Inf in block 1
  special[3 * width + 1] = 5.0f;
  special[4 * width + blk] = -INFINITY;                                    // row 4: −Inf, huge elsewhere
  for (int64_t c = 0; c < width; ++c) special[4 * width + c] += (c % 5) * 3e37f;
  for (int64_t c = 0; c < width; ++c) special[5 * width + c] = float(c) * 1e-40f;  // row 5: subnormals
  x.insert(x.end(), special.begin(), special.end());
  return x;
}

inline std::vector<uint32_t> bits_of_floats(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Rows [n, width] of `kind` packed by the CPU codec (row_pack), one record after the other.
inline std::vector<uint8_t> pack_rows(RowKind kind, const std::vector<float>& x, int64_t width) {
  const int64_t rb = int64_t(row_bytes(kind, size_t(width))), n = int64_t(x.size()) / width;
  std::vector<uint8_t> out(size_t(n * rb));
  for (int64_t r = 0; r < n; ++r) row_pack(kind, x.data() + r * width, size_t(width), out.data() + r * rb);
  return out;
}

// Records [G] of `kind` (rec, packed) on the device in pages of 2^shift records, page p stored at
// slot pages − 1 − p (a reader that ignores the page table reads the wrong rows), as KeyRows::paged.
template <class Exec>
dk::KeyRows paged_records(Dev<Exec>& dev, const std::vector<uint8_t>& rec, RowKind kind, int64_t D, int64_t G,
                          int shift) {
  const int64_t per = int64_t(1) << shift, bytes = dk::record_bytes(kind, D);
  const int64_t pages = (G + per - 1) / per;
  std::vector<uint8_t> memory(size_t(pages * per * bytes), 0);
  for (int64_t p = 0; p < pages; ++p)
    for (int64_t i = 0; i < per * bytes && p * per * bytes + i < int64_t(rec.size()); ++i)
      memory[size_t((pages - 1 - p) * per * bytes + i)] = rec[size_t(p * per * bytes + i)];
  uint8_t* base = dev.up(memory);
  std::vector<uint8_t*> table(static_cast<size_t>(pages));
  for (int64_t p = 0; p < pages; ++p) table[size_t(p)] = base + (pages - 1 - p) * per * bytes;
  return dk::KeyRows::paged(dev.up(table), shift, kind, D);
}

// Keys [G, dh] made hard for an MXFP4 indexer every 37th row, in turn: a NaN value (scale byte 0xFF),
// a block near float's overflow (byte 253), a block 2^40 above the rest, an all-zero block (the
// block of each in turn).
inline void harden_index_keys(std::vector<float>& keys, int64_t G, int64_t dh) {
  for (int64_t g = 0; g < G; g += 37) {
    float* row = keys.data() + g * dh;
    const int64_t b = (g / 37) % (dh / 32);
    switch ((g / 37) % 5) {
      case 1: row[b * 32 + 5] = NAN; break;
      case 2: for (int i = 0; i < 32; ++i) row[b * 32 + i] *= 1.5e38f / 6.0f; break;
      case 3: for (int i = 0; i < 32; ++i) row[b * 32 + i] *= 1e12f; break;
      case 4: for (int i = 0; i < 32; ++i) row[b * 32 + i] = 0.0f; break;
      default: break;
    }
  }
}

// Rows [n, width] made what the cache holds of them: row_fake_quant of `kind` per row.
inline std::vector<float> cached(RowKind kind, std::vector<float> x, int64_t width) {
  for (size_t r = 0; r < x.size() / size_t(width); ++r) row_fake_quant(kind, x.data() + r * width, size_t(width));
  return x;
}

// Sink attention and indexer scores against float64 loops written from model.md §3.4: window keys
// cut at a floor, selected entries with −1 slots, a restricted pool. The keys are what the caches
// hold (fake-quantised rows), so the kernels reading them as packed records (the backend's way:
// FP8 window ring, NVFP4 main rows, MXFP4 index keys) must give the float32 rows' bits exactly.
template <class Exec>
void check_attention_and_scores(Exec& ex) {
  std::mt19937 rng(18);
  Dev<Exec> dev(ex);
  const int64_t T = 5, H = 3, D = 32, win = 6, k = 4, G = 30, start = 9, floor = 5;
  const int64_t first = std::max(floor, start - (win - 1));
  const int64_t nkeys = start + T - first;
  const auto keys = cached(RowKind::kWindow, randn(rng, nkeys * D), D);
  const auto main = cached(RowKind::kMain, randn(rng, G * D), D);
  const auto q = randn(rng, T * H * D), sink = randn(rng, H);
  std::vector<int32_t> topk(T * k);
  for (int64_t i = 0; i < T; ++i)
    for (int j = 0; j < k; ++j) topk[i * k + j] = (j == k - 1 && i % 2) ? -1 : int32_t((i * 7 + j * 5) % G);
  const float scaling = 1.0f / std::sqrt(float(D));
  std::vector<float> want(T * H * D, 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<const float*> rows;
      const int64_t t = start + i, lo = std::max(floor, t - win + 1);
      for (int64_t p = lo; p <= t; ++p) rows.push_back(keys.data() + (p - first) * D);
      for (int j = 0; j < k; ++j)
        if (topk[i * k + j] >= 0) rows.push_back(main.data() + topk[i * k + j] * D);
      std::vector<double> l;
      double m = sink[h];
      for (const float* r : rows) {
        double dot = 0;
        for (int64_t c = 0; c < D; ++c) dot += double(q[(i * H + h) * D + c]) * r[c];
        l.push_back(dot * scaling);
        m = std::max(m, l.back());
      }
      double den = std::exp(sink[h] - m);
      for (double& v : l) den += (v = std::exp(v - m));
      for (int64_t c = 0; c < D; ++c) {
        double o = 0;
        for (size_t j = 0; j < rows.size(); ++j) o += l[j] / den * rows[j][c];
        want[(i * H + h) * D + c] = float(o);
      }
    }
  const int64_t L = win + k;
  dk::AttnGeom g{T, H, D, L, start, win, floor, first, k, dev.up(keys), dk::KeyRows::floats(dev.up(main), D),
                 dev.up(topk)};
  float* logits = dev.template zeros<float>(T * H * L);
  float* o = dev.template zeros<float>(T * H * D);
  ex.run_chain(dk::AttnChain{dk::AttnLogitsK{g, dev.up(q), scaling, logits}, dk::AttnSoftmaxK{g, dev.up(sink), logits},
                            dk::AttnValuesK{g, logits, o}});
  expect_close(dev.down(o, T * H * D), want, 1e-5, "sink attention");
  // The same attention with the window read in place (AttnGeom's ring mode: positions before
  // `start` from a ring of 7 slots of FP8 records, the rows from `start` on from their own buffer)
  // and the selected rows from NVFP4 records, alone and as the second job of an AttnBatch whose
  // first job is the gathered float one: the same bits each time.
  {
    const int64_t slots = 7;
    std::vector<float> ring(slots * D, NAN);  // unheld slots must not be read (NaN records)
    for (int64_t p = first; p < start; ++p)
      std::copy_n(keys.data() + (p - first) * D, D, ring.data() + (p % slots) * D);
    const std::vector<float> fresh(keys.begin() + (start - first) * D, keys.end());
    dk::AttnGeom gr = g;
    gr.keys = nullptr;
    gr.ring = dk::KeyRows::records(dev.up(pack_rows(RowKind::kWindow, ring, D)), RowKind::kWindow, D);
    gr.main = dk::KeyRows::records(dev.up(pack_rows(RowKind::kMain, main, D)), RowKind::kMain, D);
    gr.slots = slots;
    gr.fresh = dev.up(fresh);
    const float* dq = dev.up(q);
    const float* dsink = dev.up(sink);
    float* o2 = dev.template zeros<float>(T * H * D);
    ex.run_chain(dk::AttnChain{dk::AttnLogitsK{gr, dq, scaling, logits}, dk::AttnSoftmaxK{gr, dsink, logits},
                               dk::AttnValuesK{gr, logits, o2}});
    const std::vector<float> first_run = dev.down(o, T * H * D);
    ASSERT_EQ(dev.down(o2, T * H * D), first_run) << "sink attention, window read from a ring";
    dk::AttnBatch b;
    b.sink = dsink;
    b.scaling = scaling;
    float* ob = dev.template zeros<float>(2 * T * H * D);
    float* lb = dev.template zeros<float>(2 * T * H * L);
    b.jobs[b.n++] = {g, dq, lb, ob};
    b.jobs[b.n++] = {gr, dq, lb + T * H * L, ob + T * H * D};
    ex.run_chain(b);
    const std::vector<float> both = dev.down(ob, 2 * T * H * D);
    ASSERT_EQ(std::vector<float>(both.begin(), both.begin() + T * H * D), first_run) << "attention batch, job 0";
    ASSERT_EQ(std::vector<float>(both.begin() + T * H * D, both.end()), first_run) << "attention batch, job 1";
  }

  // Indexer scores: ratio 2, 3 heads × 16, a pool of 2 blocks of 8 for some rows.
  const int64_t nh = 3, dh = 16;
  const int ratio = 2, nb = 2, bs = 8;
  const int64_t dhi = 32;  // index keys: whole MXFP4 blocks (the float run at dh, the records at dhi)
  const auto iq = randn(rng, T * nh * dh), hw = randn(rng, T * nh), ik = randn(rng, G * dh);
  std::vector<int32_t> kept = {0, 2, 1, -1, 3, 0, -1, -1, 2, 3};
  const int64_t istart = 50;  // visible: (t+1)/2 = 25 … 27 of 30
  for (bool pool : {false, true}) {
    std::vector<float> ref(T * G);
    for (int64_t r = 0; r < T; ++r)
      for (int64_t gi = 0; gi < G; ++gi) {
        bool in = gi < (istart + r + 1) / ratio;
        if (pool) in = in && std::count(kept.begin() + r * nb, kept.begin() + (r + 1) * nb, int32_t(gi / bs)) > 0;
        double total = 0;
        for (int64_t h = 0; h < nh; ++h) {
          double dot = 0;
          for (int64_t c = 0; c < dh; ++c) dot += double(iq[(r * nh + h) * dh + c]) * ik[gi * dh + c];
          total += std::max(dot, 0.0) / std::sqrt(double(dh)) * hw[r * nh + h];
        }
        ref[r * G + gi] = in ? float(total) : -INFINITY;
      }
    float* sc = dev.template zeros<float>(T * G);
    ex.for_each(T * G, dk::IndexScoreK{dev.up(iq), dev.up(hw), dk::KeyRows::floats(dev.up(ik), dh), G, nh, dh,
                                       istart, ratio, float(1.0 / std::sqrt(double(dh))), pool ? dev.up(kept) : nullptr,
                                       nb, bs, sc});
    expect_close(dev.down(sc, T * G), ref, 1e-5, pool ? "indexer scores in a pool" : "indexer scores");
    // Keys as MXFP4 records (what the cache holds) against their float32 rows: the same bits.
    const auto ikq = cached(RowKind::kIndex, randn(rng, G * dhi), dhi), iqq = randn(rng, T * nh * dhi);
    float* s_float = dev.template zeros<float>(T * G);
    float* s_rec = dev.template zeros<float>(T * G);
    const float* diq = dev.up(iqq);
    const float* dhw = dev.up(hw);
    const int32_t* dkept = pool ? dev.up(kept) : nullptr;
    const float sc_i = float(1.0 / std::sqrt(double(dhi)));
    ex.for_each(T * G, dk::IndexScoreK{diq, dhw, dk::KeyRows::floats(dev.up(ikq), dhi), G, nh, dhi, istart, ratio,
                                       sc_i, dkept, nb, bs, s_float});
    ex.for_each(T * G, dk::IndexScoreK{diq, dhw,
                                       dk::KeyRows::records(dev.up(pack_rows(RowKind::kIndex, ikq, dhi)),
                                                            RowKind::kIndex, dhi),
                                       G, nh, dhi, istart, ratio, sc_i, dkept, nb, bs, s_rec});
    ASSERT_EQ(bits_of_floats(dev.down(s_rec, T * G)), bits_of_floats(dev.down(s_float, T * G)))
        << "indexer scores over MXFP4 records";
  }
}

// dk::IndexSelectChain of 40 jobs (more than a Batched holds: its simple path runs them in parts)
// against each job's own scores (dk::IndexScoreK), select_topk of them and, for the candidate
// sources (two jobs in three), select_candidate_blocks: the same score bits and ids. One- and
// two-row jobs of different lengths, at ratios 1 and 2.
template <class Exec>
void check_index_chain_parts(Exec& ex) {
  std::mt19937 rng(52);
  Dev<Exec> dev(ex);
  const int64_t nh = 4, dh = 32;
  const int k = 8, bs = 4, nb = 3;
  const float scale = float(1.0 / std::sqrt(double(dh)));
  dk::IndexSelectChain chain;
  chain.k = k;
  for (int j = 0; j < 40; ++j) {
    const int64_t T = 1 + j % 2, G = 40 + 7 * j;
    const int ratio = 1 + j % 2;
    dk::IndexSelectChain::Job& J = chain.jobs[chain.n++];
    J.score = dk::IndexScoreK{dev.up(randn(rng, T * nh * dh)), dev.up(randn(rng, T * nh)),
                              dk::KeyRows::floats(dev.up(randn(rng, G * dh)), dh), G, nh, dh, ratio * G - T, ratio,
                              scale, nullptr, 0, 0, dev.template zeros<float>(T * G)};
    J.rows = T;
    J.topk = dev.template zeros<int32_t>(T * k);
    J.topk_scratch = dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(T, G, k));
    J.work = dev.template zeros<float>(T * dk::IndexSelectChain::kWorkFloats);
    if (j % 3 != 0) {
      J.bs = bs, J.nb = nb, J.blocks = (G + bs - 1) / bs;
      J.bmax = dev.template zeros<float>(T * J.blocks);
      J.candidates = dev.template zeros<int32_t>(T * nb);
      J.cand_scratch = dev.template zeros<uint8_t>(dk::TopkBatch::scratch_bytes(T, J.blocks, nb));
    }
  }
  ex.run_chain(chain);
  for (int j = 0; j < chain.n; ++j) {
    const dk::IndexSelectChain::Job& J = chain.jobs[j];
    const int64_t T = J.rows, G = J.score.G;
    dk::IndexScoreK alone = J.score;
    alone.scores = dev.template zeros<float>(T * G);
    ex.for_each(T * G, alone);
    const std::vector<float> want = dev.down(alone.scores, T * G), got = dev.down(J.score.scores, T * G);
    ASSERT_EQ(bits_of_floats(got), bits_of_floats(want)) << "job " << j << ": scores";
    std::vector<int32_t> topk(size_t(T * k)), cand(size_t(T * nb));
    for (int64_t r = 0; r < T; ++r) {
      select_topk(want.data() + r * G, G, k, topk.data() + r * k);
      select_candidate_blocks(want.data() + r * G, G, (J.score.start + r + 1) / J.score.ratio, bs, nb,
                              cand.data() + r * nb);
    }
    ASSERT_EQ(dev.down(J.topk, T * k), topk) << "job " << j << ": top-k";
    if (J.blocks > 0) ASSERT_EQ(dev.down(J.candidates, T * nb), cand) << "job " << j << ": candidate blocks";
  }
}

// Packing on the device (dk::PackK) equals row_pack byte for byte and decoding on read
// (dk::record_value) equals row_unpack bit for bit, for every row kind, on the inputs of the
// fake-quantiser check (random scales, ties, signed zeros, NaN / ±Inf blocks, huge, subnormal).
template <class Exec>
void check_record_codecs(Exec& ex) {
  std::mt19937 rng(24);
  Dev<Exec> dev(ex);
  for (RowKind kind : {RowKind::kWindow, RowKind::kMain, RowKind::kIndex}) {
    const int64_t width = 64, blk = dk::FakeQuantK::block(kind), rb = int64_t(row_bytes(kind, size_t(width)));
    const std::vector<float> x = fake_quant_inputs(rng, width, blk);
    const int64_t rows = int64_t(x.size()) / width;
    const std::vector<uint8_t> want = pack_rows(kind, x, width);
    uint8_t* d = dev.template zeros<uint8_t>(rows * rb);
    ex.for_each(rows * width / blk, dk::PackK{dev.up(x), width, kind, d});
    const std::vector<uint8_t> got = dev.down(d, rows * rb);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(int(got[i]), int(want[i])) << "pack kind " << int(kind) << " row " << i / rb << " byte " << i % rb;
    // Decoding every record on the executor against row_unpack.
    std::vector<float> unpacked(x.size());
    for (int64_t r = 0; r < rows; ++r) row_unpack(kind, want.data() + r * rb, size_t(width), unpacked.data() + r * width);
    float* out = dev.template zeros<float>(rows * width);
    ex.for_each(rows * width, dk::DecodeK{d, kind, width, out});
    ASSERT_EQ(bits_of_floats(dev.down(out, rows * width)), bits_of_floats(unpacked)) << "decode kind " << int(kind);
  }
}

// The fake-quantiser kernel equals row_fake_quant bit for bit for every row kind: random rows at
// scales from 1e-9 to 1e4 (subnormal scales included), rows of E4M3 / E2M1 ties (k/512, grid
// midpoints times a power of two), all-zero and signed-zero blocks, NaN / ±Inf in one block of a
// row, huge values, subnormal inputs.
template <class Exec>
void check_fake_quant(Exec& ex) {
  std::mt19937 rng(19);
  Dev<Exec> dev(ex);
  for (RowKind kind : {RowKind::kWindow, RowKind::kMain, RowKind::kIndex}) {
    const int64_t width = 64, blk = dk::FakeQuantK::block(kind);
    const std::vector<float> x = fake_quant_inputs(rng, width, blk);
    const int64_t rows = int64_t(x.size()) / width;
    std::vector<float> want = x;
    for (int64_t r = 0; r < rows; ++r) row_fake_quant(kind, want.data() + r * width, size_t(width));
    float* d = dev.up(x);
    ex.for_each(rows * width / blk, dk::FakeQuantK{d, kind});
    const std::vector<float> got = dev.down(d, rows * width);
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      ASSERT_EQ(a, b) << "fake quant kind " << int(kind) << " at row " << i / width << " channel " << i % width
                      << " of " << x[i] << ": " << got[i] << " vs " << want[i];
    }
  }
}

// RoPE + FakeQuant in one launch (dk::RopeQuantK, beside an independent RoPE or scale in a
// dk::Both) against the separate launches the backend makes without fusion: the same bits. Shapes:
// the kv row (1 head of 512, rope dim 64, FP8 window blocks of 32), the indexer queries (32 heads
// of 128, MXFP4 blocks of 32), a rotated tail starting inside a block (96 wide, rope 48: the tail
// starts at 48), the whole row rotated (rope dim = dim), main-kind blocks of 16, several rows.
template <class Exec>
void check_rope_quant(Exec& ex) {
  std::mt19937 rng(23);
  Dev<Exec> dev(ex);
  struct Shape {
    int64_t rows, heads, dim;
    int rd;
    RowKind kind;
  };
  for (const Shape& s : {Shape{1, 1, 512, 64, RowKind::kWindow}, Shape{3, 32, 128, 64, RowKind::kIndex},
                         Shape{5, 1, 96, 48, RowKind::kWindow}, Shape{2, 3, 64, 64, RowKind::kMain},
                         Shape{4, 2, 48, 16, RowKind::kMain}}) {
    const int64_t n = s.rows * s.heads * s.dim, half = s.rd / 2, other_heads = 5, other_dim = s.rd + 8;
    auto x = randn(rng, n, 4.0f);
    x[size_t(n - 1)] = INFINITY;  // the last block is not finite: NaN throughout
    const auto o = randn(rng, s.rows * other_heads * other_dim);
    const auto cs = randn(rng, (s.rows + 2) * half), sn = randn(rng, (s.rows + 2) * half);
    const float *dc = dev.up(cs), *ds = dev.up(sn);
    float* dx[2] = {dev.up(x), dev.up(x)};
    float* dout[2] = {dev.up(o), dev.up(o)};
    float* dsc[2] = {dev.up(x), dev.up(x)};
    const auto rope = [&](float* p, int64_t heads, int64_t dim) {
      return dk::RopeK{p, heads, dim, s.rd, dc, ds, 2, false};
    };
    // Separate: the other RoPE, the RoPE, the fake quantiser, the scale.
    const int64_t no = s.rows * other_heads * half;
    ex.for_each(no, rope(dout[0], other_heads, other_dim));
    ex.for_each(s.rows * s.heads * half, rope(dx[0], s.heads, s.dim));
    ex.for_each(n / dk::FakeQuantK::block(s.kind), dk::FakeQuantK{dx[0], s.kind});
    ex.for_each(n, dk::ScaleK{dsc[0], 0.375f, false});
    // Fused: the other RoPE beside RoPE + quant; RoPE + quant beside the scale (on a second input).
    const dk::RopeQuantK rq{rope(dx[1], s.heads, s.dim), dk::FakeQuantK{dx[1], s.kind}};
    ASSERT_TRUE(rq.fits());
    ex.for_each(no + rq.blocks(s.rows), dk::Both<dk::RopeK, dk::RopeQuantK>{rope(dout[1], other_heads, other_dim), no, rq});
    std::vector<float> fused_first = dev.down(dx[1], n);
    float* dx2 = dev.up(x);
    const dk::RopeQuantK rq2{rope(dx2, s.heads, s.dim), dk::FakeQuantK{dx2, s.kind}};
    ex.for_each(rq2.blocks(s.rows) + n, dk::Both<dk::RopeQuantK, dk::ScaleK>{rq2, rq2.blocks(s.rows), {dsc[1], 0.375f, false}});
    const std::string what = "rope + quant " + std::to_string(s.rows) + "x" + std::to_string(s.heads) + "x" +
                             std::to_string(s.dim) + " rope " + std::to_string(s.rd) + " kind " + std::to_string(int(s.kind));
    const std::vector<float> want = dev.down(dx[0], n);
    const std::pair<std::vector<float>, std::vector<float>> pairs[] = {
        {fused_first, want},
        {dev.down(dx2, n), want},
        {dev.down(dout[1], s.rows * other_heads * other_dim), dev.down(dout[0], s.rows * other_heads * other_dim)},
        {dev.down(dsc[1], n), dev.down(dsc[0], n)}};
    const char* names[] = {"beside a rope", "beside a scale", "the other rope", "the scale"};
    for (int p = 0; p < 4; ++p) {
      ASSERT_EQ(pairs[p].first.size(), pairs[p].second.size());
      ASSERT_EQ(std::memcmp(pairs[p].first.data(), pairs[p].second.data(), pairs[p].first.size() * sizeof(float)), 0)
          << what << ": " << names[p] << " differs from the separate launches";
    }
    bool rotated = false;  // the check must see RoPE at work: some rotated values differ from x
    for (int64_t i = 0; i < n && !rotated; ++i) rotated = want[size_t(i)] != x[size_t(i)];
    EXPECT_TRUE(rotated) << what;
  }
}

// The device window ring: writes that wrap around the slots, then reads of any run of held
// positions, against a host ring of the same slots.
template <class Exec>
void check_window_ring(Exec& ex) {
  std::mt19937 rng(20);
  Dev<Exec> dev(ex);
  const int64_t slots = 7, D = 5;
  std::vector<float> host(slots * D, 0.0f);
  float* ring = dev.template zeros<float>(slots * D);
  const int64_t written_from = 3;
  int64_t next = written_from;
  for (int64_t n : {2, 5, 7, 1, 6}) {
    const auto rows = randn(rng, n * D);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < D; ++c) host[((next + i) % slots) * D + c] = rows[i * D + c];
    ex.for_each(n * D, dk::RingWriteK{dev.up(rows), slots, D, next, ring});
    next += n;
    for (int64_t count : {int64_t(1), int64_t(4), slots}) {
      const int64_t first = next - count;
      if (first < written_from) continue;
      std::vector<float> want(count * D);
      for (int64_t i = 0; i < count; ++i)
        for (int64_t c = 0; c < D; ++c) want[i * D + c] = host[((first + i) % slots) * D + c];
      float* out = dev.template zeros<float>(count * D);
      ex.for_each(count * D, dk::RingReadK{ring, slots, D, first, out});
      ASSERT_EQ(dev.down(out, count * D), want) << "ring read of " << count << " rows before " << next;
    }
  }
}

// The batched window store: three rings (one given no rows) written in one launch, each ring
// slot (FP8 records, packed as row_pack packs) and each staged row against the host.
template <class Exec>
void check_window_store(Exec& ex) {
  std::mt19937 rng(21);
  Dev<Exec> dev(ex);
  const int64_t D = 64, rb = int64_t(window_row_bytes(size_t(D)));
  struct Job {
    int64_t slots, first, count;
  };
  const Job jobs[] = {{5, 12, 4}, {4, 0, 0}, {6, 3, 6}};
  dk::WindowStoreK k;
  k.D = D;
  int64_t total = 0;
  for (const Job& j : jobs) total += j.count;
  float* stage = dev.template zeros<float>(total * D);
  std::vector<std::vector<uint8_t>> want_rings;
  std::vector<std::vector<float>> srcs;
  std::vector<uint8_t*> rings;
  int64_t at = 0;
  std::uniform_int_distribution<int> byte(0, 255);
  for (const Job& j : jobs) {
    srcs.push_back(cached(RowKind::kWindow, randn(rng, std::max<int64_t>(j.count, 1) * D, 2.0f), D));
    std::vector<uint8_t> r(size_t(j.slots * rb));
    for (uint8_t& b : r) b = uint8_t(byte(rng));
    uint8_t* dr = dev.up(r);
    const std::vector<uint8_t> packed = pack_rows(RowKind::kWindow, srcs.back(), D);
    for (int64_t i = 0; i < j.count; ++i)
      std::copy_n(packed.data() + i * rb, rb, r.data() + ((j.first + i) % j.slots) * rb);
    want_rings.push_back(r);
    rings.push_back(dr);
    k.jobs[k.n++] = {dev.up(srcs.back()), dr, j.slots, j.first, j.count, stage + at * D};
    at += j.count;
  }
  ex.for_each(total * D / 32, k);
  std::vector<float> want_stage;
  for (size_t j = 0; j < std::size(jobs); ++j) {
    ASSERT_EQ(dev.down(rings[j], jobs[j].slots * rb), want_rings[j]) << "window store, ring " << j;
    want_stage.insert(want_stage.end(), srcs[j].begin(), srcs[j].begin() + jobs[j].count * D);
  }
  ASSERT_EQ(dev.down(stage, total * D), want_stage) << "window store, staged rows";
}

}  // namespace dsv41::kernel_checks
