// The attention of one layer as named steps, so that a batch of segments from many sequences can
// run the token-wise steps over all its rows at once and the sequence-wise steps per segment.
// Spec: model.md §3.4 (query path, window KV, compressor, indexer, sink attention, grouped
// output), §3.5 (windows cut at a replay start), §4 (cache formats).
//
//   1. attention_query      rows independent   c = RMSNorm_q(W_qa x) [n, q_lora]; q = RoPE(W_qb c) [n, H, D]
//   2. attention_window_kv  rows independent   kv = FP8QDQ(RoPE(RMSNorm_kv(W_kv x)))  [n, D]
//   3. compressor           per segment        compressor_step + compressor_publish (compressor.h)
//   4. attention_index      per segment        indexer scores → top-k (+ candidate pool), indexer.h
//   5. sparse_sink_attention per segment       o [T, H, D] over window ∪ selected compressed entries
//   6. attention_output     rows independent   out = W_ob · concat_g(W_oa[g] · heads of g) [n, hidden]
// then the segment's window rows enter its ring (attention_push_window).
// Which steps a layer runs (compress / index / read which kv source and top-k) is decided by the
// layer plan walk (layer_steps below, used by attention_forward and the engine alike).
// Rows of one call may belong to different sequences at different positions: the RoPE tables are
// per row (RopeRows). Every step's per-row arithmetic is independent of the other rows in the call,
// so a batched forward gives the same bits as one sequence at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/attention_amx.h"

#include "cache/sequence_cache.h"
#include "format/config.h"
#include "model/attention.h"
#include "model/indexer.h"
#include "plan/layer_plan.h"
#include "model/rope.h"

namespace dsv41 {

// What one layer's attention does, from its role alone (model.md §3.4 "Layer roles").
struct LayerSteps {
  bool compress = false;          // Full: feed the compressor, publish entries (becomes the latest kv)
  bool index = false;             // index source: a new top-k over the latest kv's index keys
  bool candidate_source = false;  // ... which also builds the candidate pool
  bool restricted = false;        // ... which scores only inside the latest candidate pool
  bool attend_compressed = false; // ratio > 0: attend the latest top-k's compressed entries
};
LayerSteps layer_steps(const LayerInfo& layer);

// Working memory of steps 4–6, owned by the caller (the CPU backend holds one) and reused between
// calls: every buffer is resized to the call's shape, so a decode step whose shape has been seen
// (and whose context grows within capacity) allocates nothing. Null: a local one per call.
struct AttentionScratch {
  IndexerScratch indexer;    // step 4
  std::vector<IndexerScratch> indexer_tasks;  // step 4, prefill: one per task of query rows
  std::vector<float> keys;   // step 5: [window keys, D] the segment's window rows, dequantised
  std::vector<float> ranges; // step 5: per range of work items, [k·D] selected entries + [window + k] logits
  std::vector<SinkTokenBuffers> tile_ranges;  // step 5 with AMX tiles: per range, the packed operands
  std::vector<uint16_t> win_bf16, table_bf16;  // step 5 with AMX tiles: the window keys and the entries as bf16
  std::vector<float> mid, gin, gout;  // step 6: [n, groups·o_lora], [n, H·D/groups], [n, o_lora] (×groups: decode)
};

// cos/sin tables of n rows at arbitrary positions: [n, rope_dim/2] each.
struct RopeRows {
  int64_t half = 0;  // rope_dim / 2
  std::vector<float> cos, sin;
  void compute(const Rope& rope, RopeKind kind, const int64_t* positions, int64_t n);
  const float* cos_row(int64_t i) const { return cos.data() + i * half; }
  const float* sin_row(int64_t i) const { return sin.data() + i * half; }
};

// Step 1. x [n, hidden] (attention input) → c [n, q_lora_rank], q [n, H·D] rotated by `rope`.
// rope_row0: the RoPE table row of x's first row (the rows may be a slice of a batch).
void attention_query(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const RopeRows& rope, const float* x,
                     int64_t n, float* c, float* q, int64_t rope_row0 = 0);

// Step 2. x [n, hidden] → kv [n, head_dim], rotated and FP8 fake-quantised (the window record's
// values).
void attention_window_kv(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const RopeRows& rope, const float* x,
                         int64_t n, float* kv, int64_t rope_row0 = 0);

// Steps 1 and 2 together, the same bits as attention_query then attention_window_kv: for a few
// rows (a decode step) W_qa x and W_kv x run in one parallel region (kernels/cpu/gemm_many.h).
void attention_query_and_window_kv(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w,
                                   const RopeRows& rope, const float* x, int64_t n, float* c, float* q, float* kv,
                                   int64_t rope_row0 = 0);

// Step 4. Runs the indexer of an index-source layer for one segment of T rows at positions
// start_pos… (c, x: the segment's rows) against `kv`, and publishes its top-k (and, at the
// candidate source, the pool) into `shared`. `restricted`: score only inside shared's pool.
void attention_index(const CpuExec& ex, const ModelConfig& config, const LayerInfo& layer, const AttentionWeights& w, const Rope& rope,
                     const KvSourceCache& kv, bool restricted, const float* c, const float* x, int64_t T,
                     int64_t start_pos, SharedAttentionState& shared, AttentionScratch* scratch = nullptr);

// Step 5. Sink attention of one segment: T query rows q [T, H·D] at positions start_pos…, keys
// = the ring's rows before start_pos (from max(ring.start(), start_pos − w + 1)) followed by the
// segment's own window rows kv [T, D], and the compressed entries of `compressed` named by topk
// [T, index_topk] (−1 = none; compressed may be null: window only). A query at t sees window keys
// [max(ring.start(), t − w + 1), t]. o [T, H·D], inverse-rotated by `rope` (the segment's rows).
// Runs on options.exec's pool (the result does not depend on the thread count).
void sparse_sink_attention(const ModelConfig& config, const AttentionWeights& w, const WindowRing& ring,
                           const float* kv, const KvSourceCache* compressed, const int32_t* topk, const float* q,
                           const RopeRows& rope, int64_t rope_row0, int64_t T, int64_t start_pos, float* o,
                           const AttentionOptions& options = {}, AttentionScratch* scratch = nullptr);

// Step 4 with the segment's index queries given: q [T, nh·dh] and head_weights [T, nh] as
// indexer_queries computes them (a backend computes them for the rows of all segments of a layer
// in one product: indexer_queries_at). attention_index = indexer_queries, then this.
void attention_index_with_queries(const CpuExec& ex, const ModelConfig& config, const LayerInfo& layer,
                                  const KvSourceCache& kv, bool restricted, const float* q, const float* head_weights,
                                  int64_t T, int64_t start_pos, SharedAttentionState& shared,
                                  AttentionScratch* scratch = nullptr);

// Step 6. o [n, H·D] → out [n, hidden] (block-diagonal W_oa per group, then W_ob).
void attention_output(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const float* o, int64_t n,
                      float* out, AttentionScratch* scratch = nullptr);

}  // namespace dsv41
