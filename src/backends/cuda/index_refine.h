// Filter and refine for the indexer's selections (docs/CUDA.md, "The integer indexer's epilogue,
// session 37"): nothing reads an indexer score but two top-k selections, and their outputs are
// sets, so the exact sets can come from fast fp32 scores if each carries a bound on its distance
// from the simple body's float (dk::IndexScoreK): the entries the bounds place for certain need no
// exact score, and only the few near the k-th are scored again exactly.
//
// NOT YET USED BY A KERNEL: the bound and the selection are checked on the CPU first
// (index_refine_test.cpp). The fp32 score is formed as a GPU kernel would form it from the integer
// MMA's per-block sums (index_exact.h): per head a float chain over the blocks, ReLU, the scale,
// then the weighted head sum in any order.
//
// The bound, for one (row, entry) with H heads and per head A_h = Σ_b |S_b|·2^(E_b) (S_b the block's
// integer sum, E_b = unit + scale byte − 128; |d_h| ≤ A_h for the exact dot d_h), u = 2^-24:
//   the simple body's dot is a double chain over the channels: within 2^-53·128·5760·Σ_b 2^(E_b);
//   the float chain over ≤ 4 blocks: within γ_4·A_h (its products are exact);
//   each side's float(dot), ReLU·scale: one or two roundings of values ≤ |scale|·A_h;
//   each side's head sum (FMA or not, any order): within γ_2H·Σ_h |w_h·r_h|.
// Together |approx − simple| ≤ |scale|·Σ_h |w_h|·A_h·(2γ_2H + γ_4 + 12u)·(1 + 2^-10) + the chain's
// term + (underflow slack), computed in double. A query block off the MXFP4 grid, a key scale byte
// ≥ 253 (the simple body's values are then not the integer form's) or a dot past float's range gives
// an infinite bound: that entry is scored exactly.
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

struct IndexApprox {
  float score = 0;   // the fast score (−inf where the row does not see the entry)
  double bound = 0;  // |score − the simple body's| ≤ bound (+inf: unknown)
};

// Entry g of row r of k (visible, no pool: the caller handles visibility) scored the fast way.
inline IndexApprox index_approx_score(const IndexScoreK& k, int64_t r, int64_t g) {
  constexpr double u = 0x1p-24;
  const int nb = int(k.dh / 32);
  const uint8_t* rec = k.keys.row(g).rec;
  IndexApprox out;
  if (rec == nullptr || nb > 4 || k.dh % 32 != 0) {
    out.bound = std::numeric_limits<double>::infinity();
    return out;
  }
  float total = 0.0f;
  double weighted = 0, powers = 0, weights = 0;
  bool known = true;
  for (int64_t h = 0; h < k.nh; ++h) {
    const float* qh = k.q + (r * k.nh + h) * k.dh;
    float dot = 0.0f;
    double a = 0;
    for (int b = 0; b < nb; ++b) {
      int8_t n[32];
      const int unit = index_query_block(qh + b * 32, n);
      const int scale = rec[k.dh / 2 + b];
      if (unit == kIndexNotExact || scale > 252) known = false;
      if (unit == kIndexZeroBlock || unit == kIndexNotExact) continue;
      int sum = 0;
      for (int c = 0; c < 32; ++c) {
        const int ch = b * 32 + c;
        const uint8_t code = (ch & 1) ? uint8_t(rec[ch / 2] >> 4) : uint8_t(rec[ch / 2] & 0xF);
        sum += int(n[c]) * index_key_value(code);
      }
      const int e = unit + scale - 128;
      dot = std::fmaf(float(sum), std::ldexp(1.0f, std::clamp(e, -200, 200)), dot);
      a += std::abs(double(sum)) * std::ldexp(1.0, e);
      powers += std::ldexp(1.0, e);
    }
    if (!std::isfinite(dot)) known = false;  // fmaxf would turn a NaN into 0, as a product past float's range
    const float relu = std::fmaxf(dot, 0.0f) * k.scale;
    total = std::fmaf(relu, k.hw[r * k.nh + h], total);
    weighted += std::abs(double(k.hw[r * k.nh + h])) * a;
    weights += std::abs(double(k.hw[r * k.nh + h]));
  }
  out.score = total;
  const double H = double(k.nh);
  const double gamma_2h = 2 * H * u / (1 - 2 * H * u), gamma_4 = 4 * u / (1 - 4 * u);
  const double scale = std::abs(double(k.scale));
  const double chain = 0x1p-53 * 128 * 5760 * powers;  // the simple body's double chain
  const double slack = (20 * (1 + scale * weights) + 2 * H) * 0x1p-149;  // roundings in float's subnormals
  out.bound = scale * (weighted * (2 * gamma_2h + 12 * u + gamma_4) + weights * chain) * (1 + 0x1p-10) + slack;
  if (!known || !std::isfinite(total) || !std::isfinite(out.bound)) out.bound = std::numeric_limits<double>::infinity();
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

}  // namespace dsv41::dk
