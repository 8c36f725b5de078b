// Named intermediates of one prefill (`--dump` of `dsv41 run` / `dsv41 logits`), under the golden
// fixtures' tensor names and shapes without the `s{s}.` prefix (shared/golden/README.md), so a
// dump compares tensor by tensor with golden.safetensors. Spec: issue 3 "CLI" (--dump).
//
// Families (the NAME list of --dump): streams, pre, final_hidden, engram_hash, router, topk,
// index_scores, candidates, caches, or all. Tensors (L = prompt length, G = compressed entries):
//   layer{jj}.streams [L, hc, hidden] F32      layer{jj}.pre [L, hc] F32
//   final_hidden [L, hidden] F32               engram_hash [L, engram layers, heads·(max_ngram−1)] I64
//   layer{jj}.router_experts [L, k] I64 and layer{jj}.router_weights [L, k] F32
//   layer{jj}.topk [L, index_topk] I64, layer{jj}.index_scores [L, G] F32   (index sources, G > 0)
//   layer{jj}.candidates [L, G] U8                                          (candidate source, G > 0)
//   layer{jj}.compressed_kv [G, head_dim], layer{jj}.index_keys [G, index_head_dim] (kv sources, G > 0)
//   layer{jj}.window_kv [min(L, window−1), head_dim] F32                    (every layer)
// The caches are dequantised from the packed records (what the reference keeps after the prompt).
// Owns nothing beyond the tensors it returns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "format/safetensors.h"
#include "model/model.h"

namespace dsv41 {

// Which families a dump holds.
struct DumpSelection {
  bool streams = false, pre = false, final_hidden = false, engram_hash = false, router = false, topk = false,
       index_scores = false, candidates = false, caches = false;
  // `vision` (issue 16): the image stages vision.patches [n, 3, p, p], vision.vit [n, width],
  // vision.aligner [tokens, hidden] of every image (numbered vision.<i>.… after the first), written
  // by the command that encoded them, not from the trace; not part of "all" or any().
  bool vision = false;
  // `dspark` (issue 15): the block the DSpark drafter proposes after the last position s of the
  // ids, with slot 0 = the target's greedy token for s+1 (as at a decode step):
  // dspark.draft_ids [B] I32 (temperature 0), dspark.draft_logits [B, V] F32 (after the Markov
  // bias), dspark.confidence [B] F32 (logits); written alone (not part of "all" or any()).
  bool dspark = false;
  // A trace family is selected (the prefill must record a trace).
  bool any() const {
    return streams || pre || final_hidden || engram_hash || router || topk || index_scores || candidates || caches;
  }
};

// "streams, pre, final_hidden, engram_hash, router, topk, index_scores, candidates, caches, all, vision, dspark"
std::string dump_family_names();

// Parses "topk,caches" (comma-separated, whole words, no empty items). An unknown name is an
// invalid_argument naming it and listing the valid ones.
Result<DumpSelection> parse_dump_names(std::string_view list);

// One tensor with its own bytes (little-endian, as written).
struct DumpTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Converts the trace of ONE forward call that started at an empty sequence (a single-chunk
// prefill of `tokens` tokens) and the cache after it into the selected tensors, in layer order.
// Fails (naming the family) if the trace does not match the model's layers or `tokens`.
Result<std::vector<DumpTensor>> collect_dump(const Model& model, const ForwardTrace& trace,
                                             const SequenceCache& cache, int64_t tokens,
                                             const DumpSelection& selection);

// Writes the tensors to one safetensors file (atomically; nothing written on error).
Status write_dump(const std::string& path, const std::vector<DumpTensor>& tensors);

}  // namespace dsv41
