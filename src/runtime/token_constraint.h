// Constrained decoding seam: a per-sequence object that masks the logits before each sample and
// hears which token was sampled. The scheduler (runtime/scheduler.h) owns one per request that
// asks for it, made by the request's factory when the request is admitted; the engine and the
// other sequences of a batch never see it. Implementations: runtime/json_constraint.h.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace dsv41 {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of every token that may not come next to −inf; returns how many may.
  virtual int64_t mask(std::span<float> logits) = 0;
  // The token that was sampled (one the last mask allowed).
  virtual void advance(int32_t token) = 0;
};

// Makes a fresh constraint for each sequence (each choice of a request has its own state).
// Shared between threads: start() must be safe to call concurrently.
class ConstraintFactory {
 public:
  virtual ~ConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> start() const = 0;
};

}  // namespace dsv41
