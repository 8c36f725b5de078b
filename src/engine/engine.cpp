// The engine: admission of segments, the layer-plan walk, sequence bookkeeping (see engine.h).
#include "engine/engine.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "cache/snapshot.h"
#include "model/attention_steps.h"
#include "model/model.h"

namespace dsv41 {
namespace {

std::string seq_name(SequenceId id) { return "sequence " + std::to_string(id); }

constexpr int8_t kTextRow = -1;  // ImageTokenType kTextToken (model/vision/image_span.h)

}  // namespace

uint64_t config_fingerprint(const ModelConfig& c) {
  std::vector<int64_t> v = {c.vocab_size,         c.hidden_size,       c.num_hidden_layers,   c.num_attention_heads,
                            c.head_dim,           c.q_lora_rank,       c.o_groups,            c.o_lora_rank,
                            c.sliding_window,     c.index_n_heads,     c.index_head_dim,      c.index_topk,
                            c.hc_mult,            c.n_routed_experts,  c.num_experts_per_tok, c.moe_intermediate_size,
                            c.candidate_block_size, c.candidate_topk_blocks};
  for (int r : c.compress_ratios) v.push_back(r);
  for (int l : c.kv_source_layer_ids) v.push_back(1000 + l);
  for (int l : c.engram_layer_ids) v.push_back(2000 + l);
  return XXH3_64bits(v.data(), v.size() * sizeof(int64_t));
}

Engine::Engine(std::unique_ptr<Backend> backend, const EngramHashTables* tables, const EngineOptions& options)
    : backend_(std::move(backend)), engram_tables_(tables), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Backend> backend, const EngramHashTables* tables,
                                               const EngineOptions& options) {
  if (!backend) return invalid_argument("engine: no backend");
  if (options.rollback_tokens < 0) return invalid_argument("engine: rollback_tokens must be ≥ 0");
  if (options.page_budget_bytes < 0) return invalid_argument("engine: page budget must be ≥ 0 bytes");
  if (!backend->config().engram_layer_ids.empty() && !tables)
    return invalid_argument("engine: the model has Engram layers but no Engram hash tables were given");
  if (options.dspark && backend->draft_stages() == 0)
    return invalid_argument("engine: DSpark needs a backend with the model's drafter (" + backend->name() +
                            " has none)");
  if (options.dspark && options.rollback_tokens < backend->config().dspark_block_size)
    return invalid_argument("engine: DSpark verification needs rollback_tokens ≥ dspark_block_size (" +
                            std::to_string(backend->config().dspark_block_size) + ")");
  if (options.dspark) backend->set_feature_capture(true);
  // The budget: the caller's, capped by what the backend can hold (a device's memory).
  int64_t budget = options.page_budget_bytes;
  if (const int64_t cap = backend->cache_capacity_bytes(); cap > 0 && (budget == 0 || budget > cap)) budget = cap;
  std::unique_ptr<Engine> e(new Engine(std::move(backend), tables, options));
  DSV41_ASSIGN_OR_RETURN(e->pools_, CachePools::create(e->config(), options.rows_per_page, budget));
  e->fingerprint_ = options.model_fingerprint != 0 ? options.model_fingerprint : config_fingerprint(e->config());
  return e;
}

CacheOptions Engine::cache_options() const {
  CacheOptions co;
  co.rows_per_page = options_.rows_per_page;
  co.rollback_tokens = options_.rollback_tokens;
  co.draft_stages = options_.dspark ? backend_->draft_stages() : 0;
  return co;
}

Status Engine::draft(std::span<const DraftSpec> specs, std::vector<DraftBlock>& out, const DraftPicker& pick) {
  if (!options_.dspark) return invalid_argument("engine: DSpark is off (EngineOptions::dspark)");
  draft_requests_.clear();
  for (const DraftSpec& d : specs) {
    DSV41_ASSIGN_OR_RETURN(const Sequence* s, find(d.sequence));
    if (s->tokens.empty()) return invalid_argument(seq_name(d.sequence) + ": nothing to draft from (empty)");
    draft_requests_.push_back({s->cache.get(), static_cast<int64_t>(s->tokens.size()) - 1, d.anchor, d.slots, d.logits});
  }
  return backend_->draft(draft_requests_, out, pick);
}

bool Engine::can_draft(SequenceId id) const {
  if (!options_.dspark) return false;
  auto s = find(id);
  if (!s.ok() || (*s)->tokens.empty()) return false;
  const SequenceCache& c = *(*s)->cache;
  const int64_t last = static_cast<int64_t>((*s)->tokens.size()) - 1;
  for (int st = 0; st < c.draft_stages(); ++st)
    if (c.draft_ring(st).length() != last + 1 || c.draft_ring(st).start() > last) return false;
  return c.draft_stages() > 0;
}

void Engine::feed_draft_rings() {
  if (!options_.dspark || !feeding_) return;
  const std::vector<int>& targets = config().dspark_target_layer_ids;
  draft_feeds_.clear();
  for (size_t i = 0; i < admitted_.size(); ++i) {
    const Admitted& a = admitted_[i];
    if (!a.failure.ok()) continue;
    // Rows whose features every target layer captured (with per-layer ranges, the later ones),
    // and of those only the newest a ring can hold (a long prefill chunk's earlier rows would be
    // overwritten in the same call).
    int64_t first = 0;
    for (int t : targets) first = std::max(first, input_first(*a.segment, t, a.rows));
    SequenceCache& cache = *a.seq->cache;
    if (cache.draft_stages() == 0) continue;
    first = std::max(first, a.rows - cache.draft_ring(0).slots());
    if (first >= a.rows) continue;
    const int64_t pos = a.segment->start + first;
    // A ring that does not continue exactly here (a replay, a restored or imported prefix, the
    // rows skipped just above) restarts at the first fed position: the drafter then sees only
    // what was fed since (at most a ring's worth is ever attended anyway).
    for (int st = 0; st < cache.draft_stages(); ++st) {
      WindowRing& ring = cache.draft_ring(st);
      if (ring.length() != pos) ring.restart(pos);
    }
    draft_feeds_.push_back({static_cast<int>(i), first});
  }
  backend_->feed_draft_rings(draft_feeds_);
}

Engine::Sequence Engine::make_sequence(std::unique_ptr<SequenceCache> cache) const {
  Sequence s;
  // Room for every token the sequence can hold (4 bytes a position, next to the cache's hundreds),
  // so appending a decode step's token never reallocates.
  s.tokens.reserve(static_cast<size_t>(cache->max_context()));
  s.cache = std::move(cache);
  if (engram_tables_) s.hasher = std::make_unique<EngramHasher>(engram_tables_);
  return s;
}

Result<Engine::Sequence*> Engine::find(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return not_found(seq_name(id) + ": no such sequence");
  return &it->second;
}

Result<const Engine::Sequence*> Engine::find(SequenceId id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return not_found(seq_name(id) + ": no such sequence");
  return &it->second;
}

Result<SequenceId> Engine::add_sequence(int64_t max_context) {
  if (max_context > config().max_position_embeddings)
    return out_of_range("context of " + std::to_string(max_context) + " tokens exceeds max_position_embeddings " +
                        std::to_string(config().max_position_embeddings));
  const CacheOptions co = cache_options();
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<SequenceCache> cache,
                         SequenceCache::create(config(), backend_->plan(), max_context, co, pools_.get()));
  const SequenceId id = next_id_++;
  sequences_.emplace(id, make_sequence(std::move(cache)));
  return id;
}

Status Engine::check_fork_context(int64_t max_context, int64_t held) const {
  if (max_context > config().max_position_embeddings)
    return out_of_range("context of " + std::to_string(max_context) + " tokens exceeds max_position_embeddings " +
                        std::to_string(config().max_position_embeddings));
  if (max_context < held)
    return out_of_range("context of " + std::to_string(max_context) + " tokens is below the " +
                        std::to_string(held) + " the fork holds");
  return ok_status();
}

Result<SequenceId> Engine::fork(SequenceId from, int64_t max_context) {
  DSV41_ASSIGN_OR_RETURN(Sequence * src, find(from));
  const int64_t held = static_cast<int64_t>(src->tokens.size());
  if (max_context > 0) DSV41_RETURN_IF_ERROR(check_fork_context(max_context, held));
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<SequenceCache> cache, src->cache->fork());
  if (max_context > 0) cache->set_max_context(max_context);
  backend_->fork_cache(*src->cache, *cache);
  Sequence s = make_sequence(std::move(cache));
  if (s.hasher) s.hasher->set_history(src->hasher->history());
  s.tokens.assign(src->tokens.begin(), src->tokens.end());  // keeps the reserved capacity
  const SequenceId id = next_id_++;
  sequences_.emplace(id, std::move(s));
  return id;
}

Result<SequenceId> Engine::fork_prefix(SequenceId from, int64_t prefix, int64_t max_context) {
  DSV41_ASSIGN_OR_RETURN(Sequence * src, find(from));
  if (max_context > 0) DSV41_RETURN_IF_ERROR(check_fork_context(max_context, prefix));
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<SequenceCache> cache, src->cache->fork_global(prefix));
  if (max_context > 0) cache->set_max_context(max_context);
  backend_->fork_cache(*src->cache, *cache);
  Sequence s = make_sequence(std::move(cache));
  s.tokens.assign(src->tokens.begin(), src->tokens.begin() + prefix);
  // The Engram look-back of the prefix comes from its real tokens (never pads).
  if (s.hasher) s.hasher->rebuild_history(s.tokens.data(), prefix);
  const SequenceId id = next_id_++;
  sequences_.emplace(id, std::move(s));
  return id;
}

Engine::LivePrefix Engine::longest_live_prefix(std::span<const int32_t> tokens) const {
  LivePrefix best;
  // Image spans hold image_token_id whatever the image: equal ids say nothing about equal
  // embeddings, so a shared prefix stops before the first image position.
  size_t limit = tokens.size();
  if (config().vision.has_value())
    limit = static_cast<size_t>(std::find(tokens.begin(), tokens.end(), config().image_token_id) - tokens.begin());
  for (const auto& [id, s] : sequences_) {
    const size_t n = std::min(s.tokens.size(), limit);
    const size_t common = static_cast<size_t>(
        std::mismatch(s.tokens.begin(), s.tokens.begin() + n, tokens.begin()).first - s.tokens.begin());
    if (static_cast<int64_t>(common) > best.length ||
        (static_cast<int64_t>(common) == best.length && common > 0 && id < best.sequence)) {
      best.sequence = id;
      best.length = static_cast<int64_t>(common);
    }
  }
  return best;
}

Status Engine::remove_sequence(SequenceId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return not_found(seq_name(id) + ": no such sequence");
  backend_->forget_cache(it->second.cache.get());
  sequences_.erase(it);
  return ok_status();
}

Status Engine::reset_sequence(SequenceId id) {
  DSV41_ASSIGN_OR_RETURN(Sequence * s, find(id));
  s->cache->reset();
  if (s->hasher) s->hasher->reset();
  s->tokens.clear();
  return ok_status();
}

Result<int64_t> Engine::length(SequenceId id) const {
  DSV41_ASSIGN_OR_RETURN(const Sequence* s, find(id));
  return static_cast<int64_t>(s->tokens.size());
}

Result<std::span<const int32_t>> Engine::tokens(SequenceId id) const {
  DSV41_ASSIGN_OR_RETURN(const Sequence* s, find(id));
  return std::span<const int32_t>(s->tokens);
}

const SequenceCache* Engine::cache(SequenceId id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.cache.get();
}

Status Engine::rollback(SequenceId id, int64_t k) {
  DSV41_ASSIGN_OR_RETURN(Sequence * s, find(id));
  Status st = s->cache->rollback(k);
  if (!st.ok()) return st.with_context(seq_name(id));
  s->tokens.resize(s->tokens.size() - static_cast<size_t>(k));
  if (s->hasher) s->hasher->rebuild_history(s->tokens.data(), static_cast<int64_t>(s->tokens.size()));
  return ok_status();
}

Result<std::string> Engine::snapshot(SequenceId id) const {
  DSV41_ASSIGN_OR_RETURN(const Sequence* s, find(id));
  static const std::vector<int64_t> kNone;
  return snapshot_sequence(*s->cache, s->hasher ? s->hasher->history() : kNone, fingerprint_);
}

Status Engine::restore(SequenceId id, std::string_view bytes) {
  DSV41_ASSIGN_OR_RETURN(Sequence * s, find(id));
  std::vector<int64_t> history;
  DSV41_ASSIGN_OR_RETURN(SnapshotHeader header, read_snapshot_header(bytes));
  if (header.length != static_cast<int64_t>(s->tokens.size()))
    return invalid_argument(seq_name(id) + ": window snapshot of position " + std::to_string(header.length) +
                            ", the sequence holds " + std::to_string(s->tokens.size()) + " tokens");
  Status st = restore_sequence(bytes, fingerprint_, *s->cache, history);
  if (!st.ok()) return st.with_context(seq_name(id));
  if (s->hasher) s->hasher->set_history(std::move(history));
  return ok_status();
}

Result<Payload> Engine::export_global(SequenceId id, int64_t begin, int64_t end) const {
  DSV41_ASSIGN_OR_RETURN(const Sequence* s, find(id));
  const int64_t len = static_cast<int64_t>(s->tokens.size());
  if (begin < 0 || begin > end || end > len)
    return out_of_range(seq_name(id) + ": export of positions [" + std::to_string(begin) + ", " +
                        std::to_string(end) + "), the sequence holds " + std::to_string(len));
  Payload p;
  const SequenceCache& c = *s->cache;
  for (int l = 0; l < c.num_layers(); ++l) {
    const KvSourceCache* kv = c.kv_source(l);
    if (!kv) continue;
    const int64_t g0 = entries_after(begin, kv->ratio), g1 = entries_after(end, kv->ratio);
    if (g1 > kv->entries())
      return internal_error(seq_name(id) + ": layer " + std::to_string(l) + " holds " +
                            std::to_string(kv->entries()) + " entries, positions up to " + std::to_string(end) +
                            " need " + std::to_string(g1));
    for (const PagedRows* rows : {&kv->main, &kv->index}) {
      PayloadPart part;
      part.layer = static_cast<uint32_t>(l);
      part.kind = rows == &kv->main ? RowKind::kMain : RowKind::kIndex;
      part.record_bytes = static_cast<uint32_t>(rows->record_bytes());
      part.count = static_cast<uint32_t>(g1 - g0);
      part.bytes.resize(static_cast<size_t>((g1 - g0) * rows->record_bytes()));
      // Row by row: rows never straddle pages, but consecutive rows may sit in different pages.
      for (int64_t g = g0; g < g1; ++g)
        std::copy_n(rows->row(g), rows->record_bytes(), part.bytes.data() + (g - g0) * rows->record_bytes());
      p.parts.push_back(std::move(part));
    }
  }
  return p;
}

Result<SequenceId> Engine::import_global(int64_t max_context, std::span<const int32_t> prefix_tokens,
                                         std::span<const Payload> chunks, int64_t chunk_tokens) {
  const int64_t prefix = static_cast<int64_t>(prefix_tokens.size());
  if (chunk_tokens < 1 || prefix != static_cast<int64_t>(chunks.size()) * chunk_tokens)
    return invalid_argument("import_global: " + std::to_string(chunks.size()) + " chunks of " +
                            std::to_string(chunk_tokens) + " tokens do not make a prefix of " +
                            std::to_string(prefix) + " tokens");
  if (max_context > config().max_position_embeddings)
    return out_of_range("import_global: context of " + std::to_string(max_context) +
                        " tokens exceeds max_position_embeddings " + std::to_string(config().max_position_embeddings));
  if (prefix > max_context)
    return out_of_range("import_global: prefix of " + std::to_string(prefix) + " tokens exceeds the context of " +
                        std::to_string(max_context));
  for (int64_t i = 0; i < prefix; ++i)
    if (prefix_tokens[i] < 0 || prefix_tokens[i] >= config().vocab_size)
      return invalid_argument("import_global: token " + std::to_string(prefix_tokens[i]) + " at position " +
                              std::to_string(i) + " outside the vocabulary");
  // Validate every chunk against the layout of a fresh cache (nothing is created until all pass).
  const CacheOptions co = cache_options();
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<SequenceCache> cache,
                         SequenceCache::create(config(), backend_->plan(), max_context, co, pools_.get()));
  int64_t new_bytes = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::string where = "import_global: chunk " + std::to_string(i);
    const int64_t begin = static_cast<int64_t>(i) * chunk_tokens, end = begin + chunk_tokens;
    const Payload& p = chunks[i];
    size_t next = 0;
    for (int l = 0; l < cache->num_layers(); ++l) {
      const KvSourceCache* kv = cache->kv_source(l);
      if (!kv) continue;
      const int64_t count = entries_after(end, kv->ratio) - entries_after(begin, kv->ratio);
      for (const PagedRows* rows : {&kv->main, &kv->index}) {
        const RowKind kind = rows == &kv->main ? RowKind::kMain : RowKind::kIndex;
        const std::string what = where + " part " + std::to_string(next);
        if (next >= p.parts.size())
          return invalid_argument(what + ": missing (layer " + std::to_string(l) + " needs main and index parts)");
        const PayloadPart& part = p.parts[next++];
        if (part.layer != static_cast<uint32_t>(l) || part.kind != kind)
          return invalid_argument(what + ": layer " + std::to_string(part.layer) + " kind " +
                                  std::to_string(static_cast<int>(part.kind)) + ", expected layer " +
                                  std::to_string(l) + " kind " + std::to_string(static_cast<int>(kind)));
        if (static_cast<int64_t>(part.record_bytes) != rows->record_bytes())
          return invalid_argument(what + ": records of " + std::to_string(part.record_bytes) + " bytes, layer " +
                                  std::to_string(l) + " holds " + std::to_string(rows->record_bytes()));
        if (static_cast<int64_t>(part.count) != count || part.bytes.size() != static_cast<size_t>(count * rows->record_bytes()))
          return invalid_argument(what + ": " + std::to_string(part.count) + " records in " +
                                  std::to_string(part.bytes.size()) + " bytes, layer " + std::to_string(l) +
                                  " (ratio " + std::to_string(kv->ratio) + ") has " + std::to_string(count) +
                                  " entries in positions [" + std::to_string(begin) + ", " + std::to_string(end) +
                                  ")");
      }
    }
    if (next != p.parts.size())
      return invalid_argument(where + ": " + std::to_string(p.parts.size() - next) + " parts more than the model's kv sources");
  }
  for (int l = 0; l < cache->num_layers(); ++l) {
    const KvSourceCache* kv = cache->kv_source(l);
    if (!kv) continue;
    const int64_t entries = entries_after(prefix, kv->ratio);
    new_bytes += kv->main.pages_to_append(entries) * pools_->main->page_bytes() +
                 kv->index.pages_to_append(entries) * pools_->index->page_bytes();
  }
  // The pools never refuse a page, so the budget is checked here, as for an admitted forward.
  if (!pools_->budget.can_take(new_bytes))
    return out_of_range("import_global: " + std::to_string(new_bytes) + " bytes of pages exceed the page budget (" +
                        std::to_string(pools_->budget.used_bytes) + " of " +
                        std::to_string(pools_->budget.limit_bytes) + " in use)");
  for (const Payload& p : chunks) {
    size_t next = 0;
    for (int l = 0; l < cache->num_layers(); ++l) {
      KvSourceCache* kv = cache->kv_source(l);
      if (!kv) continue;
      for (PagedRows* rows : {&kv->main, &kv->index}) {
        const PayloadPart& part = p.parts[next++];
        for (uint32_t r = 0; r < part.count; ++r)
          std::copy_n(part.bytes.data() + static_cast<size_t>(r) * part.record_bytes, part.record_bytes,
                      rows->append());
      }
    }
  }
  for (int l = 0; l < cache->num_layers(); ++l) cache->window(l).restart(prefix);
  Sequence s = make_sequence(std::move(cache));
  s.tokens.assign(prefix_tokens.begin(), prefix_tokens.end());
  if (s.hasher) s.hasher->rebuild_history(s.tokens.data(), prefix);
  const SequenceId id = next_id_++;
  sequences_.emplace(id, std::move(s));
  return id;
}

PoolStats Engine::pool_stats() const {
  PoolStats p;
  p.main_bytes = pools_->main->bytes_in_use();
  p.index_bytes = pools_->index->bytes_in_use();
  p.budget_bytes = pools_->budget.limit_bytes;
  p.sequences = static_cast<int64_t>(sequences_.size());
  return p;
}

Status Engine::check_segment(const Segment& s, const Sequence* seq) const {
  const int64_t T = static_cast<int64_t>(s.tokens.size());
  const int64_t V = config().vocab_size;
  if (T < 1) return invalid_argument(seq_name(s.sequence) + ": a segment needs at least one token");
  const int64_t length = static_cast<int64_t>(seq->tokens.size());
  if (!s.depth.empty()) DSV41_RETURN_IF_ERROR(check_depth(s, *seq));
  DSV41_RETURN_IF_ERROR(check_image_rows(s));
  if (s.replay) return check_replay(s, *seq);
  if (s.start != length)
    return invalid_argument(seq_name(s.sequence) + ": segment starts at position " + std::to_string(s.start) +
                            " but the sequence holds " + std::to_string(length) + " positions");
  for (int64_t t = 0; t < T; ++t)
    if (s.tokens[t] < 0 || s.tokens[t] >= V)
      return invalid_argument(seq_name(s.sequence) + ": token id " + std::to_string(s.tokens[t]) + " at position " +
                              std::to_string(s.start + t) + " outside the vocabulary (0.." + std::to_string(V - 1) +
                              ")");
  if (length + T > seq->cache->max_context())
    return out_of_range(seq_name(s.sequence) + ": " + std::to_string(length + T) +
                        " tokens exceed the sequence's context of " + std::to_string(seq->cache->max_context()));
  return ok_status();
}

int64_t Engine::input_first(const Segment& s, int layer, int64_t rows) {
  if (s.depth.empty()) return 0;
  return std::clamp<int64_t>(s.depth[layer].input_from - s.start, 0, rows);
}

int64_t Engine::attend_first(const Segment& s, int layer, int64_t rows) {
  if (s.depth.empty()) return 0;
  return std::clamp<int64_t>(s.depth[layer].attend_from - s.start, 0, rows);
}

Status Engine::check_depth(const Segment& s, const Sequence& seq) const {
  const int L = seq.cache->num_layers();
  const int64_t T = static_cast<int64_t>(s.tokens.size());
  if (static_cast<int>(s.depth.size()) != L)
    return invalid_argument(seq_name(s.sequence) + ": depth ranges for " + std::to_string(s.depth.size()) +
                            " layers, the model has " + std::to_string(L));
  for (int l = 0; l < L; ++l) {
    const LayerRange& r = s.depth[l];
    if (r.input_from > r.attend_from)
      return invalid_argument(seq_name(s.sequence) + ": layer " + std::to_string(l) + " input range starts after its attention range");
    const int64_t att = attend_first(s, l, T), in = input_first(s, l, T);
    // A window that is not cut inside this segment must continue exactly at its start.
    const bool cut = r.attend_from >= s.start && r.attend_from < s.start + T;
    const WindowRing& ring = seq.cache->window(l);
    if (att < T && !cut && ring.length() != s.start)
      return invalid_argument(seq_name(s.sequence) + ": layer " + std::to_string(l) + "'s window holds " +
                              std::to_string(ring.length()) + " positions, the segment continues it at " +
                              std::to_string(s.start));
    // A compressor cannot skip positions: it must have taken every one before its first new row.
    const KvSourceCache* kv = seq.cache->kv_source(l);
    if (kv && in < T && kv->next_position() < s.start + in)
      return invalid_argument(seq_name(s.sequence) + ": layer " + std::to_string(l) + "'s compressor has taken " +
                              std::to_string(kv->next_position()) + " positions, the segment feeds it from " +
                              std::to_string(s.start + in));
  }
  if (s.logits == LogitRows::kAll)
    for (int l = 0; l < L; ++l)
      if (attend_first(s, l, T) != 0)
        return invalid_argument(seq_name(s.sequence) + ": logits of every row need every layer on every row");
  if (s.logits == LogitRows::kLast && attend_first(s, L - 1, T) >= T)
    return invalid_argument(seq_name(s.sequence) + ": the last layer does not run the last position, no logits");
  return ok_status();
}

Status Engine::check_image_rows(const Segment& s) const {
  const ModelConfig& c = config();
  const int64_t T = static_cast<int64_t>(s.tokens.size());
  if (s.token_types.empty()) {
    if (!s.image_embeddings.empty())
      return invalid_argument(seq_name(s.sequence) + ": image embeddings without token types");
    // Replayed image positions need their embeddings again (a text decode step may still hold a
    // sampled image_token_id: it is embedded as text).
    if (s.replay && c.vision.has_value() &&
        std::find(s.tokens.begin(), s.tokens.end(), c.image_token_id) != s.tokens.end())
      return invalid_argument(seq_name(s.sequence) + ": the replay covers image positions but gives no image rows");
    return ok_status();
  }
  if (!c.vision.has_value())
    return invalid_argument(seq_name(s.sequence) + ": image input, but the model has no vision tower (text only)");
  if (static_cast<int64_t>(s.token_types.size()) != T)
    return invalid_argument(seq_name(s.sequence) + ": " + std::to_string(s.token_types.size()) + " token types for " +
                            std::to_string(T) + " tokens");
  int64_t span_rows = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int8_t ty = s.token_types[t];
    if (ty < -1 || ty > 3)
      return invalid_argument(seq_name(s.sequence) + ": token type " + std::to_string(ty) + " at position " +
                              std::to_string(s.start + t) + " (−1 text, 0..3 image span)");
    const bool image_id = s.tokens[t] == c.image_token_id;
    if ((ty >= 0) != image_id)
      return invalid_argument(seq_name(s.sequence) + ": position " + std::to_string(s.start + t) + " holds token " +
                              std::to_string(s.tokens[t]) + " with type " + std::to_string(ty) +
                              ": image-span rows and image_token_id " + std::to_string(c.image_token_id) +
                              " positions must coincide");
    span_rows += ty >= 0;
  }
  if (static_cast<int64_t>(s.image_embeddings.size()) != span_rows * c.hidden_size)
    return invalid_argument(seq_name(s.sequence) + ": " + std::to_string(s.image_embeddings.size()) +
                            " image embedding values for " + std::to_string(span_rows) + " span rows of width " +
                            std::to_string(c.hidden_size));
  return ok_status();
}

Status Engine::check_replay(const Segment& s, const Sequence& seq) const {
  const int64_t T = static_cast<int64_t>(s.tokens.size());
  const int64_t held = static_cast<int64_t>(seq.tokens.size());
  if (s.start < 0 || s.start + T > held)
    return invalid_argument(seq_name(s.sequence) + ": a replay covers positions the sequence holds (0.." +
                            std::to_string(held) + "), this one " + std::to_string(s.start) + ".." +
                            std::to_string(s.start + T));
  if (!std::equal(s.tokens.begin(), s.tokens.end(), seq.tokens.begin() + s.start))
    return invalid_argument(seq_name(s.sequence) + ": replayed tokens differ from the sequence's own");
  for (int l = 0; l < seq.cache->num_layers(); ++l) {
    const KvSourceCache* kv = seq.cache->kv_source(l);
    if (kv && s.start > kv->next_position())
      return invalid_argument(seq_name(s.sequence) + ": replay from " + std::to_string(s.start) + " leaves positions " +
                              std::to_string(kv->next_position()) + ".." + std::to_string(s.start - 1) +
                              " out of layer " + std::to_string(l) + "'s compressor");
  }
  return ok_status();
}

const std::vector<SegmentResult>& Engine::forward(std::span<const Segment> segments, ForwardTrace* trace) {
  ++forward_calls_;
  results_.assign(segments.size(), SegmentResult{});
  admitted_.clear();
  rows_.clear();
  batch_tokens_.clear();
  batch_positions_.clear();
  const LayerPlan& plan = backend_->plan();
  const int n_engram = engram_tables_ ? engram_tables_->layers() : 0;
  const int64_t cols = engram_tables_ ? engram_tables_->columns : 0;
  if (trace && segments.size() != 1) {
    for (SegmentResult& r : results_) r.status = invalid_argument("engine: a trace needs a batch of one segment");
    idle_forward();
    return results_;
  }
  // ---- Admission: everything checked before any compute. -------------------------------------
  int64_t rows = 0, pool_bytes = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    auto found = find(s.sequence);
    if (!found.ok()) {
      results_[i].status = found.status();
      continue;
    }
    Sequence* seq = *found;
    Status st = check_segment(s, seq);
    for (const Admitted& a : admitted_)
      if (st.ok() && a.seq == seq)
        st = invalid_argument(seq_name(s.sequence) + ": appears twice in one batch");
    // Pages the segment's new compressed entries take (a shared partial page is copied first).
    int64_t need = 0;
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    for (const LayerInfo& info : plan.layers) {
      const KvSourceCache* kv = st.ok() ? seq->cache->kv_source(info.index) : nullptr;
      if (!kv) continue;
      const int64_t more = entries_after(s.start + T, kv->ratio) - kv->entries();
      need += kv->main.pages_to_append(more) * pools_->main->page_bytes();
      need += kv->index.pages_to_append(more) * pools_->index->page_bytes();
    }
    if (st.ok() && !pools_->budget.can_take(pool_bytes + need))
      st = out_of_range(seq_name(s.sequence) + ": the page pool's budget of " +
                        std::to_string(pools_->budget.limit_bytes) + " bytes cannot take " + std::to_string(need) +
                        " more bytes of global KV (" + std::to_string(pools_->budget.used_bytes + pool_bytes) +
                        " in use)");
    if (st.ok() && trace && !s.depth.empty()) st = invalid_argument("engine: a trace needs a full-depth segment");
    Admitted a;
    a.index = static_cast<int>(i);
    a.segment = &s;
    a.seq = seq;
    a.row0 = rows;
    a.rows = T;
    // Engram n-gram row ids of the segment (hashing moves the look-back on; restored on failure).
    // A failed hash leaves the look-back as it was; only a replay, which rebuilds it first, has
    // something to undo (and only a replay copies it: decode steps allocate nothing here).
    if (st.ok() && seq->hasher) {
      if (s.replay) {
        a.saved_history = seq->hasher->history();
        seq->hasher->rebuild_history(seq->tokens.data(), s.start);
      }
      engram_ids_.resize(static_cast<size_t>((rows + T) * n_engram * cols));
      st = seq->hasher->hash(s.tokens.data(), T, engram_ids_.data() + rows * n_engram * cols);
      if (!st.ok() && s.replay) seq->hasher->set_history(a.saved_history);
    }
    if (!st.ok()) {
      results_[i].status = st;
      continue;
    }
    pool_bytes += need;
    rows += T;
    admitted_.push_back(std::move(a));
    for (int64_t t = 0; t < T; ++t) {
      batch_tokens_.push_back(s.tokens[t]);
      batch_positions_.push_back(s.start + t);
    }
  }
  timing_ = ForwardTiming{};
  if (admitted_.empty()) {
    idle_forward();
    return results_;
  }
  // Windows cut inside a segment restart there (nothing before it is attended; it is rebuilt). A
  // replay without per-layer ranges cuts every window at its start.
  for (const Admitted& a : admitted_) {
    const Segment& s = *a.segment;
    for (int l = 0; l < a.seq->cache->num_layers(); ++l) {
      if (s.depth.empty()) {
        if (s.replay) a.seq->cache->window(l).restart(s.start);
      } else if (s.depth[l].attend_from >= s.start && s.depth[l].attend_from < s.start + a.rows) {
        a.seq->cache->window(l).restart(s.depth[l].attend_from);
      }
    }
  }
  for (const Admitted& a : admitted_) rows_.push_back({a.row0, a.rows, batch_positions_[a.row0], a.seq->cache.get()});

  BatchLayout layout;
  layout.rows = rows;
  layout.tokens = batch_tokens_.data();
  layout.positions = batch_positions_.data();
  layout.segments = rows_;
  // Image rows: only when a segment brings some (a text batch builds nothing here).
  const bool images = std::any_of(admitted_.begin(), admitted_.end(),
                                  [](const Admitted& a) { return !a.segment->token_types.empty(); });
  if (images) {
    batch_types_.assign(static_cast<size_t>(rows), kTextRow);
    batch_embeddings_.clear();
    for (const Admitted& a : admitted_) {
      const Segment& s = *a.segment;
      if (s.token_types.empty()) continue;
      std::copy(s.token_types.begin(), s.token_types.end(), batch_types_.begin() + a.row0);
      batch_embeddings_.insert(batch_embeddings_.end(), s.image_embeddings.begin(), s.image_embeddings.end());
    }
    layout.types = batch_types_.data();
    layout.image_embeddings = batch_embeddings_.data();
  }
  if (trace) {
    *trace = ForwardTrace{};
    trace->engram_rows.assign(engram_ids_.begin(), engram_ids_.begin() + rows * n_engram * cols);
  }
  // The target features are captured only while the drafter's rings are fed (feed_draft_rings
  // is their only reader): a plain stretch of `--dspark auto` does not pay for them.
  if (options_.dspark) backend_->set_feature_capture(feeding_);
  backend_->begin_batch(layout, trace);
  forward_layers(trace);
  backend_->end_batch();
  // An exchange with other ranks failed (expert parallelism): nothing this batch computed can be trusted.
  if (Status shared = backend_->take_step_failure(); !shared.ok())
    for (Admitted& a : admitted_)
      if (a.failure.ok()) a.failure = shared;
  const auto feed_start = std::chrono::steady_clock::now();
  feed_draft_rings();
  feed_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - feed_start).count();
  const auto head_start = std::chrono::steady_clock::now();

  // ---- Logits of the rows each segment asked for. -------------------------------------------
  logit_rows_.clear();
  for (const Admitted& a : admitted_) {
    const LogitRows want = segments[a.index].logits;
    if (want == LogitRows::kLast) logit_rows_.push_back(a.row0 + a.rows - 1);
    if (want == LogitRows::kAll)
      for (int64_t r = 0; r < a.rows; ++r) logit_rows_.push_back(a.row0 + r);
  }
  const int64_t V = config().vocab_size;
  logits_.resize(static_cast<size_t>(static_cast<int64_t>(logit_rows_.size()) * V));
  if (!logit_rows_.empty() || trace) backend_->logits(logit_rows_, logits_.data());
  timing_.head_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - head_start).count();
  int64_t offset = 0;
  for (Admitted& a : admitted_) {
    const Segment& s = segments[a.index];
    SegmentResult& r = results_[a.index];
    const int64_t n = s.logits == LogitRows::kAll ? a.rows : (s.logits == LogitRows::kLast ? 1 : 0);
    if (!a.failure.ok()) {
      // Earlier layers have taken part of the segment into the cache: the sequence cannot go on.
      a.seq->cache->reset();
      if (a.seq->hasher) a.seq->hasher->reset();
      a.seq->tokens.clear();
      r.status = a.failure.with_context(seq_name(s.sequence) + " (the sequence was reset)");
    } else {
      if (!s.replay) a.seq->tokens.insert(a.seq->tokens.end(), s.tokens.begin(), s.tokens.end());
      r.logit_rows = n;
      r.logits = n > 0 ? logits_.data() + offset * V : nullptr;
      r.work = count_token_layers(s.depth, backend_->plan().layers.size(), backend_->plan().decoder_start, s.start,
                                  s.start + a.rows, s.replay);
    }
    offset += n;
  }
  return results_;
}

void Engine::idle_forward() {
  backend_->idle_forward();
  // A failed exchange leaves no segment to report it on; the next forward's exchange fails again.
  (void)backend_->take_step_failure();
}

void Engine::run_engram(int layer) {
  const int n_engram = engram_tables_->layers();
  const int64_t cols = engram_tables_->columns;
  const int slot = backend_->plan().layers[layer].engram_slot;
  const int64_t rows = static_cast<int64_t>(batch_tokens_.size());
  layer_ids_.resize(static_cast<size_t>(rows * cols));
  for (int64_t t = 0; t < rows; ++t)
    std::copy_n(engram_ids_.data() + (t * n_engram + slot) * cols, cols, layer_ids_.data() + t * cols);
  bool ok = true;
  for (const RowRange& r : input_rows_)
    ok = ok && backend_->engram(layer, layer_ids_.data() + r.begin * cols, r.begin, r.end - r.begin).ok();
  if (ok) return;
  // A stored table row that cannot be decoded (a NaN scale in the mapped checkpoint: rows are
  // only read when looked up). Find the segments it belongs to; the others get their Engram.
  for (Admitted& a : admitted_) {
    if (!a.failure.ok()) continue;
    const int64_t first = input_first(*a.segment, layer, a.rows);
    if (first >= a.rows) continue;
    Status st = backend_->engram(layer, layer_ids_.data() + (a.row0 + first) * cols, a.row0 + first, a.rows - first);
    if (!st.ok()) a.failure = st.with_context("layer " + std::to_string(layer) + " engram");
  }
}

// Appends batch rows [begin, end) to `ranges`, merging with the last range when contiguous (a
// decode batch, every segment at full depth, is one range).
static void add_rows(std::vector<RowRange>& ranges, int64_t begin, int64_t end) {
  if (begin >= end) return;
  if (!ranges.empty() && ranges.back().end == begin) {
    ranges.back().end = end;
  } else {
    ranges.push_back({begin, end});
  }
}

void Engine::forward_layers(ForwardTrace* trace) {
  (void)trace;
  const LayerPlan& plan = backend_->plan();
  const int segments = static_cast<int>(admitted_.size());
  int latest_kv = -1;       // the kv source whose entries later layers read (the latest Full layer)
  bool have_topk = false;   // an index source has published a top-k in this forward
  timing_ = ForwardTiming{};
  auto layer_start = std::chrono::steady_clock::now();
  for (const LayerInfo& info : plan.layers) {
    const int l = info.index;
    // The previous layer's time goes to the encoder or the decoder (cheap: one clock read a layer).
    if (l > 0) {
      const auto now = std::chrono::steady_clock::now();
      const double ms = std::chrono::duration<double, std::milli>(now - layer_start).count();
      (plan.decoder_start >= 0 && l - 1 >= plan.decoder_start ? timing_.decoder_ms : timing_.encoder_ms) += ms;
      layer_start = now;
    }
    // The rows this layer runs (plan/replay_rule.h): input (+ compressor) and attention + FFN.
    input_rows_.clear();
    attend_rows_.clear();
    for (const Admitted& a : admitted_) {
      add_rows(input_rows_, a.row0 + input_first(*a.segment, l, a.rows), a.row0 + a.rows);
      add_rows(attend_rows_, a.row0 + attend_first(*a.segment, l, a.rows), a.row0 + a.rows);
    }
    backend_->begin_layer(l);
    if (info.has_engram) run_engram(l);
    backend_->attention_input(l, input_rows_);
    backend_->attention_projections(l, attend_rows_);
    const LayerSteps steps = layer_steps(info);
    if (steps.compress) latest_kv = l;
    // Every segment's compressor first (they share the page pool), then the segments' index and
    // attention steps, each in one call (independent per segment: the backend may run them
    // together).
    attention_jobs_.clear();
    compress_jobs_.clear();
    for (int s = 0; s < segments; ++s) {
      const Admitted& a = admitted_[s];
      const int64_t in = input_first(*a.segment, l, a.rows), att = attend_first(*a.segment, l, a.rows);
      if (steps.compress && in < a.rows) {
        // Write floor: positions the kv source already covers are not fed again.
        const SegmentRows& r = rows_[s];
        const int64_t covered = r.cache->kv_source(l)->next_position() - r.start;
        compress_jobs_.push_back({s, std::clamp<int64_t>(std::max(covered, in), 0, r.rows)});
      }
      if (att >= a.rows) continue;
      const bool compressed = steps.attend_compressed && latest_kv >= 0 && (have_topk || steps.index);
      SegmentAttention job;
      job.segment = s;
      job.first_row = att;
      job.index = steps.index && latest_kv >= 0;
      job.index_kv_layer = latest_kv;
      job.restricted = steps.restricted;
      job.attend_kv_layer = compressed ? latest_kv : -1;
      attention_jobs_.push_back(job);
    }
    if (!compress_jobs_.empty()) backend_->compress_segments(l, compress_jobs_);
    backend_->index_and_attend(l, attention_jobs_);
    if (steps.index && latest_kv >= 0) have_topk = true;
    backend_->attention_output(l, attend_rows_);
    backend_->ffn(l, attend_rows_);
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - layer_start).count();
  const bool last_is_decoder = plan.decoder_start >= 0 && static_cast<int>(plan.layers.size()) - 1 >= plan.decoder_start;
  (last_is_decoder ? timing_.decoder_ms : timing_.encoder_ms) += ms;
}

}  // namespace dsv41
