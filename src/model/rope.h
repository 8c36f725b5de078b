// Rotary position embedding tables and rotation. Spec: model.md §3.6 (and §3.4 for where each
// table is used), golden README (rope.main.inv_freq / rope.compress.inv_freq).
//
// Two tables, both over the rope dim = qk_rope_head_dim (the LAST channels of every q/k/v and
// indexer head):
//   main      f_i = rope_theta^(−2i/d)                       (SWA-only layers, no YaRN)
//   compress  f_i = compress_rope_theta^(−2i/d), then YaRN when rope_scaling is present:
//             low = max(⌊d·ln(L0/(β_fast·2π)) / (2 ln θ)⌋, 0), high = min(⌈d·ln(L0/(β_slow·2π)) / (2 ln θ)⌉, d−1),
//             γ_i = clamp((i − low)/(high − low), 0, 1), f'_i = (f_i/factor)·γ_i + f_i·(1 − γ_i)
// Pairs are ADJACENT channels (2i, 2i+1) of the tail, rotated as complex numbers by e^{i·t·f_i}
// in fp32; the inverse rotation is the conjugate. Angles are float(t)·f_i in fp32 (as the
// reference's fp32 matmul), cos/sin are correctly rounded to fp32.
// Owns its two frequency tables; immutable after create(), safe to share between threads.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "plan/layer_plan.h"

namespace dsv41 {

class Rope {
 public:
  // Fails (naming the key) if qk_rope_head_dim is not a positive even number, a theta is not
  // positive, or a YaRN parameter is not usable.
  static Result<Rope> create(const ModelConfig& config);

  int rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq(RopeKind kind) const {  // [rope_dim/2]
    return kind == RopeKind::kMain ? main_ : compress_;
  }

  // cos/sin of position `pos` for every pair: cos[rope_dim/2], sin[rope_dim/2].
  void cos_sin(RopeKind kind, int64_t pos, float* cos, float* sin) const;

  // Rotates the last rope_dim channels of x[dim] in place by position `pos` (conjugate when
  // inverse). dim must be ≥ rope_dim (checked by callers' shape validation).
  void apply(RopeKind kind, float* x, int64_t dim, int64_t pos, bool inverse = false) const;

 private:
  int rope_dim_ = 0;
  std::vector<float> main_, compress_;
};

// The rotation itself with precomputed cos/sin (used to rotate many heads at one position).
// x[dim]: channels dim−rope_dim .. dim−1 are rotated pairwise.
void rope_rotate(float* x, int64_t dim, int rope_dim, const float* cos, const float* sin, bool inverse);

}  // namespace dsv41
