// The named steps of one layer's attention (see attention_steps.h). Spec: model.md §3.4–§3.6, §4.
#include "model/attention_steps.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <span>

#include "base/thread_pool.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/gemm_amx.h"
#include "model/indexer.h"
#include "model/rmsnorm.h"
#include "model/selected_rows.h"
#include "model/weight_matrix.h"

namespace dsv41 {
namespace {

// Query rows scored together by the indexer (each unpacked key is reused across them), bounded so
// the [rows, G] score buffer stays ≤ 2^22 floats (16 MiB) however long the context.
constexpr int64_t kIndexerRowBlock = 256;
constexpr int64_t kIndexerTaskRows = 16;  // query rows per parallel task of the indexer
// A block of query rows too few for a task each (decode: one row) scores its keys in parallel
// instead, in ranges of whole key tiles, once the rows see at least this many entries: at 64K
// dsv41-mini's decode spent half a token in one thread's scoring (docs/BENCHMARKS.md "Session 30").
constexpr int64_t kParallelScoreEntries = 1024;
constexpr int64_t kScoreTilesPerTask = 16;  // key tiles (of kIndexKeyTile) per parallel task
constexpr int64_t kIndexerScoreFloats = int64_t{1} << 22;
// Output groups whose wo_a products a decode step runs in one region (a table on the stack).
constexpr int64_t kMaxOutputGroups = 64;

}  // namespace

LayerSteps layer_steps(const LayerInfo& layer) {
  LayerSteps s;
  s.compress = layer.role == LayerRole::kFull;
  s.index = layer.role == LayerRole::kFull || layer.role == LayerRole::kReindex;
  s.candidate_source = s.index && layer.candidate_source;
  s.restricted = s.index && layer.restricted_to_candidates;
  s.attend_compressed = layer.ratio > 0;
  return s;
}

void RopeRows::compute(const Rope& rope, RopeKind kind, const int64_t* positions, int64_t n) {
  half = rope.rope_dim() / 2;
  cos.resize(static_cast<size_t>(n * half));
  sin.resize(static_cast<size_t>(n * half));
  for (int64_t i = 0; i < n; ++i) rope.cos_sin(kind, positions[i], cos.data() + i * half, sin.data() + i * half);
}

namespace {

// Step 1 after c = W_qa x: the norm, q = W_qb c and RoPE.
void query_from_c(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const RopeRows& rope,
                  int64_t n, float* c, float* q, int64_t rope_row0) {
  const int64_t H = config.num_attention_heads, D = config.head_dim;
  const int64_t ql = config.q_lora_rank;
  const int rd = static_cast<int>(rope.half * 2);
  rmsnorm_rows(c, n, ql, w.q_norm.data(), config.rms_norm_eps, c);
  matmul(ex, c, n, ql, weight_ref(w.wq_b, w.bf16.wq_b, w.quant_wq_b), H * D, q);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h) rope_rotate(q + (i * H + h) * D, D, rd, rope.cos_row(rope_row0 + i), rope.sin_row(rope_row0 + i), false);
}

// Step 2 after kv = W_kv x: the norm, RoPE and the FP8 fake quantisation.
void window_kv_from_projection(const ModelConfig& config, const AttentionWeights& w, const RopeRows& rope, int64_t n,
                               float* kv, int64_t rope_row0) {
  const int64_t D = config.head_dim;
  const int rd = static_cast<int>(rope.half * 2);
  rmsnorm_rows(kv, n, D, w.kv_norm.data(), config.rms_norm_eps, kv);
  for (int64_t i = 0; i < n; ++i) {
    rope_rotate(kv + i * D, D, rd, rope.cos_row(rope_row0 + i), rope.sin_row(rope_row0 + i), false);
    row_fake_quant(RowKind::kWindow, kv + i * D, D);
  }
}

}  // namespace

void attention_query(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const RopeRows& rope,
                     const float* x, int64_t n, float* c, float* q, int64_t rope_row0) {
  matmul(ex, x, n, config.hidden_size, weight_ref(w.wq_a, w.bf16.wq_a, w.quant_wq_a), config.q_lora_rank, c);
  query_from_c(ex, config, w, rope, n, c, q, rope_row0);
}

void attention_window_kv(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const RopeRows& rope,
                         const float* x, int64_t n, float* kv, int64_t rope_row0) {
  matmul(ex, x, n, config.hidden_size, weight_ref(w.wkv, w.bf16.wkv, w.quant_wkv), config.head_dim, kv);
  window_kv_from_projection(config, w, rope, n, kv, rope_row0);
}

void attention_query_and_window_kv(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w,
                                   const RopeRows& rope, const float* x, int64_t n, float* c, float* q, float* kv,
                                   int64_t rope_row0) {
  if (n > kGemmManyMaxRows) {
    attention_query(ex, config, w, rope, x, n, c, q, rope_row0);
    attention_window_kv(ex, config, w, rope, x, n, kv, rope_row0);
    return;
  }
  // W_qa x and W_kv x in one parallel region: the same products, so the same bits.
  const WeightRef wq_a = weight_ref(w.wq_a, w.bf16.wq_a, w.quant_wq_a), wkv = weight_ref(w.wkv, w.bf16.wkv, w.quant_wkv);
  const GemmJob jobs[2] = {gemm_job(x, n, config.hidden_size, wq_a, config.q_lora_rank, c),
                           gemm_job(x, n, config.hidden_size, wkv, config.head_dim, kv)};
  gemm_many(ex, jobs);
  query_from_c(ex, config, w, rope, n, c, q, rope_row0);
  window_kv_from_projection(config, w, rope, n, kv, rope_row0);
}

void attention_index(const CpuExec& ex, const ModelConfig& config, const LayerInfo& layer, const AttentionWeights& w, const Rope& rope,
                     const KvSourceCache& kv, bool restricted, const float* c, const float* x, int64_t T,
                     int64_t start_pos, SharedAttentionState& shared, AttentionScratch* scratch) {
  const int64_t G = kv.entries();
  const int k = config.index_topk;
  if (G == 0) {
    // Nothing to select from yet. The reference publishes nothing; an all −1 top-k attends the
    // same (no compressed entry) and keeps `shared.topk` meaningful for every later layer.
    shared.index_layer = layer.index;
    shared.topk.assign(static_cast<size_t>(T * k), -1);
    shared.topk_row0 = shared.call_row0;
    if (shared.record_trace) shared.trace_index_scores.clear();
    return;
  }
  AttentionScratch local;
  AttentionScratch& as = scratch ? *scratch : local;
  IndexerScratch& ws = as.indexer;
  indexer_queries(ex, config, w, rope, c, x, T, start_pos, ws.q, ws.head_weights, &ws);
  attention_index_with_queries(ex, config, layer, kv, restricted, ws.q.data(), ws.head_weights.data(), T, start_pos,
                               shared, &as);
}

namespace {

// Scores a block of few query rows [row0, row0 + rows) into scores [rows, G] in parallel over the
// keys: whole key tiles a task (a restricted layer: each row's pool blocks, a range a task), each
// task with its own scratch — every tile is scored as the serial loop scores it, so the bits are
// indexer_scores' (indexer_scores_in_pool's). False, nothing done, where the rows see fewer than
// kParallelScoreEntries entries (a task would cost more than it saves).
bool score_in_parallel(const CpuExec& ex, const ModelConfig& config, const LayerInfo& layer, const KvSourceCache& kv,
                       int64_t G, bool restricted, const float* q, const float* head_weights, int64_t row0,
                       int64_t rows, int64_t start_pos, const SharedAttentionState& shared, float* scores,
                       IndexerScratch& ws, std::vector<IndexerScratch>& task_scratch, CpuIsa isa) {
  const int nb = config.candidate_topk_blocks, bs = config.candidate_block_size;
  // Two ranges a thread: few enough that a task's fixed cost (a wake-up, its first cold tiles)
  // stays small against its keys.
  const auto grain_for = [&](int64_t units, int64_t least) {
    return std::max<int64_t>(least, (units + 2 * ex.threads() - 1) / (2 * ex.threads()));
  };
  const auto scratch_for = [&](int64_t units, int64_t grain) {
    const int64_t tasks = (units + grain - 1) / grain;
    if (static_cast<int64_t>(task_scratch.size()) < tasks) task_scratch.resize(static_cast<size_t>(tasks));
  };
  if (!restricted) {
    if (std::min<int64_t>(G, (start_pos + row0 + rows) / layer.ratio) < kParallelScoreEntries) return false;
    const IndexQueryInts* ints = indexer_query_ints(config, q, row0, rows, isa, ws) ? &ws.query_ints : nullptr;
    const int64_t tiles = (G + kIndexKeyTile - 1) / kIndexKeyTile, grain = grain_for(tiles, kScoreTilesPerTask);
    scratch_for(tiles, grain);
    ex.parallel_for(tiles, grain, [&](int64_t b, int64_t e) {
      indexer_score_tiles(config, kv, G, b * kIndexKeyTile, std::min<int64_t>(e * kIndexKeyTile, G), layer.ratio, q,
                          head_weights, row0, rows, start_pos, scores, ints,
                          task_scratch[static_cast<size_t>(b / grain)], isa);
    });
    return true;
  }
  const int32_t* first = shared.candidate_blocks.data() + (shared.call_row0 - shared.candidate_row0 + row0) * nb;
  if (int64_t(std::find(first, first + nb, -1) - first) * bs < kParallelScoreEntries) return false;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = row0 + r;
    const int32_t* kept = shared.candidate_blocks.data() + (shared.call_row0 - shared.candidate_row0 + i) * nb;
    const int count = static_cast<int>(std::find(kept, kept + nb, -1) - kept);
    float* row = scores + r * G;
    std::fill(row, row + G, -std::numeric_limits<float>::infinity());
    const bool visible = std::min<int64_t>(G, (start_pos + i + 1) / layer.ratio) > 0;
    const IndexQueryInts* ints = visible && indexer_query_ints(config, q, i, 1, isa, ws) ? &ws.query_ints : nullptr;
    const int64_t grain = grain_for(count, std::max<int64_t>(1, kScoreTilesPerTask * kIndexKeyTile / bs));
    scratch_for(count, grain);
    ex.parallel_for(count, grain, [&](int64_t b, int64_t e) {
      indexer_score_pool_blocks(config, kv, G, layer.ratio, q, head_weights, i, start_pos, kept, static_cast<int>(b),
                                static_cast<int>(e), bs, row, ints, task_scratch[static_cast<size_t>(b / grain)], isa);
    });
  }
  return true;
}

}  // namespace

void attention_index_with_queries(const CpuExec& ex, const ModelConfig& config, const LayerInfo& layer,
                                  const KvSourceCache& kv, bool restricted, const float* q, const float* head_weights,
                                  int64_t T, int64_t start_pos, SharedAttentionState& shared,
                                  AttentionScratch* scratch) {
  const int64_t G = kv.entries();
  const int k = config.index_topk;
  if (G == 0) {  // attention_index's case (a caller may come here directly)
    shared.index_layer = layer.index;
    shared.topk.assign(static_cast<size_t>(T * k), -1);
    shared.topk_row0 = shared.call_row0;
    if (shared.record_trace) shared.trace_index_scores.clear();
    return;
  }
  AttentionScratch local;
  IndexerScratch& ws = (scratch ? *scratch : local).indexer;

  const int nb = config.candidate_topk_blocks, bs = config.candidate_block_size;
  restricted = restricted && shared.candidate_layer >= 0;
  // Built in the scratch, then swapped into `shared` (its old storage comes back for next time).
  std::vector<int32_t>& topk = ws.topk;
  topk.resize(static_cast<size_t>(T * k));
  std::vector<int32_t>& blocks_kept = ws.blocks_kept;
  if (layer.candidate_source) blocks_kept.resize(static_cast<size_t>(T * nb));
  if (shared.record_trace) {
    shared.trace_index_scores.assign(static_cast<size_t>(T * G), 0.0f);
    if (layer.candidate_source) shared.trace_candidates.assign(static_cast<size_t>(T * G), 0);
  }
  std::vector<float>& scores = ws.scores;
  const int64_t row_block = std::clamp<int64_t>(kIndexerScoreFloats / G, 1, kIndexerRowBlock);
  // The buffers sized by the entry count get room for every entry the kv source's pages can hold,
  // so as the context grows they grow only in a step that takes a new page (engine.h).
  const int64_t room = kv.main.pages() * kv.main.rows_per_page();
  scores.reserve(static_cast<size_t>(std::min(row_block, T) * room));
  ws.heap.reserve(static_cast<size_t>(std::max(k, nb)));
  ws.block_scores.reserve(static_cast<size_t>(room / bs + 1));
  ws.select_values.reserve(static_cast<size_t>(room));
  const CpuIsa isa = ex.use_fast() ? ex.gemm_isa() : CpuIsa::kPortable;
  AttentionScratch& as = scratch ? *scratch : local;
  for (int64_t row0 = 0; row0 < T; row0 += row_block) {
    const int64_t rows = std::min(row_block, T - row0);
    scores.resize(static_cast<size_t>(rows * G));
    // Rows [b, e) of this block: their scores (a restricted layer scores only inside the pool,
    // ≤ topk_blocks·block_size entries per query), candidate blocks and top-k. Rows are
    // independent, so tasks of rows run in parallel; a block of few rows (decode: one row) has
    // its scores made in parallel over key tiles first (scored), then the rest on the caller.
    const int64_t tasks = (rows + kIndexerTaskRows - 1) / kIndexerTaskRows;
    const bool scored = tasks == 1 && ex.threads() > 1 &&
                        score_in_parallel(ex, config, layer, kv, G, restricted, q, head_weights, row0, rows, start_pos,
                                          shared, scores.data(), ws, as.indexer_tasks, isa);
    auto run_rows = [&](int64_t b, int64_t e, IndexerScratch& ts) {
      if (!restricted && !scored)
        indexer_scores(config, kv, G, layer.ratio, q, head_weights, row0 + b, e - b, start_pos,
                       scores.data() + b * G, &ts, isa);
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = row0 + r, t = start_pos + i;
        float* row = scores.data() + r * G;
        if (restricted) {
          if (!scored)
            indexer_scores_in_pool(config, kv, G, layer.ratio, q, head_weights, i, start_pos,
                                   shared.candidate_blocks.data() + (shared.call_row0 - shared.candidate_row0 + i) * nb,
                                   nb, bs, row, &ts, isa);
        } else if (layer.candidate_source) {
          int32_t* kept = blocks_kept.data() + i * nb;
          select_candidate_blocks(row, G, (t + 1) / layer.ratio, bs, nb, kept, &ts);
          if (shared.record_trace) {
            uint8_t* cand = shared.trace_candidates.data() + i * G;
            for (int j = 0; j < nb && kept[j] >= 0; ++j)
              for (int64_t g = int64_t{kept[j]} * bs; g < std::min<int64_t>(G, int64_t{kept[j] + 1} * bs); ++g)
                cand[g] = 1;
          }
        }
        if (shared.record_trace) std::copy(row, row + G, shared.trace_index_scores.begin() + i * G);
        select_topk(row, G, k, topk.data() + i * k, &ts);
      }
    };
    if (tasks == 1 || ex.threads() == 1) {
      run_rows(0, rows, ws);
      continue;
    }
    if (static_cast<int64_t>(as.indexer_tasks.size()) < tasks) as.indexer_tasks.resize(static_cast<size_t>(tasks));
    ex.parallel_for(rows, kIndexerTaskRows, [&](int64_t b, int64_t e) {
      run_rows(b, e, as.indexer_tasks[static_cast<size_t>(b / kIndexerTaskRows)]);
    });
  }
  shared.index_layer = layer.index;
  shared.topk.swap(topk);
  shared.topk_row0 = shared.call_row0;
  if (layer.candidate_source) {
    shared.candidate_layer = layer.index;
    shared.candidate_blocks.swap(blocks_kept);
    shared.candidate_row0 = shared.call_row0;
  }
}

namespace {

// Unpacks the main rows that topk [T, k] selects from `source` into `held`, unless it holds them
// already (see selected_rows.h).
void hold_selected_rows(const KvSourceCache& source, const int32_t* topk, int64_t T, int k, int64_t D,
                        int64_t start_pos, SelectedRows& held) {
  const size_t n = static_cast<size_t>(T * k);
  if (held.source == &source && held.entries == source.entries() && held.start_pos == start_pos && held.rows == T &&
      std::equal(topk, topk + n, held.topk.begin()))
    return;
  held.topk.assign(topk, topk + n);
  held.count.resize(static_cast<size_t>(T));
  held.values.resize(n * static_cast<size_t>(D));
  size_t cells = 16;
  while (cells < 2 * n) cells *= 2;
  held.unpacked_entry.assign(cells, -1);  // no allocation once the shape has been seen
  held.unpacked_slot.resize(cells);
  const size_t mask = cells - 1;
  for (int64_t i = 0; i < T; ++i) {
    int nsel = 0;
    float* row = held.values.data() + i * k * D;
    for (int j = 0; j < k; ++j) {
      const int32_t e = topk[i * k + j];
      if (e < 0) continue;
      float* dst = row + (nsel++) * D;
      size_t c = (uint32_t(e) * 2654435761u) & mask;  // Knuth's multiplicative hash, linear probing
      while (held.unpacked_entry[c] >= 0 && held.unpacked_entry[c] != e) c = (c + 1) & mask;
      if (held.unpacked_entry[c] == e) {  // unpacked for an earlier row (or slot): the same floats
        std::copy_n(held.values.data() + int64_t{held.unpacked_slot[c]} * D, D, dst);
        continue;
      }
      source.read_main(e, dst);
      held.unpacked_entry[c] = e;
      held.unpacked_slot[c] = static_cast<int32_t>(i * k + nsel - 1);
    }
    held.count[static_cast<size_t>(i)] = nsel;
  }
  held.source = &source;
  held.entries = source.entries();
  held.start_pos = start_pos;
  held.rows = T;
}

// One token's heads h0 … h0 + nh − 1 on the vector loops: o0 [nh, D] = softmax(q·keys) · keys
// over the window rows then the selected rows (the sink in the softmax only).
void attend_heads_on_vectors(CpuIsa isa, const float* q0, int64_t nh, int64_t D, const float* win_rows, int64_t nwin,
                             const float* sel_rows, int64_t nsel, float scaling, const float* sinks, float* logits,
                             int64_t lstride, float* o0) {
  std::fill(o0, o0 + nh * D, 0.0f);  // here, not for all items on the caller beforehand
  dot_rows_heads(isa, q0, D, nh, win_rows, nwin, D, logits, lstride);
  dot_rows_heads(isa, q0, D, nh, sel_rows, nsel, D, logits + nwin, lstride);
  // The sink joins the max and the denominator, never the values (attention_kernels.h).
  for (int64_t hh = 0; hh < nh; ++hh) sink_softmax(isa, logits + hh * lstride, nwin + nsel, scaling, sinks[hh]);
  weighted_sum_rows_heads(isa, logits, lstride, nh, win_rows, nwin, D, o0, D);
  weighted_sum_rows_heads(isa, logits + nwin, lstride, nh, sel_rows, nsel, D, o0, D);
}

// The key rows as bf16 (SinkTokenArgs::win_bf16 …; win_bf16 null: the float rows).
struct KeyRowsBf16 {
  const uint16_t* win_bf16 = nullptr;
  const uint16_t* table_bf16 = nullptr;
  const int32_t* sel_ids = nullptr;
};

// All H heads of one token on the AMX tiles (attention_amx.h); false: they did not run.
bool attend_token_on_tiles(const float* q0, int64_t H, int64_t D, const float* win_rows, int64_t nwin,
                           const float* sel_rows, int64_t nsel, const KeyRowsBf16& bf16, float scaling,
                           const float* sinks, CpuIsa isa, float* logits, int64_t lstride, float* o0,
                           SinkTokenBuffers& buffers) {
  SinkTokenArgs a;
  a.win_bf16 = bf16.win_bf16;
  a.table_bf16 = bf16.table_bf16;
  a.sel_ids = bf16.sel_ids;
  a.q = q0;
  a.heads = H;
  a.D = D;
  a.win_rows = win_rows;
  a.nwin = nwin;
  a.sel_rows = sel_rows;
  a.nsel = nsel;
  a.scaling = scaling;
  a.sinks = sinks;
  a.isa = isa;
  a.logits = logits;
  a.lstride = lstride;
  a.o = o0;
  return sink_attention_token_amx(a, buffers);
}

// With the tiles: the window keys [rows, D] and the compressed entries [G, D] of this call as bf16
// (SinkTokenArgs::win_bf16), converted once, threaded over rows. False (use the float rows) when a
// row is not exact in bf16 — cache rows always are (records.h), so that is a safety net only.
bool key_rows_as_bf16(const CpuExec& ex, const std::vector<float>& keys, const KvSourceCache* compressed,
                      int64_t D, AttentionScratch& ws) {
  const int64_t rows = static_cast<int64_t>(keys.size()) / D, G = compressed ? compressed->entries() : 0;
  ws.win_bf16.resize(keys.size());
  ws.table_bf16.resize(static_cast<size_t>(G * D));
  std::atomic<bool> exact{true};
  ex.parallel_items(rows, D, [&](int64_t b, int64_t e) {
    if (!key_rows_to_bf16(keys.data() + b * D, e - b, D, ws.win_bf16.data() + b * D)) exact = false;
  });
  ex.parallel_items(G, 8 * D, [&](int64_t b, int64_t e) {  // unpacking a record costs more than a copy
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t g = b; g < e; ++g) {
      compressed->read_main(g, row.data());
      if (!key_rows_to_bf16(row.data(), 1, D, ws.table_bf16.data() + g * D)) exact = false;
    }
  });
  return exact;
}

// Step 5; held (optional): the selection's rows unpacked once (sparse_sink_attention_selected).
void sink_attention(const ModelConfig& config, const AttentionWeights& w, const WindowRing& ring, const float* kv,
                    const KvSourceCache* compressed, const int32_t* topk, const float* q, const RopeRows& rope,
                    int64_t rope_row0, int64_t T, int64_t start_pos, float* o, const AttentionOptions& options,
                    AttentionScratch* scratch, SelectedRows* held) {
  AttentionScratch local;
  AttentionScratch& ws = scratch ? *scratch : local;
  const int64_t H = config.num_attention_heads, D = config.head_dim;
  const int64_t win = config.sliding_window;
  const int rd = static_cast<int>(rope.half * 2);
  const int64_t floor = ring.start();  // windows cut at a replay start see nothing before it

  // ---- Keys of the window: positions [first, start_pos+T) = ring rows then the segment's rows. --
  const int64_t first = std::max<int64_t>(floor, start_pos - (win - 1));
  // Room for a full window from the start, so the buffer does not grow while the window fills.
  std::vector<float>& keys = ws.keys;
  keys.reserve(static_cast<size_t>((win - 1 + T) * D));
  keys.resize(static_cast<size_t>((start_pos + T - first) * D));
  for (int64_t p = first; p < start_pos; ++p) ring.read(p, keys.data() + (p - first) * D);
  std::copy(kv, kv + T * D, keys.begin() + (start_pos - first) * D);

  // ---- Sink attention per token and head. ---------------------------------------------------
  // Work items are (token, head) pairs in flat order i·H + h, split into contiguous ranges run on
  // the thread pool; each pair's arithmetic is the same whichever thread runs it, so the result
  // does not depend on the thread count or the ranges.
  const float scaling = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  const int k = config.index_topk;
  if (!(compressed && topk)) held = nullptr;
  if (held) hold_selected_rows(*compressed, topk, T, k, D, start_pos, *held);
  const int64_t items = T * H;
  // Roughly the multiply-adds per item; threads only when each gets ≥ ~256K of them: a verify
  // step's 6 rows of dsv41-mini (≈ 786K) take both threads, a decode row (≈ 131K) stays on one
  // (the pool's workers spin between jobs, so waking them costs little; was 2M until session 40).
  const int64_t per_item = (std::min<int64_t>(win, start_pos + T) + k) * D * 2;
  int64_t chunks;
  if (options.threads > 0) {
    chunks = std::min<int64_t>(options.threads, items);  // an explicit count wins
  } else {
    const int64_t hw = options.exec.threads();
    chunks = std::min<int64_t>({hw, items, std::max<int64_t>(1, items * per_item / (int64_t{1} << 18))});
    // Threaded over many tokens: up to 4 ranges a thread (each at least one token's heads, so
    // the kernels still read a key row once for 4 heads), taken as threads free up. A prefill's
    // tokens differ in work (the window and the selected entries fill up over the first
    // positions): one equal range a thread left the early ranges' threads idle.
    if (chunks > 1) chunks = std::max(chunks, std::min<int64_t>(T, 4 * chunks));
  }
  chunks = std::max<int64_t>(chunks, 1);
  // With AMX a prefill's tokens (≥ kAmxMinRows of them, as for the products: a decode step keeps
  // its heads spread over the threads) go through the tiles a token at a time, all its heads
  // together (attention_amx.h), so ranges hold whole tokens.
  const bool tiles = options.exec.use_amx() && T >= kAmxMinRows && sink_attention_tiles_fit(H, D);
  int64_t grain = chunks <= 1 ? items : (items + chunks - 1) / chunks;
  if (tiles) grain = (grain + H - 1) / H * H;
  chunks = (items + grain - 1) / grain;
  // Each range of items (range = begin / grain, fixed by the chunking) has its own slice of the
  // scratch: the dequantised selected entries [k, D] and the logits of one token's heads
  // [H, window + k]. The heads of one token in a range go through the kernels together (each key
  // row read once for all of them: attention_kernels.h), with the bits of one head at a time.
  const int64_t lstride = win + k;
  const int64_t range_floats = int64_t{k} * D + H * lstride;
  // Room for one range per pool thread (the count of ranges can rise as the window fills).
  ws.ranges.reserve(static_cast<size_t>(std::max<int64_t>(chunks, options.exec.threads()) * range_floats));
  ws.ranges.resize(static_cast<size_t>(chunks * range_floats));
  const CpuIsa isa = options.exec.gemm_isa();
  if (tiles) ws.tile_ranges.resize(static_cast<size_t>(std::max<int64_t>(chunks, ws.tile_ranges.size())));
  // Tokens take their key rows from one bf16 copy of the call's window and entries, unless there
  // are fewer selections (T·k) than entries to convert, or a held selection already has them.
  const bool from_bf16 = tiles && !held && (!(compressed && topk) || T * k >= compressed->entries()) &&
                         key_rows_as_bf16(options.exec, keys, compressed && topk ? compressed : nullptr, D, ws);
  auto attend_range = [&](int64_t begin, int64_t end) {
    float* const sel = ws.ranges.data() + (begin / grain) * range_floats;  // [k, D]
    float* const logits = sel + int64_t{k} * D;                              // [H, window + k]
    for (int64_t item = begin; item < end;) {
      const int64_t i = item / H, h0 = item % H;
      const int64_t nh = std::min<int64_t>(H - h0, end - item);  // heads h0 … h0 + nh − 1 of token i
      const int64_t t = start_pos + i;
      const int64_t lo = std::max<int64_t>(floor, t - win + 1);
      const int64_t nwin = t - lo + 1;
      int nsel = 0;
      const float* sel_rows = sel;  // [nsel, D]: token i's selected entries, unpacked
      const int32_t* selected = compressed && topk ? topk + i * k : nullptr;
      auto unpack_selected = [&] {
        nsel = 0;
        for (int j = 0; j < k; ++j)
          if (selected[j] >= 0) compressed->read_main(selected[j], sel + (nsel++) * D);
      };
      if (held) {
        nsel = held->count[static_cast<size_t>(i)];
        sel_rows = held->values.data() + i * k * D;
      } else if (selected && !from_bf16) {
        unpack_selected();
      }
      const float* win_rows = keys.data() + (lo - first) * D;  // [nwin, D], contiguous
      const float* q0 = q + (i * H + h0) * D;
      float* o0 = o + (i * H + h0) * D;
      bool on_tiles = false;
      if (tiles && nh == H) {
        SinkTokenBuffers& tb = ws.tile_ranges[static_cast<size_t>(begin / grain)];
        KeyRowsBf16 bf16;
        if (from_bf16) {
          tb.sel_ids.clear();
          for (int j = 0; selected && j < k; ++j)
            if (selected[j] >= 0) tb.sel_ids.push_back(selected[j]);
          nsel = static_cast<int>(tb.sel_ids.size());
          bf16 = {ws.win_bf16.data() + (lo - first) * D, ws.table_bf16.data(), tb.sel_ids.data()};
        }
        on_tiles = attend_token_on_tiles(q0, H, D, win_rows, nwin, sel_rows, nsel, bf16, scaling, w.attn_sink.data(),
                                         isa, logits, lstride, o0, tb);
      }
      if (!on_tiles) {
        if (from_bf16 && selected) unpack_selected();
        attend_heads_on_vectors(isa, q0, nh, D, win_rows, nwin, sel_rows, nsel, scaling, w.attn_sink.data() + h0,
                                logits, lstride, o0);
      }
      // The values carry RoPE on their tail; undo the query position's rotation.
      for (int64_t hh = 0; hh < nh; ++hh)
        rope_rotate(o0 + hh * D, D, rd, rope.cos_row(rope_row0 + i), rope.sin_row(rope_row0 + i), true);
      item += nh;
    }
  };
  if (chunks <= 1) {
    attend_range(0, items);
  } else {
    options.exec.parallel_for(items, grain, attend_range);
  }
}

}  // namespace

void sparse_sink_attention(const ModelConfig& config, const AttentionWeights& w, const WindowRing& ring,
                           const float* kv, const KvSourceCache* compressed, const int32_t* topk, const float* q,
                           const RopeRows& rope, int64_t rope_row0, int64_t T, int64_t start_pos, float* o,
                           const AttentionOptions& options, AttentionScratch* scratch) {
  sink_attention(config, w, ring, kv, compressed, topk, q, rope, rope_row0, T, start_pos, o, options, scratch, nullptr);
}

void sparse_sink_attention_selected(const ModelConfig& config, const AttentionWeights& w, const WindowRing& ring,
                                    const float* kv, const KvSourceCache& compressed, const int32_t* topk,
                                    const float* q, const RopeRows& rope, int64_t rope_row0, int64_t T,
                                    int64_t start_pos, float* o, const AttentionOptions& options,
                                    AttentionScratch* scratch, SelectedRows& held) {
  sink_attention(config, w, ring, kv, &compressed, topk, q, rope, rope_row0, T, start_pos, o, options, scratch, &held);
}

void attention_output(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const float* o, int64_t n,
                      float* out, AttentionScratch* scratch) {
  const int64_t H = config.num_attention_heads, D = config.head_dim, hidden = config.hidden_size;
  const int64_t groups = config.o_groups, olr = config.o_lora_rank;
  const int64_t group_in = H / groups * D;
  AttentionScratch local;
  AttentionScratch& ws = scratch ? *scratch : local;
  std::vector<float>& mid = ws.mid;
  std::vector<float>& gin = ws.gin;
  std::vector<float>& gout = ws.gout;
  mid.resize(static_cast<size_t>(n * groups * olr));
  const WeightRef wo_a = weight_ref(w.wo_a, w.bf16.wo_a, w.quant_wo_a);
  if (n <= kGemmManyMaxRows && groups <= kMaxOutputGroups) {
    // A decode step: the groups' products in one parallel region (gemm_many) rather than one
    // fork/join each; the same products, so the same bits. gin / gout hold every group's rows.
    gin.resize(static_cast<size_t>(groups * n * group_in));
    gout.resize(static_cast<size_t>(groups * n * olr));
    WeightRef views[kMaxOutputGroups];
    GemmJob jobs[kMaxOutputGroups];
    for (int64_t g = 0; g < groups; ++g) {
      float* xg = gin.data() + g * n * group_in;
      for (int64_t i = 0; i < n; ++i) std::copy_n(o + i * H * D + g * group_in, group_in, xg + i * group_in);
      views[g] = wo_a.offset(g * olr * group_in);
      jobs[g] = gemm_job(xg, n, group_in, views[g], olr, gout.data() + g * n * olr);
    }
    gemm_many(ex, std::span<const GemmJob>(jobs, static_cast<size_t>(groups)));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(gout.data() + (g * n + i) * olr, olr, mid.begin() + i * groups * olr + g * olr);
    matmul(ex, mid.data(), n, groups * olr, weight_ref(w.wo_b, w.bf16.wo_b, w.quant_wo_b), hidden, out);
    return;
  }
  gin.resize(static_cast<size_t>(n * group_in));
  gout.resize(static_cast<size_t>(n * olr));
  // A prefill's group copies move n · H · D floats a layer (256 MiB at 2K tokens on mini-flash):
  // on the caller alone they were a serial phase between the products; threaded over rows.
  for (int64_t g = 0; g < groups; ++g) {
    ex.parallel_items(n, group_in, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) std::copy_n(o + i * H * D + g * group_in, group_in, gin.begin() + i * group_in);
    });
    matmul(ex, gin.data(), n, group_in, wo_a.offset(g * olr * group_in), olr, gout.data());
    ex.parallel_items(n, olr, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) std::copy_n(gout.begin() + i * olr, olr, mid.begin() + i * groups * olr + g * olr);
    });
  }
  matmul(ex, mid.data(), n, groups * olr, weight_ref(w.wo_b, w.bf16.wo_b, w.quant_wo_b), hidden, out);
}

}  // namespace dsv41
