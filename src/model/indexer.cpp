// Sparse indexer: scores, candidate pool, top-k (see indexer.h). Spec: model.md §3.4.
#include "model/indexer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/index_score.h"

namespace dsv41 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The n largest values (ties → lower index), n ≤ size, with a value > −inf, ascending by index,
// into out[width] (−1 padded). heap: working storage of n (value, index) pairs.
// A selection without sorting the row: one pass in index order keeps the n best so far in a heap
// whose top is the worst of them (smallest value, then largest index); a later value enters only
// when strictly larger than that top — an equal one comes later, so it ranks below. Blocks of 16
// with nothing above the top are skipped by one vectorisable comparison. NaN never enters.
// Rows of at most this many entries per pick take the threshold selection below: a copy of the
// pickable values, std::nth_element for the n-th largest (the threshold t), then one pass in
// index order keeps every value > t and the first (lowest-index) values == t until n are kept —
// the same set as the heap's, already ascending. O(size); on long rows (size ≫ n) the heap, which
// skips whole blocks below its top, is cheaper.
constexpr int64_t kThresholdSelectRatio = 16;

void largest_ascending(const float* v, int64_t size, int64_t n, int width, std::vector<std::pair<float, int32_t>>& heap,
                       std::vector<float>& values, int32_t* out) {
  if (n > 0 && size <= kThresholdSelectRatio * n) {
    values.clear();
    for (int64_t g = 0; g < size; ++g)
      if (v[g] > kNegInf) values.push_back(v[g]);  // −inf and NaN are never picked
    int kept = 0;
    if (static_cast<int64_t>(values.size()) <= n) {
      for (int64_t g = 0; g < size; ++g)
        if (v[g] > kNegInf) out[kept++] = static_cast<int32_t>(g);
    } else {
      std::nth_element(values.begin(), values.begin() + (n - 1), values.end(), std::greater<float>());
      const float t = values[static_cast<size_t>(n - 1)];
      int64_t above = 0;
      for (int64_t g = 0; g < size; ++g) above += v[g] > t;
      int64_t ties = n - above;  // ≥ 1: t itself is among the n largest
      for (int64_t g = 0; g < size; ++g) {
        if (v[g] > t) {
          out[kept++] = static_cast<int32_t>(g);
        } else if (v[g] == t && ties > 0) {
          out[kept++] = static_cast<int32_t>(g);
          --ties;
        }
      }
    }
    for (int i = kept; i < width; ++i) out[i] = -1;
    return;
  }
  auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  heap.clear();
  int64_t g = 0;
  for (; g < size && static_cast<int64_t>(heap.size()) < n; ++g) {
    if (!(v[g] > kNegInf)) continue;  // −inf (masked, padding) and NaN are never picked
    heap.emplace_back(v[g], static_cast<int32_t>(g));
    std::push_heap(heap.begin(), heap.end(), better);
  }
  if (n > 0 && static_cast<int64_t>(heap.size()) == n) {
    float top = heap.front().first;
    while (g < size) {
      if (g + 16 <= size) {
        bool any = false;
        for (int j = 0; j < 16; ++j) any |= v[g + j] > top;
        if (!any) {
          g += 16;
          continue;
        }
      }
      for (const int64_t end = std::min(size, g + 16); g < end; ++g) {
        if (!(v[g] > top)) continue;
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = {v[g], static_cast<int32_t>(g)};
        std::push_heap(heap.begin(), heap.end(), better);
        top = heap.front().first;
      }
    }
  }
  const int kept = static_cast<int>(heap.size());
  for (int i = 0; i < kept; ++i) out[i] = heap[static_cast<size_t>(i)].second;
  std::sort(out, out + kept);
  for (int i = kept; i < width; ++i) out[i] = -1;
}

}  // namespace

namespace {

// Rows of indexer_queries*: the two products, then per row RoPE (at position pos(i)) and MXFP4 of
// each head, and the head-weight scaling.
template <typename PosFn>
void queries(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope, const float* c,
             const float* x, int64_t T, PosFn pos, float* q, float* head_weights, IndexerScratch* scratch) {
  const int64_t nh = config.index_n_heads, dh = config.index_head_dim;
  matmul(ex, c, T, config.q_lora_rank, weight_ref(w.indexer_wq_b, {}, w.quant_indexer_wq_b), nh * dh, q);
  gemm_f32(ex, x, T, config.hidden_size, w.indexer_weights_proj.data(), nh, head_weights);
  const float heads_scaling = static_cast<float>(std::pow(static_cast<double>(nh), -0.5));
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  std::vector<float>& cs = ws.cos;
  std::vector<float>& sn = ws.sin;
  cs.resize(static_cast<size_t>(rope.rope_dim() / 2));
  sn.resize(static_cast<size_t>(rope.rope_dim() / 2));
  for (int64_t i = 0; i < T; ++i) {
    rope.cos_sin(RopeKind::kCompress, pos(i), cs.data(), sn.data());
    for (int64_t h = 0; h < nh; ++h) {
      float* qh = q + (i * nh + h) * dh;
      rope_rotate(qh, dh, rope.rope_dim(), cs.data(), sn.data(), false);
      row_fake_quant(RowKind::kIndex, qh, dh);
    }
    for (int64_t h = 0; h < nh; ++h) head_weights[i * nh + h] *= heads_scaling;
  }
}

}  // namespace

void indexer_queries(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                     const float* c, const float* x, int64_t T, int64_t start_pos, std::vector<float>& q,
                     std::vector<float>& head_weights, IndexerScratch* scratch) {
  const int64_t nh = config.index_n_heads, dh = config.index_head_dim;
  q.resize(static_cast<size_t>(T * nh * dh));
  head_weights.resize(static_cast<size_t>(T * nh));
  queries(ex, config, w, rope, c, x, T, [&](int64_t i) { return start_pos + i; }, q.data(), head_weights.data(),
          scratch);
}

void indexer_queries_at(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                        const float* c, const float* x, int64_t T, const int64_t* positions, float* q,
                        float* head_weights, IndexerScratch* scratch) {
  queries(ex, config, w, rope, c, x, T, [&](int64_t i) { return positions[i]; }, q, head_weights, scratch);
}

namespace {

// Tiles (candidate-pool blocks) ahead of the one being scored whose records are asked for
// (below): of two and four, four decoded faster (docs/BENCHMARKS.md, session 33).
constexpr int64_t kPrefetchTiles = 4;

// Asks the memory for the records of keys [g0, g0 + n) before their tile is read. A decode step
// reads each record once and the weights it streams between steps push them out of the caches,
// so a tile's loads would otherwise wait on memory a record at a time. The records of a page lie
// side by side: one request per line of the run. A prefetch is a hint and never faults.
void prefetch_key_records(const KvSourceCache& kv, int64_t g0, int64_t n) {
  if (n <= 0) return;
  const uint8_t* records[kIndexKeyTile];
  kv.index.rows(g0, n, records);
  const int64_t bytes = kv.index.record_bytes();
  for (int64_t j = 0; j < n;) {
    int64_t e = j + 1;  // [j, e): records side by side
    while (e < n && records[e] == records[e - 1] + bytes) ++e;
    for (const uint8_t* p = records[j]; p < records[e - 1] + bytes; p += 64) __builtin_prefetch(p);
    __builtin_prefetch(records[e - 1] + bytes - 1);
    j = e;
  }
}

// Keys [g0, g0 + n) of `kv`, unpacked and transposed into ws.key_t (the tile layout of
// kernels/cpu/index_score.h).
void load_key_tile(const KvSourceCache& kv, int64_t g0, int n, int dh, IndexerScratch& ws, CpuIsa isa) {
  ws.key.resize(static_cast<size_t>(kIndexKeyTile * dh));
  ws.key_t.resize(static_cast<size_t>(kIndexKeyTile * dh));
  for (int j = 0; j < n; ++j) kv.read_index(g0 + j, ws.key.data() + int64_t{j} * dh);
  transpose_key_tile(isa, ws.key.data(), n, dh, ws.key_t.data());
}

// Keys [g0, g0 + n) of `kv` as integers (index_score_int.h) if they keep the integer path exact
// for the call's queries qi; false: the float path must score this tile.
bool load_int_key_tile(const KvSourceCache& kv, int64_t g0, int n, const IndexQueryInts& qi, IndexerScratch& ws,
                       CpuIsa isa) {
  const uint8_t* records[kIndexKeyTile];
  kv.index.rows(g0, n, records);
  index_key_tile_ints(isa, records, n, qi.dh, ws.key_ints);
  return index_int_tile_fits(qi, ws.key_ints);
}

// Query rows [0, rows) of q scored on integers (index_score_int.h) where this CPU can and the
// rows are on their MXFP4 grid (always, for the indexer's fake-quantised queries).
bool use_int_queries(CpuIsa isa, const float* q, int64_t rows, int nh, int dh, IndexerScratch& ws) {
  return index_int_supported(isa, dh) && index_query_ints(q, rows, nh, dh, ws.query_ints);
}

}  // namespace

bool indexer_query_ints(const ModelConfig& config, const float* q, int64_t row0, int64_t rows, CpuIsa isa,
                        IndexerScratch& ws) {
  const int nh = config.index_n_heads, dh = config.index_head_dim;
  return use_int_queries(isa, q + row0 * int64_t{nh} * dh, rows, nh, dh, ws);
}

void indexer_scores(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                    const float* head_weights, int64_t row0, int64_t rows, int64_t start_pos, float* scores,
                    IndexerScratch* scratch, CpuIsa isa) {
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  const bool ints = indexer_query_ints(config, q, row0, rows, isa, ws);
  indexer_score_tiles(config, kv, G, 0, G, ratio, q, head_weights, row0, rows, start_pos, scores,
                      ints ? &ws.query_ints : nullptr, ws, isa);
}

void indexer_score_tiles(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int64_t g_begin, int64_t g_end,
                         int ratio, const float* q, const float* head_weights, int64_t row0, int64_t rows,
                         int64_t start_pos, float* scores, const IndexQueryInts* query_ints, IndexerScratch& ws,
                         CpuIsa isa) {
  const int nh = config.index_n_heads, dh = config.index_head_dim;
  const float softmax_scale = static_cast<float>(std::pow(static_cast<double>(dh), -0.5));
  const int64_t vec = int64_t{nh} * dh;
  const bool ints = query_ints != nullptr;
  // Key tiles outer (each packed key is unpacked once per call), rows inner. Rows are in position
  // order, so the rows that see nothing of a tile yet lead: they only get −inf.
  for (int64_t g0 = g_begin; g0 < g_end; g0 += kIndexKeyTile) {
    const int n = static_cast<int>(std::min<int64_t>(kIndexKeyTile, g_end - g0));
    const int64_t ahead = g0 + kPrefetchTiles * kIndexKeyTile;
    prefetch_key_records(kv, ahead, std::min<int64_t>(kIndexKeyTile, g_end - ahead));
    int64_t r = 0;
    for (; r < rows && (start_pos + row0 + r + 1) / ratio <= g0; ++r) std::fill_n(scores + r * G + g0, n, kNegInf);
    if (r < rows && ints && load_int_key_tile(kv, g0, n, *query_ints, ws, isa)) {
      index_score_tile_ints(isa, *query_ints, r, rows - r, head_weights + (row0 + r) * nh, ws.key_ints, softmax_scale,
                            scores + r * G + g0, G, n);
    } else if (r < rows) {
      load_key_tile(kv, g0, n, dh, ws, isa);
      for (int64_t r0 = r; r0 < rows; r0 += kIndexTileRows) {
        const int64_t m = std::min(kIndexTileRows, rows - r0);
        index_score_tile(isa, q + (row0 + r0) * vec, head_weights + (row0 + r0) * nh, m, nh, dh, ws.key_t.data(),
                         softmax_scale, scores + r0 * G + g0, G, n);
      }
    }
    // Entries whose group ends after the row's position: not visible yet.
    for (; r < rows; ++r) {
      const int64_t visible = (start_pos + row0 + r + 1) / ratio;
      if (visible >= g0 + n) break;
      std::fill(scores + r * G + std::max(g0, visible), scores + r * G + g0 + n, kNegInf);
    }
  }
}

void indexer_scores_in_pool(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                            const float* head_weights, int64_t i, int64_t start_pos, const int32_t* kept,
                            int topk_blocks, int block_size, float* row, IndexerScratch* scratch, CpuIsa isa) {
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  std::fill(row, row + G, kNegInf);
  const int64_t visible = std::min<int64_t>(G, (start_pos + i + 1) / ratio);
  const bool ints = visible > 0 && indexer_query_ints(config, q, i, 1, isa, ws);
  indexer_score_pool_blocks(config, kv, G, ratio, q, head_weights, i, start_pos, kept, 0, topk_blocks, block_size, row,
                            ints ? &ws.query_ints : nullptr, ws, isa);
}

void indexer_score_pool_blocks(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                               const float* head_weights, int64_t i, int64_t start_pos, const int32_t* kept,
                               int j_begin, int j_end, int block_size, float* row, const IndexQueryInts* query_ints,
                               IndexerScratch& ws, CpuIsa isa) {
  const int nh = config.index_n_heads, dh = config.index_head_dim;
  const float softmax_scale = static_cast<float>(std::pow(static_cast<double>(dh), -0.5));
  const int64_t visible = std::min<int64_t>(G, (start_pos + i + 1) / ratio);
  const bool ints = query_ints != nullptr;
  for (int j = j_begin; j < j_end && kept[j] >= 0; ++j) {
    const int64_t end = std::min<int64_t>(visible, (int64_t{kept[j]} + 1) * block_size);
    if (const int a = j + int{kPrefetchTiles}; a < j_end && kept[a] >= 0) {  // blocks ahead, as tiles above
      const int64_t first = int64_t{kept[a]} * block_size;
      prefetch_key_records(kv, first, std::min<int64_t>({kIndexKeyTile, block_size, visible - first}));
    }
    for (int64_t g0 = int64_t{kept[j]} * block_size; g0 < end; g0 += kIndexKeyTile) {
      const int n = static_cast<int>(std::min<int64_t>(kIndexKeyTile, end - g0));
      if (ints && load_int_key_tile(kv, g0, n, *query_ints, ws, isa)) {
        index_score_tile_ints(isa, *query_ints, 0, 1, head_weights + i * nh, ws.key_ints, softmax_scale, row + g0, G,
                              n);
        continue;
      }
      load_key_tile(kv, g0, n, dh, ws, isa);
      index_score_tile(isa, q + i * nh * dh, head_weights + i * nh, 1, nh, dh, ws.key_t.data(), softmax_scale,
                       row + g0, G, n);
    }
  }
}

void select_candidate_blocks(const float* scores, int64_t G, int64_t visible, int block_size, int topk_blocks,
                             int32_t* kept, IndexerScratch* scratch) {
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  const int64_t blocks = (G + block_size - 1) / block_size;
  std::vector<float>& block_score = ws.block_scores;
  block_score.assign(static_cast<size_t>(blocks), kNegInf);
  for (int64_t g = 0; g < G; ++g) {
    float& b = block_score[g / block_size];
    b = std::max(b, scores[g]);
  }
  // The newest visible entry's block is only partly filled: pin it so it is always kept.
  if (visible >= 1) block_score[(visible - 1) / block_size] = std::numeric_limits<float>::infinity();
  const int64_t n = std::min<int64_t>(topk_blocks, blocks);
  largest_ascending(block_score.data(), blocks, n, topk_blocks, ws.heap, ws.select_values, kept);
}

void select_topk(const float* scores, int64_t G, int k, int32_t* out, IndexerScratch* scratch) {
  IndexerScratch local;
  const int64_t n = std::min<int64_t>(k, G);
  IndexerScratch& ws = scratch ? *scratch : local;
  largest_ascending(scores, G, n, k, ws.heap, ws.select_values, out);
}

}  // namespace dsv41
