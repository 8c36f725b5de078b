// One layer's attention over a chunk of tokens with the packed cache (see attention.h).
// Spec: model.md §3.4–§3.6, §4.
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "model/attention_steps.h"
#include "model/compressor.h"

namespace dsv41 {
namespace {

std::string layer_name(const LayerInfo& layer) { return "layer " + std::to_string(layer.index); }

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
  call_row0 = topk_row0 = candidate_row0 = 0;
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

  const int64_t H = config.num_attention_heads, D = config.head_dim, ql = config.q_lora_rank;
  const LayerSteps steps = layer_steps(layer);
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) positions[i] = start_pos + i;
  RopeRows rope_rows;
  rope_rows.compute(rope, layer.rope, positions.data(), T);

  std::vector<float> c(static_cast<size_t>(T * ql)), q(static_cast<size_t>(T * H * D));
  std::vector<float> kv(static_cast<size_t>(T * D)), o(static_cast<size_t>(T * H * D));
  const CpuExec& ex = options.exec;
  attention_query(ex, config, w, rope_rows, x, T, c.data(), q.data());
  attention_window_kv(ex, config, w, rope_rows, x, T, kv.data());
  if (steps.compress) {
    CompressedGroups groups;
    compressor_step(ex, config, w, *own_kv, x, T, groups);
    compressor_publish(ex, config, w, rope, *own_kv, groups);
    shared.kv_layer = layer.index;
    shared.entries = own_kv->entries();
  }
  if (steps.index) {
    const KvSourceCache* src = cache.kv_source(shared.kv_layer);
    if (src) attention_index(ex, config, layer, w, rope, *src, steps.restricted, c.data(), x, T, start_pos, shared);
  }
  const KvSourceCache* compressed = (steps.attend_compressed && shared.kv_layer >= 0 && shared.index_layer >= 0)
                                        ? cache.kv_source(shared.kv_layer)
                                        : nullptr;
  sparse_sink_attention(config, w, ring, kv.data(), compressed, compressed ? shared.topk.data() : nullptr, q.data(),
                        rope_rows, 0, T, start_pos, o.data(), options);
  attention_output(ex, config, w, o.data(), T, out);
  // The chunk's window rows enter the ring.
  ring.push_rows(kv.data(), T);
  return ok_status();
}

}  // namespace dsv41
