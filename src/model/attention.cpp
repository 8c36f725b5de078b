// One layer's attention over a chunk of tokens with the packed cache (see attention.h).
// Spec: model.md §3.4–§3.6, §4.
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/attention_kernels.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/rmsnorm.h"
#include "model/weight_matrix.h"

namespace dsv41 {
namespace {

// Query rows scored together by the indexer (each unpacked key is reused across them), bounded so
// the [rows, G] score buffer stays ≤ 2^22 floats (16 MiB) however long the context.
constexpr int64_t kIndexerRowBlock = 32;
constexpr int64_t kIndexerScoreFloats = int64_t{1} << 22;

std::string layer_name(const LayerInfo& layer) { return "layer " + std::to_string(layer.index); }

// Runs the indexer of an index-source layer for the chunk and publishes its top-k (and, at the
// candidate source, the candidate pool) into `shared`.
void run_indexer(const CpuExec& ex, const ModelConfig& config, const LayerInfo& layer, const AttentionWeights& w,
                 const Rope& rope, const KvSourceCache& kv, const float* c, const float* x, int64_t T,
                 int64_t start_pos, SharedAttentionState& shared) {
  const int64_t G = kv.entries();
  const int k = config.index_topk;
  if (G == 0) {
    // Nothing to select from yet. The reference publishes nothing; an all −1 top-k attends the
    // same (no compressed entry) and keeps `shared.topk` meaningful for every later layer.
    shared.index_layer = layer.index;
    shared.topk.assign(static_cast<size_t>(T * k), -1);
    if (shared.record_trace) shared.trace_index_scores.clear();
    return;
  }
  std::vector<float> q, head_weights;
  indexer_queries(ex, config, w, rope, c, x, T, start_pos, q, head_weights);

  const int nb = config.candidate_topk_blocks, bs = config.candidate_block_size;
  const bool restricted = layer.restricted_to_candidates && shared.candidate_layer >= 0;
  std::vector<int32_t> topk(static_cast<size_t>(T * k));
  std::vector<int32_t> blocks_kept;
  if (layer.candidate_source) blocks_kept.resize(static_cast<size_t>(T * nb));
  if (shared.record_trace) {
    shared.trace_index_scores.assign(static_cast<size_t>(T * G), 0.0f);
    if (layer.candidate_source) shared.trace_candidates.assign(static_cast<size_t>(T * G), 0);
  }
  std::vector<float> scores;
  const int64_t row_block = std::clamp<int64_t>(kIndexerScoreFloats / G, 1, kIndexerRowBlock);
  for (int64_t row0 = 0; row0 < T; row0 += row_block) {
    const int64_t rows = std::min(row_block, T - row0);
    scores.resize(static_cast<size_t>(rows * G));
    // A restricted layer scores only inside the pool (≤ topk_blocks·block_size entries per query).
    if (!restricted)
      indexer_scores(config, kv, G, layer.ratio, q.data(), head_weights.data(), row0, rows, start_pos, scores.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = row0 + r, t = start_pos + i;
      float* row = scores.data() + r * G;
      if (restricted) {
        indexer_scores_in_pool(config, kv, G, layer.ratio, q.data(), head_weights.data(), i, start_pos,
                               shared.candidate_blocks.data() + i * nb, nb, bs, row);
      } else if (layer.candidate_source) {
        int32_t* kept = blocks_kept.data() + i * nb;
        select_candidate_blocks(row, G, (t + 1) / layer.ratio, bs, nb, kept);
        if (shared.record_trace) {
          uint8_t* cand = shared.trace_candidates.data() + i * G;
          for (int j = 0; j < nb && kept[j] >= 0; ++j)
            for (int64_t g = int64_t{kept[j]} * bs; g < std::min<int64_t>(G, int64_t{kept[j] + 1} * bs); ++g)
              cand[g] = 1;
        }
      }
      if (shared.record_trace) std::copy(row, row + G, shared.trace_index_scores.begin() + i * G);
      select_topk(row, G, k, topk.data() + i * k);
    }
  }
  shared.index_layer = layer.index;
  shared.topk = std::move(topk);
  if (layer.candidate_source) {
    shared.candidate_layer = layer.index;
    shared.candidate_blocks = std::move(blocks_kept);
  }
}

}  // namespace

void SharedAttentionState::begin_forward(int64_t start_pos_, int64_t tokens_) {
  start_pos = start_pos_;
  tokens = tokens_;
  kv_layer = -1;
  entries = 0;
  index_layer = -1;
  topk.clear();
  candidate_layer = -1;
  candidate_blocks.clear();
  trace_index_scores.clear();
  trace_candidates.clear();
}

Status attention_forward(const ModelConfig& config, const LayerInfo& layer, const AttentionWeights& w,
                         const Rope& rope, SharedAttentionState& shared, SequenceCache& cache, const float* x,
                         int64_t T, int64_t start_pos, float* out, const AttentionOptions& options) {
  // ---- Validate everything before touching any state. ------------------------------------
  if (layer.index < 0 || layer.index >= cache.num_layers())
    return invalid_argument(layer_name(layer) + ": not a layer of this cache (" +
                            std::to_string(cache.num_layers()) + " layers)");
  if (w.layer != layer.index)
    return invalid_argument(layer_name(layer) + ": attention weights are for layer " + std::to_string(w.layer));
  WindowRing& ring = cache.window(layer.index);
  if (T < 1) return invalid_argument(layer_name(layer) + ": attention over " + std::to_string(T) + " tokens");
  if (start_pos != ring.length())
    return invalid_argument(layer_name(layer) + ": chunk starts at position " + std::to_string(start_pos) +
                            " but the cache holds " + std::to_string(ring.length()) + " positions");
  if (start_pos + T > cache.max_context())
    return out_of_range(layer_name(layer) + ": positions up to " + std::to_string(start_pos + T) +
                        " exceed the cache's context of " + std::to_string(cache.max_context()));
  if (shared.start_pos != start_pos || shared.tokens != T)
    return internal_error(layer_name(layer) + ": shared attention state was begun for another chunk");
  const CpuExec& ex = options.exec;
  KvSourceCache* own_kv = nullptr;
  if (layer.role == LayerRole::kFull) {
    own_kv = cache.kv_source(layer.index);
    if (!own_kv) return internal_error(layer_name(layer) + ": Full layer without a kv-source cache");
  } else if (layer.role == LayerRole::kReindex || layer.role == LayerRole::kReuse) {
    if (shared.kv_layer != layer.kv_source)
      return internal_error(layer_name(layer) + ": reads the compressed KV of layer " +
                            std::to_string(layer.kv_source) + " but the latest published is " +
                            std::to_string(shared.kv_layer));
  }

  const int64_t hidden = config.hidden_size, H = config.num_attention_heads, D = config.head_dim;
  const int64_t ql = config.q_lora_rank, rd = rope.rope_dim();
  const int64_t win = config.sliding_window;
  const RopeKind kind = layer.rope;

  // ---- Query path: c = RMSNorm_q(W_qa x) [T, ql]; q = RoPE(W_qb c) [T, H, D]. --------------
  std::vector<float> c(static_cast<size_t>(T * ql)), q(static_cast<size_t>(T * H * D));
  matmul(ex, x, T, hidden, weight_ref(w.wq_a, w.bf16.wq_a), ql, c.data());
  rmsnorm_rows(c.data(), T, ql, w.q_norm.data(), config.rms_norm_eps, c.data());
  matmul(ex, c.data(), T, ql, weight_ref(w.wq_b, w.bf16.wq_b), H * D, q.data());
  // cos/sin per position of the chunk: [T, rd/2] each.
  std::vector<float> cosv(static_cast<size_t>(T * rd / 2)), sinv(static_cast<size_t>(T * rd / 2));
  for (int64_t i = 0; i < T; ++i) rope.cos_sin(kind, start_pos + i, cosv.data() + i * rd / 2, sinv.data() + i * rd / 2);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h)
      rope_rotate(q.data() + (i * H + h) * D, D, static_cast<int>(rd), cosv.data() + i * rd / 2,
                  sinv.data() + i * rd / 2, false);

  // ---- Window KV: FP8QDQ(RoPE(RMSNorm_kv(W_kv x))) [T, D]. --------------------------------
  std::vector<float> kv(static_cast<size_t>(T * D));
  matmul(ex, x, T, hidden, weight_ref(w.wkv, w.bf16.wkv), D, kv.data());
  rmsnorm_rows(kv.data(), T, D, w.kv_norm.data(), config.rms_norm_eps, kv.data());
  for (int64_t i = 0; i < T; ++i) {
    rope_rotate(kv.data() + i * D, D, static_cast<int>(rd), cosv.data() + i * rd / 2, sinv.data() + i * rd / 2, false);
    row_fake_quant(RowKind::kWindow, kv.data() + i * D, D);
  }

  // ---- Compressed branch: Full publishes; index sources select. ----------------------------
  if (layer.role == LayerRole::kFull) {
    CompressedGroups groups;
    compressor_step(ex, config, w, *own_kv, x, T, groups);
    compressor_publish(ex, config, w, rope, *own_kv, groups);
    shared.kv_layer = layer.index;
    shared.entries = own_kv->entries();
  }
  if (layer.role == LayerRole::kFull || layer.role == LayerRole::kReindex) {
    const KvSourceCache* src = cache.kv_source(shared.kv_layer);
    if (src) run_indexer(ex, config, layer, w, rope, *src, c.data(), x, T, start_pos, shared);
  }
  const KvSourceCache* compressed =
      (layer.ratio > 0 && shared.kv_layer >= 0 && shared.index_layer >= 0) ? cache.kv_source(shared.kv_layer)
                                                                            : nullptr;

  // ---- Keys of the window: positions [first, start_pos+T) = ring rows then chunk rows. ------
  const int64_t first = std::max<int64_t>(0, start_pos - (win - 1));
  std::vector<float> keys(static_cast<size_t>((start_pos + T - first) * D));
  for (int64_t p = first; p < start_pos; ++p) ring.read(p, keys.data() + (p - first) * D);
  std::copy(kv.begin(), kv.end(), keys.begin() + (start_pos - first) * D);

  // ---- Sink attention per token and head. ---------------------------------------------------
  // Work items are (token, head) pairs in flat order i·H + h, split into contiguous ranges run on
  // options.exec.pool (inline without one); each pair's arithmetic is the same whichever
  // thread runs it, so the result does not depend on the thread count or the ranges.
  const float scaling = static_cast<float>(std::pow(static_cast<double>(D), -0.5));
  const int k = config.index_topk;
  std::vector<float> o(static_cast<size_t>(T * H * D), 0.0f);
  auto attend_range = [&](int64_t begin, int64_t end) {
    std::vector<float> sel(static_cast<size_t>(k * D));  // dequantised selected compressed entries
    std::vector<float> logits;
    int64_t loaded = -1;  // token whose selected entries are in `sel`
    int nsel = 0;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / H, h = item % H;
      const int64_t t = start_pos + i;
      const int64_t lo = std::max<int64_t>(0, t - win + 1);
      const int64_t nwin = t - lo + 1;
      if (loaded != i) {
        nsel = 0;
        if (compressed) {
          const int32_t* row = shared.topk.data() + i * k;
          for (int j = 0; j < k; ++j)
            if (row[j] >= 0) compressed->read_main(row[j], sel.data() + (nsel++) * D);
        }
        loaded = i;
      }
      logits.resize(static_cast<size_t>(nwin + nsel));
      const float* win_rows = keys.data() + (lo - first) * D;  // [nwin, D], contiguous
      const float* qh = q.data() + (i * H + h) * D;
      dot_rows(qh, win_rows, nwin, D, logits.data());
      dot_rows(qh, sel.data(), nsel, D, logits.data() + nwin);
      const float sink = w.attn_sink[h];
      float m = sink;  // the sink joins the max and the denominator, never the values
      for (int64_t j = 0; j < nwin + nsel; ++j) {
        logits[j] *= scaling;
        m = std::max(m, logits[j]);
      }
      double denom = std::exp(static_cast<double>(sink - m));
      for (int64_t j = 0; j < nwin + nsel; ++j) {
        logits[j] = std::exp(logits[j] - m);
        denom += logits[j];
      }
      for (int64_t j = 0; j < nwin + nsel; ++j) logits[j] = static_cast<float>(logits[j] / denom);
      float* oh = o.data() + (i * H + h) * D;
      weighted_sum_rows(logits.data(), win_rows, nwin, D, oh);
      weighted_sum_rows(logits.data() + nwin, sel.data(), nsel, D, oh);
      // The values carry RoPE on their tail; undo the query position's rotation.
      rope_rotate(oh, D, static_cast<int>(rd), cosv.data() + i * rd / 2, sinv.data() + i * rd / 2, true);
    }
  };
  {
    const int64_t items = T * H;
    // Roughly the multiply-adds per item; threads only when each gets ≥ ~2M of them.
    const int64_t per_item = (std::min<int64_t>(win, start_pos + T) + k) * D * 2;
    int64_t chunks;
    if (options.threads > 0) {
      chunks = std::min<int64_t>(options.threads, items);  // an explicit count wins
    } else {
      const int64_t hw = ex.threads();
      chunks = std::min<int64_t>({hw, items, std::max<int64_t>(1, items * per_item / (int64_t{1} << 21))});
    }
    if (chunks <= 1) {
      attend_range(0, items);
    } else {
      ex.parallel_for(items, (items + chunks - 1) / chunks, attend_range);
    }
  }

  // ---- Grouped output projection: group g's heads (H/G·D) × rows g·o_lora.. of W_oa. --------
  const int64_t groups = config.o_groups, olr = config.o_lora_rank;
  const int64_t group_in = H / groups * D;
  std::vector<float> mid(static_cast<size_t>(T * groups * olr));
  std::vector<float> gin(static_cast<size_t>(T * group_in)), gout(static_cast<size_t>(T * olr));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t i = 0; i < T; ++i)
      std::copy(o.begin() + i * H * D + g * group_in, o.begin() + i * H * D + (g + 1) * group_in,
                gin.begin() + i * group_in);
    matmul(ex, gin.data(), T, group_in, weight_ref(w.wo_a, w.bf16.wo_a).offset(g * olr * group_in), olr,
           gout.data());
    for (int64_t i = 0; i < T; ++i)
      std::copy(gout.begin() + i * olr, gout.begin() + (i + 1) * olr, mid.begin() + i * groups * olr + g * olr);
  }
  matmul(ex, mid.data(), T, groups * olr, weight_ref(w.wo_b, w.bf16.wo_b), hidden, out);

  // ---- The chunk's window rows enter the ring (it keeps the newest `sliding_window`). ------
  ring.push_rows(kv.data(), T);
  return ok_status();
}

}  // namespace dsv41
