// Sparse indexer: scores, candidate pool, top-k (see indexer.h). Spec: model.md §3.4.
#include "model/indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/gemm.h"

namespace dsv41 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The n largest values (ties → lower index), n ≤ size, with a value > −inf, ascending by index,
// into out[width] (−1 padded). idx: working storage of `size` indices.
void largest_ascending(const float* v, int64_t size, int64_t n, int width, std::vector<int32_t>& idx, int32_t* out) {
  idx.resize(static_cast<size_t>(size));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  // `better` is a strict total order, so the n best form one set however they are found: a
  // selection (linear), not a partial sort; nothing to select when every entry is kept.
  if (n < size) std::nth_element(idx.begin(), idx.begin() + n, idx.end(), better);
  // Drop the −inf picks (masked or padding), then sort by index.
  int64_t kept = 0;
  for (int64_t j = 0; j < n; ++j)
    if (v[idx[j]] > kNegInf) idx[kept++] = idx[j];
  std::sort(idx.begin(), idx.begin() + kept);
  for (int i = 0; i < width; ++i) out[i] = i < kept ? idx[i] : -1;
}

}  // namespace

void indexer_queries(const CpuExec& ex, const ModelConfig& config, const AttentionWeights& w, const Rope& rope,
                     const float* c, const float* x, int64_t T, int64_t start_pos, std::vector<float>& q,
                     std::vector<float>& head_weights, IndexerScratch* scratch) {
  const int64_t nh = config.index_n_heads, dh = config.index_head_dim;
  q.resize(static_cast<size_t>(T * nh * dh));
  head_weights.resize(static_cast<size_t>(T * nh));
  matmul(ex, c, T, config.q_lora_rank, weight_ref(w.indexer_wq_b, {}, w.quant_indexer_wq_b), nh * dh, q.data());
  gemm_f32(ex, x, T, config.hidden_size, w.indexer_weights_proj.data(), nh, head_weights.data());
  const float heads_scaling = static_cast<float>(std::pow(static_cast<double>(nh), -0.5));
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  std::vector<float>& cs = ws.cos;
  std::vector<float>& sn = ws.sin;
  cs.resize(static_cast<size_t>(rope.rope_dim() / 2));
  sn.resize(static_cast<size_t>(rope.rope_dim() / 2));
  for (int64_t i = 0; i < T; ++i) {
    rope.cos_sin(RopeKind::kCompress, start_pos + i, cs.data(), sn.data());
    for (int64_t h = 0; h < nh; ++h) {
      float* qh = q.data() + (i * nh + h) * dh;
      rope_rotate(qh, dh, rope.rope_dim(), cs.data(), sn.data(), false);
      row_fake_quant(RowKind::kIndex, qh, dh);
    }
    for (int64_t h = 0; h < nh; ++h) head_weights[i * nh + h] *= heads_scaling;
  }
}

namespace {

// score(g) of chunk row i against the unpacked key (the one formula both entry points use).
float score_one(const float* key, const float* q, const float* head_weights, int64_t i, int64_t nh, int64_t dh,
                float softmax_scale, float* per_head) {
  dot_rows(key, q + i * nh * dh, nh, dh, per_head);  // q_h · I_g for every head
  float total = 0.0f;
  for (int64_t h = 0; h < nh; ++h) {
    const float relu = std::max(per_head[h], 0.0f) * softmax_scale;
    total += relu * head_weights[i * nh + h];
  }
  return total;
}

}  // namespace

void indexer_scores(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                    const float* head_weights, int64_t row0, int64_t rows, int64_t start_pos, float* scores,
                    IndexerScratch* scratch) {
  const int64_t nh = config.index_n_heads, dh = config.index_head_dim;
  const float softmax_scale = static_cast<float>(std::pow(static_cast<double>(dh), -0.5));
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  std::vector<float>& key = ws.key;
  std::vector<float>& per_head = ws.per_head;
  key.resize(static_cast<size_t>(dh));
  per_head.resize(static_cast<size_t>(nh));
  // Keys outer (each packed key is unpacked once per block of query rows).
  for (int64_t g = 0; g < G; ++g) {
    kv.read_index(g, key.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = row0 + r, t = start_pos + i;
      float* out = scores + r * G + g;
      if (g >= (t + 1) / ratio) {  // not visible yet: its group ends after t
        *out = kNegInf;
        continue;
      }
      *out = score_one(key.data(), q, head_weights, i, nh, dh, softmax_scale, per_head.data());
    }
  }
}

void indexer_scores_in_pool(const ModelConfig& config, const KvSourceCache& kv, int64_t G, int ratio, const float* q,
                            const float* head_weights, int64_t i, int64_t start_pos, const int32_t* kept,
                            int topk_blocks, int block_size, float* row, IndexerScratch* scratch) {
  const int64_t nh = config.index_n_heads, dh = config.index_head_dim;
  const float softmax_scale = static_cast<float>(std::pow(static_cast<double>(dh), -0.5));
  IndexerScratch local;
  IndexerScratch& ws = scratch ? *scratch : local;
  std::vector<float>& key = ws.key;
  std::vector<float>& per_head = ws.per_head;
  key.resize(static_cast<size_t>(dh));
  per_head.resize(static_cast<size_t>(nh));
  std::fill(row, row + G, kNegInf);
  const int64_t visible = std::min<int64_t>(G, (start_pos + i + 1) / ratio);
  for (int j = 0; j < topk_blocks && kept[j] >= 0; ++j) {
    const int64_t end = std::min<int64_t>(visible, (int64_t{kept[j]} + 1) * block_size);
    for (int64_t g = int64_t{kept[j]} * block_size; g < end; ++g) {
      kv.read_index(g, key.data());
      row[g] = score_one(key.data(), q, head_weights, i, nh, dh, softmax_scale, per_head.data());
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
  largest_ascending(block_score.data(), blocks, n, topk_blocks, ws.order, kept);
}

void select_topk(const float* scores, int64_t G, int k, int32_t* out, IndexerScratch* scratch) {
  IndexerScratch local;
  const int64_t n = std::min<int64_t>(k, G);
  largest_ascending(scores, G, n, k, (scratch ? *scratch : local).order, out);
}

}  // namespace dsv41
