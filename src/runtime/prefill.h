// Prefill of a prompt through an engine at a chosen depth (full / bounded / exact): the steps of
// plan/replay_rule.h run in order, each cut into chunks, the encoder replay of a hit first.
// Spec: system.md §3 (serving a turn), issue 10 items 1–3.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "plan/replay_rule.h"

namespace dsv41 {

struct PrefillOptions {
  PrefillDepth depth = PrefillDepth::kBounded;
  int64_t chunk = 512;  // positions per forward (0 = each step in one forward)
  // The sequence's window state at its current length is exact (a live sequence or a restored
  // snapshot); false after Engine::fork_prefix: the windows are replayed.
  bool windows_present = true;
  // When the plan runs full depth: also return the logits of every new position (all_logits).
  bool all_logits = false;
  // Called after each forward with the positions run so far and in all (replay included), e.g.
  // for a progress line; may be empty.
  std::function<void(int64_t done, int64_t total)> progress;
  // Image spans of the prompt (runtime/image_input.h), borrowed: types [prompt positions] (empty:
  // all text) and the span rows' embeddings [span rows, hidden] in prompt order. Each forward
  // (replays included) gets its chunk's part.
  std::span<const int8_t> token_types;
  std::span<const float> image_embeddings;
};

struct PrefillResult {
  std::vector<float> last_logits;  // [vocab] of the last prompt position
  // [N − h, vocab]: every new position's logits, when asked for and the plan ran full depth
  // (other depths leave the early positions' decoder unrun: their logits do not exist).
  std::vector<float> all_logits;
  PrefillDepth effective = PrefillDepth::kFull;
  TokenLayers work;
  PrefillTiming timing;  // wall time of its forwards: replay, encoder, decoder tail
  int64_t forwards = 0;
};

// `prompt` holds every token of the sequence after the prefill: its first length(id) tokens must
// be those the sequence already holds (the hit), the rest are appended. Stops at the first error
// (the sequence then holds what the completed forwards appended).
Result<PrefillResult> prefill(Engine& engine, SequenceId id, std::span<const int32_t> prompt,
                              const PrefillOptions& options);

}  // namespace dsv41
