// The attention side of one backbone layer, with its per-sequence packed cache.
// Spec: model.md §3.4 (query path, window KV, sink attention, grouped output, layer roles),
// §3.5, §3.6 (RoPE per layer kind), §4 (cache formats), §9 (golden reference notes).
//
// attention_forward() processes T tokens at positions start_pos … start_pos+T−1 of one sequence
// (a prefill chunk of any size, or one decode step) causally, reading and updating that layer's
// part of the SequenceCache:
//   c   = RMSNorm_q(W_qa x)                       [T, q_lora_rank]  (also the indexer's query input)
//   q   = RoPE(W_qb c)                            [T, heads, head_dim]
//   kv  = FP8QDQ(RoPE(RMSNorm_kv(W_kv x)))        [T, head_dim]     → window ring (K = V)
//   Full layers: compressor → new compressed entries (NVFP4 main rows, MXFP4 index keys) and
//                indexer top-k (+ the candidate pool at the candidate source); they PUBLISH
//   Reindex:     indexer over the published keys (restricted to the pool after the source)
//   Reuse:       the published top-k unchanged
//   o   = sink attention over window ∪ selected compressed entries, inverse RoPE
//   out = W_ob · concat_g(W_oa[g] · heads of group g)        [T, hidden]
// The role of each layer comes only from its LayerInfo (plan/layer_plan.h).
//
// Numeric policy (fp32 engine): every activation is fp32; the only roundings are the cache
// fake-quantisers (FP8 window, NVFP4 main, MXFP4 index keys and indexer queries). This matches
// the f32 golden fixture, whose indexer scores and attention logits are fp32. Dot products run
// through kernels/cpu/attention_kernels.h (AVX2 float accumulation when available), so results
// agree with the scalar reference to float rounding. Each token's arithmetic does not depend on
// how the sequence is chunked (as long as gemm_f32 computes each row independently, as now).
// Top-k tie rule: larger score first, equal scores → lower entry index first (documented here
// because the golden reference's torch.topk leaves it unspecified; the fixtures have no ties).
// Decode follows the fixtures (model.md §9.8): every step scores against all index keys in the
// cache, not only when a compressor group completes as the release's own decode code does.
// Usage per forward call (one chunk through all layers): shared.begin_forward(start_pos, T), then
// attention_forward for layers 0, 1, … in order with the same start_pos and T.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "format/config.h"
#include "kernels/cpu/cpu_exec.h"
#include "plan/layer_plan.h"
#include "model/weight_matrix.h"
#include "model/rope.h"

namespace dsv41 {

class WeightRegistry;  // model/weights.h

// Float32 copies of one layer's attention tensors, release names `layers.i.attn.*` (model.md §2).
// Row-major [out, in] like the checkpoint (y = x · Wᵀ). Empty vectors for tensors the layer's role
// does not have.
struct AttentionWeights {
  int layer = -1;
  // Release-name prefix of the tensors: empty = "layers.<layer>.attn."; a DSpark stage's
  // attention is "mtp.<stage>.attn." (model/dspark_weights.h).
  std::string prefix;
  std::vector<float> wq_a;       // attn.wq_a.weight        [q_lora_rank, hidden]
  std::vector<float> q_norm;     // attn.q_norm.weight      [q_lora_rank]
  std::vector<float> wq_b;       // attn.wq_b.weight        [heads·head_dim, q_lora_rank]
  std::vector<float> wkv;        // attn.wkv.weight         [head_dim, hidden]
  std::vector<float> kv_norm;    // attn.kv_norm.weight     [head_dim]
  std::vector<float> wo_a;       // attn.wo_a.weight        [o_groups·o_lora_rank, heads·head_dim/o_groups]
  std::vector<float> wo_b;       // attn.wo_b.weight        [hidden, o_groups·o_lora_rank]
  std::vector<float> attn_sink;  // attn.attn_sink          [heads]
  // Full layers only.
  std::vector<float> compressor_wkv;    // attn.compressor.wkv.weight   [head_dim, hidden]
  std::vector<float> compressor_wgate;  // attn.compressor.wgate.weight [head_dim, hidden] (ratio > 1)
  std::vector<float> compressor_norm;   // attn.compressor.norm.weight  [head_dim]
  std::vector<float> indexer_wk;        // attn.indexer.wk.weight       [index_head_dim, head_dim]
  std::vector<float> indexer_k_norm;    // attn.indexer.k_norm.weight   [index_head_dim]
  // Index sources (Full and Reindex).
  std::vector<float> indexer_wq_b;          // attn.indexer.wq_b.weight         [idx_heads·idx_head_dim, q_lora_rank]
  std::vector<float> indexer_weights_proj;  // attn.indexer.weights_proj.weight [idx_heads, hidden]
  // The five big projections may instead be held as bf16 bits (Model::load, when every value is
  // bf16-exact: weight_matrix.h); a projection held here has an empty float32 vector above, so
  // check_attention_weights runs before the narrowing. attention_forward reads either.
  struct Bf16Projections {
    std::vector<uint16_t> wq_a, wq_b, wkv, wo_a, wo_b;
  } bf16;
  // Or, with ModelLoadOptions::weights == kStored, the checkpoint's own FP8 bytes (weight_matrix.h):
  // a view set here (codes != null) replaces the float32 vector above, which stays empty; the
  // indexer's wq_b too.
  QuantWeights quant_wq_a, quant_wq_b, quant_wkv, quant_wo_a, quant_wo_b, quant_indexer_wq_b;
};

// The attention tensors of a layer: release-name suffix (after "layers.<i>.attn."), the field
// that holds it, and its element count for this layer's role (0 = must be absent).
struct AttentionTensor {
  const char* name;
  std::vector<float> AttentionWeights::*field;
  int64_t size;
  QuantWeights AttentionWeights::*quant = nullptr;  // where a stored FP8 view may go instead
};
std::vector<AttentionTensor> attention_tensors(const ModelConfig& config, const LayerInfo& layer);

// Checks every tensor the layer's role needs is present with the size the config implies, and
// that no unexpected one is; the message names the tensor (release name) and both sizes.
Status check_attention_weights(const AttentionWeights& w, const ModelConfig& config, const LayerInfo& layer);

// Loads `layers.<i>.attn.*` from the registry (either naming scheme), dequantised to float32, or,
// when `stored`, the FP8 projections as views into the mapping (never widened; the registry must
// outlive the weights).
// prefix: as AttentionWeights::prefix (empty = the backbone layer's).
Result<AttentionWeights> load_attention_weights(const WeightRegistry& registry, const ModelConfig& config,
                                                const LayerInfo& layer, bool stored = false,
                                                const std::string& prefix = {});

// State shared between the layers of ONE forward call (one chunk through all layers). Full layers
// publish, Reindex layers re-score, Reuse layers read. Call begin_forward() before layer 0.
struct SharedAttentionState {
  int64_t start_pos = 0, tokens = 0;

  // Latest published compressed KV: the kv-source layer whose cache holds it, and its entry count
  // after this chunk (−1 / 0 before any Full layer ran in this forward).
  int kv_layer = -1;
  int64_t entries = 0;

  // Latest top-k (from the latest index source): [tokens, index_topk] compressed entry indices,
  // ascending, −1 padded. index_layer = −1: none yet (then no compressed entry is attended).
  int index_layer = -1;
  std::vector<int32_t> topk;

  // Candidate pool of the candidate source: per token the kept block ids, [tokens, topk_blocks],
  // ascending, −1 padded (blocks of candidate_block_size entries). Valid when candidate_layer ≥ 0.
  int candidate_layer = -1;
  std::vector<int32_t> candidate_blocks;

  // Optional trace for dumps and golden tests (costs [tokens, entries] memory when on).
  bool record_trace = false;
  std::vector<float> trace_index_scores;    // [tokens, entries] of the latest index source (−inf = masked)
  std::vector<uint8_t> trace_candidates;    // [tokens, entries] pool of the candidate source (1 = in)

  // Rows of the segment (0-based) where the arrays above start: with per-layer position ranges
  // (plan/replay_rule.h) a layer may run only the segment's later rows; call_row0 is the first row
  // of the current attention_index call (set by its caller), topk_row0 / candidate_row0 the first
  // rows of the published top-k / pool.
  int64_t call_row0 = 0, topk_row0 = 0, candidate_row0 = 0;

  void begin_forward(int64_t start_pos_, int64_t tokens_);
};

// Execution knobs (not semantics: every setting gives the same result, except exec.fast, which
// picks the compressor's fast path or its scalar reference: compressor.h).
struct AttentionOptions {
  // How many ranges the sink-attention core is split into, run on exec.pool (so at most its
  // thread count at once): 0 = one per pool thread, used only when the chunk has enough work;
  // n > 0 = exactly n ranges (capped at tokens × heads).
  int threads = 0;
  // The pool and path every product and block of the layer runs on (kernels/cpu/cpu_exec.h); its
  // pool must outlive the call.
  CpuExec exec = CpuExec::serial();
};

// One layer's attention over T tokens at positions start_pos…start_pos+T−1.
//   x:   [T, hidden] — the layer's attention input, already RMSNorm_attn'd (fp32)
//   out: [T, hidden] — attention output (may not alias x)
// Requires start_pos == cache.window(layer.index).length() (every layer sees every position once,
// in order), T ≥ 1, start_pos + T ≤ cache.max_context(), and `shared` begun for this chunk. On any
// error nothing is modified. The weights must have passed check_attention_weights.
// Working memory is O(T · heads · head_dim) floats (128 MiB per 1024 tokens at V4.1 geometry)
// plus O(32 · entries) for indexer scores: callers bound T by chunking long prefills.
Status attention_forward(const ModelConfig& config, const LayerInfo& layer, const AttentionWeights& w,
                         const Rope& rope, SharedAttentionState& shared, SequenceCache& cache, const float* x,
                         int64_t T, int64_t start_pos, float* out, const AttentionOptions& options = {});

}  // namespace dsv41
