// The compressor of a Full (kv-source) layer and the entries it publishes. Spec: model.md §3.4
// "Compressor", §4 (NVFP4 main rows, MXFP4 index keys), §9 (golden: trailing partial group
// buffered, RoPE of entry g at position g·r).
//
// For ratio r, tokens are grouped in non-overlapping runs of r positions (group g = positions
// g·r … g·r+r−1):
//   r = 1:  L_t = RMSNorm_c(W_ckv x_t)
//   r ≥ 2:  a_j = W_ckv x_j, b_j = W_cg x_j (fp32); per channel w = softmax over the group's r
//           tokens of b; L_g = RMSNorm_c(Σ_j w_j ⊙ a_j)
// A group that is not complete at the end of a call stays pending in the cache (its tokens'
// fp32 a and b), so any chunking of a prefill produces the same entries as one call.
// Published for each new group g:
//   main row  = NVFP4QDQ(RoPE_compress(L_g, g·r))
//   index key = MXFP4QDQ(RoPE_compress(RMSNorm_k(W_k L_g), g·r))     (from the pre-RoPE latent)
// Owns nothing; state lives in the KvSourceCache.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/sequence_cache.h"
#include "format/config.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/attention.h"
#include "model/rope.h"

namespace dsv41 {

struct CompressedGroups {
  int64_t first_group = 0;      // index of the first completed group
  int64_t groups = 0;           // groups completed by this call
  std::vector<float> latents;   // [groups, head_dim] pre-RoPE latents L_g
};

// Working memory of the compressor, owned by the caller and reused between calls (resized to the
// call's shape: no allocation once a shape has been seen). Null: a local one per call.
struct CompressorScratch {
  std::vector<float> a, b;          // [pending + T, D] projections of the pending and new tokens
  std::vector<float> pool;          // [groups, r·8] softmax_pool_avx2 scratch, one slice per group
  std::vector<float> keys;          // [groups, index_dim] index keys being published
  std::vector<float> rotated;       // [D] one main row being published
};

// Feeds T tokens x[T, hidden] through the compressor: completes groups (returned) and leaves the
// remainder pending in `kv`. The caller validated shapes (check_attention_weights).
// Reference: scalar projections with double accumulation (gemm_f32_reference) and the scalar
// pooling loop. Fast: the projections by gemm_f32 (AVX2, threaded) and the pooling by
// compressor_pool_fast. They agree to float rounding (the projections); given the same
// projections the pooling agrees bit for bit. compressor_step picks one by ex.use_fast()
// (kernels/cpu/cpu_exec.h); the fast path threads on ex.pool.
// Each is chunking-invariant on its own: any split of the tokens over calls gives the same bits
// (gemm_f32's per-row summation order does not depend on the rows in a call).
// `out` may be reused between calls (its latents keep their storage).
void compressor_step_reference(const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
                               const float* x, int64_t T, CompressedGroups& out, CompressorScratch* scratch = nullptr);
void compressor_step_fast(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
                          const float* x, int64_t T, CompressedGroups& out, CompressorScratch* scratch = nullptr);
void compressor_step(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, KvSourceCache& kv,
                     const float* x, int64_t T, CompressedGroups& out, CompressorScratch* scratch = nullptr);

// The fast step with the new tokens' projections given instead of x: a = W_ckv x [T, D] and, for
// ratio ≥ 2, b = W_cg x [T, D] (b unused at ratio 1), as gemm_f32 computes them. A backend computes
// them for the rows of every decoding segment of a layer in one product (the same bits per row:
// gemm.h's order does not depend on the rows of a call), then steps each segment's own state.
// The same result as compressor_step_fast on those rows of x.
void compressor_step_projected(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w,
                               KvSourceCache& kv, const float* a, const float* b, int64_t T,
                               CompressedGroups& out, CompressorScratch* scratch = nullptr);

// The softmax-gated pooling of `groups` complete groups of r tokens (r ≥ 2), fp32, per channel c:
//   out[g, c] = Σ_j a[g·r+j, c] · softmax_j(b[g·r+j, c])      a, b [groups·r, D] → out [groups, D]
// The fast version (AVX2, threaded over groups; CPU with AVX2+FMA only) gives the reference's bits;
// scratch: [groups, r·8] floats (null: allocated for the call).
void compressor_pool_reference(const float* a, const float* b, int64_t groups, int r, int64_t D, float* out);
void compressor_pool_fast(const CpuExec& ex, const float* a, const float* b, int64_t groups, int r, int64_t D,
                          float* out, float* scratch = nullptr);

// Appends the main rows and index keys of `groups` to `kv` (groups.first_group must equal
// kv.entries()). The index-key projection is gemm_f32 on ex.pool (on either path).
void compressor_publish(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                        KvSourceCache& kv, const CompressedGroups& groups, CompressorScratch* scratch = nullptr);

}  // namespace dsv41
