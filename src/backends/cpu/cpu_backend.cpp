// The CPU backend's steps (see cpu_backend.h). Spec: model.md §3.1–§3.9.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <thread>

#include "kernels/cpu/gemm.h"
#include "model/compressor.h"
#include "model/indexer.h"
#include "model/rmsnorm.h"
#include "model/weight_matrix.h"

namespace dsv41 {
namespace {

template <typename T>
T* row(std::vector<T>& v, int64_t r, int64_t width) {
  return v.data() + r * width;
}

}  // namespace

// A bigger model streams more bytes per step and makes rows relatively cheaper than this shape
// says; the planner's measurements (StepCost::record) correct it for the rows it has seen.
StepShape CpuBackend::step_shape() const { return kComputeBoundStep; }

CpuBackend::CpuBackend(const Model& model, const CpuExec* exec, const CpuBackendOptions& options)
    : model_(model), ex_(exec ? *exec : model.exec()), experts_comm_(options.experts) {
  for (int l = 0; l < model.config().num_hidden_layers; ++l) {
    moe_.push_back(model.layer(l).moe());
    // Only this rank's routed experts stay reachable (a use of another's would fail loudly).
    if (experts_comm_) moe_.back() = shard_moe_weights(moe_.back(), {experts_comm_->rank(), experts_comm_->size()});
  }
  // Row groups split a batch's MoE over groups; expert parallelism exchanges it whole (no groups).
  const Model::HeldBytes held = model.held_bytes();
  if (!experts_comm_ && held.dense + held.routed <= CpuBackendOptions::kMaxGroupedWeightBytes)
    group_rows_ = options.group_rows < 0 ? CpuBackendOptions::kDefaultGroupRows : options.group_rows;
  // The groups' compressor steps take their rows' projections (the fast path's step).
  layer_groups_on_ = options.layer_groups && ex_.use_fast();
  attention_options_.exec = ex_;
  if (const DrafterWeights* dw = model.drafter()) {
    drafter_ = std::make_unique<Drafter>(model, ex_);
    target_slot_.assign(static_cast<size_t>(model.config().num_hidden_layers), -1);
    for (size_t i = 0; i < dw->shape.targets.size(); ++i) target_slot_[dw->shape.targets[i]] = static_cast<int>(i);
  }
}

void CpuBackend::begin_batch(const BatchLayout& layout, ForwardTrace* trace) {
  const ModelConfig& c = config();
  const int64_t n = layout.rows, d = c.hidden_size, hc = c.hc_mult;
  const int64_t H = c.num_attention_heads, D = c.head_dim, k = model_.moe_shape().top_k;
  flush_pending();
  layout_ = layout;
  segments_.assign(layout.segments.begin(), layout.segments.end());
  layout_.segments = segments_;
  trace_ = trace;
  shared_.resize(segments_.size());
  selected_.resize(segments_.size());
  for (SelectedRows& held : selected_) held.source = nullptr;  // storage kept
  batch_layer_groups_ = layer_groups_on_ && trace == nullptr;
  for (size_t s = 0; s < segments_.size(); ++s) {
    shared_[s].begin_forward(segments_[s].start, segments_[s].rows);
    shared_[s].record_trace = trace != nullptr;
    batch_layer_groups_ = batch_layer_groups_ && segments_[s].rows == 1 && segments_[s].row0 == static_cast<int64_t>(s);
  }
  for (const LayerInfo& info : plan().layers) rope_rows_[info.rope].compute(model_.rope(), info.rope, layout.positions, n);
  x_.resize(n * hc * d);
  x2_.resize(n * hc * d);
  p_.resize(n * hc);
  h_.resize(n * d);
  a_.resize(n * d);
  hidden_.resize(n * d);
  c_.resize(n * c.q_lora_rank);
  q_.resize(n * H * D);
  o_.resize(n * H * D);
  kv_.resize(n * D);
  for (auto* v : {&pre_a_, &post_a_, &pre_b_, &post_b_}) v->resize(n * hc);
  comb_a_.resize(n * hc * hc);
  comb_b_.resize(n * hc * hc);
  experts_.resize(n * k);
  weights_.resize(n * k);
  if (capture_) features_.resize(static_cast<size_t>(n * drafter_->feature_width()));
  // X: hc copies of each embedding row; carried mix p one-hot (model.md §3.1).
  // Image-span rows take their image embeddings instead (model.md §3.1, §3.10) and route with
  // bias_vl (is_image_, empty for a text batch).
  const std::vector<float>& embed = model_.embedding();
  const float* image_row = layout.image_embeddings;
  is_image_.clear();
  if (layout.types) is_image_.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    if (layout.types && layout.types[t] >= 0) {
      std::copy_n(image_row, d, h_.data() + t * d);
      image_row += d;
      is_image_[t] = 1;
    } else {
      std::copy_n(embed.data() + int64_t(layout.tokens[t]) * d, d, h_.data() + t * d);
    }
  }
  mhc_init_streams(model_.mhc_shape(), h_.data(), n, x_.data());
  mhc_initial_pre(model_.mhc_shape(), n, p_.data());
}

void CpuBackend::begin_layer(int layer) {
  flush_pending();
  if (hook_) hook_(layer, x_.data(), p_.data());
}

int64_t CpuBackend::row_groups(int64_t rows) const {
  if (group_rows_ <= 0 || trace_ != nullptr || ex_.threads() < CpuBackendOptions::kMinGroupedThreads ||
      rows > CpuBackendOptions::kMaxGroupedRows ||
      rows < std::max(CpuBackendOptions::kMinGroupedRows, 2 * group_rows_))
    return 1;
  return std::clamp<int64_t>(rows / group_rows_, 1, ex_.threads());
}

void CpuBackend::run_groups(const RowRange& r, FunctionRef<void(RowScratch&, int64_t, int64_t)> fn) {
  const int64_t n = r.end - r.begin, groups = row_groups(n);
  if (static_cast<int64_t>(group_scratch_.size()) < groups) group_scratch_.resize(static_cast<size_t>(groups));
  // Group g: rows [r.begin + n·g / groups, r.begin + n·(g + 1) / groups). Inside a chunk the
  // products and loops run inline (the pool does not nest).
  ex_.parallel_for(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t b = r.begin + n * g / groups, e = r.begin + n * (g + 1) / groups;
      fn(group_scratch_[static_cast<size_t>(g)], b, e - b);
    }
  });
}

void CpuBackend::flush_pending() {
  flush_rows();
  run_compress_jobs();
}

void CpuBackend::flush_rows() {
  if (layer_group_.layer >= 0) run_layer_group(false);
  if (pending_input_.layer >= 0) {
    const Pending p = pending_input_;
    pending_input_.layer = -1;
    input_rows(p.layer, p.rows.begin, p.rows.end - p.rows.begin, &mhc_scratch_);
  }
  if (pending_output_.layer >= 0) {
    const Pending p = pending_output_;
    pending_output_.layer = -1;
    output_rows(p.layer, p.rows.begin, p.rows.end - p.rows.begin, &attention_scratch_);
  }
}

Status CpuBackend::engram(int layer, const int64_t* row_ids, int64_t row0, int64_t rows) {
  StepScope timed(ex_.profile, StepPhase::kEngram);
  flush_pending();
  const int64_t hc = config().hc_mult, d = config().hidden_size, cols = model_.engram_shape().columns;
  auto run = [&](int64_t begin, int64_t end) {  // batch rows [begin, end)
    return engram_forward(ex_, model_.engram_shape(), model_.layer(layer).engram(), row_ids + (begin - row0) * cols,
                          end - begin, x_.data() + begin * hc * d, &engram_scratch_);
  };
  if (is_image_.empty()) return run(row0, row0 + rows);
  // The gate is 0 on image-span rows (model.md §3.8, §3.10): only the runs of text rows run.
  for (int64_t t = row0; t < row0 + rows;) {
    if (is_image_[t]) {
      ++t;
      continue;
    }
    int64_t end = t;
    while (end < row0 + rows && !is_image_[end]) ++end;
    DSV41_RETURN_IF_ERROR(run(t, end));
    t = end;
  }
  return ok_status();
}

void CpuBackend::input_rows(int layer, int64_t r0, int64_t n, MhcScratch* scratch) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  const LayerWeights& L = model_.layer(layer);
  // Attention site: coefficients from X, input collapsed with the carried (previous site's) mix.
  mhc_coefficients(ex_, model_.mhc_shape(), L.mhc_attn(), x_.data() + r0 * hc * d, n, pre_a_.data() + r0 * hc,
                   post_a_.data() + r0 * hc, comb_a_.data() + r0 * hc * hc, scratch);
  mhc_collapse(ex_, model_.mhc_shape(), x_.data() + r0 * hc * d, p_.data() + r0 * hc, n, h_.data() + r0 * d);
  rmsnorm_rows(h_.data() + r0 * d, n, d, L.attn_norm.data(), c.rms_norm_eps, h_.data() + r0 * d);
}

void CpuBackend::projection_rows(int layer, int64_t r0, int64_t n) {
  const ModelConfig& c = config();
  const AttentionWeights& w = model_.layer(layer).attn;
  const RopeRows& rope = rope_rows_.at(plan().layers[layer].rope);
  const int64_t HD = c.num_attention_heads * c.head_dim;
  attention_query_and_window_kv(ex_, c, w, rope, row(h_, r0, c.hidden_size), n, row(c_, r0, c.q_lora_rank),
                                row(q_, r0, HD), row(kv_, r0, c.head_dim), r0);
}

void CpuBackend::attention_input(int layer, std::span<const RowRange> rows) {
  StepScope timed(ex_.profile, StepPhase::kAttentionInput);
  flush_pending();
  if (capture_ && target_slot_[layer] >= 0) capture_features(layer, rows);
  if (rows.size() == 1 && row_groups(rows[0].end - rows[0].begin) > 1) {
    pending_input_ = {layer, rows[0]};  // attention_projections runs it in the groups
    return;
  }
  for (const RowRange& r : rows) input_rows(layer, r.begin, r.end - r.begin, &mhc_scratch_);
}

void CpuBackend::attention_projections(int layer, std::span<const RowRange> rows) {
  StepScope timed(ex_.profile, StepPhase::kProjections);
  if (pending_input_.layer == layer && rows.size() == 1 && rows[0].begin == pending_input_.rows.begin &&
      rows[0].end == pending_input_.rows.end) {
    pending_input_.layer = -1;
    if (batch_layer_groups_ && rows[0].begin == 0 && rows[0].end == layout_.rows) {
      layer_group_ = {layer, false, false};  // the rest of the layer's steps join it (ffn runs it)
      return;
    }
    run_groups(rows[0], [&](RowScratch& s, int64_t r0, int64_t n) {
      input_rows(layer, r0, n, &s.mhc);
      projection_rows(layer, r0, n);
    });
    return;
  }
  flush_pending();
  for (const RowRange& r : rows) projection_rows(layer, r.begin, r.end - r.begin);
}

void CpuBackend::compress(int layer, int segment, int64_t first_row) {
  StepScope timed(ex_.profile, StepPhase::kCompress);
  flush_rows();
  if (!compress_jobs_.empty() && compress_jobs_.front().layer != layer) run_compress_jobs();
  compress_jobs_.push_back({layer, segment, first_row});
}

void CpuBackend::compress_segments(int layer, std::span<const SegmentCompress> jobs) {
  if (layer_group_.layer == layer && !layer_group_.attend && compress_jobs_.empty()) {
    // The groups publish in segment order: the jobs must come in it (the engine's order).
    bool ordered = true;
    for (size_t k = 1; k < jobs.size(); ++k) ordered = ordered && jobs[k - 1].segment < jobs[k].segment;
    if (ordered) {
      StepScope timed(ex_.profile, StepPhase::kCompress);
      for (const SegmentCompress& j : jobs) compress_jobs_.push_back({layer, j.segment, j.first_row});
      return;
    }
  }
  Backend::compress_segments(layer, jobs);
}

void CpuBackend::run_compress_jobs() {
  const int64_t n = static_cast<int64_t>(compress_jobs_.size());
  if (n == 0) return;
  if (static_cast<int64_t>(job_groups_.size()) < n) {
    job_groups_.resize(static_cast<size_t>(n));
    job_scratch_.resize(static_cast<size_t>(n));
  }
  const ModelConfig& c = config();
  // Decoders (a few rows each) side by side, one segment per chunk, the products inside inline; a
  // prefill chunk threads its own products, so then all run one after another.
  constexpr int64_t kSmallRows = 16;
  bool small = n >= 2;
  for (const CompressJob& j : compress_jobs_) small = small && segments_[j.segment].rows - j.first_row < kSmallRows;
  // Decoders' rows one after another in h_ (a decode batch): their projections as one product per
  // weight instead of one short product per segment (the same bits per row, gemm.h).
  const int64_t span_b = segments_[compress_jobs_[0].segment].row0 + compress_jobs_[0].first_row;
  bool contiguous = small && ex_.use_fast();
  int64_t span_e = span_b;
  for (const CompressJob& j : compress_jobs_) {
    const SegmentRows& s = segments_[j.segment];
    contiguous = contiguous && j.first_row < s.rows && s.row0 + j.first_row == span_e;
    span_e = s.row0 + s.rows;
  }
  const AttentionWeights& attn = model_.layer(compress_jobs_[0].layer).attn;
  const int64_t D = c.head_dim;
  const bool gated = segments_[compress_jobs_[0].segment].cache->kv_source(compress_jobs_[0].layer)->ratio >= 2;
  if (contiguous) {
    job_a_.resize(static_cast<size_t>((span_e - span_b) * D));
    job_b_.resize(gated ? job_a_.size() : 0);
    const float* x = row(h_, span_b, c.hidden_size);
    gemm_f32(ex_, x, span_e - span_b, c.hidden_size, attn.compressor_wkv.data(), D, job_a_.data());
    if (gated) gemm_f32(ex_, x, span_e - span_b, c.hidden_size, attn.compressor_wgate.data(), D, job_b_.data());
  }
  auto step = [&](int64_t k) {
    const CompressJob& j = compress_jobs_[static_cast<size_t>(k)];
    const SegmentRows& s = segments_[j.segment];
    if (j.first_row >= s.rows) return;
    const int64_t r0 = s.row0 + j.first_row;
    KvSourceCache& kv = *s.cache->kv_source(j.layer);
    if (contiguous) {
      compressor_step_projected(ex_, c, attn, kv, row(job_a_, r0 - span_b, D),
                                gated ? row(job_b_, r0 - span_b, D) : nullptr, s.rows - j.first_row, job_groups_[k],
                                &job_scratch_[k]);
    } else {
      compressor_step(ex_, c, model_.layer(j.layer).attn, kv, row(h_, r0, c.hidden_size), s.rows - j.first_row,
                      job_groups_[k], &job_scratch_[k]);
    }
  };
  if (small) {
    ex_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) step(k);
    });
  } else {
    for (int64_t k = 0; k < n; ++k) step(k);
  }
  for (int64_t k = 0; k < n; ++k) {
    const CompressJob& j = compress_jobs_[static_cast<size_t>(k)];
    const SegmentRows& s = segments_[j.segment];
    KvSourceCache& kv = *s.cache->kv_source(j.layer);
    if (j.first_row < s.rows)
      compressor_publish(ex_, c, model_.layer(j.layer).attn, model_.rope(), kv, job_groups_[k], &job_scratch_[k]);
    shared_[j.segment].kv_layer = j.layer;
    shared_[j.segment].entries = kv.entries();
  }
  compress_jobs_.clear();
}

void CpuBackend::index(int layer, int segment, int64_t first_row, int kv_layer, bool restricted) {
  flush_pending();
  index_with(layer, segment, first_row, kv_layer, restricted, &attention_scratch_);
}

void CpuBackend::attend(int layer, int segment, int64_t first_row, int kv_layer) {
  flush_pending();
  attend_with(layer, segment, first_row, kv_layer, &attention_scratch_);
}

void CpuBackend::index_and_attend(int layer, std::span<const SegmentAttention> jobs) {
  StepScope timed(ex_.profile, StepPhase::kIndexAttend);
  if (layer_group_.layer == layer && !layer_group_.attend) {
    bool whole = true;  // every job from the segment's (only) row
    for (const SegmentAttention& j : jobs) whole = whole && j.first_row == 0;
    if (whole) {
      group_jobs_.assign(jobs.begin(), jobs.end());
      layer_group_.attend = true;
      return;
    }
  }
  flush_pending();
  if (segment_scratch_.size() < jobs.size()) segment_scratch_.resize(jobs.size());
  // A segment of many rows (a prefill chunk) runs alone on the caller, its kernels threaded over
  // its rows and heads; the small ones (decoders) run side by side, one segment per chunk.
  constexpr int64_t kLargeRows = 16;
  const int64_t n = static_cast<int64_t>(jobs.size());
  auto large = [&](int64_t k) {
    const SegmentAttention& j = jobs[static_cast<size_t>(k)];
    return segments_[j.segment].rows - j.first_row >= kLargeRows;
  };
  // The index queries of every indexing segment's rows in one product per run of contiguous
  // rows (a decode batch: one), rather than a one-row product per segment; row by row the same
  // bits (indexer_queries_at). They live in attention_scratch_.indexer's q and head_weights,
  // which the jobs (each with its own scratch) only read.
  const ModelConfig& c = config();
  const int64_t iw = int64_t{c.index_n_heads} * c.index_head_dim;
  IndexerScratch& iq = attention_scratch_.indexer;
  bool any_index = false;
  for (const SegmentAttention& j : jobs) any_index = any_index || j.index;
  // Nested phases are timed only on the caller (a pool job's clock would race the profile).
  StepProfile* const profile = ThreadPool::inside_job() ? nullptr : ex_.profile;
  if (any_index) {
    StepScope timed_queries(profile, StepPhase::kIndexer);
    iq.q.resize(static_cast<size_t>(layout_.rows * iw));
    iq.head_weights.resize(static_cast<size_t>(layout_.rows * c.index_n_heads));
    auto queries = [&](int64_t b, int64_t e) {
      if (b < e)
        indexer_queries_at(ex_, c, model_.layer(layer).attn, model_.rope(), row(c_, b, c.q_lora_rank),
                           row(h_, b, c.hidden_size), e - b, layout_.positions + b, row(iq.q, b, iw),
                           row(iq.head_weights, b, c.index_n_heads), &iq);
    };
    int64_t run_b = 0, run_e = 0;  // the current run of contiguous rows
    for (const SegmentAttention& j : jobs) {
      if (!j.index) continue;
      const SegmentRows& s = segments_[j.segment];
      const int64_t b = s.row0 + j.first_row, e = s.row0 + s.rows;
      if (b >= e) continue;
      if (b != run_e) {
        queries(run_b, run_e);
        run_b = b;
      }
      run_e = e;
    }
    queries(run_b, run_e);
  }
  auto run_job = [&](int64_t k) {
    const SegmentAttention& j = jobs[static_cast<size_t>(k)];
    AttentionScratch* scratch = &segment_scratch_[static_cast<size_t>(k)];
    StepProfile* const job_profile = ThreadPool::inside_job() ? nullptr : profile;
    if (j.index) {
      StepScope timed_index(job_profile, StepPhase::kIndexer);
      const SegmentRows& s = segments_[j.segment];
      const KvSourceCache& kv = *s.cache->kv_source(j.index_kv_layer);
      const int64_t r0 = s.row0 + j.first_row;
      shared_[j.segment].call_row0 = j.first_row;
      attention_index_with_queries(ex_, c, plan().layers[layer], kv, j.restricted, row(iq.q, r0, iw),
                                   row(iq.head_weights, r0, c.index_n_heads), s.rows - j.first_row, s.start + j.first_row,
                                   shared_[j.segment], scratch);
    }
    StepScope timed_attend(job_profile, StepPhase::kSparseAttention);
    attend_with(layer, j.segment, j.first_row, j.attend_kv_layer, scratch);
  };
  // A trace records per-segment state in order; it only comes with single-segment batches.
  if (n < 2 || trace_ != nullptr) {
    for (int64_t k = 0; k < n; ++k) run_job(k);
    return;
  }
  int64_t small = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (large(k)) {
      run_job(k);
    } else {
      ++small;
    }
  }
  if (small == 0) return;
  ex_.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k)
      if (!large(k)) run_job(k);
  });
}

void CpuBackend::run_layer_group(bool with_ffn) {
  const LayerGroup g = layer_group_;
  layer_group_ = {};
  const int layer = g.layer;
  const ModelConfig& c = config();
  const int64_t n = layout_.rows, S = static_cast<int64_t>(segments_.size()), D = c.head_dim;
  segment_compress_.assign(static_cast<size_t>(S), -1);
  segment_attend_.assign(static_cast<size_t>(S), -1);
  // What the groups write row by row into shared buffers is sized here, before the job.
  const int64_t jobs = static_cast<int64_t>(compress_jobs_.size());
  if (jobs > 0) {
    for (int64_t k = 0; k < jobs; ++k) segment_compress_[compress_jobs_[static_cast<size_t>(k)].segment] = static_cast<int32_t>(k);
    if (static_cast<int64_t>(job_groups_.size()) < jobs) {
      job_groups_.resize(static_cast<size_t>(jobs));
      job_scratch_.resize(static_cast<size_t>(jobs));
    }
    job_a_.resize(static_cast<size_t>(n * D));
    job_b_.resize(static_cast<size_t>(n * D));
  }
  if (g.attend) {
    bool any_index = false;
    for (size_t k = 0; k < group_jobs_.size(); ++k) {
      segment_attend_[group_jobs_[k].segment] = static_cast<int32_t>(k);
      any_index = any_index || group_jobs_[k].index;
    }
    if (any_index) {
      attention_scratch_.indexer.q.resize(static_cast<size_t>(n * c.index_n_heads * c.index_head_dim));
      attention_scratch_.indexer.head_weights.resize(static_cast<size_t>(n * c.index_n_heads));
    }
  }
  published_.store(0, std::memory_order_relaxed);
  ++layer_group_runs_;
  run_groups({0, n}, [&](RowScratch& s, int64_t b, int64_t m) {
    input_rows(layer, b, m, &s.mhc);
    projection_rows(layer, b, m);
    if (jobs > 0) layer_group_compress(layer, b, b + m);
    if (g.attend) layer_group_attend(layer, b, b + m, &s.attention);
    if (g.output) output_rows(layer, b, m, &s.attention);
    if (with_ffn) ffn_rows(layer, b, m, &s.mhc, &s.moe);
  });
  compress_jobs_.clear();
}

// A group's compressor steps (segment r = row r): its rows' projections as one product (row by
// row the bits of run_compress_jobs' whole-batch product), each segment's step, then its entries
// into the shared page pool once every earlier job has published (call order, as
// run_compress_jobs). Groups are handed out in row order and only wait for earlier ones, which
// some thread has already taken, so the wait always ends.
void CpuBackend::layer_group_compress(int layer, int64_t b, int64_t e) {
  const ModelConfig& c = config();
  const int64_t D = c.head_dim;
  const AttentionWeights& attn = model_.layer(layer).attn;
  const bool gated = segments_[compress_jobs_[0].segment].cache->kv_source(layer)->ratio >= 2;
  const float* x = row(h_, b, c.hidden_size);
  gemm_f32(ex_, x, e - b, c.hidden_size, attn.compressor_wkv.data(), D, row(job_a_, b, D));
  if (gated) gemm_f32(ex_, x, e - b, c.hidden_size, attn.compressor_wgate.data(), D, row(job_b_, b, D));
  for (int64_t r = b; r < e; ++r) {
    const int32_t k = segment_compress_[static_cast<size_t>(r)];
    if (k < 0) continue;
    const CompressJob& j = compress_jobs_[static_cast<size_t>(k)];
    const SegmentRows& s = segments_[j.segment];
    KvSourceCache& kv = *s.cache->kv_source(j.layer);
    if (j.first_row < s.rows)
      compressor_step_projected(ex_, c, attn, kv, row(job_a_, r, D), gated ? row(job_b_, r, D) : nullptr,
                                s.rows - j.first_row, job_groups_[k], &job_scratch_[k]);
    for (int spins = 0; published_.load(std::memory_order_acquire) != k; ++spins) {
      if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      } else {
        std::this_thread::yield();
      }
    }
    if (j.first_row < s.rows)
      compressor_publish(ex_, c, attn, model_.rope(), kv, job_groups_[k], &job_scratch_[k]);
    shared_[j.segment].kv_layer = j.layer;
    shared_[j.segment].entries = kv.entries();
    published_.store(k + 1, std::memory_order_release);
  }
}

// A group's index queries (one product per run of indexing rows, row by row the bits of
// index_and_attend's), then each of its segments' index and attention steps as run_job there.
void CpuBackend::layer_group_attend(int layer, int64_t b, int64_t e, AttentionScratch* scratch) {
  const ModelConfig& c = config();
  const int64_t iw = int64_t{c.index_n_heads} * c.index_head_dim, nh = c.index_n_heads;
  IndexerScratch& iq = attention_scratch_.indexer;  // only rows [b, e) of its q / head_weights
  auto indexing = [&](int64_t r) {
    const int32_t k = segment_attend_[static_cast<size_t>(r)];
    return k >= 0 && group_jobs_[static_cast<size_t>(k)].index;
  };
  for (int64_t r = b; r < e;) {
    if (!indexing(r)) {
      ++r;
      continue;
    }
    int64_t end = r + 1;
    while (end < e && indexing(end)) ++end;
    indexer_queries_at(ex_, c, model_.layer(layer).attn, model_.rope(), row(c_, r, c.q_lora_rank), row(h_, r, c.hidden_size),
                       end - r, layout_.positions + r, row(iq.q, r, iw), row(iq.head_weights, r, nh), &scratch->indexer);
    r = end;
  }
  for (int64_t r = b; r < e; ++r) {
    const int32_t k = segment_attend_[static_cast<size_t>(r)];
    if (k < 0) continue;
    const SegmentAttention& j = group_jobs_[static_cast<size_t>(k)];
    if (j.index) {
      const SegmentRows& s = segments_[j.segment];
      const KvSourceCache& kv = *s.cache->kv_source(j.index_kv_layer);
      shared_[j.segment].call_row0 = 0;
      attention_index_with_queries(ex_, c, plan().layers[layer], kv, j.restricted, row(iq.q, r, iw),
                                   row(iq.head_weights, r, nh), s.rows, s.start, shared_[j.segment], scratch);
    }
    attend_with(layer, j.segment, 0, j.attend_kv_layer, scratch);
  }
}

void CpuBackend::index_with(int layer, int segment, int64_t first_row, int kv_layer, bool restricted,
                            AttentionScratch* scratch) {
  const SegmentRows& s = segments_[segment];
  const ModelConfig& c = config();
  const KvSourceCache& kv = *s.cache->kv_source(kv_layer);
  const int64_t r0 = s.row0 + first_row;
  shared_[segment].call_row0 = first_row;
  attention_index(ex_, c, plan().layers[layer], model_.layer(layer).attn, model_.rope(), kv, restricted,
                  row(c_, r0, c.q_lora_rank), row(h_, r0, c.hidden_size), s.rows - first_row, s.start + first_row,
                  shared_[segment], scratch);
}

void CpuBackend::attend_with(int layer, int segment, int64_t first_row, int kv_layer, AttentionScratch* scratch) {
  const SegmentRows& s = segments_[segment];
  const ModelConfig& c = config();
  const int64_t HD = c.num_attention_heads * c.head_dim;
  const int64_t r0 = s.row0 + first_row, n = s.rows - first_row;
  WindowRing& ring = s.cache->window(layer);
  const KvSourceCache* compressed = kv_layer >= 0 ? s.cache->kv_source(kv_layer) : nullptr;
  const SharedAttentionState& shared = shared_[segment];
  // The latest top-k may have been published for an earlier first row of this segment.
  const int32_t* topk = compressed ? shared.topk.data() + (first_row - shared.topk_row0) * c.index_topk : nullptr;
  const RopeRows& rope = rope_rows_.at(plan().layers[layer].rope);
  if (compressed && n <= kSelectedRowsMax) {
    // A decoding or verifying segment unpacks its selection once for the Reuse layer after it, and
    // each entry once for all its rows (selected_rows.h).
    sparse_sink_attention_selected(c, model_.layer(layer).attn, ring, row(kv_, r0, c.head_dim), *compressed, topk,
                                   row(q_, r0, HD), rope, r0, n, s.start + first_row, row(o_, r0, HD), attention_options_,
                                   scratch, selected_[segment]);
  } else {
    sparse_sink_attention(c, model_.layer(layer).attn, ring, row(kv_, r0, c.head_dim), compressed, topk,
                          row(q_, r0, HD), rope, r0, n, s.start + first_row, row(o_, r0, HD), attention_options_, scratch);
  }
  ring.push_rows(row(kv_, r0, c.head_dim), n);
}

void CpuBackend::output_rows(int layer, int64_t r0, int64_t n, AttentionScratch* scratch) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, hc = c.hc_mult, HD = c.num_attention_heads * c.head_dim;
  dsv41::attention_output(ex_, c, model_.layer(layer).attn, row(o_, r0, HD), n, row(a_, r0, d), scratch);
  mhc_expand(ex_, model_.mhc_shape(), row(a_, r0, d), row(x_, r0, hc * d), row(post_a_, r0, hc), row(comb_a_, r0, hc * hc),
             n, row(x2_, r0, hc * d));
}

void CpuBackend::ffn_input_rows(int layer, int64_t r0, int64_t m, MhcScratch* mhc_scratch) {
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  const LayerWeights& L = model_.layer(layer);
  const MhcShape& mhc = model_.mhc_shape();
  // FFN site: coefficients from X', input collapsed with this block's attention-site pre.
  mhc_coefficients(ex_, mhc, L.mhc_ffn(), row(x2_, r0, hc * d), m, row(pre_b_, r0, hc), row(post_b_, r0, hc),
                   row(comb_b_, r0, hc * hc), mhc_scratch);
  mhc_collapse(ex_, mhc, row(x2_, r0, hc * d), row(pre_a_, r0, hc), m, row(h_, r0, d));
  rmsnorm_rows(row(h_, r0, d), m, d, L.ffn_norm.data(), c.rms_norm_eps, row(h_, r0, d));
}

void CpuBackend::ffn_expand_rows(int64_t r0, int64_t m) {
  const int64_t d = config().hidden_size, hc = config().hc_mult;
  mhc_expand(ex_, model_.mhc_shape(), row(a_, r0, d), row(x2_, r0, hc * d), row(post_b_, r0, hc),
             row(comb_b_, r0, hc * hc), m, row(x_, r0, hc * d));
  std::copy_n(row(pre_b_, r0, hc), m * hc, row(p_, r0, hc));  // the carried mix for the next site
}

void CpuBackend::ffn_rows(int layer, int64_t r0, int64_t m, MhcScratch* mhc_scratch, MoeScratch* moe_scratch) {
  const int64_t d = config().hidden_size, k = model_.moe_shape().top_k;
  ffn_input_rows(layer, r0, m, mhc_scratch);
  const uint8_t* is_image = is_image_.empty() ? nullptr : is_image_.data() + r0;
  moe_forward(ex_, model_.moe_shape(), moe_[layer], row(h_, r0, d), m, is_image, row(a_, r0, d), row(experts_, r0, k),
              row(weights_, r0, k), moe_scratch);
  ffn_expand_rows(r0, m);
}

void CpuBackend::attention_output(int layer, std::span<const RowRange> rows) {
  StepScope timed(ex_.profile, StepPhase::kAttentionOutput);
  if (layer_group_.layer == layer && layer_group_.attend && rows.size() == 1 && rows[0].begin == 0 &&
      rows[0].end == layout_.rows) {
    layer_group_.output = true;
    return;
  }
  flush_pending();
  if (rows.size() == 1 && row_groups(rows[0].end - rows[0].begin) > 1) {
    pending_output_ = {layer, rows[0]};  // ffn runs it in the groups
    return;
  }
  for (const RowRange& r : rows) output_rows(layer, r.begin, r.end - r.begin, &attention_scratch_);
}

void CpuBackend::ffn(int layer, std::span<const RowRange> rows) {
  StepScope timed(ex_.profile, StepPhase::kFfn);
  const ModelConfig& c = config();
  const int64_t n = layout_.rows, d = c.hidden_size, hc = c.hc_mult, k = model_.moe_shape().top_k;
  if (layer_group_.layer == layer && layer_group_.output && rows.size() == 1 && rows[0].begin == 0 &&
      rows[0].end == n) {
    run_layer_group(true);
  } else if (experts_comm_) {
    // Expert parallelism: the MoE of every range in one exchange (every rank makes the same calls).
    flush_pending();
    for (const RowRange& r : rows) ffn_input_rows(layer, r.begin, r.end - r.begin, &mhc_scratch_);
    moe_expert_parallel(layer, rows);
    for (const RowRange& r : rows) ffn_expand_rows(r.begin, r.end - r.begin);
  } else if (pending_output_.layer == layer && rows.size() == 1 && rows[0].begin == pending_output_.rows.begin &&
             rows[0].end == pending_output_.rows.end) {
    pending_output_.layer = -1;
    run_groups(rows[0], [&](RowScratch& s, int64_t r0, int64_t m) {
      output_rows(layer, r0, m, &s.attention);
      ffn_rows(layer, r0, m, &s.mhc, &s.moe);
    });
  } else {
    flush_pending();
    for (const RowRange& r : rows) ffn_rows(layer, r.begin, r.end - r.begin, &mhc_scratch_, &moe_scratch_);
  }
  expert_seen_.assign(static_cast<size_t>(c.n_routed_experts), 0);
  for (const RowRange& r : rows)
    for (int64_t i = r.begin * k; i < r.end * k; ++i) {
      const int32_t e = experts_[i];
      if (e >= 0 && e < c.n_routed_experts && !expert_seen_[e]) {
        expert_seen_[e] = 1;
        ++expert_reads_;
      }
    }
  if (trace_) {
    const LayerInfo& info = plan().layers[layer];
    const SharedAttentionState& shared = shared_[0];
    trace_->streams.emplace_back(x_.begin(), x_.begin() + n * hc * d);
    trace_->pre.push_back(pre_b_);
    trace_->router_experts.push_back(experts_);
    trace_->router_weights.push_back(weights_);
    trace_->topk.push_back(info.ratio > 0 ? shared.topk : std::vector<int32_t>{});
    // The shared state holds this layer's scores only if this layer ran the indexer.
    const bool indexed = shared.index_layer == layer && !shared.trace_index_scores.empty();
    trace_->index_scores.push_back(indexed ? shared.trace_index_scores : std::vector<float>{});
    trace_->candidates.push_back(indexed && shared.candidate_layer == layer ? shared.trace_candidates
                                                                            : std::vector<uint8_t>{});
  }
}

void CpuBackend::moe_expert_parallel(int layer, std::span<const RowRange> rows) {
  const int64_t d = config().hidden_size, k = model_.moe_shape().top_k;
  int64_t m = 0;
  for (const RowRange& r : rows) m += r.end - r.begin;
  // One range (every decode batch, every full-depth prefill) runs in place; several are packed.
  const bool packed = rows.size() > 1;
  const int64_t r0 = rows.empty() ? 0 : rows[0].begin;
  if (packed) {
    ep_in_.resize(static_cast<size_t>(m * d));
    ep_out_.resize(static_cast<size_t>(m * d));
    ep_experts_.resize(static_cast<size_t>(m * k));
    ep_weights_.resize(static_cast<size_t>(m * k));
    ep_image_.assign(is_image_.empty() ? 0 : static_cast<size_t>(m), 0);
    int64_t at = 0;
    for (const RowRange& r : rows) {
      std::copy_n(row(h_, r.begin, d), (r.end - r.begin) * d, ep_in_.data() + at * d);
      if (!is_image_.empty()) std::copy_n(is_image_.data() + r.begin, r.end - r.begin, ep_image_.data() + at);
      at += r.end - r.begin;
    }
  }
  const float* in = packed ? ep_in_.data() : h_.data() + r0 * d;
  float* out = packed ? ep_out_.data() : a_.data() + r0 * d;
  int32_t* experts = packed ? ep_experts_.data() : experts_.data() + r0 * k;
  float* weights = packed ? ep_weights_.data() : weights_.data() + r0 * k;
  const uint8_t* image = is_image_.empty() ? nullptr : (packed ? ep_image_.data() : is_image_.data() + r0);
  // After a failed exchange the rest of the forward only keeps the call count (the batch fails).
  Status st = ep_failure_.ok() ? moe_forward_ep(ex_, model_.moe_shape(), moe_[layer], *experts_comm_, in, m, image, out,
                                                experts, weights, &ep_scratch_)
                               : ep_failure_;
  if (!st.ok()) {
    if (ep_failure_.ok()) ep_failure_ = st.with_context("layer " + std::to_string(layer) + " expert-parallel MoE");
    std::fill_n(out, m * d, 0.0f);
    std::fill_n(experts, m * k, 0);
    std::fill_n(weights, m * k, 0.0f);
  }
  if (!packed) return;
  int64_t at = 0;
  for (const RowRange& r : rows) {
    const int64_t n = r.end - r.begin;
    std::copy_n(ep_out_.data() + at * d, n * d, row(a_, r.begin, d));
    std::copy_n(ep_experts_.data() + at * k, n * k, row(experts_, r.begin, k));
    std::copy_n(ep_weights_.data() + at * k, n * k, row(weights_, r.begin, k));
    at += n;
  }
}

void CpuBackend::idle_forward() {
  if (!experts_comm_) return;
  // The exchanges of a forward without rows: one MoE call per layer, as ffn makes.
  for (const LayerInfo& info : plan().layers) moe_expert_parallel(info.index, {});
}

Status CpuBackend::take_step_failure() {
  Status st = ep_failure_;
  ep_failure_ = ok_status();
  return st;
}

void CpuBackend::logits(std::span<const int64_t> rows, float* out) {
  StepScope timed(ex_.profile, StepPhase::kLogits);
  flush_pending();
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  const MhcShape& mhc = model_.mhc_shape();
  if (trace_) {
    // The trace wants every row's final hidden state.
    const int64_t n = layout_.rows;
    mhc_collapse(ex_, mhc, x_.data(), p_.data(), n, hidden_.data());
    rmsnorm_rows(hidden_.data(), n, d, model_.final_norm().data(), c.rms_norm_eps, hidden_.data());
    trace_->final_hidden.assign(hidden_.begin(), hidden_.begin() + n * d);
    for (size_t i = 0; i < rows.size(); ++i) std::copy_n(hidden_.data() + rows[i] * d, d, h_.data() + i * d);
  } else {
    // Final collapse with the last FFN-site pre and the final norm, only for the rows asked for.
    for (size_t i = 0; i < rows.size(); ++i) {
      mhc_collapse(ex_, mhc, x_.data() + rows[i] * hc * d, p_.data() + rows[i] * hc, 1, h_.data() + i * d);
    }
    rmsnorm_rows(h_.data(), static_cast<int64_t>(rows.size()), d, model_.final_norm().data(), c.rms_norm_eps,
                 h_.data());
  }
  if (!rows.empty())
    matmul(ex_, h_.data(), static_cast<int64_t>(rows.size()), d, model_.head().ref(), c.vocab_size, out);
}

// The drafter's target features of a target layer (model/dspark.h): the mean of the streams
// entering it (after its Engram, before its mHC), for the given rows.
void CpuBackend::capture_features(int layer, std::span<const RowRange> rows) {
  const int64_t d = config().hidden_size, hc = config().hc_mult, width = drafter_->feature_width();
  const int64_t slot = target_slot_[layer];
  const float inv = 1.0f / static_cast<float>(hc);
  for (const RowRange& r : rows)
    for (int64_t t = r.begin; t < r.end; ++t) {
      const float* x = x_.data() + t * hc * d;
      float* f = features_.data() + t * width + slot * d;
      for (int64_t i = 0; i < d; ++i) {
        float sum = 0;
        for (int64_t j = 0; j < hc; ++j) sum += x[j * d + i];
        f[i] = sum * inv;
      }
    }
}

void CpuBackend::feed_draft_rings(std::span<const DraftFeed> feeds) {
  if (!capture_ || feeds.empty()) return;
  feed_drafter_rings(*drafter_, config().head_dim, segments_, layout_.positions, features_.data(), feeds, feed_scratch_);
}

Status CpuBackend::draft(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick) {
  if (!drafter_) return Backend::draft(requests, out, pick);
  return drafter_->draft(requests, out, pick);
}

}  // namespace dsv41
