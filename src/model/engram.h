// Engram: writes an n-gram table lookup into the residual streams, gated per stream by how
// well the stream matches a key derived from the same lookup. Spec: model.md §3.8.
//
//   R     = table[row ids]                      [cols, head_dim] → flattened [cols·head_dim]
//   kv    = W_ekv R                             [(hc+1)·d]: keys K [hc, d] then value v [d]
//   dot_i = Σ_c X_i,c · (q_w ⊙ k_w)_i,c · K_i,c · rsqrt(mean(X_i²)+eps) · rsqrt(mean(K_i²)+eps) / √d
//   gate_i = σ( sign(dot_i) · sqrt(max(|dot_i|, 1e-6)) )
//   X_i  ← X_i + gate_i · v                     (fp32)
// eps is the config's rms_norm_eps. Row ids come from EngramHasher (engram_hash.h). Weights are
// float32 (the table dequantised by the registry) and borrowed for the call.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "format/config.h"

namespace dsv41 {

struct EngramShape {
  int hc = 4;
  int64_t dim = 0;       // hidden_size
  int columns = 0;       // (engram_max_ngram_size − 1) · engram_n_heads
  int64_t head_dim = 0;  // engram_head_dim
  float eps = 1e-20f;    // rms_norm_eps
  static EngramShape from_config(const ModelConfig& config);
};

struct EngramWeights {
  const float* table = nullptr;  // [rows, head_dim]
  int64_t rows = 0;
  const float* wkv = nullptr;       // [(hc+1)·d, columns·head_dim]
  const float* q_weight = nullptr;  // [hc, d]
  const float* k_weight = nullptr;  // [hc, d]
};

// x [T, hc, d] updated in place; row_ids [T, columns]. A row id outside the table fails the
// call before anything is written.
Status engram_forward_reference(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                                int64_t tokens, float* x);
// Same with the wkv projection as one GEMM over all tokens.
Status engram_forward(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids, int64_t tokens,
                      float* x);

}  // namespace dsv41
