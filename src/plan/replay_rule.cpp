// The replay rule (see replay_rule.h): per-layer position ranges of a prefill at each depth.
#include "plan/replay_rule.h"

#include <algorithm>
#include <limits>

namespace dsv41 {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max() / 4;

// First position of the incomplete compressor group at `end` (a Full layer of ratio r ≥ 2), or
// kNever when the group is complete (nothing pending).
int64_t pending_from(const LayerInfo& info, int64_t end) {
  if (info.role != LayerRole::kFull || info.ratio < 2) return kNever;
  const int64_t first = end / info.ratio * info.ratio;
  return first < end ? first : kNever;
}

}  // namespace

const char* prefill_depth_name(PrefillDepth depth) {
  switch (depth) {
    case PrefillDepth::kFull:
      return "full";
    case PrefillDepth::kBounded:
      return "bounded";
    case PrefillDepth::kExact:
      return "exact";
  }
  return "full";
}

Result<PrefillDepth> parse_prefill_depth(std::string_view name) {
  if (name == "full") return PrefillDepth::kFull;
  if (name == "bounded") return PrefillDepth::kBounded;
  if (name == "exact") return PrefillDepth::kExact;
  return invalid_argument("depth \"" + std::string(name) + "\": expected full, bounded or exact");
}

TokenLayers& TokenLayers::operator+=(const TokenLayers& o) {
  encoder += o.encoder;
  decoder += o.decoder;
  replay += o.replay;
  full_depth += o.full_depth;
  return *this;
}

TokenLayers count_token_layers(std::span<const LayerRange> layers, int num_layers, int decoder_start,
                               int64_t begin, int64_t end, bool replay) {
  TokenLayers t;
  for (int l = 0; l < num_layers; ++l) {
    const LayerRange r = layers.empty() ? LayerRange{} : layers[l];
    const int64_t attend = std::max<int64_t>(0, end - std::max(begin, r.attend_from));
    const int64_t input_only = std::max<int64_t>(0, std::min(end, std::max(begin, r.attend_from)) -
                                                        std::max(begin, r.input_from));
    if (replay) {
      t.replay += attend + input_only;
    } else if (decoder_start < 0 || l < decoder_start) {
      t.encoder += attend + input_only;
    } else {
      t.decoder += attend;
      t.encoder += input_only;  // the decoder source's compressor-only rows (CED)
    }
  }
  if (!replay) t.full_depth = (end - begin) * num_layers;
  return t;
}

Result<PrefillPlan> plan_prefill(const LayerPlan& plan, int64_t window, int64_t N, int64_t h, bool windows_present,
                                 PrefillDepth depth) {
  if (N < 1 || h < 0 || h >= N)
    return invalid_argument("prefill of positions " + std::to_string(h) + ".." + std::to_string(N) +
                            ": the hit must leave at least one new position");
  if (window < 1) return invalid_argument("prefill: sliding window must be ≥ 1");
  const int L = static_cast<int>(plan.layers.size());
  const int ds = plan.decoder_start;
  const bool intact = windows_present || h == 0;  // every ring is exact at h
  PrefillPlan out;
  out.depth = depth;
  std::vector<LayerRange> ranges(L);  // LayerRange{0, 0}: every position, windows not cut

  // Full depth: every layer on every new position. Without window state at the hit, the windows
  // are rebuilt by replaying the whole hit at full depth (global rows under the write floor).
  auto full = [&] {
    out.effective = PrefillDepth::kFull;
    out.steps.clear();
    // The replay's ranges start every window at 0 (so chunks of it continue one another).
    if (!intact) out.steps.push_back({0, h, true, std::vector<LayerRange>(L)});
    out.steps.push_back({h, N, false, {}});
  };
  if (depth == PrefillDepth::kFull || ds < 0) {
    full();
  } else if (depth == PrefillDepth::kBounded) {
    const int64_t tail = std::max<int64_t>(0, N - window);
    const int64_t replay_from = intact ? h : std::max<int64_t>(0, h - window);
    if (tail <= h && intact) {
      full();  // the tail lies in the new positions' first w: nothing to save
    } else {
      out.effective = PrefillDepth::kBounded;
      for (int l = 0; l < L; ++l) {
        LayerRange& r = ranges[l];
        if (l < ds) {
          // Encoder: every new position; after a hit without windows, the hit's last w positions
          // first, windows cut there.
          r.input_from = r.attend_from = intact ? 0 : replay_from;
        } else {
          r.attend_from = std::max(tail, replay_from);
          // The decoder source's compressor sees every position the encoder runs (its global KV
          // for the new positions; the pending group rebuilt from the replay after a hit).
          r.input_from = l == ds ? (intact ? 0 : replay_from) : r.attend_from;
        }
      }
      const int64_t lo = intact ? h : std::min(replay_from, ranges[ds].attend_from);
      if (lo < h) out.steps.push_back({lo, h, true, ranges});
      out.steps.push_back({h, N, false, ranges});
    }
  } else {
    // Exact: the decoder pyramid from the top, then (without windows at h) the encoder pyramid.
    std::vector<int64_t> s(L, 0);
    int64_t need = N - 1;  // the last position's output (its logits)
    for (int l = L - 1; l >= ds; --l) {
      // Outputs exact from `need` and the ring's last w − 1 rows exact at N. (The decoder source's
      // pending group at N is its compressor's, fed every new position through input_from.)
      s[l] = std::max<int64_t>(0, std::min(need - (window - 1), N - (window - 1)));
      need = s[l];
    }
    // The decoder source's compressor takes every new position (and, without windows, the
    // pending group of the hit).
    int64_t ds_input = intact ? h : std::min(h, pending_from(plan.layers[ds], h));
    ds_input = std::min(ds_input, s[ds]);
    if (intact) {
      if (s[ds] <= h) {
        full();  // the pyramid reaches the hit: a full-depth suffix is exact and no dearer
      } else {
        out.effective = PrefillDepth::kExact;
        for (int l = 0; l < L; ++l) {
          if (l < ds) continue;  // encoder: every new position, windows intact
          ranges[l].attend_from = s[l];
          ranges[l].input_from = l == ds ? 0 : s[l];
        }
        out.steps.push_back({h, N, false, ranges});
      }
    } else {
      out.effective = PrefillDepth::kExact;
      // Encoder pyramid over the hit: every ring's last w − 1 rows and pending group exact at h,
      // and the top encoder layer's outputs exact wherever the decoder source reads them.
      need = std::min(ds_input, s[ds]);
      for (int l = ds - 1; l >= 0; --l) {
        s[l] = std::max<int64_t>(0, std::min({need - (window - 1), h - (window - 1), pending_from(plan.layers[l], h)}));
        need = s[l];
      }
      for (int l = 0; l < L; ++l) {
        ranges[l].attend_from = s[l];
        ranges[l].input_from = l == ds ? ds_input : s[l];
      }
      int64_t lo = h;
      for (int l = 0; l < L; ++l) lo = std::min({lo, ranges[l].input_from, ranges[l].attend_from});
      if (lo < h) out.steps.push_back({lo, h, true, ranges});
      out.steps.push_back({h, N, false, ranges});
    }
  }
  for (const PrefillStep& st : out.steps) out.work += count_token_layers(st.layers, L, ds, st.begin, st.end, st.replay);
  return out;
}

std::string depth_fallback_note(const LayerPlan& plan, PrefillDepth depth) {
  if (depth == PrefillDepth::kFull || plan.decoder_start >= 0) return {};
  return std::string("the model's layer plan has no decoder (no kv source), so CED and replay do not apply: --depth ") +
         prefill_depth_name(depth) + " runs full depth";
}

}  // namespace dsv41
