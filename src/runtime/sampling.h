// Next-token selection from fp32 logits: greedy, temperature, top-p (nucleus), seeded.
// Spec: issue 3 "Runtime" (greedy, temperature, top-p, seeded sampling); golden `generated`
// is greedy.
//
// Rules (deterministic for a given seed and logits):
//   temperature == 0 → greedy: the largest logit, ties to the lowest id (NaN never wins).
//   otherwise p = softmax(logits / temperature) in double; candidates sorted by (p desc, id asc);
//   top-p keeps the shortest prefix whose mass reaches top_p (at least one token); the kept
//   probabilities are renormalised and one uniform u ∈ [0, 1) picks by cumulative mass.
// Optional filters (the server's top_k, min_p, logit_bias; off by default, and then the rules
// above are exactly what runs): logit_bias is added to the logits first (greedy included);
// top_k > 0 keeps the k most likely candidates before top-p, whose threshold is then top_p of
// their mass; min_p > 0 then drops candidates with p < min_p · p_max. presence_penalty and
// frequency_penalty (OpenAI's) lower the logit of every token this sampler has already returned,
// by presence + frequency · count, after the bias and before the rest. repetition_penalty (vLLM's
// and transformers' multiplicative one) scales the logit of every token of the context given to
// create() (the prompt) or already returned — each such id once: a positive logit divided by it, a
// negative one multiplied — after the bias and before presence / frequency.
// RNG: xoshiro256** (Blackman & Vigna) seeded by four splitmix64 outputs of `seed`; u is the
// top 53 bits of one draw × 2^-53. One draw per sampled token, none for greedy.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "base/status.h"

namespace dsv41 {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  float top_p = 1.0f;        // (0, 1]
  uint64_t seed = 0;
  int32_t top_k = 0;   // 0 = off
  float min_p = 0.0f;  // [0, 1]; 0 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added to its logit)
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;  // [-2, 2]; 0 = off
  float repetition_penalty = 1.0f;                          // > 0; 1 = off
};


class Sampler {
 public:
  // Rejects a negative / non-finite temperature, top_p outside (0, 1] and the other parameters out
  // of their ranges. context: the tokens before the first sampled one (the prompt), which the
  // repetition penalty counts as seen; unused when it is 1.
  static Result<Sampler> create(const SamplingParams& params, std::span<const int32_t> context = {});

  // The next token id; logits must be non-empty.
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  int32_t pick(std::span<const float> logits);
  bool penalised() const;
  void penalise_repetitions();
  SamplingParams params_;
  Xoshiro256 rng_;
  std::vector<float> biased_;  // logits + logit_bias − penalties
  std::vector<std::pair<int32_t, int32_t>> counts_;  // (token, times returned), with penalties only
  std::vector<int32_t> context_;  // sorted distinct context ids, with a repetition penalty only
};

// Largest logit, ties to the lowest id; NaN entries are skipped (−1 if all are NaN or empty).
int32_t argmax_logits(std::span<const float> logits);

}  // namespace dsv41
