// Filter and refine for the indexer's selections (docs/CUDA.md "Filter and refine on the GPU"):
// nothing reads an indexer score but two top-k selections, and their outputs are sets, so the
// exact sets can come from fast scores if each carries a bound on its distance from the simple
// body's float (dk::IndexScoreK): the entries the bounds place for certain need no exact score,
// and only the few near the k-th are scored again exactly. index_refine.cu runs it on the GPU;
// this file is the fast score's arithmetic and its bound on the CPU (index_refine_test.cpp checks
// the bound on fresh random rows and that a selection built on it is exact).
//
// The fast score, the fused form. A query head's nonzero MXFP4 blocks hold n·2^u (|n| < 16) and a
// key's nonzero blocks nk·2^(s − 128) (nk = 2·E2M1, |nk| ≤ 12). Where a head's units span ≤
// kIndexFusedSpan binades and so do the key's scale bytes, shifting each block's integers to the
// least exponent keeps them within int8 (15·8 = 120, 12·8 = 96), and one integer dot over all
// channels gives X with q_h·I_g = X·2^(U + S − 128) exactly (U, S the least unit and scale; |X| ≤
// 128·120·96 < 2^21, so float(X) is exact). That product is the simple body's double chain exactly
// (index_exact.h: spans ≤ 6 ≪ 38) and float's exactly, so ReLU_h = ReLU(float(X))·(2^U·scale)·2^(S − 128)
// is the simple body's ReLU term bit for bit (2^U·scale and the factor 2^(S − 128) are exact
// power-of-two scalings while the values stay normal). Only the head sum differs: the fast score
// adds w_h·ReLU_h in another order (and scales the sum by 2^(S − 128) after it, exact while normal).
//
// The bound: two sums of the same H products, each within γ_H·Σ_h |w_h·ReLU_h| of the exact sum
// (recursive summation, FMA or not: γ_2H covers both), so
//   |fast − simple| ≤ index_refine_error(H)·Σ_h |w_h|·ReLU_h·(1 + 2^-10) + (20·(1 + Σ|w|) + 4H + 8)·2^-149,
// the second term for roundings in float's subnormals (where the power-of-two scalings are not
// exact). Σ|w|·ReLU is formed in float beside the score (its own rounding ≪ 2^-10). A head or key
// wider than kIndexFusedSpan, a query block off the MXFP4 grid, a key scale byte past 252 or
// values near float's overflow (a term above 2^105, a sum of magnitudes at 2^126) give an infinite
// bound: that entry is scored exactly.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "backends/cuda/device_kernels_attention.h"
#include "backends/cuda/index_exact.h"

namespace dsv41::dk {

// 2·γ_2H (u = 2^-24): the relative error of two head sums of H terms in different orders.
inline double index_refine_error(int64_t H) {
  constexpr double u = 0x1p-24;
  return 2 * (2 * double(H) * u / (1 - 2 * double(H) * u));
}

struct IndexApprox {
  float score = 0;   // the fast score (−inf where the row does not see the entry)
  double bound = 0;  // |score − the simple body's| ≤ bound (+inf: unknown)
  // score is the simple body's float bit for bit, as the GPU's FFMA chain in head order forms it
  // (index_head_order_exact; the GPU's fast scorer sums in head order since session 50, so its known
  // scores carry no bound and its band scores only the unknown entries again).
  bool exact_in_head_order = false;
};

// Summed in head order, as the simple body's FFMA chain is (on the GPU `total += relu·w` contracts
// to one FFMA a head), the simple body's chain is the fused form's scaled by 2^(S − 128) step for
// step, so the two agree bit for bit unless a rounding of either falls in float's subnormals. It
// cannot where every nonzero value of both chains is at least 2^-126: relu'_h = fl(X·c_h) ≥ c_h for
// X ≥ 1, so each product relu'_h·w_h is a multiple of
// ulp(c_h)·ulp(w_h), every partial sum — exact or rounded — a multiple of the least such quantum
// Q over the heads (rounding a multiple of Q gives one), and a nonzero multiple of Q·kf is at least
// that in the simple body's chain. Q ≥ 2^-126·max(1, 1/kf) is therefore enough (with the fused
// form's overflow limits), Q taken no larger than any c_h so that the ReLU terms c_h·kf·X stay
// normal too. A head with w_h = 0 or c_h = 0 adds exact zeros and no quantum.
inline double index_product_quantum(float c, float w) {
  const auto ulp = [](float x) {
    return std::fpclassify(x) == FP_SUBNORMAL ? 0x1p-149 : std::ldexp(1.0, std::ilogb(x) - 23);
  };
  return c == 0.0f || w == 0.0f ? INFINITY : std::min(ulp(c) * ulp(w), double(std::fabs(c)));
}
inline bool index_head_order_exact(double quantum, float kf) {
  return quantum * std::min(1.0, double(kf)) >= 0x1p-126;
}

// Entry g of row r of k (visible, no pool: the caller handles visibility) scored the fast way, in
// the fused form, with the head sum in head order (the GPU adds in another order: the bound holds
// for any).
inline IndexApprox index_approx_score(const IndexScoreK& k, int64_t r, int64_t g) {
  const int nb = int(k.dh / 32);
  const uint8_t* rec = k.keys.row(g).rec;
  IndexApprox out;
  if (rec == nullptr || nb > 4 || k.dh % 32 != 0) {
    out.bound = std::numeric_limits<double>::infinity();
    return out;
  }
  // The key: integers, nonzero blocks, their least scale and span.
  int nk[128];
  int kscale[4];
  uint32_t nonzero = 0;
  int least = 255, most = 0;
  bool known = true;
  for (int b = 0; b < nb; ++b) {
    kscale[b] = rec[k.dh / 2 + b];
    known = known && kscale[b] <= 252;
    for (int c = 0; c < 32; ++c) {
      const int ch = b * 32 + c;
      const uint8_t code = (ch & 1) ? uint8_t(rec[ch / 2] >> 4) : uint8_t(rec[ch / 2] & 0xF);
      nk[ch] = index_key_value(code);
      if (nk[ch] != 0) nonzero |= 1u << b;
    }
    if (nonzero >> b & 1u) least = std::min(least, kscale[b]), most = std::max(most, kscale[b]);
  }
  known = known && (!nonzero || most - least <= kIndexFusedSpan);
  const float kf = nonzero ? std::ldexp(1.0f, least - 128) : 1.0f;
  float total = 0.0f, magnitude = 0.0f, weights = 0.0f, cmax = 0.0f;
  double quantum = INFINITY;
  for (int64_t h = 0; h < k.nh; ++h) {
    const float* qh = k.q + (r * k.nh + h) * k.dh;
    int8_t n[128];
    int unit[4];
    for (int b = 0; b < nb; ++b) unit[b] = index_query_block(qh + b * 32, n + b * 32);
    const int span = index_query_span(unit, nb);
    int qleast = 1 << 20;
    for (int b = 0; b < nb; ++b)
      if (unit[b] != kIndexZeroBlock) qleast = std::min(qleast, unit[b]);
    known = known && span <= kIndexFusedSpan;
    const float c = qleast > 200 ? 0.0f : std::ldexp(k.scale, std::max(qleast, -300));
    if (qleast <= 200 && !(std::fabs(c) >= std::numeric_limits<float>::min() && std::isfinite(c))) known = false;
    cmax = std::max(cmax, std::fabs(c));
    int64_t x = 0;  // the fused dot: each side's blocks shifted to its least exponent
    for (int b = 0; b < nb && known; ++b) {
      if (unit[b] == kIndexZeroBlock || !(nonzero >> b & 1u)) continue;
      const int qs = unit[b] - qleast, ks = kscale[b] - least;
      for (int c2 = 0; c2 < 32; ++c2) x += int64_t(n[b * 32 + c2] * (1 << qs)) * int64_t(nk[b * 32 + c2] * (1 << ks));
    }
    const float w = k.hw[r * k.nh + h];
    quantum = std::min(quantum, index_product_quantum(c, w));
    const float relu = std::fmaxf(float(x), 0.0f) * c;
    total = std::fmaf(relu, w, total);
    magnitude = std::fmaf(relu, std::fabs(w), magnitude);
    weights += std::fabs(w);
  }
  out.score = total * kf;
  const double H = double(k.nh);
  out.bound = double(magnitude) * double(kf) * index_refine_error(k.nh) * (1 + 0x1p-10) +
              (20 * (1 + double(weights)) + 4 * H + 8) * 0x1p-149;
  // Near float's overflow the simple body's terms ReLU_h = ReLU(X)·c_h·2^(S − 128) or its partial sums
  // may overflow where the fast sum, scaled after, does not: unknown unless every term stays below
  // 2^21·c_max·2^(S − 128) ≤ 2^105 and the sum of their magnitudes below 2^126.
  if (double(cmax) * double(kf) > 0x1p105 || double(magnitude) * double(kf) >= 0x1p126) known = false;
  if (!known || !std::isfinite(out.score) || !std::isfinite(out.bound))
    out.bound = std::numeric_limits<double>::infinity();
  out.exact_in_head_order = std::isfinite(out.bound) && index_head_order_exact(quantum, kf);
  return out;
}

// The top-k set of one row (select_topk's contract: the ids of the min(k, finite) largest exact
// scores, larger first and equal values → lower id, in ascending id order, −1 padded) from fast
// scores and bounds: an entry is in for certain when fewer than k others can score at least its
// lower end, out for certain when k others score above its upper end for certain; only the rest
// are scored exactly (exact(g) → the simple body's score). rescored: how many were.
template <class Exact>
std::vector<int32_t> refine_topk(std::span<const IndexApprox> approx, int k, Exact&& exact, int64_t* rescored) {
  const int64_t G = int64_t(approx.size());
  std::vector<double> lo, hi;  // over the entries that can be kept (not −inf / NaN for certain)
  std::vector<int64_t> live;
  for (int64_t g = 0; g < G; ++g) {
    const IndexApprox& a = approx[size_t(g)];
    if (a.score == -INFINITY && a.bound == 0) continue;  // not seen by the row
    live.push_back(g);
    lo.push_back(std::isnan(a.score) ? -INFINITY : double(a.score) - a.bound);
    hi.push_back(std::isnan(a.score) ? INFINITY : double(a.score) + a.bound);
  }
  std::vector<double> his = hi, los = lo;
  std::sort(his.begin(), his.end());
  std::sort(los.begin(), los.end());
  const auto at_least = [](const std::vector<double>& v, double x) {  // count of v ≥ x
    return int64_t(v.end() - std::lower_bound(v.begin(), v.end(), x));
  };
  const auto above = [](const std::vector<double>& v, double x) {  // count of v > x
    return int64_t(v.end() - std::upper_bound(v.begin(), v.end(), x));
  };
  std::vector<int32_t> in;
  std::vector<std::pair<float, int64_t>> open;  // (exact score, id) of the entries the bounds leave open
  int64_t scored = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    if (at_least(his, lo[i]) - 1 < k && std::isfinite(lo[i])) {
      in.push_back(int32_t(live[i]));
    } else if (above(los, hi[i]) < k) {
      const float s = exact(live[i]);
      ++scored;
      if (!std::isnan(s) && s != -INFINITY) open.push_back({s, live[i]});
    }
  }
  if (rescored) *rescored = scored;
  const size_t want = size_t(std::max<int64_t>(0, k - int64_t(in.size())));
  std::sort(open.begin(), open.end(),
            [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  for (size_t i = 0; i < std::min(want, open.size()); ++i) in.push_back(int32_t(open[i].second));
  std::sort(in.begin(), in.end());
  in.resize(size_t(k), -1);
  return in;
}

// The GPU's band rule (index_refine.cu, steps 2–4) on one row, on the CPU: the row holds the fast
// scores (NaN where unknown, −inf where unseen); β is their largest finite bound (as a float,
// rounded up), t the k-th largest fast score (−inf where fewer than k), tb the nb-th largest fast
// block maximum; an entry is scored again (exact(g)) where it is unknown, at or above t − 2β, or
// within 2β of the fast maximum of a block that is not out for certain (tb − 2β, both rounded
// down) — where β = 0 (every known fast score exact: the GPU's scorer sums in head order) only where
// it is unknown; then the block maxima (the newest visible block +inf) and both selections are taken over
// the row as refined, fast scores left in place, each with the GPU's floor (cut for the top-k,
// block_cut for the blocks: values below it ineligible, as TopkBatch::Job::floor makes them).
// select(v, n, width, out) is select_topk's contract.
struct RefinedRow {
  std::vector<int32_t> topk, candidates;
  int64_t rescored = 0;
};

inline float index_refine_round_down(double x) {  // as __fsub_rd gives it
  float f = float(x);
  if (double(f) > x) f = std::nextafter(f, -INFINITY);
  return f;
}

template <class Exact, class Select>
RefinedRow refine_row(std::span<const IndexApprox> approx, int k, int bs, int nb, int64_t visible, Exact&& exact,
                      Select&& select) {
  const int64_t G = int64_t(approx.size());
  std::vector<float> v(static_cast<size_t>(G));
  float beta = 0.0f;
  for (int64_t g = 0; g < G; ++g) {
    const IndexApprox& a = approx[size_t(g)];
    const bool unseen = a.score == -INFINITY && a.bound == 0;
    v[size_t(g)] = unseen ? -INFINITY : std::isfinite(a.bound) ? a.score : NAN;
    if (!unseen && std::isfinite(a.bound)) {
      float b = float(a.bound);
      if (double(b) < a.bound) b = std::nextafter(b, INFINITY);
      beta = std::max(beta, b);
    }
  }
  const int64_t blocks = nb > 0 ? (G + bs - 1) / bs : 0;
  const auto maxima = [&](const std::vector<float>& row) {
    std::vector<float> m(size_t(blocks), -INFINITY);
    for (int64_t b = 0; b < blocks; ++b) {
      if (visible >= 1 && (visible - 1) / bs == b) {
        m[size_t(b)] = INFINITY;
        continue;
      }
      for (int64_t g = b * bs; g < std::min(G, (b + 1) * bs); ++g) m[size_t(b)] = std::fmax(m[size_t(b)], row[size_t(g)]);
    }
    return m;
  };
  const auto kth = [&](const std::vector<float>& row, int width) {  // the smallest of the selected
    std::vector<int32_t> ids(static_cast<size_t>(width));
    select(row.data(), int64_t(row.size()), width, ids.data());
    float t = INFINITY;
    for (int32_t id : ids) t = std::min(t, id < 0 ? -INFINITY : row[size_t(id)]);
    return t;
  };
  const std::vector<float> bmax = maxima(v);
  const float t = kth(v, k), tb = nb > 0 ? kth(bmax, nb) : INFINITY;
  const float cut = index_refine_round_down(double(t) - 2.0 * double(beta));
  const float block_cut = index_refine_round_down(double(tb) - 2.0 * double(beta));
  RefinedRow out;
  std::vector<float> refined = v;
  const bool exact_known = beta == 0.0f;
  for (int64_t g = 0; g < G; ++g) {
    const float a = v[size_t(g)];
    const bool unknown = std::isnan(a), seen = unknown || a > -INFINITY;
    bool need = seen && (unknown || (!exact_known && a >= cut));
    if (nb > 0 && seen && !exact_known) {
      const int64_t b = g / bs;
      bool block_unknown = false;
      for (int64_t e = b * bs; e < std::min(G, (b + 1) * bs); ++e) block_unknown = block_unknown || std::isnan(v[size_t(e)]);
      const float top = bmax[size_t(b)];
      const bool block_in = block_unknown || !(top < block_cut);
      need = need || (block_in && (unknown || a >= index_refine_round_down(double(top) - 2.0 * double(beta))));
    }
    if (!need) continue;
    refined[size_t(g)] = exact(g);
    ++out.rescored;
  }
  // The floors: every entry the exact top-k keeps scores at least t − β, every block it keeps has
  // a maximum of at least tb − β (index_refine.cu, Work); below them a value can be dropped.
  const auto floored = [](std::vector<float> row, float floor) {
    for (float& x : row) x = x < floor ? -INFINITY : x;
    return row;
  };
  const std::vector<float> top = floored(refined, cut);
  out.topk.resize(size_t(k));
  select(top.data(), G, k, out.topk.data());
  if (nb > 0) {
    const std::vector<float> m = floored(maxima(refined), block_cut);
    out.candidates.resize(size_t(nb));
    select(m.data(), blocks, nb, out.candidates.data());
  }
  return out;
}

}  // namespace dsv41::dk
