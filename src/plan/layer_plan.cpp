// Derives the layer plan (role, shared-state sources, CED half, RoPE kind of every backbone
// layer) from the config and rejects schedules that cannot be executed.
// Spec: model.md §3.4 "Layer roles and shared state", §3.5 (CED), §3.6 (RoPE per layer type).
//
// The shared state is one slot per quantity per forward (the release's shared attention
// runtime): a Full layer replaces the published compressed KV + index keys, an index source
// replaces the published top-k, and everyone else reads whatever was published last. So a
// layer's sources are simply the latest kv source / index source at or before it, and a
// schedule is consistent when what a layer reads was produced at the ratio it runs at.
#include "plan/layer_plan.h"

#include <fmt/format.h>

namespace dsv41 {
namespace {

// An id list must name backbone layers, each once, in execution order.
Status check_layer_list(const char* key, const std::vector<int>& ids, int num_layers) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_layers)
      return corrupt(fmt::format("{}: layer {} (entry {}) out of range [0, {}) of num_hidden_layers", key, ids[i], i,
                                 num_layers));
    if (i > 0 && ids[i] == ids[i - 1])
      return corrupt(fmt::format("{}: layer {} listed twice", key, ids[i]));
    if (i > 0 && ids[i] < ids[i - 1])
      return corrupt(fmt::format("{}: not in increasing order (layer {} after {})", key, ids[i], ids[i - 1]));
  }
  return ok_status();
}

// Membership per layer (ids already checked to be in range), so that planning stays linear in
// the number of layers whatever the config says.
std::vector<int> slot_of_layer(const std::vector<int>& ids, int num_layers) {
  std::vector<int> slot(num_layers, -1);
  for (size_t i = 0; i < ids.size(); ++i) slot[ids[i]] = int(i);
  return slot;
}

}  // namespace

const char* layer_role_name(LayerRole role) {
  switch (role) {
    case LayerRole::kSwaOnly: return "SWA-only";
    case LayerRole::kFull: return "Full";
    case LayerRole::kReindex: return "Reindex";
    case LayerRole::kReuse: return "Reuse";
  }
  return "?";
}

double LayerPlan::global_entries_per_token() const {
  double entries = 0;
  for (const LayerInfo& layer : layers)
    if (layer.role == LayerRole::kFull) entries += 1.0 / layer.ratio;
  return entries;
}

Result<LayerPlan> build_layer_plan(const ModelConfig& c) {
  const int L = c.num_hidden_layers;
  if (L <= 0) return corrupt(fmt::format("num_hidden_layers: must be positive, got {}", L));
  if (c.compress_ratios.size() < size_t(L))
    return corrupt(fmt::format("compress_ratios: has {} entries, fewer than num_hidden_layers {}",
                               c.compress_ratios.size(), L));
  for (int l = 0; l < L; ++l)
    if (c.compress_ratios[l] < 0)
      return corrupt(fmt::format("compress_ratios: entry {} is negative ({})", l, c.compress_ratios[l]));
  DSV41_RETURN_IF_ERROR(check_layer_list("kv_source_layer_ids", c.kv_source_layer_ids, L));
  DSV41_RETURN_IF_ERROR(check_layer_list("index_source_layer_ids", c.index_source_layer_ids, L));
  DSV41_RETURN_IF_ERROR(check_layer_list("engram_layer_ids", c.engram_layer_ids, L));
  const std::vector<int> kv_slot = slot_of_layer(c.kv_source_layer_ids, L);
  const std::vector<int> index_slot = slot_of_layer(c.index_source_layer_ids, L);
  const std::vector<int> engram_slot = slot_of_layer(c.engram_layer_ids, L);

  for (int k : c.kv_source_layer_ids) {
    if (c.compress_ratios[k] == 0)
      return corrupt(fmt::format("kv_source_layer_ids: layer {} has compress ratio 0 (SWA-only) and cannot own a "
                                 "compressor",
                                 k));
    // A Full layer scores its own fresh cache; without its own indexer it would reuse a top-k
    // computed over the cache it just replaced.
    if (index_slot[k] < 0)
      return corrupt(fmt::format("kv_source_layer_ids: layer {} is not in index_source_layer_ids (a Full layer "
                                 "runs its own indexer)",
                                 k));
  }
  for (int i : c.index_source_layer_ids)
    if (c.compress_ratios[i] == 0)
      return corrupt(fmt::format("index_source_layer_ids: layer {} has compress ratio 0 (SWA-only) and has no "
                                 "compressed cache to index",
                                 i));

  const int cand = c.candidate_source_layer_id;
  if (cand < -1 || cand >= L)
    return corrupt(fmt::format("candidate_source_layer_id: layer {} out of range [0, {}) (or -1 for none)", cand, L));
  if (cand >= 0) {
    // The pool is block-max of the source's own scores over its own fresh cache (model.md §3.4).
    if (kv_slot[cand] < 0)
      return corrupt(fmt::format("candidate_source_layer_id: layer {} is not a kv source (the candidate pool is "
                                 "built by a Full layer over the cache it publishes)",
                                 cand));
    // Later index sources are restricted to the pool, which names positions of the candidate
    // source's cache; a later Full layer would replace that cache under it.
    for (int k : c.kv_source_layer_ids)
      if (k > cand)
        return corrupt(fmt::format("kv_source_layer_ids: layer {} publishes a new cache after the candidate "
                                   "source (layer {}), whose pool indexes the replaced one",
                                   k, cand));
  }

  LayerPlan plan;
  // CED split (model.md §3.5): from the last kv source on, layers see the past only through
  // that layer's published cache and their own SWA windows, so they form the decoder; the
  // last kv source belongs to it because its compressor reads its own attention input. In
  // V4.1-Flash that is layer 20 (decoder 20..39); in the tiny fixture layer 6.
  plan.decoder_start = c.kv_source_layer_ids.empty() ? -1 : c.kv_source_layer_ids.back();

  int latest_kv = -1, latest_index = -1;
  plan.layers.resize(L);
  for (int l = 0; l < L; ++l) {
    LayerInfo& info = plan.layers[l];
    info.index = l;
    info.ratio = c.compress_ratios[l];
    info.half = plan.decoder_start >= 0 && l >= plan.decoder_start ? ModelHalf::kDecoder : ModelHalf::kEncoder;
    // SWA-only layers: θ = rope_theta, no YaRN; compressed layers: compress_rope_theta + YaRN.
    info.rope = info.ratio > 0 ? RopeKind::kCompress : RopeKind::kMain;
    info.engram_slot = engram_slot[l];
    info.has_engram = info.engram_slot >= 0;
    if (info.ratio == 0) {
      info.role = LayerRole::kSwaOnly;
      continue;
    }
    if (kv_slot[l] >= 0) {
      info.role = LayerRole::kFull;
      latest_kv = latest_index = l;
    } else {
      // Reindex and Reuse layers attend to the latest published cache: it must exist and be
      // compressed at this layer's ratio (positions, visibility ⌊(t+1)/r⌋ and RoPE positions g·r
      // all depend on r).
      const bool reindex = index_slot[l] >= 0;
      const char* key = reindex ? "index_source_layer_ids" : "compress_ratios";
      if (latest_kv < 0)
        return corrupt(fmt::format("{}: layer {} ({}, ratio {}) has no earlier kv source to read a compressed cache "
                                   "from",
                                   key, l, reindex ? "Reindex" : "Reuse", info.ratio));
      if (c.compress_ratios[latest_kv] != info.ratio)
        return corrupt(fmt::format("{}: layer {} ({}, ratio {}) would read the cache of kv source {}, whose ratio "
                                   "is {}",
                                   key, l, reindex ? "Reindex" : "Reuse", info.ratio, latest_kv,
                                   c.compress_ratios[latest_kv]));
      info.role = reindex ? LayerRole::kReindex : LayerRole::kReuse;
      if (reindex) latest_index = l;
    }
    info.kv_source = latest_kv;
    info.index_source = latest_index;
    info.candidate_source = l == cand;
    info.restricted_to_candidates = cand >= 0 && l > cand && info.role == LayerRole::kReindex;
  }
  return plan;
}

std::string format_layer_plan(const LayerPlan& plan) {
  auto source = [](int layer) { return layer < 0 ? std::string("-") : std::to_string(layer); };
  // Fixed width with the right-aligned engram slot last, so no line carries trailing blanks.
  std::string out = fmt::format("{:>5}  {:<8}  {:>5}  {:>6}  {:>7}  {:<10}  {:<7}  {:<8}  {:>6}\n", "layer", "role",
                                "ratio", "kv src", "idx src", "candidates", "half", "rope", "engram");
  for (const LayerInfo& l : plan.layers) {
    const char* cand = l.candidate_source ? "source" : l.restricted_to_candidates ? "restricted" : "-";
    out += fmt::format("{:>5}  {:<8}  {:>5}  {:>6}  {:>7}  {:<10}  {:<7}  {:<8}  {:>6}\n", l.index,
                       layer_role_name(l.role), l.ratio, source(l.kv_source), source(l.index_source), cand,
                       l.half == ModelHalf::kDecoder ? "decoder" : "encoder",
                       l.rope == RopeKind::kCompress ? "compress" : "main",
                       l.has_engram ? std::to_string(l.engram_slot) : std::string("-"));
  }
  if (plan.decoder_start >= 0)
    out += fmt::format("decoder starts at layer {}\n", plan.decoder_start);
  else
    out += "no encoder/decoder split (no kv source)\n";
  out += fmt::format("global compressed entries per token: {:g}\n", plan.global_entries_per_token());
  return out;
}

}  // namespace dsv41
