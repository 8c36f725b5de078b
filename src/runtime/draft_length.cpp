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

DraftPlan plan_draft_lengths(std::span<const std::vector<double>> accept_probs, const StepCost& cost,
                             const DsparkMode& mode, double sunk_ms) {
  sunk_ms = std::isfinite(sunk_ms) ? std::max(sunk_ms, 0.0) : 0.0;
  const int seqs = int(accept_probs.size());
  DraftPlan plan;
  plan.k.assign(size_t(seqs), 0);
  std::vector<std::vector<double>> pi;
  for (const auto& p : accept_probs) pi.push_back(prefix_products(p));
  auto totals = [&](const std::vector<int>& k) {
    double tokens = seqs, rows = seqs;
    for (int s = 0; s < seqs; ++s)
      for (int i = 0; i < k[size_t(s)]; ++i) tokens += pi[size_t(s)][size_t(i)], rows += 1;
    return std::pair(tokens, int(rows));
  };
  if (mode.kind == DsparkMode::Kind::kFixed)
    for (int s = 0; s < seqs; ++s) plan.k[size_t(s)] = std::min(mode.k, int(pi[size_t(s)].size()));
  if (mode.kind == DsparkMode::Kind::kAuto && seqs > 0) {
    // Max-heap on π; ties to the lower sequence, then the lower slot (keeps prefixes).
    using Cand = std::tuple<double, int, int>;  // (π, −seq, −slot)
    std::priority_queue<Cand> heap;
    for (int s = 0; s < seqs; ++s)
      if (!pi[size_t(s)].empty()) heap.emplace(pi[size_t(s)][0], -s, 0);
    std::vector<int> admitted;  // sequence of each admission, in order
    double tokens = seqs;
    int rows = seqs;
    size_t best_n = 0;
    double best = tokens / (sunk_ms + cost.cost(rows, seqs));
    while (!heap.empty()) {
      const auto [p, ns, ni] = heap.top();
      heap.pop();
      const int s = -ns, i = -ni;
      tokens += p;
      rows += 1;
      admitted.push_back(s);
      if (size_t(i + 1) < pi[size_t(s)].size()) heap.emplace(pi[size_t(s)][size_t(i + 1)], -s, -(i + 1));
      const double throughput = tokens / (sunk_ms + cost.cost(rows, seqs));
      if (throughput > best) best = throughput, best_n = admitted.size();
    }
    for (size_t a = 0; a < best_n; ++a) ++plan.k[size_t(admitted[a])];
  }
  const auto [tokens, rows] = totals(plan.k);
  plan.expected_tokens = tokens;
  plan.cost_ms = seqs > 0 ? sunk_ms + cost.cost(rows, seqs) : 0.0;
  return plan;
}

int choose_draft_length(std::span<const double> accept_probs, const StepCost& cost, const DsparkMode& mode) {
  const std::vector<std::vector<double>> one = {std::vector<double>(accept_probs.begin(), accept_probs.end())};
  return plan_draft_lengths(one, cost, mode).k[0];
}

}  // namespace dsv41
