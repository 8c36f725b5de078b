// Draft-length choice by greedy marginal admission (see draft_length.h).
#include "runtime/draft_length.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <string>
#include <tuple>

namespace dsv41 {
namespace {

double clamp_prob(double p) { return std::isnan(p) ? 0.0 : std::clamp(p, 0.0, 1.0); }

// π_1 … π_m of one sequence.
std::vector<double> prefix_products(const std::vector<double>& p) {
  std::vector<double> pi(p.size());
  double run = 1;
  for (size_t i = 0; i < p.size(); ++i) pi[i] = run *= clamp_prob(p[i]);
  return pi;
}

}  // namespace

Result<DsparkMode> parse_dspark_mode(std::string_view text, int block_size) {
  if (text == "auto") return DsparkMode{DsparkMode::Kind::kAuto, 0};
  if (text == "off") return DsparkMode{DsparkMode::Kind::kOff, 0};
  if (text.size() == 1 && text[0] >= '1' && text[0] <= '9' && text[0] - '0' <= block_size)
    return DsparkMode{DsparkMode::Kind::kFixed, text[0] - '0'};
  return invalid_argument("dspark mode '" + std::string(text) + "': expected auto, off or a draft length 1.." +
                          std::to_string(block_size) + " (the drafter's block size is " + std::to_string(block_size) + ")");
}

namespace {

// The modelled cost of a step of `rows` rows over `seqs` sequences under `rule`.
double step_ms(const StepCost& cost, int rows, int seqs, double sunk_ms, const DraftPlanRule& rule) {
  const double first = rule.charge_first_touch ? cost.first_touch_ms(rows, seqs) / DraftPlanRule::kFirstTouchSteps : 0.0;
  return sunk_ms + cost.cost(rows, seqs) + first;
}

// Whether a plan of `seqs` sequences looks for stale estimates above it: at one sequence, whose
// few shapes (1 … block + 1 rows) are each stepped often while they are the best; at more, every
// total row count is a shape of its own and most are stepped rarely, so staleness says little.
bool explores(const DraftPlanRule& rule, int seqs) { return rule.explore_after > 0 && seqs == 1; }

// The plan to step instead of plan `best` of 0 … `most` (plan n has rows_of(n) rows): the smallest
// larger one whose shape's estimate is stale (DraftPlanRule::explore_after), else `best`.
template <typename RowsOf>
size_t explore_above(size_t best, size_t most, RowsOf rows_of, const StepCost& cost, int seqs,
                     const DraftPlanRule& rule) {
  if (!explores(rule, seqs)) return best;
  for (size_t n = best + 1; n <= most; ++n)
    if (cost.steps_since_refresh(rows_of(n), seqs) >= rule.explore_after) return n;
  return best;
}

// kAuto, one sequence (sequence, slot) pair at a time in decreasing π; the best prefix.
std::vector<int> admit_by_confidence(const std::vector<std::vector<double>>& pi, const StepCost& cost, double sunk_ms,
                                     const DraftPlanRule& rule) {
  const int seqs = int(pi.size());
  std::vector<int> k(size_t(seqs), 0);
  // Max-heap on π; ties to the lower sequence, then the lower slot (keeps prefixes).
  using Cand = std::tuple<double, int, int>;  // (π, −seq, −slot)
  std::priority_queue<Cand> heap;
  for (int s = 0; s < seqs; ++s)
    if (!pi[size_t(s)].empty()) heap.emplace(pi[size_t(s)][0], -s, 0);
  std::vector<int> admitted;  // sequence of each admission, in order
  double tokens = seqs;
  int rows = seqs;
  size_t best_n = 0;
  double best = tokens / step_ms(cost, rows, seqs, sunk_ms, rule);
  while (!heap.empty()) {
    const auto [p, ns, ni] = heap.top();
    heap.pop();
    const int s = -ns, i = -ni;
    tokens += p;
    rows += 1;
    admitted.push_back(s);
    if (size_t(i + 1) < pi[size_t(s)].size()) heap.emplace(pi[size_t(s)][size_t(i + 1)], -s, -(i + 1));
    const double throughput = tokens / step_ms(cost, rows, seqs, sunk_ms, rule);
    if (throughput > best) best = throughput, best_n = admitted.size();
  }
  best_n = explore_above(best_n, admitted.size(), [seqs](size_t n) { return seqs + int(n); }, cost, seqs, rule);
  for (size_t a = 0; a < best_n; ++a) ++k[size_t(admitted[a])];
  return k;
}

// kAuto with one cap for the batch: the best K = 0 … longest (ties keep the smaller).
std::vector<int> best_uniform_cap(const std::vector<std::vector<double>>& pi, const StepCost& cost, double sunk_ms,
                                  const DraftPlanRule& rule) {
  const int seqs = int(pi.size());
  size_t longest = 0;
  for (const auto& p : pi) longest = std::max(longest, p.size());
  int best_cap = 0;
  double best = -1;
  for (size_t cap = 0; cap <= longest; ++cap) {
    double tokens = seqs;
    int rows = seqs;
    for (const auto& p : pi)
      for (size_t i = 0; i < std::min(cap, p.size()); ++i) tokens += p[i], ++rows;
    const double throughput = tokens / step_ms(cost, rows, seqs, sunk_ms, rule);
    if (throughput > best) best = throughput, best_cap = int(cap);
  }
  const auto rows_of_cap = [&pi, seqs](size_t cap) {
    int rows = seqs;
    for (const auto& p : pi) rows += int(std::min(cap, p.size()));
    return rows;
  };
  best_cap = int(explore_above(size_t(best_cap), longest, rows_of_cap, cost, seqs, rule));
  std::vector<int> k(static_cast<size_t>(seqs));
  for (int s = 0; s < seqs; ++s) k[size_t(s)] = std::min(best_cap, int(pi[size_t(s)].size()));
  return k;
}

}  // namespace

DraftPlan plan_draft_lengths(std::span<const std::vector<double>> accept_probs, const StepCost& cost,
                             const DsparkMode& mode, double sunk_ms, const DraftPlanRule& rule) {
  sunk_ms = std::isfinite(sunk_ms) ? std::max(sunk_ms, 0.0) : 0.0;
  const int seqs = int(accept_probs.size());
  DraftPlan plan;
  plan.k.assign(size_t(seqs), 0);
  std::vector<std::vector<double>> pi;
  for (const auto& p : accept_probs) pi.push_back(prefix_products(p));
  if (mode.kind == DsparkMode::Kind::kFixed)
    for (int s = 0; s < seqs; ++s) plan.k[size_t(s)] = std::min(mode.k, int(pi[size_t(s)].size()));
  if (mode.kind == DsparkMode::Kind::kAuto && seqs > 0)
    plan.k = rule.uniform_cap ? best_uniform_cap(pi, cost, sunk_ms, rule) : admit_by_confidence(pi, cost, sunk_ms, rule);
  double tokens = seqs;
  int rows = seqs;
  for (int s = 0; s < seqs; ++s)
    for (int i = 0; i < plan.k[size_t(s)]; ++i) tokens += pi[size_t(s)][size_t(i)], ++rows;
  plan.expected_tokens = tokens;
  const DraftPlanRule charged = mode.kind == DsparkMode::Kind::kAuto ? rule : DraftPlanRule{};
  plan.cost_ms = seqs > 0 ? step_ms(cost, rows, seqs, sunk_ms, charged) : 0.0;
  return plan;
}

void weigh_by_remaining(std::span<std::vector<double>> accept_probs, std::span<const int64_t> remaining) {
  int64_t most = 0;
  for (int64_t r : remaining) most = std::max(most, r);
  if (most <= 0) return;
  for (size_t s = 0; s < accept_probs.size() && s < remaining.size(); ++s)
    if (!accept_probs[s].empty())
      accept_probs[s][0] = clamp_prob(accept_probs[s][0]) * double(std::max<int64_t>(remaining[s], 0)) / double(most);
}

int choose_draft_length(std::span<const double> accept_probs, const StepCost& cost, const DsparkMode& mode) {
  const std::vector<std::vector<double>> one = {std::vector<double>(accept_probs.begin(), accept_probs.end())};
  return plan_draft_lengths(one, cost, mode).k[0];
}

}  // namespace dsv41
