// The replay rule: which layers run which positions of a prefill, for the three prefill depths.
// Spec: system.md §1 (CED prefill compute), §3 (serving a turn: encoder replay, encoder over the
// suffix, decoder bounded replay), model.md §3.5. This file is the one place that decides it; the
// engine only executes the per-layer ranges it returns (Segment::depth).
//
// Vocabulary: a prompt of N positions whose first h are a global hit (their global KV present,
// h = 0 for a cold prompt). The encoder is the layers before the plan's decoder_start (the
// decoder's kv source, "dsrc"); the decoder is dsrc and everything after it. w = sliding_window.
// Per layer ℓ a segment runs two ranges of positions (LayerRange):
//   input_from:  from here on the layer takes its attention input (mHC + RMSNorm) and, if it is a
//                kv source, feeds its compressor (rows under the write floor are skipped);
//   attend_from: from here on it runs everything (attention, window, FFN); its window is cut at
//                this position (a query at i sees keys [max(attend_from, i − w + 1), i]).
//   input_from ≤ attend_from. Positions before input_from do nothing at that layer.
//
// The depths:
//   full     every layer, every new position (h … N−1). The validation baseline.
//   bounded  the paper's system. Encoder layers: every new position. The decoder's kv source:
//            its compressor sees every new position (it projects the decoder's global KV); the
//            decoder (dsrc included) runs attention/FFN only on the tail, the last w prompt
//            positions, every decoder window cut at N − w. After a hit without window state the
//            encoder replays the last w positions of the hit, windows cut at h − w.
//   exact    the same results as full (bit for bit on the CPU, whose kernels' per-row results do
//            not depend on the other rows of a call): the windows' receptive field is bounded, so
//            a pyramid suffices. Working down from what must be exact at the end — every layer's
//            window rows for the last w − 1 positions, every kv source's pending compressor group,
//            and (decoder) the last position's output — layer ℓ must run from
//              s_ℓ = min(need_ℓ − (w − 1), end − (w − 1), pending_ℓ)
//            where need_ℓ is the first position whose output layer ℓ + 1 needs exact
//            (need_ℓ = s_{ℓ+1}), end = N for the decoder tail and h for the encoder replay, and
//            pending_ℓ the first position of its incomplete compressor group. Derived from the
//            plan, nothing hard-coded: for V4.1-Flash the decoder pyramid starts
//            20·(w − 1) + 1 positions before the end.
// Prompts no longer than the tail (and, for exact, than the pyramid) run full depth in every mode.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "plan/layer_plan.h"

namespace dsv41 {

enum class PrefillDepth { kFull, kBounded, kExact };
const char* prefill_depth_name(PrefillDepth depth);  // "full", "bounded", "exact"
Result<PrefillDepth> parse_prefill_depth(std::string_view name);

struct LayerRange {
  int64_t input_from = 0;
  int64_t attend_from = 0;
};

// Token-layers of work by kind (system.md §1 "prefill compute"; keys of --json / telemetry).
struct TokenLayers {
  int64_t encoder = 0;     // encoder layers on new positions, and the decoder source's compressor-only rows
  int64_t decoder = 0;     // decoder layers on new positions
  int64_t replay = 0;      // any layer on positions of the hit (window replay)
  int64_t full_depth = 0;  // what a full-depth prefill of the new positions costs: (N − h) · layers
  TokenLayers& operator+=(const TokenLayers& o);
};

// One forward's worth of a prefill: positions [begin, end) with per-layer ranges (one entry per
// layer; empty = full depth). replay: the positions are the hit's (already in the sequence).
struct PrefillStep {
  int64_t begin = 0, end = 0;
  bool replay = false;
  std::vector<LayerRange> layers;
};

struct PrefillPlan {
  PrefillDepth depth = PrefillDepth::kFull;
  PrefillDepth effective = PrefillDepth::kFull;  // full when the prompt fits in the tail / pyramid
  std::vector<PrefillStep> steps;                // in order; each may be chunked further
  TokenLayers work;
};

// The plan for a prompt of N positions with a global hit of h positions (0 ≤ h < N, h = 0: cold).
// `windows_present`: the sequence already holds exact window state at h (a live sequence or a
// restored snapshot): no encoder replay. Plans without a decoder (no kv source) run full depth.
Result<PrefillPlan> plan_prefill(const LayerPlan& plan, int64_t window, int64_t N, int64_t h, bool windows_present,
                                 PrefillDepth depth);

// Why `depth` cannot apply to any prompt of this plan (a plan without a decoder, i.e. no kv
// source, has no encoder-only positions: every depth runs full), as one line for the user; empty
// when it can apply. Commands print it once, not per prompt.
std::string depth_fallback_note(const LayerPlan& plan, PrefillDepth depth);

// The work of positions [begin, end) under per-layer ranges (empty = full depth).
TokenLayers count_token_layers(std::span<const LayerRange> layers, int num_layers, int decoder_start,
                               int64_t begin, int64_t end, bool replay);

}  // namespace dsv41
