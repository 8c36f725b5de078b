// The bounded-versus-exact replay experiment (issue 10 item 5; system.md §3 "dsv41 must measure
// the difference"): for prompts cut from real text and global-hit positions h, how far the
// paper's bounded prefill (windows cut at the tail / at the replay start) moves the model from the
// exact result, and what each costs.
//
// Per (prompt, h): the first h tokens are prefilled at full depth in one sequence and only their
// global KV is kept (Engine::fork_prefix: a hit from the SSD tier without window state, or h = 0:
// cold); the rest of the prompt is prefilled at each depth. Prompts are cut back to back from
// each text (offsets 0, length + tokens, …). Then `tokens` greedy steps:
//   - teacher-forced: the bounded run is fed exact's greedy tokens, so both see the same context at
//     every step; per step KL(exact ‖ bounded) of the next-token distributions and whether their
//     top-1 agree (prompt end + every step);
//   - free-running: bounded decodes its own greedy tokens; the first step where they differ from
//     exact's (−1: never within `tokens`);
//   - full depth as a check on exact: the largest |Δlogit| between full and exact over the same
//     teacher-forced steps (0 on the CPU, whose kernels give bit-identical rows).
// Cost: token-layers of each prefill (encoder / decoder / replay) and its wall time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "plan/replay_rule.h"

namespace dsv41 {

struct ReplayAbOptions {
  std::vector<int64_t> lengths = {512, 1024};  // prompt lengths cut from each text
  std::vector<int64_t> hits = {0, 256};         // global-hit positions (< length)
  int64_t tokens = 32;                          // greedy steps after the prompt
  int64_t chunk = 512;                          // prefill chunk
  int64_t prompts_per_text = 2;                 // prompts cut back to back from each text
};

struct ReplayAbCase {
  int text = 0;               // index of the input text
  int64_t offset = 0;         // first token of the prompt in that text
  int64_t length = 0, hit = 0;
  double kl_mean = 0, kl_max = 0;   // KL(exact ‖ bounded) in nats over prompt end + steps
  double top1_agreement = 0;        // fraction of those positions with the same argmax
  int64_t first_divergence = -1;    // free-running greedy: first differing step, −1 = none
  double full_vs_exact_max_abs = 0; // max |Δlogit| full vs exact (teacher-forced positions)
  TokenLayers work_full, work_bounded, work_exact;
  double seconds_full = 0, seconds_bounded = 0, seconds_exact = 0;  // prefill wall time
};

// texts: token ids of each input text (BOS not added here). Cases whose prompt + tokens do not
// fit in a text are skipped (none fit: an error naming the lengths).
Result<std::vector<ReplayAbCase>> run_replay_ab(const Model& model, const std::vector<std::vector<int32_t>>& texts,
                                                const ReplayAbOptions& options);

// KL(p ‖ q) in nats of the softmax distributions of two logit rows (double precision).
double kl_divergence_of_logits(std::span<const float> p_logits, std::span<const float> q_logits);

}  // namespace dsv41
