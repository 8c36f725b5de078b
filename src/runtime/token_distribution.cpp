// A Sampler's distribution as a value, exact or with a partial sort (see token_distribution.h).
#include "runtime/token_distribution.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsv41 {
namespace {

// softmax(l / T) with the Sampler's arithmetic: max over non-NaN, exp in double, sum in id order.
// Returns false (weights undefined) when the row has no finite probability: all NaN, or a +inf.
bool softmax_weights(std::span<const float> logits, float temperature, std::vector<double>* out) {
  std::vector<double>& p = *out;
  const size_t n = logits.size();
  double mx = -INFINITY;
  for (float v : logits)
    if (!std::isnan(v)) mx = std::max(mx, double(v));
  p.assign(n, 0.0);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = std::isnan(logits[i]) ? 0.0 : std::exp((double(logits[i]) - mx) / temperature);
    sum += p[i];
  }
  if (!(sum > 0 && std::isfinite(sum))) return false;
  for (double& v : p) v /= sum;
  return true;
}

void mark_unusable(TokenDistribution* out) {
  out->order.clear();
  out->total = 0;
}

// Zeroes the weights outside order[0, keep) and records the kept prefix and its mass.
void keep_prefix(std::vector<int32_t>& ids, size_t keep, double mass, TokenDistribution* out) {
  std::vector<double> kept(keep);
  for (size_t i = 0; i < keep; ++i) kept[i] = out->weight[size_t(ids[i])];
  std::fill(out->weight.begin(), out->weight.end(), 0.0);
  for (size_t i = 0; i < keep; ++i) out->weight[size_t(ids[i])] = kept[i];
  ids.resize(keep);
  out->order.swap(ids);
  out->total = mass;
}

// min_p on a kept prefix (the Sampler's rule): drop the tail below min_p · p_max, recount mass.
void apply_min_p(const std::vector<int32_t>& ids, const std::vector<double>& p, float min_p, size_t* keep,
                 double* mass) {
  if (!(min_p > 0) || *keep == 0) return;
  const double floor = min_p * p[size_t(ids[0])];
  while (*keep > 1 && p[size_t(ids[*keep - 1])] < floor) --*keep;
  *mass = 0;
  for (size_t k = 0; k < *keep; ++k) *mass += p[size_t(ids[k])];
}

}  // namespace

bool TokenDistribution::usable() const { return total > 0 && std::isfinite(total); }

std::span<const float> bias_and_penalise(std::span<const float> logits, const SamplingParams& params,
                                         const TokenCounts& counts, std::vector<float>* scratch) {
  if (params.logit_bias.empty() && counts.empty()) return logits;
  scratch->assign(logits.begin(), logits.end());
  std::vector<float>& b = *scratch;
  for (const auto& [id, bias] : params.logit_bias)
    if (static_cast<size_t>(id) < b.size()) b[size_t(id)] += bias;
  for (const auto& [id, n] : counts)
    if (static_cast<size_t>(id) < b.size())
      b[size_t(id)] -= params.presence_penalty + params.frequency_penalty * static_cast<float>(n);
  return b;
}

void sampler_distribution(std::span<const float> logits, const SamplingParams& params, TokenDistribution* out) {
  if (!softmax_weights(logits, params.temperature, &out->weight)) return mark_unusable(out);
  const std::vector<double>& p = out->weight;
  const size_t n = p.size();
  // The Sampler stable-sorts ids by p desc: that is the order (p desc, id asc), which an unstable
  // sort of (p, id) pairs reproduces exactly, without the indirection (several times faster).
  std::vector<std::pair<double, int32_t>> sorted(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = {p[i], int32_t(i)};
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<int32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = sorted[i].second;
  size_t limit = n;
  double threshold = params.top_p;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < n) {
    limit = static_cast<size_t>(params.top_k);
    double top = 0;
    for (size_t k = 0; k < limit; ++k) top += p[size_t(order[k])];
    threshold = params.top_p * top;
  }
  size_t keep = 0;
  double mass = 0;
  while (keep < limit) {
    mass += p[size_t(order[keep])];
    ++keep;
    if (mass >= threshold) break;
  }
  apply_min_p(order, p, params.min_p, &keep, &mass);
  keep_prefix(order, keep, mass, out);
}

void fast_distribution(std::span<const float> logits, const SamplingParams& params, TokenDistribution* out) {
  if (!softmax_weights(logits, params.temperature, &out->weight)) return mark_unusable(out);
  const std::vector<double>& p = out->weight;
  const size_t n = p.size();
  const bool top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < n;
  if (!top_k && params.top_p >= 1 && !(params.min_p > 0)) {  // no filter: every token
    out->order.clear();
    out->total = std::accumulate(p.begin(), p.end(), 0.0);
    return;
  }
  // The Sampler's order is (p desc, id asc); sort only as much of it as the filters read,
  // doubling the sorted prefix while top_p has not reached its threshold.
  auto before = [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b); };
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  const size_t limit = top_k ? size_t(params.top_k) : n;
  size_t sorted = 0, m = top_k ? limit : std::min(n, size_t(64));  // top_k's mass needs all k
  size_t keep = 0;
  double mass = 0, threshold = params.top_p;
  for (;;) {
    std::nth_element(ids.begin() + long(sorted), ids.begin() + long(m), ids.end(), before);
    std::sort(ids.begin() + long(sorted), ids.begin() + long(m), before);
    sorted = m;
    if (top_k && keep == 0) {
      double top = 0;
      for (size_t k = 0; k < limit; ++k) top += p[size_t(ids[k])];
      threshold = params.top_p * top;
    }
    bool reached = false;
    while (keep < sorted) {
      mass += p[size_t(ids[keep])];
      ++keep;
      if (mass >= threshold) { reached = true; break; }
    }
    if (reached || sorted == limit) break;
    m = std::min(limit, 2 * m);
  }
  apply_min_p(ids, p, params.min_p, &keep, &mass);
  keep_prefix(ids, keep, mass, out);
}

int32_t pick_ordered(const TokenDistribution& d, double u) {
  if (!d.usable()) return -1;
  const double target = u * d.total;
  double acc = 0;
  if (!d.order.empty()) {
    for (int32_t id : d.order) {
      acc += d.weight[size_t(id)];
      if (target < acc) return id;
    }
    return d.order.back();
  }
  // Unfiltered fast row: walk the same order, sorting only as far as the walk goes (the mass is
  // nearly always in the first few dozen tokens).
  const std::vector<double>& p = d.weight;
  auto before = [&](int32_t a, int32_t b) { return p[size_t(a)] > p[size_t(b)] || (p[size_t(a)] == p[size_t(b)] && a < b); };
  std::vector<int32_t> ids(p.size());
  std::iota(ids.begin(), ids.end(), 0);
  size_t sorted = 0, m = std::min(ids.size(), size_t(64));
  while (sorted < ids.size()) {
    std::nth_element(ids.begin() + long(sorted), ids.begin() + long(m), ids.end(), before);
    std::sort(ids.begin() + long(sorted), ids.begin() + long(m), before);
    for (; sorted < m; ++sorted) {
      acc += p[size_t(ids[sorted])];
      if (target < acc) return ids[sorted];
    }
    m = std::min(ids.size(), 2 * m);
  }
  for (size_t i = ids.size(); i-- > 0;)  // rounding ran past the end: the last kept token
    if (p[size_t(ids[i])] > 0) return ids[i];
  return -1;
}

int32_t pick_by_id(const TokenDistribution& d, double u) {
  if (!d.usable()) return -1;
  const double target = u * d.total;
  double acc = 0;
  int32_t last = -1;
  for (size_t i = 0; i < d.weight.size(); ++i) {
    if (d.weight[i] <= 0) continue;
    acc += d.weight[i];
    last = int32_t(i);
    if (target < acc) return last;
  }
  return last;
}

}  // namespace dsv41
