// CUDA (Hopper, sm_90a) kernels over the packed cache records: the C++ API.
// Spec: ../shared/spec/model.md §3.4 (sparse sink attention, indexer, top-k) and §4 (records).
//
// A plain C++ header (no CUDA headers): every entry point takes raw DEVICE pointers, a params
// struct and a stream, enqueues its kernels and returns. Kernels never allocate: scratch space
// comes from the caller as a workspace whose size the matching *_workspace_bytes function gives.
// Pointers are borrowed for the call; the memory must stay valid until the stream has run the
// work. Errors are values: a bad argument or a failed launch comes back as a Status naming the
// call; nothing runs when the arguments are refused.
//
// Record layouts are those of cache/records.h (528 B FP8 window rows, 288 B NVFP4 main rows,
// 68 B MXFP4 index rows at V4.1 widths); the device codecs agree with the CPU ones bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "cache/records.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;  // the same type cuda_runtime.h declares

namespace dsv41::cuda {

// ---- Devices --------------------------------------------------------------------------------
// Number of CUDA devices; an error when the runtime cannot answer (no driver, no device).
Result<int> device_count();
// "NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" for device `device`.
Result<std::string> device_summary(int device);
// The current device's copy bandwidth in bytes per second, counted as bytes read + bytes written
// (the convention of docs/CUDA.md's "copy rate"): the best of `passes` device-to-device copies of
// `bytes` after one unmeasured copy. What a decode step that streams its weights can at most read.
Result<double> copy_bandwidth(int64_t bytes, int passes);

// ---- Record codecs (a) ------------------------------------------------------------------------
// rows records of `kind` with `channels` channels each: x/out [rows, channels] fp32,
// records [rows, row_bytes(kind, channels)] packed back to back. Bit-identical to row_pack /
// row_unpack of cache/records.h (NaN/Inf blocks included).
Status rows_pack(RowKind kind, const float* x, int64_t rows, int channels, uint8_t* records, cudaStream_t stream);
Status rows_unpack(RowKind kind, const uint8_t* records, int64_t rows, int channels, float* out,
                   cudaStream_t stream);

// ---- Sparse sink attention for decode (b) ------------------------------------------------------
// For each query token i (one per sequence in decode) and head h:
//   keys  = window rows of positions max(0, t−window+1)..t (ring slot = position mod window)
//           ∪ the main rows topk_ids[i, j] ≥ 0 (−1 = absent)        K = V, [head_dim] each
//   s_k   = (q_{i,h} · K_k) · head_dim^-1/2;  m = max(sink_h, max_k s_k)
//   o     = Σ_k exp(s_k − m) K_k / (Σ_k exp(s_k − m) + exp(sink_h − m))
// The token's own window row (position t) must already be in its ring. The inverse RoPE of the
// output stays outside the kernel (the engine applies it with the output projection's input).
// Arithmetic: keys decode exactly to bf16; q·K on tensor cores with q split into bf16 high +
// low parts (≈16 significant bits, fp32 accumulation); probabilities rounded to bf16 for the
// value sum (as the reference kernel does, model.md §3.4), the denominator summed in fp32.
struct SparseAttentionParams {
  int tokens = 0;     // T query tokens
  int heads = 0;      // H (any count; processed in groups of 16)
  int head_dim = 0;   // D: 64 or 512
  int window = 0;     // ring slots per sequence (sliding_window)
  int topk = 0;       // selected compressed entries per token (index_topk); 0 = window only
  const float* q = nullptr;                        // [T, H, D] fp32, RoPE applied
  const float* sink = nullptr;                     // [H] attention sink logits
  const int64_t* positions = nullptr;              // [T] position t of each token
  const uint8_t* const* window_rings = nullptr;    // [T] ring of the token's sequence: [window, 528 B]
  const uint8_t* const* main_rows = nullptr;       // [T] main records of its kv source: [G, 288 B]
  const int32_t* topk_ids = nullptr;               // [T, topk] entry ids, −1 padded (null if topk 0)
  float* out = nullptr;                            // [T, H, D] fp32
};
Status sparse_attention_decode(const SparseAttentionParams& p, cudaStream_t stream);

// ---- Indexer scoring + top-k (c) ---------------------------------------------------------------
// For each query token i at position t with visible = ⌊(t+1)/ratio⌋ entries (capped at entries[i]):
//   score(g) = Σ_h w_h · ReLU(q_h · I_g) · index_head_dim^-1/2    for visible g (others −inf)
// then the min(k, visible) largest (ties: lower entry first), ascending by entry, −1 padded.
// q is given as packed MXFP4 index rows (the query is fake-quantised to MXFP4 by the model, so
// packing it is exact); keys are the kv source's index rows. When `pool_blocks` is set, only the
// entries of those blocks are scored (restricted index sources, model.md §3.4 hierarchical
// candidates); everything else is −inf.
// Arithmetic: each 32-channel block's q·I partial is exact (E2M1 codes placed in E4M3 bits,
// FP8 warpgroup MMAs, whose fp32 sums of one block's integer-valued products are exact), the
// key block scales, ReLU, weights and head sum in fp32; q's block scales are folded into its
// E4M3 values relative to the head's largest block (exact when every block is within 2^14 of
// it; otherwise the query is scored on fp16 tensor cores, exact within 2^22). So scores agree
// with a float64 reference to float rounding, and top-k equals the exact top-k of these scores.
// Never writes a [T, G] score matrix: each block of `chunk` entries keeps its own top-k in
// shared memory and writes k candidates; a second kernel merges them per token.
struct IndexerParams {
  int tokens = 0;            // T query tokens
  int heads = 0;             // index_n_heads   } built: 32 × 128 (V4.1-Flash, model.md §1.2)
  int head_dim = 0;          // index_head_dim  }        and 8 × 64 (tiny test shapes)
  int k = 0;                 // index_topk (≤ 2048)
  int ratio = 1;             // compress ratio of the layer (visibility)
  const uint8_t* q = nullptr;                    // [T, heads] index rows (68 B at dim 128)
  const float* head_weights = nullptr;           // [T, heads] w_h (already × heads^-1/2)
  const int64_t* positions = nullptr;            // [T]
  const int64_t* entries = nullptr;              // [T] entries published in the token's cache
  // [T] index rows of the token's kv source, 16-byte aligned; rows past entries[i] are never read.
  const uint8_t* const* keys = nullptr;
  const int32_t* pool_blocks = nullptr;          // [T, pool_size] ascending block ids, −1 padded; or null
  int pool_size = 0;                             // blocks per token in pool_blocks
  int pool_block_size = 0;                       // entries per block (a power of two ≥ 4 at dim 128)
  int pool_block_shift = 0;                      // set by indexer_topk (log2 of pool_block_size)
  int64_t max_entries = 0;                       // bound on visible entries (sizes the grid)
  int32_t* topk = nullptr;                       // [T, k] out
  float* scores_debug = nullptr;                 // optional [T, max_entries] scores (tests only)
  // Candidate source (layer 20, dense only): optional [T, ceil(max_entries / candidate_block)]
  // block maxima of the scores (−inf where nothing is visible, the block of the newest visible
  // entry +inf). The candidate pool is then topk_rows(block_max, ..., candidate_topk_blocks):
  // ascending block ids, −1 padded, −inf blocks dropped, as select_candidate_blocks.
  float* block_max = nullptr;
  int candidate_block = 0;                       // entries per block (power of two ≤ 8192)
};
// Workspace bytes for these params (per-chunk candidates and per-token selection floors, which
// indexer_topk clears with a cudaMemsetAsync on the stream before its kernels).
size_t indexer_workspace_bytes(const IndexerParams& p);
Status indexer_topk(const IndexerParams& p, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Top-k of given fp32 score rows with the same selection code (tests, and score rows computed
// elsewhere): scores [T, n], out [T, k] ascending, −1 padded, −inf never selected.
size_t topk_rows_workspace_bytes(int tokens, int64_t n, int k);
Status topk_rows(const float* scores, int tokens, int64_t n, int k, int32_t* out, void* workspace,
                 size_t workspace_bytes, cudaStream_t stream);

}  // namespace dsv41::cuda
