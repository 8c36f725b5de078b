// Acceptance of DSpark drafts (issue 15; system.md §4; lead's notes "Verification").
//
// One verification step of one sequence: the target scored [t, d_1 … d_k] in one forward and
// returned k+1 logit rows; row j−1 scores d_j, row k gives the bonus. verify() returns how many
// drafts are accepted and the one token that follows them (a correction or the bonus), so a step
// emits accepted + 1 tokens.
//
// The target distribution p of a row is the Sampler's (sampling.h): logit_bias, then
// presence/frequency penalties, then temperature, top_k, top_p, min_p (the same weights and kept
// set; token_distribution.h). The draft distribution q is the same processing applied to the
// drafter's Markov-corrected logits.
//   temperature 0: accept d_j while d_j == argmax(p row j−1) (argmax_logits: ties to the lowest
//     id, NaN never wins); next = argmax of the first mismatching row, or of row k (the bonus).
//     Token for token the same as greedy decoding with a Sampler, penalties and bias included.
//   temperature > 0: speculative rejection sampling (Leviathan et al. 2023, Chen et al. 2023):
//     accept d_j with probability min(1, p(d_j)/q(d_j)); at the first rejection sample from
//     normalise(max(p − q, 0)); all accepted → sample the bonus from p of row k. The emitted
//     tokens are then distributed exactly as sampling from p one token at a time, PROVIDED d_j was
//     drawn from q_j — draft_token() does that draw. A drafter that picks deterministically (the
//     argmax, as the release does at temperature 0) must say so (DraftPick::kArgmax): q_j is then
//     the point mass on d_j, which is also exact. Drafts drawn from any other law (e.g. a plain
//     softmax(logits / T) on the device while p uses top_p) break the guarantee.
// Penalties: they depend on the tokens this object has returned, so row j−1 (of p and of q) is
// processed with the counts of everything returned before plus d_1 … d_{j−1} — the same counts a
// Sampler would hold when it produced that token. Accepted drafts and the next token are counted.
//
// Cost: verify() forms rows with fast_distribution (O(V) plus a sort of the prefix the filters
// read; token_distribution.h) and draws a token from p with pick_ordered (the Sampler's walk,
// sorting only as far as it goes); a correction walks the residual in id order. sample() keeps
// the Sampler's full sort so that it stays bit-identical to Sampler::sample; verify() with k = 0
// matches it too except when u lands within rounding of a boundary (token_distribution.h).
// RNG (xoshiro256**, seeded from params.seed like the Sampler's, owned by this object; one request
// = one object, so a request is reproducible for its seed). Draws per verify() with temperature > 0:
// one uniform per draft examined (accepted, or the first rejected one), plus one for the next token:
// accepted + 2 after a rejection, k + 1 when all k are accepted (k = 0: one draw, like sample());
// an unusable draft row takes no acceptance draw (accepted + 1).
// draft_token() draws from a second stream (seed-derived) so drafting never shifts the acceptance
// draws. Temperature 0 draws nothing.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "base/status.h"
#include "runtime/sampling.h"
#include "runtime/token_distribution.h"

namespace dsv41 {

// How the drafter chose its tokens at temperature > 0 (ignored at temperature 0).
enum class DraftPick {
  kSampled,  // d_j ~ q_j (draft_token()); draft_logits are required
  kArgmax,   // d_j chosen deterministically (argmax); q_j = point mass; draft_logits may be empty
};

struct VerifyInput {
  std::span<const int32_t> drafts;       // d_1 … d_k, k ≥ 0
  std::span<const float> draft_logits;   // [k, V] fp32, row i → d_{i+1} (kSampled only)
  std::span<const float> target_logits;  // [k+1, V] fp32, row j−1 scores d_j, row k = bonus
  int32_t vocab = 0;                     // V
  DraftPick pick = DraftPick::kSampled;
};

struct VerifyResult {
  int32_t accepted = 0;  // j ∈ 0..k: d_1 … d_j are emitted
  int32_t next = -1;     // emitted after them: correction (j < k) or bonus (j == k)
};

class SpeculativeSampler {
 public:
  // Same validation as Sampler::create.
  static Result<SpeculativeSampler> create(const SamplingParams& params);

  // One plain (non-speculative) token from one logit row: the Sampler's rule and draw.
  int32_t sample(std::span<const float> logits);

  // Accepts a prefix of the drafts and picks the next token. Errors (nothing changes then): sizes
  // not [k, V] / [k+1, V], a draft id outside 0..V−1, a target row that is all NaN. A draft row
  // that is all NaN, or gives its own draft probability 0, is rejected (as if k ended before it;
  // exact, since a draft drawn from q never has q(d) = 0).
  Result<VerifyResult> verify(const VerifyInput& in);

  // Draws d_{i+1} ~ q_i from draft row i, processed with the counts plus `drafted_before` =
  // d_1 … d_i (the drafts already chosen this step). Temperature 0: the argmax, no draw.
  // −1 when the row has no finite probability (all NaN): end the drafts before it.
  int32_t draft_token(std::span<const float> draft_row, std::span<const int32_t> drafted_before);

  // Counts a token as returned without drawing (e.g. one a constraint forced).
  void observe(int32_t token);

  const SamplingParams& params() const { return params_; }
  uint64_t accept_draws() const { return accept_draws_; }  // uniforms taken by sample()/verify()

 private:
  explicit SpeculativeSampler(const SamplingParams& params);
  double uniform();
  bool penalised() const { return params_.presence_penalty != 0 || params_.frequency_penalty != 0; }
  // The counts a row sees: those of returned tokens plus `extra` (the drafts before the row).
  const TokenCounts& counts_with(std::span<const int32_t> extra);
  std::span<const float> processed(std::span<const float> logits, std::span<const int32_t> extra);
  int32_t pick_residual(const TokenDistribution& p, const TokenDistribution& q);
  int32_t pick_exact(std::span<const float> logits, std::span<const int32_t> extra);  // sample()'s
  int32_t pick_fast(std::span<const float> logits, std::span<const int32_t> extra);   // verify()'s

  SamplingParams params_;
  Xoshiro256 rng_;        // acceptance and next-token draws
  Xoshiro256 draft_rng_;  // draft_token() draws
  uint64_t accept_draws_ = 0;
  TokenCounts counts_, row_counts_;  // returned tokens (penalties only); scratch for a row
  std::vector<float> biased_;
  TokenDistribution p_, q_;
  std::vector<double> residual_;
};

}  // namespace dsv41
