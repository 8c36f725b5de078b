// Bytes a decode step must read from memory: the roofline numerator (issue 3 item 6).
// Spec: model.md §3 (which weights a token touches), §4 (cache records).
// Owns nothing; reads names, shapes and dtypes of a checkpoint (no tensor data).
//
// Per decoded token the forward pass reads every backbone weight once (attention, compressors,
// indexers, mHC, norms, router, shared expert, Engram projections, the head), the routed experts
// it selects (on average num_experts_per_tok / n_routed_experts of them), one embedding row and,
// per Engram layer, one table row per hash column ((engram_max_ngram_size − 1) · engram_n_heads).
// Vision and drafter (mtp) tensors are not read by the text backbone and are left out.
// Two byte counts: as the engine holds the weights now (every weight widened to float32 at load,
// scales folded in) and as stored in the checkpoint (BF16 / FP8 / packed FP4, scales included) —
// what an engine computing from the packed formats would read.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "format/config.h"
#include "model/weights.h"

namespace dsv41 {

struct DecodeWeightTraffic {
  double params = 0;        // logical weights read per decoded token
  double engine_bytes = 0;  // the same as float32, as the engine holds them
  double stored_bytes = 0;  // in the checkpoint's stored dtypes, scale companions included
  int64_t checkpoint_params = 0;  // every text-backbone weight, for scale
};

Result<DecodeWeightTraffic> decode_weight_traffic(const WeightRegistry& weights, const ModelConfig& config);

// Upper bound on the cache bytes a decode step reads: the whole packed cache in use (window
// rings, main rows, index keys, pending groups), counted once. Layers that share a cache read
// the same rows (hot in cache after the first), and top-k attention reads at most index_topk
// main rows, so the real figure is lower; at the contexts we benchmark it is small next to the
// weights either way.
inline double decode_cache_bytes_upper_bound(const CacheFootprint& cache) { return static_cast<double>(cache.total()); }

}  // namespace dsv41
