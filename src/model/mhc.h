// Manifold-constrained hyper-connections (mHC): the coefficient function H, the collapse of the
// hc_mult residual streams into one sublayer input, and the post/comb update that writes a
// sublayer output back into the streams. Spec: model.md §3.1 (stream init), §3.2 (single-pass
// order: a site collapses with the PREVIOUS site's pre), §3.3 (H).
//
// Layout: streams X are [T, hc, d] float32 (token-major, then stream, then channel).
// Coefficients per token: pre [hc], post [hc], comb [hc, hc] with comb[j, i] = weight of input
// stream j in output stream i (row = input, column = output), as the checkpoint's 24-vector
// (for hc = 4) is laid out: [pre(hc) | post(hc) | comb(hc·hc, row-major)].
// Owns nothing: callers pass the layer's fp32 mHC tensors (hc_*_fn [(2+hc)·hc, hc·d],
// hc_*_base [(2+hc)·hc], hc_*_scale [3]) and borrow them for the call.
#pragma once

#include <cstdint>
#include <vector>

#include "format/config.h"
#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

struct MhcShape {
  int hc = 4;               // residual streams (config hc_mult)
  int64_t dim = 0;          // channels per stream (hidden_size)
  int sinkhorn_iters = 20;  // total normalisation rounds incl. the first column pass
  float hc_eps = 1e-6f;     // added to pre, to the softmax and to every row/column sum
  float norm_eps = 1e-20f;  // rms_norm_eps inside the flattened-stream RMS normalisation

  static MhcShape from_config(const ModelConfig& config);
  int64_t mix_width() const { return int64_t(2 + hc) * hc; }  // 24 for hc = 4
};

struct MhcWeights {
  const float* fn = nullptr;     // [(2+hc)·hc, hc·d]
  const float* base = nullptr;   // [(2+hc)·hc]
  const float* scale = nullptr;  // [3]: pre, post, comb
};

// Working memory of mhc_coefficients, owned by the caller and reused between calls (resized to the
// call's token count: no allocation once a shape has been seen). Null: a local one per call.
struct MhcScratch {
  std::vector<float> normed;  // [T, hc·d] normalised streams (fast path)
  std::vector<float> mix;     // [T, (2+hc)·hc] raw projections (the reference uses one row)
};

// Each operation has a plain scalar *_reference, a *_fast path (AVX2 inner loops from
// kernels/cpu/block_kernels.h, threaded over tokens on ex.pool) and an unsuffixed entry that picks
// one at run time (kernels/cpu/cpu_exec.h: the fast path when ex.use_fast()).
// How they agree: collapse and expand give identical bits; the coefficients agree to float
// rounding (the fast projection is a GEMM with float lanes, the reference accumulates in double),
// the Sinkhorn part being the same scalar code on the same projection.
// The fast paths require a CPU with AVX2 and FMA (call the unsuffixed entries otherwise).

// (pre, post, comb) = H(X) for T tokens.  x [T, hc, d] → pre [T, hc], post [T, hc], comb [T, hc, hc].
// Reference: per token, the flattened-stream RMS scale and the projection with double accumulation.
// Fast: the normalised streams of all tokens as one GEMM (kernels/cpu/gemm.h), the RMS scale in
// AVX2 (double lanes) and the gates + Sinkhorn threaded over tokens.
void mhc_coefficients_reference(const MhcShape& shape, const MhcWeights& w, const float* x, int64_t tokens,
                                float* pre, float* post, float* comb, MhcScratch* scratch = nullptr);
void mhc_coefficients_fast(const CpuExec& ex, const MhcShape& shape, const MhcWeights& w, const float* x,
                           int64_t tokens, float* pre, float* post, float* comb, MhcScratch* scratch = nullptr);
void mhc_coefficients(const CpuExec& ex, const MhcShape& shape, const MhcWeights& w, const float* x, int64_t tokens,
                      float* pre, float* post, float* comb, MhcScratch* scratch = nullptr);

// y[t] = Σ_j pre[t, j] · X[t, j]   (fp32, j ascending).   x [T, hc, d], pre [T, hc] → y [T, d]
void mhc_collapse_reference(const MhcShape& shape, const float* x, const float* pre, int64_t tokens, float* y);
void mhc_collapse_fast(const CpuExec& ex, const MhcShape& shape, const float* x, const float* pre, int64_t tokens,
                       float* y);
void mhc_collapse(const CpuExec& ex, const MhcShape& shape, const float* x, const float* pre, int64_t tokens,
                  float* y);

// out[t, i] = post[t, i] · a[t] + Σ_j comb[t, j, i] · X[t, j]   (fp32).
// a [T, d], x [T, hc, d] → out [T, hc, d]; out must not alias x.
void mhc_expand_reference(const MhcShape& shape, const float* a, const float* x, const float* post,
                          const float* comb, int64_t tokens, float* out);
void mhc_expand_fast(const CpuExec& ex, const MhcShape& shape, const float* a, const float* x, const float* post,
                     const float* comb, int64_t tokens, float* out);
void mhc_expand(const CpuExec& ex, const MhcShape& shape, const float* a, const float* x, const float* post,
                const float* comb, int64_t tokens, float* out);

// X^(0) = hc identical copies of the embedding row.  e [T, d] → x [T, hc, d]
void mhc_init_streams(const MhcShape& shape, const float* e, int64_t tokens, float* x);
// The carried mix before layer 0: one-hot on stream 0.  pre [T, hc]
void mhc_initial_pre(const MhcShape& shape, int64_t tokens, float* pre);

}  // namespace dsv41
