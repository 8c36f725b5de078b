// Step-cost table with EMA refresh and a linear prior (see step_cost.h).
#include "runtime/step_cost.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

namespace dsv41 {

StepCostPrior step_cost_prior(const StepShape& shape) {
  return {.fixed_ms = shape.fixed, .per_row_ms = shape.per_row, .per_seq_ms = shape.per_seq};
}

StepCost::StepCost(StepCostPrior prior, double ema_alpha, int unstored_steps)
    : prior_(prior), alpha_(std::isfinite(ema_alpha) ? std::clamp(ema_alpha, 1e-6, 1.0) : 0.1),
      unstored_steps_(std::max(unstored_steps, 1)) {}

int StepCost::bucket(int seqs) { return std::bit_width(unsigned(std::max(seqs, 1))) - 1; }

double StepCost::prior(int rows, int seqs) const {
  return prior_.fixed_ms + prior_.per_row_ms * rows + prior_.per_seq_ms * seqs;
}

size_t StepCost::measured_points() const {
  size_t n = 0;
  for (const auto& b : table_) n += b.size();
  return n;
}

double StepCost::cost(int rows, int seqs) const {
  seqs = std::max(seqs, 1);
  rows = std::max(rows, seqs);
  const size_t b = size_t(bucket(seqs));
  if (b >= table_.size() || table_[b].empty()) return prior(rows, seqs);
  const auto& m = table_[b];
  auto hi = m.lower_bound(rows);  // first measured rows ≥ rows
  if (hi != m.end() && hi->first == rows) return hi->second.ms;
  if (hi != m.end() && hi != m.begin()) {
    auto lo = std::prev(hi);
    const double t = double(rows - lo->first) / double(hi->first - lo->first);
    return lo->second.ms + t * (hi->second.ms - lo->second.ms);
  }
  // One side only: keep the measured level, take the slope from the prior.
  const auto& near = hi != m.end() ? *hi : *std::prev(hi);
  const double from = prior(near.first, seqs), to = prior(rows, seqs);
  return from > 0 && to > 0 ? near.second.ms * to / from : near.second.ms;
}

void StepCost::store(int rows, int seqs, double ms, bool replace) {
  const size_t b = size_t(bucket(seqs));
  if (b >= table_.size()) table_.resize(b + 1), stored_.resize(b + 1, 0);
  Entry& e = table_[b][rows];
  e.ms = (replace || e.samples == 0) ? ms : (1 - alpha_) * e.ms + alpha_ * ms;
  ++e.samples;
  e.stamp = ++stored_[b];
}

long StepCost::steps_since_refresh(int rows, int seqs) const {
  const size_t b = size_t(bucket(std::max(seqs, 1)));
  if (b >= table_.size()) return -1;
  const auto it = table_[b].find(rows);
  return it == table_[b].end() ? -1 : stored_[b] - it->second.stamp;
}

bool StepCost::touch(int rows, int seqs, double ms) {
  const size_t b = size_t(bucket(seqs));
  if (b >= touched_.size()) touched_.resize(b + 1);
  const auto it = touched_[b].emplace(rows, Seen{ms, 0}).first;
  if (std::isnan(ms)) it->second.steps = std::max(it->second.steps, unstored_steps_);  // profiled: past its first steps
  return ++it->second.steps <= unstored_steps_;
}

void StepCost::learn_first_touch(int rows, int seqs, double stored_ms) {
  const size_t b = size_t(bucket(seqs));
  if ((b < table_.size() && table_[b].count(rows)) || b >= touched_.size()) return;  // not the first store
  const auto first = touched_[b].find(rows);
  if (first == touched_[b].end() || !std::isfinite(first->second.first_ms)) return;  // profiled: no first touch seen
  const double extra = std::max(first->second.first_ms - stored_ms, 0.0);
  first_touch_extra_ms_ = first_touch_samples_++ == 0 ? extra : (1 - alpha_) * first_touch_extra_ms_ + alpha_ * extra;
}

double StepCost::first_touch_ms(int rows, int seqs) const {
  seqs = std::max(seqs, 1);
  const size_t b = size_t(bucket(seqs));
  const bool seen = b < touched_.size() && touched_[b].count(rows);
  return seen ? 0.0 : first_touch_extra_ms_;
}

bool StepCost::record(int rows, int seqs, double ms) {
  if (!(std::isfinite(ms) && ms > 0) || seqs < 1 || rows < seqs) return false;
  if (touch(rows, seqs, ms)) return true;  // one of its first steps: noted only
  learn_first_touch(rows, seqs, ms);
  store(rows, seqs, ms, false);
  return true;
}

Status StepCost::profile(std::span<const int> batch_sizes, int max_rows_per_seq,
                         FunctionRef<Result<double>(int, int)> step) {
  if (max_rows_per_seq < 1) return invalid_argument("step cost profile: max_rows_per_seq must be ≥ 1");
  for (int seqs : batch_sizes) {
    if (seqs < 1) return invalid_argument("step cost profile: batch size " + std::to_string(seqs) + " must be ≥ 1");
    for (int r = 1; r <= max_rows_per_seq; ++r) {
      Result<double> ms = step(r, seqs);
      if (!ms.ok()) return ms.status().with_context("step cost profile (" + std::to_string(seqs) + " × " + std::to_string(r) + " rows)");
      if (!(std::isfinite(*ms) && *ms > 0))
        return invalid_argument("step cost profile: step of " + std::to_string(seqs) + " × " + std::to_string(r) +
                                " rows returned " + std::to_string(*ms) + " ms (must be finite and > 0)");
      store(r * seqs, seqs, *ms, true);
      touch(r * seqs, seqs, NAN);  // a profiled shape is past its first touch
    }
  }
  return ok_status();
}

}  // namespace dsv41
