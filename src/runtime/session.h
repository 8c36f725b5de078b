// One sequence being generated, for the CLI and tests that need no batching: a thin wrapper over
// an Engine (engine/engine.h) with one sequence, on a CPU backend unless given another. Borrows the Model (which must
// outlive it). Spec: issue 3 "Runtime", issue 9 item 6.
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
#include "engine/engine.h"
#include "model/model.h"

namespace dsv41 {

class Session {
 public:
  // A session able to hold max_context positions (≤ max_position_embeddings).
  static Result<std::unique_ptr<Session>> create(const Model& model, int64_t max_context,
                                                 const EngineOptions& options = {});
  // The same on the given backend (e.g. the device backend, app/backend_choice.h).
  static Result<std::unique_ptr<Session>> create(std::unique_ptr<Backend> backend, const Model& model,
                                                 int64_t max_context, const EngineOptions& options = {});

  // Appends `tokens`, `chunk` tokens per forward (0 = all at once). Returns the logits [V] of the
  // last token; all_logits (optional) receives [tokens, V]; trace (optional, only with one chunk)
  // the named intermediates. token_types / image_embeddings: the prompt's image spans (engine.h
  // Segment), only with one chunk.
  Result<std::vector<float>> prefill(std::span<const int32_t> tokens, int64_t chunk = 0,
                                     std::vector<float>* all_logits = nullptr, ForwardTrace* trace = nullptr,
                                     std::span<const int8_t> token_types = {},
                                     std::span<const float> image_embeddings = {});
  // Appends one token; returns the logits [V] predicting the next one.
  Result<std::vector<float>> decode(int32_t token);

  int64_t length() const { return *engine_->length(id_); }
  int64_t max_context() const { return engine_->cache(id_)->max_context(); }
  CacheFootprint cache_bytes() const { return engine_->cache(id_)->bytes_in_use(); }
  // The packed cache (read-only), e.g. for dumps of its dequantised rows.
  const SequenceCache& cache() const { return *engine_->cache(id_); }
  Engine& engine() { return *engine_; }
  SequenceId sequence() const { return id_; }
  void reset();

 private:
  Session(std::unique_ptr<Engine> engine, SequenceId id) : engine_(std::move(engine)), id_(id) {}
  std::unique_ptr<Engine> engine_;
  SequenceId id_;
};

}  // namespace dsv41
