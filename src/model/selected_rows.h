// The selected compressed entries of a decoding segment, unpacked once per selection (issue 9 item
// 8: a batch-8 decode step spends about a fifth of its time on per-token attention work, and a
// Reuse layer attends exactly the entries of the same kv source that the layer before it
// selected: model.md §3.5, plan/layer_plan.h), and each entry once per selection: the rows of a
// verify step (a decode token and its drafts, consecutive positions) select mostly the same
// entries. Spec of the attention itself: attention_steps.h step 5.
// Owns: the unpacked rows and the tag that says which selection they are. Valid for one forward
// (the owner resets `source` at each batch); the KvSourceCache is borrowed for that forward.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/sequence_cache.h"
#include "format/config.h"
#include "model/attention.h"
#include "model/attention_steps.h"

namespace dsv41 {

// The most rows a segment holds its selection for: decode steps and verify steps (a token and up
// to its drafts); a prefill chunk's rows unpack per call (held, they would take rows · index_topk ·
// head_dim floats).
constexpr int64_t kSelectedRowsMax = 8;

struct SelectedRows {
  const KvSourceCache* source = nullptr;  // null: nothing held
  int64_t entries = 0, start_pos = 0, rows = 0;
  std::vector<int32_t> topk;   // [rows, index_topk] the selection the values unpack
  std::vector<int32_t> count;  // [rows] entries selected per row (topk's non-negative ones)
  std::vector<float> values;   // [rows, index_topk, head_dim]: row i's entries from values + i·k·D
  // Unpacking's bookkeeping: an open-addressing table from an entry to the slot (i·k + n) of
  // `values` that already holds it in this selection (2^m ≥ 2·rows·k cells, key −1 = empty), sized
  // by the selection's shape, never by the context, so a decode step allocates nothing.
  std::vector<int32_t> unpacked_entry, unpacked_slot;
};

// sparse_sink_attention (attention_steps.h) with the selection's main rows taken from `held` when
// it holds this selection of `compressed` (same source object, entry count, positions and top-k),
// else unpacked into it first. The same values in the same order as unpacking per call, so the
// same bits. compressed and topk must be non-null. No allocation once held has seen the shape.
void sparse_sink_attention_selected(const ModelConfig& config, const AttentionWeights& w, const WindowRing& ring,
                                    const float* kv, const KvSourceCache& compressed, const int32_t* topk,
                                    const float* q, const RopeRows& rope, int64_t rope_row0, int64_t T,
                                    int64_t start_pos, float* o, const AttentionOptions& options,
                                    AttentionScratch* scratch, SelectedRows& held);

}  // namespace dsv41
