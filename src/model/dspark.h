// The DSpark drafter on the CPU: target features → each stage's ring rows, and a 5-token draft
// block per sequence. Spec: model.md §6.1 (as corrected from the release code), system.md §4;
// issue 15. Weights: model/dspark_weights.h.
//
// Ring rows (every position the target accepts; engine.h feeds them after each forward):
//   f = concat over target layers ℓ of mean_j X_j (the streams entering ℓ, after its Engram)
//   main = RMSNorm_main(W_main f);  ring_s ← FP8QDQ(RoPE_pos(RMSNorm_kv,s(W_kv,s main)))
// A draft after position s (the target has processed s and chosen t_{s+1}):
//   block ids [t_{s+1}, noise, …] at positions s+1 … s+B, embedded by the backbone, hc copies,
//   carried mix one-hot; per stage the backbone block (mHC sites, RMSNorms, MoE of the stage's
//   experts, text routing bias) with an attention whose keys are the stage ring's entries
//   (positions max(start, s−W+1) … s) followed by all B block rows (bidirectional), sink softmax,
//   inverse RoPE, grouped output; then x = collapse with the last FFN pre, logits =
//   head(RMSNorm_norm(x)) with the backbone's head; sequentially over slots i: the Markov head's
//   embedding e_i of ids[i] adds W_markov e_i to logits_i, ids[i+1] = pick(logits_i) (argmax by
//   default), confidence_i = w_conf · [x_i ‖ e_i] (a logit of acceptance, uncalibrated).
// Numeric policy as the backbone's: fp32 activations, the only roundings the FP8 fake-quant of
// ring rows and block keys/values. Requests are independent: a batch of requests gives each the
// same bits as alone (token-wise steps are per row; attention per request).
// Workspace is kept between calls (no allocation once a batch shape was seen).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/attention_steps.h"
#include "model/mhc.h"
#include "model/moe.h"

namespace dsv41 {

class Model;
struct DrafterWeights;

struct DraftRequest {
  const SequenceCache* cache = nullptr;  // its draft rings hold the positions up to `last`
  int64_t last = 0;                      // s: the last position the target has processed
  int32_t anchor = 0;                    // t_{s+1}: the target's token for s+1
  // Draft slots wanted, 1 … block (0 = all): the stages always run the whole block (its rows see
  // each other), but the head, the Markov head and the confidence run only for these slots, so a
  // caller verifying k ≤ slots drafts does not pay for the others. The slots given are the same
  // values as in a full draft.
  int slots = 0;
  // Whether the caller reads the block's logits (DraftBlock::logits): a greedy caller does not, and
  // the device drafter then downloads only the picks and confidences (the logits left empty).
  bool logits = true;
};

// One request's draft: ids [n] (d_1 … d_n, predicting positions s+2 … s+n+1), the Markov-corrected
// logits they were picked from [n, V], and the confidence logits [n]; n = the request's slots.
struct DraftBlock {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  std::vector<float> confidence;
};

// Chooses slot `slot`'s token of request `request` from its logits (sampling); null = argmax.
using DraftPicker = std::function<int32_t(int64_t request, int slot, std::span<const float> logits)>;

// Fails, naming the request, when a request's rings do not end at its `last` position or its
// anchor is outside the vocabulary [0, V) (what Drafter::draft checks first).
Status check_draft_requests(std::span<const DraftRequest> requests, int stages, int64_t V);

// The head's sequential tail of one request's draft, shared by the CPU drafter and the device
// backend's: b.logits holds the head's logits of the request's first n slots [n, V] (n =
// b.ids.size() = b.confidence.size()); x [n, d] their collapsed rows (before the final norm).
// Per slot j in turn: logits_j += W_markov e(prev), confidence_j = w_conf · [x_j ‖ e(prev)],
// prev = pick(request, j, logits_j) (argmax when pick is null), starting from prev = anchor.
// head_by_rank (optional): markov_head transposed, [r, V] (markov_head_by_rank); the same sums in
// the same order, with V's lanes side by side (≈ 4× fewer instructions on a plain x86-64 build).
void draft_block_tail(const DrafterWeights& w, int64_t d, int64_t V, int32_t anchor, const float* x, int64_t request,
                      const DraftPicker& pick, DraftBlock& b, const float* head_by_rank = nullptr);
// w.markov_head [V, r] as [r, V].
std::vector<float> markov_head_by_rank(const DrafterWeights& w, int64_t V);

class Drafter {
 public:
  // The model must have a drafter (model.drafter() non-null) and outlive this object.
  Drafter(const Model& model, const CpuExec& exec);

  int block() const;
  int stages() const;
  int64_t feature_width() const;  // targets · hidden

  // Ring rows of n rows at `positions` from their target features [n, feature_width]; read them
  // with ring_rows(stage) [n, head_dim] until the next call.
  void ring_rows(const float* features, const int64_t* positions, int64_t n);
  const float* ring_rows(int stage) const { return rows_[stage].data(); }

  // One draft per request into out[i] (resized). Fails, naming the request, when a ring does not
  // end at the request's `last` position or the anchor is outside the vocabulary.
  Status draft(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick = {});

 private:
  void stage(int s, std::span<const DraftRequest> requests);
  void attend(int s, const DraftRequest& r, int64_t row0);

  const Model& model_;
  const DrafterWeights& w_;
  CpuExec ex_;
  std::vector<MoeWeights> moe_;
  std::vector<float> markov_head_by_rank_;  // [r, V]
  std::vector<std::vector<float>> rows_;  // [stage][n, D]
  std::vector<float> main_;                // [n, d]
  RopeRows rope_;
  // The draft batch's activations (R = requests · B rows).
  std::vector<int64_t> positions_;
  std::vector<float> x_, x2_, p_, h_, c_, q_, kv_, o_, a_, pre_a_, post_a_, comb_a_, pre_b_, post_b_, comb_b_;
  std::vector<float> weights_, keys_, logits_;
  std::vector<int64_t> head_rows_;  // [requests + 1] first head row of each request
  std::vector<int32_t> experts_;
  MhcScratch mhc_scratch_;
  MoeScratch moe_scratch_;
  AttentionScratch attention_scratch_;
};

}  // namespace dsv41
