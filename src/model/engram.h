// Engram: writes an n-gram table lookup into the residual streams, gated per stream by how
// well the stream matches a key derived from the same lookup. Spec: model.md §3.8.
//
//   R     = table[row ids]                      [cols, head_dim] → flattened [cols·head_dim]
//   kv    = W_ekv R                             [(hc+1)·d]: keys K [hc, d] then value v [d]
//   dot_i = Σ_c X_i,c · (q_w ⊙ k_w)_i,c · K_i,c · rsqrt(mean(X_i²)+eps) · rsqrt(mean(K_i²)+eps) / √d
//   gate_i = σ( sign(dot_i) · sqrt(max(|dot_i|, 1e-6)) )
//   X_i  ← X_i + gate_i · v                     (fp32)
// eps is the config's rms_norm_eps. Row ids come from EngramHasher (engram_hash.h). Weights are
// float32 and borrowed for the call, except the table: real tables are far too large to widen
// (two tables of ~98 GB each in FP8 in the release), so its rows may instead be read from the
// mapped checkpoint tensor and dequantised only for the ids of the call (dequant.h,
// dequantize_rows: exactly the values a whole-table widening gives).
//
// Reference vs fast (engram_forward picks one by ex.use_fast(), kernels/cpu/cpu_exec.h): the
// reference gathers sequentially, projects with double accumulation and forms the gate sums in
// scalar double; the fast path gathers threaded over tokens, projects with one gemm_f32 and forms
// the gate sums in AVX2 double lanes, threaded over tokens. They agree to float rounding (the projection); the
// gathered rows are identical.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "format/config.h"
#include "format/safetensors.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/weight_matrix.h"

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
  const float* table = nullptr;  // dense float32 [rows, head_dim]; null: rows come from `stored`
  int64_t rows = 0;
  WeightRef wkv;                    // [(hc+1)·d, columns·head_dim]: float32 or the stored FP8
  const float* q_weight = nullptr;  // [hc, d]
  const float* k_weight = nullptr;  // [hc, d]
  // The stored table [rows, head_dim] (F32/BF16/F8_E4M3 bytes, e.g. mapped from the checkpoint)
  // and its scale companion (row-wise, may be null for a float table); used when table is null.
  const TensorView* stored = nullptr;
  const TensorView* stored_scale = nullptr;
};

// Working memory of engram_forward, owned by the caller and reused between calls (resized to the
// call's token count: no allocation once a shape has been seen). Null: a local one per call.
struct EngramScratch {
  std::vector<float> r;   // [T, columns·head_dim] gathered rows
  std::vector<float> kv;  // [T, (hc+1)·d] projections (the reference uses one row)
};

// R for T tokens: r [T, columns·head_dim] = the table rows of row_ids [T, columns], as float32.
// Fails on an id outside the table (the message gives the id and the row count) or on a stored
// row that cannot be decoded (a NaN scale, say: the message names the tensor).
Status engram_gather_reference(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                               int64_t tokens, float* r);
// Same, threaded over tokens on ex.pool; identical values.
Status engram_gather_fast(const CpuExec& ex, const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                          int64_t tokens, float* r);

// x [T, hc, d] updated in place; row_ids [T, columns]. A row id outside the table (or a failed
// row read) fails the call before anything is written. engram_forward_fast needs a CPU with
// AVX2 and FMA; engram_forward checks.
Status engram_forward_reference(const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                                int64_t tokens, float* x, EngramScratch* scratch = nullptr);
Status engram_forward_fast(const CpuExec& ex, const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                           int64_t tokens, float* x, EngramScratch* scratch = nullptr);
Status engram_forward(const CpuExec& ex, const EngramShape& shape, const EngramWeights& w, const int64_t* row_ids,
                      int64_t tokens, float* x, EngramScratch* scratch = nullptr);

}  // namespace dsv41
