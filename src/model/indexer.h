// The sparse indexer of an index-source layer: which compressed entries each query attends.
// Spec: model.md §3.4 "Indexer" and "Hierarchical candidates"; §9 (golden reference).
//
// For the query at position t (c_t = the q low-rank latent, x_t = the attention input):
//   q^I_h   = MXFP4QDQ(RoPE_compress(W^I_qb c_t))_h         [index_n_heads, index_head_dim]
//   w_h     = (W_w x_t)_h · index_n_heads^-1/2
//   score(g) = Σ_h w_h · (ReLU(q^I_h · I_g) · index_head_dim^-1/2)     (fp32, in this order; the
//              dot exact per 32-channel block: kernels/cpu/index_score.h)
//   visible: g < ⌊(t+1)/r⌋, otherwise −inf
// Candidate pool (candidate source): block score = max over candidate_block_size entries (−inf
// padding), the block of the newest visible entry pinned to +inf, the top candidate_topk_blocks
// blocks with a score > −inf kept. Restricted index sources set −inf outside the pool.
// Top-k: the min(index_topk, G) largest scores, −inf picks dropped, ascending by entry, −1 padded.
// Tie rule (both selections): larger value first, equal values → lower index first.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/sequence_cache.h"
#include "format/config.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/index_score_int.h"
#include "model/attention.h"
#include "model/rope.h"

namespace dsv41 {

// Working memory of the indexer, owned by the caller and reused between calls (resized to the
// call's shape: no allocation once a shape has been seen, the context growing within capacity).
// Null: a local one per call.
struct IndexerScratch {
  std::vector<float> q, head_weights;      // [T, nh·dh], [T, nh] (attention_index)
  std::vector<float> scores;               // [rows, G] one block of query rows (attention_index)
  std::vector<int32_t> topk, blocks_kept;  // [T, k], [T, topk_blocks]: swapped into the shared state
  std::vector<float> key, key_t;           // [16, dh] one tile of unpacked keys, and transposed
  IndexQueryInts query_ints;               // the call's query rows as integers (index_score_int.h)
  IndexKeyTileInts key_ints;               // one tile of keys as integers, from their records
  std::vector<float> cos, sin;             // [rope_dim/2] of one query position
  std::vector<float> block_scores;         // [blocks] candidate block scores of one row
  std::vector<std::pair<float, int32_t>> heap;  // [k] or [topk_blocks] the best so far (selection)
  std::vector<float> select_values;             // [≤ G] the pickable values of one row (selection)
};

// Index queries and head weights of T tokens: q [T, nh·dh] (rotated + MXFP4 fake-quantised),
// head_weights [T, nh] (already × nh^-1/2). c: [T, q_lora_rank], x: [T, hidden]. The two
// projections are gemm_f32 on ex.pool.
void indexer_queries(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                     const float* c, const float* x, int64_t T, int64_t start_pos, std::vector<float>& q,
                     std::vector<float>& head_weights, IndexerScratch* scratch = nullptr);
// The same for T rows at arbitrary positions (rows of many segments: one product for all), into
// q [T, nh·dh] and head_weights [T, nh]. Row by row the same bits as indexer_queries (the
// products' per-row arithmetic does not depend on the other rows: kernels/cpu/gemm.h).
void indexer_queries_at(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                        const float* c, const float* x, int64_t T, const int64_t* positions, float* q,
                        float* head_weights, IndexerScratch* scratch = nullptr);

// scores[rows, G] for query rows [row0, row0+rows) of the chunk against entries [0, G) of `kv`,
// with visibility applied (ratio = the index layer's compress ratio).
// The dot products and the head sum follow kernels/cpu/index_score.h (exact per 32-channel
// block), so every ISA gives the same bits; `isa` picks the loop (capped by the CPU's).
void indexer_scores(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                    const float* head_weights, int64_t row0, int64_t rows, int64_t start_pos, float* scores,
                    IndexerScratch* scratch = nullptr, CpuIsa isa = CpuIsa::kAvx512);
// Query rows [row0, row0 + rows) of q as integers in ws.query_ints (index_score_int.h), made once
// for many calls below; false where they cannot take the integer path (then pass null).
bool indexer_query_ints(const ModelConfig& config, const float* q, int64_t row0, int64_t rows, CpuIsa isa,
                        IndexerScratch& ws);
// The same scores for entries [g_begin, g_end) only (g_begin a multiple of kIndexKeyTile), the
// queries' integers made beforehand (indexer_query_ints; null: the float path): each tile of 16
// keys is scored on its own, so ranges scored apart (in parallel, each with its own scratch ws)
// give indexer_scores' bits.
void indexer_score_tiles(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int64_t g_begin, int64_t g_end,
                         int ratio, const float* q, const float* head_weights, int64_t row0, int64_t rows,
                         int64_t start_pos, float* scores, const IndexQueryInts* query_ints, IndexerScratch& ws,
                         CpuIsa isa);

// The same scores for ONE query row (chunk row i) but only inside the candidate pool `kept`
// (ascending block ids, −1 padded, blocks of block_size entries); every other entry is −inf.
// Equal, entry for entry, to indexer_scores followed by masking outside the pool, at the cost of
// the pool instead of the whole context (restricted index sources).
void indexer_scores_in_pool(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                            const float* head_weights, int64_t i, int64_t start_pos, const int32_t* kept,
                            int topk_blocks, int block_size, float* row, IndexerScratch* scratch = nullptr,
                            CpuIsa isa = CpuIsa::kAvx512);
// The same scores for the pool's blocks kept[j_begin … j_end) only, written into `row` (which the
// caller filled with −inf first), the row's integers made beforehand (indexer_query_ints for row
// i; null where there are none or nothing is visible): blocks scored apart give
// indexer_scores_in_pool's bits.
void indexer_score_pool_blocks(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                               const float* head_weights, int64_t i, int64_t start_pos, const int32_t* kept,
                               int j_begin, int j_end, int block_size, float* row, const IndexQueryInts* query_ints,
                               IndexerScratch& ws, CpuIsa isa);

// Candidate blocks of one score row: kept[topk_blocks] ascending block ids, −1 padded.
// visible = ⌊(t+1)/r⌋ (its newest block is pinned).
void select_candidate_blocks(const float* scores, int64_t G, int64_t visible, int block_size, int topk_blocks,
                             int32_t* kept, IndexerScratch* scratch = nullptr);

// Top-k of one score row: out[k] ascending entry ids, −1 padded (k = index_topk).
void select_topk(const float* scores, int64_t G, int k, int32_t* out, IndexerScratch* scratch = nullptr);

}  // namespace dsv41
