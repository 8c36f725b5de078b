// The layer plan: what each backbone layer does, derived from the config alone.
// Spec: model.md §3.4 "Layer roles and shared state", §3.5 (CED halves), §3.6 (RoPE per type).
//
//   SWA-only (ratio 0)  window attention only.
//   Full     (kv source) owns a compressor: publishes compressed KV + index keys, runs its own
//                        indexer; the candidate source also builds the candidate pool.
//   Reindex  (index source, not kv source) reads the latest published KV + index keys, runs its
//                        own indexer (restricted to the candidate pool when after the source).
//   Reuse    (other compressed layers) reads the latest published KV and the latest top-k.
// A schedule that cannot be executed (a compressed layer before any Full layer of its ratio,
// an index source that is SWA-only, ...) is rejected with the reason.
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
  bool candidate_source = false;   // builds the hierarchical candidate pool
  bool restricted_to_candidates = false;  // index source after the candidate source
  bool has_engram = false;
  int engram_slot = -1;       // position in engram_layer_ids, -1 if none
  ModelHalf half = ModelHalf::kEncoder;
  RopeKind rope = RopeKind::kMain;
};

struct LayerPlan {
  std::vector<LayerInfo> layers;  // num_hidden_layers entries (DSpark layers not included)
  int decoder_start = -1;         // first decoder layer (the last kv source), -1 if no CED split

  // Compressed entries per context token held in global KV: Σ over kv sources of 1/ratio.
  double global_entries_per_token() const;
};

Result<LayerPlan> build_layer_plan(const ModelConfig& config);

// A fixed-width table (layer, role, ratio, kv src, idx src, cand, engram, half, rope) for
// `dsv41 inspect`.
std::string format_layer_plan(const LayerPlan& plan);

}  // namespace dsv41
