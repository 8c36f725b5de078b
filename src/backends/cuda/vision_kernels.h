// The CUDA vision tower's kernels (issue 16 item 6; model.md §3.10): a tiled bf16 tensor-core
// GEMM used for every product, a flash-style attention, and the element-wise steps between them.
// A plain C++ header (no CUDA headers), like cuda_kernels.h: raw DEVICE pointers, enqueued on
// `stream`, errors as Status values naming the call; arguments are checked before anything runs.
// bf16 values travel as uint16_t (the bits). vision_tower.h strings them into the tower.
#pragma once

#include <cstdint>

#include "base/status.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;  // the same type cuda_runtime.h declares

namespace dsv41::cuda {

// out[m, n] = a[m, k] · w[n, k]ᵀ (+ bias[n]) with bf16 inputs on tensor cores (mma.sync
// m16n8k16), fp32 accumulation, tiles of 128 × 128 × 32 in a 3-stage cp.async pipeline.
// Exactly one output: out_f32 (plain, or added to what it holds when `accumulate`: the residual
// stream) or out_bf16 (rounded to nearest even). Requirements (refused otherwise): m, n, k > 0,
// k, lda and ldw multiples of 8 and a, w 16-byte aligned (16-byte row loads); ldo ≥ n.
struct GemmArgs {
  int m = 0, n = 0, k = 0;
  const uint16_t* a = nullptr;  // bf16 [m, lda]
  int64_t lda = 0;
  const uint16_t* w = nullptr;  // bf16 [n, ldw]  (a Linear weight [out, in])
  int64_t ldw = 0;
  const float* bias = nullptr;  // [n] or null
  float* out_f32 = nullptr;     // [m, ldo]
  bool accumulate = false;
  uint16_t* out_bf16 = nullptr;  // [m, ldo]
  int64_t ldo = 0;
  // SwiGLU pairs (bf16 output only, n even): columns 2t and 2t+1 are the gate and up of unit t
  // (the tower interleaves w1's rows so), and out_bf16[row, t] = silu(gate)·up, ldo ≥ n/2.
  bool swiglu_pairs = false;
};
Status gemm_bf16(const GemmArgs& g, cudaStream_t stream);

// Bidirectional multi-head attention without mask, flash-style: per (head, 64 query rows) the
// keys stream through shared memory in tiles of 64, scores on tensor cores, online softmax in
// fp32 (exp2 with the scale folded in), P rounded to bf16 for P·V, so no [n, n] score matrix
// exists. q, k, v: bf16 [heads, n, head_dim] (one contiguous [n, head_dim] block per head);
// out: bf16 [n, ldo], head h in columns h·head_dim .. +head_dim. head_dim 64 only (the release's
// 1024 / 16); scale = 1/√head_dim.
struct AttentionArgs {
  int n = 0, heads = 0, head_dim = 0;
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  uint16_t* out = nullptr;
  int64_t ldo = 0;
};
Status attention_bf16(const AttentionArgs& a, cudaStream_t stream);

// ---- Element-wise steps (vision_ops.cu) -----------------------------------------------------
// RMSNorm of each row (model/rmsnorm.h's function, mean of squares in fp32): x [rows, n] fp32 →
// out_bf16 or out_f32 [rows, n] (exactly one), y = w · (x · (mean(x²) + eps)^-½).
Status rmsnorm_rows_f32(const float* x, int64_t rows, int n, const float* w, double eps, uint16_t* out_bf16,
                        float* out_f32, cudaStream_t stream);
// qkv [n, 3·heads·hd] fp32 (q | k | v) → q, k, v bf16 [heads, n, hd], q and k rotated by the
// 2-D RoPE tables cos/sin [n, hd/2] (model/vision/vision_rope.h: halves (i, i + hd/2)).
Status rope_split_qkv(const float* qkv, int64_t n, int heads, int hd, const float* cos_t, const float* sin_t,
                      uint16_t* q, uint16_t* k, uint16_t* v, cudaStream_t stream);
// The 2-D RoPE tables (model/vision/vision_rope.h rope_tables) on the device: cos/sin
// [n_h·n_w, hd/2], inv_freq [hd/4] from vision_rope::inv_freq.
Status rope_tables_device(int n_h, int n_w, int hd, const float* inv_freq, float* cos_t, float* sin_t,
                          cudaStream_t stream);
// x [rows, n] fp32 → bf16 [rows, ldo] with columns n..ldo−1 zero (ldo ≥ n).
Status f32_to_bf16_rows(const float* x, int64_t rows, int n, uint16_t* out, int ldo, cudaStream_t stream);
// Exact GELU 0.5·x·(1 + erf(x/√2)) of x [count] fp32, written as bf16 to out [count].
Status gelu_f32_to_bf16(const float* x, int64_t count, uint16_t* out, cudaStream_t stream);
// The aligner's unfold (model.md §3.10): features [n_h·n_w, d] fp32 → bf16 [⌈n_h/r⌉·⌈n_w/r⌉,
// r·r·d], feature ch·r² + kh·r + kw of token (ty, tx) = patch (ty·r + kh, tx·r + kw), zero past
// the grid (the right/bottom padding).
Status unfold_bf16(const float* features, int n_h, int n_w, int d, int r, uint16_t* out, cudaStream_t stream);

}  // namespace dsv41::cuda
