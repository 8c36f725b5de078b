// End-to-end speed of one sequence (issue 3 item 6): for each context length C, the prefill
// rate of C tokens and the decode rate of the next tokens at that context, with the packed
// cache in use. Owns nothing; borrows the Model.
//
// Prompt: C pseudo-random token ids (xoshiro256** from `seed`, uniform over the vocabulary
// minus the first three ids — BOS/EOS/pad in every config we ship), not text: speed does not
// depend on the ids except through MoE routing, which random weights spread anyway. Decode feeds
// back the greedy argmax, as `dsv41 run` does. Each context gets a fresh Session sized C + decode,
// on a fresh backend from `make_backend` (the CPU backend when it is empty; made untimed).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "engine/backend.h"
#include "model/model.h"
#include "plan/replay_rule.h"

namespace dsv41 {

struct SpeedBenchOptions {
  std::vector<int64_t> contexts;  // prompt lengths, each ≥ 1
  int64_t decode_tokens = 16;     // tokens decoded after each prefill (≥ 0)
  int64_t chunk = 0;              // prefill chunk (0 = the whole prompt in one forward)
  uint64_t seed = 1;
  PrefillDepth depth = PrefillDepth::kFull;  // prefill depth (plan/replay_rule.h)
  // Returning turn (issue 10 item 6): after each cold prefill, the same prompt + this many new
  // tokens served as after a global hit of the whole prompt without window state (what the SSD
  // tier gives), once at each of returning_depths; 0 = skip.
  int64_t returning_suffix = 0;
  std::vector<PrefillDepth> returning_depths = {PrefillDepth::kBounded, PrefillDepth::kExact};
  // Called between each prefill and its decode, untimed: e.g. a bandwidth measurement taken
  // next to the decode it bounds (on a shared machine the bandwidth left to us changes by 2×
  // within minutes).
  std::function<void(int64_t context)> before_decode;
  // Called just before each prefill's clock starts, untimed (e.g. a profile's reset).
  std::function<void(int64_t context)> before_prefill;
  // The backend of each context's session (e.g. the device backend); empty = the CPU backend.
  std::function<Result<std::unique_ptr<Backend>>()> make_backend;
  // Checked after each context's decode (a device backend keeps its first error instead of
  // failing a step: app/backend_choice.h backend_status); empty = nothing to check.
  std::function<Status(const Backend&)> backend_status;
};

// One returning turn: window replay + suffix + decoder tail, timed to its first logits.
struct ReturningTurn {
  PrefillDepth depth = PrefillDepth::kBounded;
  double seconds = 0;
  TokenLayers work;
};

struct SpeedPoint {
  int64_t context = 0;
  double prefill_seconds = 0;
  int64_t decode_tokens = 0;
  double decode_seconds = 0;
  std::vector<int32_t> decoded;  // the greedy ids fed back (backends compared in tests)
  CacheFootprint cache;  // after the last decoded token
  int64_t positions = 0;  // tokens in the cache at that point
  PrefillDepth effective_depth = PrefillDepth::kFull;
  TokenLayers prefill_work;
  std::vector<ReturningTurn> returning;  // with SpeedBenchOptions::returning_suffix
  double prefill_tokens_per_s() const { return prefill_seconds > 0 ? context / prefill_seconds : 0; }
  double decode_tokens_per_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

// Called after each context with its result (for progress output).
using SpeedProgress = std::function<void(const SpeedPoint&)>;

// Errors (nothing is run): no contexts, a context < 1 or beyond max_position_embeddings together
// with the decode tokens, negative decode_tokens or chunk. Errors name the CLI option.
Status check_speed_bench_options(const ModelConfig& config, const SpeedBenchOptions& options);
// Checks the options as above, then runs every context.
Result<std::vector<SpeedPoint>> run_speed_bench(const Model& model, const SpeedBenchOptions& options,
                                                const SpeedProgress& progress = nullptr);

// The prompt used for a context (exposed for tests): `tokens` ids in [3, V) from `seed`.
std::vector<int32_t> speed_bench_prompt(int64_t vocab_size, int64_t tokens, uint64_t seed);

}  // namespace dsv41
