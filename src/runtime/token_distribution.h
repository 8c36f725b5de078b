// The probability distribution a Sampler draws from, as a value (for DSpark acceptance, which
// needs p(d) and q(d), not just a draw). Rules: sampling.h — logit_bias, then presence/frequency
// penalties, then softmax(· / T) in double, then top_k, top_p, min_p over the order (p desc, id asc).
//
// Two ways to form it, with the same weights and the same kept set:
//   sampler_distribution: a full sort, step by step the Sampler's arithmetic, so `total` and
//     `order` are bit-identical to what Sampler::sample walks (pick_ordered then returns its token).
//   fast_distribution: sorts only the prefix the filters look at (none without filters), so a
//     row costs O(V) plus the kept prefix's sort. `total` sums the kept weights (in id order when
//     unfiltered); without filters it keeps every token of nonzero weight, where the Sampler's
//     top_p = 1 loop can stop a rounding tail (mass < 1e-15) early — no other difference.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/sampling.h"

namespace dsv41 {

struct TokenDistribution {
  std::vector<double> weight;  // [V]: softmax(·/T) for kept tokens, 0 otherwise
  std::vector<int32_t> order;  // kept ids by (weight desc, id asc); empty for an unfiltered fast row
  double total = 0;            // Σ kept weights: normalise by it
  double prob(int32_t id) const { return total > 0 ? weight[size_t(id)] / total : 0.0; }
  bool usable() const;         // total finite and > 0 (false for all-NaN rows)
};

using TokenCounts = std::vector<std::pair<int32_t, int32_t>>;  // (token, times returned)

// logits + logit_bias − (presence + frequency · n) for every counted token; returns `logits`
// itself when there is nothing to apply, else a span of `scratch`.
std::span<const float> bias_and_penalise(std::span<const float> logits, const SamplingParams& params,
                                         const TokenCounts& counts, std::vector<float>* scratch);

void sampler_distribution(std::span<const float> logits, const SamplingParams& params, TokenDistribution* out);
void fast_distribution(std::span<const float> logits, const SamplingParams& params, TokenDistribution* out);

// The Sampler's walk in the order (p desc, id asc) to the first cumulative weight above u · total,
// u ∈ [0, 1); −1 if not usable. On sampler_distribution's output it returns the Sampler's token
// for the same u; on fast_distribution's too, except when u · total falls within rounding of a
// boundary of an unfiltered row (its total is summed in another order).
int32_t pick_ordered(const TokenDistribution& d, double u);
// A walk in id order over the kept tokens: same law, no order needed. −1 if not usable.
int32_t pick_by_id(const TokenDistribution& d, double u);

}  // namespace dsv41
