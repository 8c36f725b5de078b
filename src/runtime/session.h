// One sequence being generated: owns its packed attention cache and Engram history, borrows the
// Model (which must outlive it). Spec: issue 3 "Runtime" — exact full-depth prefill in chunks of
// any size, incremental decode, logits.
//
// Every call continues the sequence where the previous one stopped; prefill in chunks of any
// size and token-by-token decode compute the same function (up to float rounding and the cache
// quantisers' grid flips, see golden README). Invalid token ids or a context overflow fail the
// call before anything changes. Not thread-safe; one Session per sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace dsv41 {

class Session {
 public:
  // A session able to hold max_context positions (≤ max_position_embeddings).
  static Result<std::unique_ptr<Session>> create(const Model& model, int64_t max_context);

  // Appends `tokens`, `chunk` tokens per forward (0 = all at once). Returns the logits [V] of the
  // last token; all_logits (optional) receives [tokens, V]; trace (optional, only with one chunk)
  // the named intermediates.
  Result<std::vector<float>> prefill(std::span<const int32_t> tokens, int64_t chunk = 0,
                                     std::vector<float>* all_logits = nullptr, ForwardTrace* trace = nullptr);
  // Appends one token; returns the logits [V] predicting the next one.
  Result<std::vector<float>> decode(int32_t token);

  int64_t length() const { return seq_.length(); }
  int64_t max_context() const { return seq_.cache->max_context(); }
  CacheFootprint cache_bytes() const { return seq_.cache->bytes_in_use(); }
  // The packed cache (read-only), e.g. for dumps of its dequantised rows.
  const SequenceCache& cache() const { return *seq_.cache; }
  void reset();

 private:
  Session(const Model& model, SequenceState seq) : model_(&model), seq_(std::move(seq)) {}
  const Model* model_;
  SequenceState seq_;
};

}  // namespace dsv41
