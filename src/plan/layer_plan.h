// The layer plan: what each backbone layer does, derived from the config alone.
// Spec: model.md §3.4 "Layer roles and shared state", §3.5 (CED halves), §3.6 (RoPE per type).
//
//   SWA-only (ratio 0)  window attention only.
//   Full     (kv source) owns a compressor: publishes compressed KV + index keys, runs its own
//                        indexer; the candidate source also builds the candidate pool.
//   Reindex  (index source, not kv source) reads the latest published KV + index keys, runs its
//                        own indexer (restricted to the candidate pool when after the source).
//   Reuse    (other compressed layers) reads the latest published KV and the latest top-k.
// A schedule that cannot be executed (a compressed layer whose latest kv source has another
// ratio or does not exist, an index or kv source that is SWA-only, a kv source without its own
// indexer, a candidate source that is not a kv source or is followed by one, unsorted or
// duplicate id lists, ...) is rejected with the reason, naming the config key.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "format/config.h"

namespace dsv41 {

enum class LayerRole { kSwaOnly, kFull, kReindex, kReuse };
enum class RopeKind { kMain, kCompress };  // θ = rope_theta, no YaRN | compress_rope_theta + YaRN
enum class ModelHalf { kEncoder, kDecoder };

const char* layer_role_name(LayerRole role);

struct LayerInfo {
  int index = 0;
  LayerRole role = LayerRole::kSwaOnly;
  int ratio = 0;              // compress_ratios[index]
  int kv_source = -1;         // layer whose compressed KV this layer reads (itself if Full), -1 if none
  int index_source = -1;      // layer whose top-k this layer uses (itself if Full/Reindex), -1 if none
  bool candidate_source = false;   // builds the hierarchical candidate pool (candidate_source_layer_id)
  bool restricted_to_candidates = false;  // Reindex layer after the candidate source: its top-k
                                          // only considers positions in the candidate pool
  bool has_engram = false;
  int engram_slot = -1;       // position in engram_layer_ids, -1 if none
  ModelHalf half = ModelHalf::kEncoder;
  RopeKind rope = RopeKind::kMain;
};

struct LayerPlan {
  std::vector<LayerInfo> layers;  // num_hidden_layers entries (DSpark layers not included)
  int decoder_start = -1;         // first decoder layer (the last kv source), -1 if no kv source

  // Compressed entries per context token held in global KV: Σ over kv sources of 1/ratio.
  double global_entries_per_token() const;
};

Result<LayerPlan> build_layer_plan(const ModelConfig& config);

// A fixed-width table (layer, role, ratio, kv src, idx src, candidates, half, rope, engram slot)
// followed by the decoder start and global entries per token, for `dsv41 inspect`.
std::string format_layer_plan(const LayerPlan& plan);

}  // namespace dsv41
