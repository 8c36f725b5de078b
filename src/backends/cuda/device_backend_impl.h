// DeviceBackend's steps (see device_backend.h), included by the one file that instantiates it per
// executor (host_device_backend.cpp, cuda_backend.cu). Each step follows CpuBackend's
// (backends/cpu/cpu_backend.cpp) and the blocks it calls line by line, with the arithmetic in
// device_kernels.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cuda/device_backend.h"
#include "backends/cuda/mma_gemm.h"
#include "model/attention_steps.h"

namespace dsv41 {

template <class Exec>
template <typename T>
const T* DeviceBackend<Exec>::put(const T* src, int64_t n) {
  void* p = ex_.alloc(n * int64_t(sizeof(T)));
  if (!p) return nullptr;
  ex_.upload(p, src, n * int64_t(sizeof(T)));
  owned_.push_back(p);
  weight_bytes_ += n * int64_t(sizeof(T));
  return static_cast<const T*>(p);
}

// Values held by a float32 / bf16 matrix (a stored FP8 / FP4 one uploads its bytes: put(QuantWeights)).
inline int64_t elements(const WeightMatrix& m) {
  return m.is_bf16() ? static_cast<int64_t>(m.bf16.size()) : static_cast<int64_t>(m.f32.size());
}

// The stored bytes as they are: codes, and the UE8M0 scale rows the view's rows touch.
template <class Exec>
dk::DevWeight DeviceBackend<Exec>::put(const QuantWeights& q) {
  dk::DevWeight w;
  const int64_t scale_rows = q.rows > 0 ? ((q.row_phase + q.rows - 1) >> q.block_rows_log2) + 1 : 0;
  w.codes = put(q.codes, q.rows * q.row_bytes());
  w.scales = put(q.scales, scale_rows * q.scale_cols);
  w.in = q.in;
  w.scale_cols = static_cast<int32_t>(q.scale_cols);
  w.phase = q.row_phase;
  w.fp4 = q.format == QuantFormat::kFp4E2M1;
  w.rows_log2 = static_cast<uint8_t>(q.block_rows_log2);
  w.cols_log2 = static_cast<uint8_t>(q.block_cols_log2);
  return w;
}

template <class Exec>
dk::DevWeight DeviceBackend<Exec>::put(const WeightRef& w, int64_t n) {
  if (w.is_quant()) return put(w.quant);
  if (w.bf16) return {nullptr, put(w.bf16, n)};
  return {w.f32 ? put(w.f32, n) : nullptr, nullptr};
}

template <class Exec>
dk::DevWeight DeviceBackend<Exec>::put(const std::vector<float>& f32, const std::vector<uint16_t>& bf16,
                                      const QuantWeights& quant) {
  if (quant.codes) return put(quant);
  if (!bf16.empty()) return {nullptr, put(bf16.data(), int64_t(bf16.size()))};
  return {put(f32), nullptr};
}

// The weights a backbone layer (LayerDev) and a drafter stage (DraftStageDev) have in common:
// attention projections and norms, the sink, the block's norms, mHC, router and experts.
template <class Exec>
template <class BlockDev>
void DeviceBackend<Exec>::put_block(const LayerWeights& L, bool has_shared, BlockDev& D, bool only_own_experts) {
  const AttentionWeights& a = L.attn;
  D.wq_a = put(a.wq_a, a.bf16.wq_a, a.quant_wq_a);
  D.wq_b = put(a.wq_b, a.bf16.wq_b, a.quant_wq_b);
  D.wkv = put(a.wkv, a.bf16.wkv, a.quant_wkv);
  D.wo_a = put(a.wo_a, a.bf16.wo_a, a.quant_wo_a);
  D.wo_b = put(a.wo_b, a.bf16.wo_b, a.quant_wo_b);
  D.q_norm = put(a.q_norm);
  D.kv_norm = put(a.kv_norm);
  D.sink = put(a.attn_sink);
  D.attn_norm = put(L.attn_norm);
  D.ffn_norm = put(L.ffn_norm);
  D.hca_fn = put(L.hc_attn_fn);
  D.hca_base = put(L.hc_attn_base);
  D.hca_scale = put(L.hc_attn_scale);
  D.hcf_fn = put(L.hc_ffn_fn);
  D.hcf_base = put(L.hc_ffn_base);
  D.hcf_scale = put(L.hc_ffn_scale);
  D.gate = put(L.gate);
  D.gate_bias = put(L.gate_bias);
  std::vector<dk::ExpertW> table;
  // With expert parallelism only this rank's routed experts come to the device (others' entries
  // stay empty: no kernel of this rank reads them).
  const ExpertShard shard{ep_comm_ ? ep_comm_->rank() : 0, ep_comm_ ? ep_comm_->size() : 1};
  for (const ExpertStore& e : L.experts) {
    if (only_own_experts && !shard.owns(static_cast<int>(table.size()))) {
      table.push_back({});
      continue;
    }
    table.push_back({put(e.w1.ref(), elements(e.w1)), put(e.w3.ref(), elements(e.w3)), put(e.w2.ref(), elements(e.w2))});
  }
  if (!table.empty()) D.experts = put(table.data(), int64_t(table.size()));
  dk::ExpertW sw{};
  if (has_shared) {
    const ExpertStore& s = L.shared;
    sw = {put(s.w1.ref(), elements(s.w1)), put(s.w3.ref(), elements(s.w3)), put(s.w2.ref(), elements(s.w2))};
    D.shared = put(&sw, 1);
  }
  if constexpr (requires { D.experts_mma; }) {  // the grouped tensor-core experts (set_mma_gemm)
    const MoeShape& ms = model_.moe_shape();
    const int64_t d = model_.config().hidden_size;
    bool fits = !table.empty() && !only_own_experts;  // the exchange's experts run the warp kernels
    for (const dk::ExpertW& e : table) fits = fits && fast::mma_expert_fits(e, d, ms.inter);
    D.experts_mma = fits && (!has_shared || fast::mma_expert_fits(sw, d, ms.shared_inter));
  }
}

template <class Exec>
DeviceBackend<Exec>::DeviceBackend(const Model& model, Communicator* experts) : model_(model), ep_comm_(experts) {
  for (F32* b : {&x_, &x2_, &p_, &h_, &c_, &q_, &kv_, &o_, &a_, &pre_a_, &post_a_, &comb_a_, &post_b_,
                 &comb_b_, &tables_, &scratch_r_, &scratch_m_, &scratch_mhc_, &mid_,
                 &logits_buf_, &cmp_ab_, &cmp_lat_, &cmp_cos_, &iq_,
                 &ihw_, &scores_, &bmax_, &index_work_, &router_, &hexp_, &hshared_, &engram_r_, &engram_kv_, &engram_gate_,
                 &weights_, &stage_, &features_})
    b->bind(&ex_);
  experts_.bind(&ex_);
  for (F32* b : {&ep_x_, &ep_wt_, &ep_parts_, &ep_ret_, &ep_shared_}) b->bind(&ex_);
  ep_ex_.bind(&ex_);
  ep_pair_row_.bind(&ex_);
  mma_groups_.bind(&ex_);
  mma_parts_.bind(&ex_);
  select_scratch_.bind(&ex_);
  is_image_dev_.bind(&ex_);
  rows_.bind(&ex_);
  const ModelConfig& c = model.config();
  const int64_t d = c.hidden_size;
  if (const DrafterWeights* dw = model.drafter()) {
    drafter_ = std::make_unique<Drafter>(model, model.exec());
    target_slot_.assign(static_cast<size_t>(c.num_hidden_layers), -1);
    for (size_t i = 0; i < dw->shape.targets.size(); ++i) target_slot_[size_t(dw->shape.targets[i])] = int(i);
    upload_drafter(*dw);
  }
  embed_ = put(model.embedding());
  final_norm_ = put(model.final_norm());
  head_ = put(model.head().ref(), elements(model.head()));
  const EngramShape& es = model.engram_shape();
  for (const LayerInfo& info : model.plan().layers)
    if (info.ratio > 0 && std::find(ratios_.begin(), ratios_.end(), info.ratio) == ratios_.end())
      ratios_.push_back(info.ratio);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = model.layer(l);
    const AttentionWeights& w = L.attn;
    LayerDev D;
    put_block(L, model.moe_shape().has_shared, D, ep_comm_ != nullptr);
    D.c_wkv = put(w.compressor_wkv);
    D.c_wgate = put(w.compressor_wgate);
    D.c_norm = put(w.compressor_norm);
    D.i_wk = put(w.indexer_wk);
    D.i_knorm = put(w.indexer_k_norm);
    D.i_wqb = put(w.indexer_wq_b, {}, w.quant_indexer_wq_b);
    D.i_wproj = put(w.indexer_weights_proj);
    D.gate_bias_vl = put(L.gate_bias_vl);
    const EngramWeights ew = L.engram();
    if (ew.wkv.f32 || ew.wkv.is_quant()) {  // float32 when widened, else the stored FP8 bytes
      D.e_wkv = put(ew.wkv, int64_t(es.hc + 1) * d * es.columns * es.head_dim);
      D.e_q = put(ew.q_weight, int64_t(es.hc) * d);
      D.e_k = put(ew.k_weight, int64_t(es.hc) * d);
    }
    layers_.push_back(D);
  }
  // What the caches may take: the device's free memory after the weights, less a reserve for the
  // step's workspace (activations of a 4,096-row prefill chunk, the experts' parts, graphs) and the
  // window copies (a sequence's fixed rings, outside the global-KV budget).
  if (const int64_t free = ex_.free_bytes(); free > 0)
    cache_capacity_ = std::max<int64_t>(1, free - std::max(kDeviceReserveBytes, free / 8));
}

template <class Exec>
DeviceBackend<Exec>::~DeviceBackend() {
  for (void* p : owned_) ex_.release(p);  // the weights (put)
  ex_.release_host(host_up_);
  ex_.release_host(host_down_);
}

template <class Exec>
void DeviceBackend<Exec>::upload_staged(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  if (host_up_used_ + bytes > host_up_cap_) {
    // A bigger staging block; queued copies may still read the old one: they finish first.
    ex_.sync();
    ex_.release_host(host_up_);
    host_up_cap_ = std::max<int64_t>(2 * host_up_cap_, std::max<int64_t>(host_up_used_ + bytes, 1 << 16));
    host_up_ = static_cast<uint8_t*>(ex_.alloc_host(host_up_cap_));
    host_up_used_ = 0;
    if (!host_up_) {
      host_up_cap_ = 0;
      return;  // the executor's status holds the error
    }
  }
  uint8_t* at = host_up_ + host_up_used_;
  std::memcpy(at, src, size_t(bytes));
  ex_.upload_async(dst, at, bytes);
  host_up_used_ += (bytes + 63) / 64 * 64;
  async_in_flight_ = true;
}

template <class Exec>
void DeviceBackend<Exec>::gemm(const float* x, int64_t xs, int64_t rows, int64_t in, dk::DevWeight w, int64_t out,
                               float* y, int64_t ys) {
  const dk::GemmK k{x, xs, w, in, out, y, ys};
  if (mma_gemm_ && mma_scope_.dense && rows >= mma_min_rows_ && fast::mma_gemm_worth(k, rows))
    return ex_.run_chain(dk::MmaGemmChain{k, rows, mma_scope_.sums});
  ex_.for_each(rows * out, k);
}

// Gathered GEMMs of `rows` rows each: on the tensor-core tiles one by one where set_mma_gemm takes
// them all, else as Batched launches.
template <class Exec>
void DeviceBackend<Exec>::flush_gemms(Launches<dk::GemmK>& gemms, int64_t rows) {
  bool tiles = mma_gemm_ && mma_scope_.dense && rows >= mma_min_rows_;
  for (const auto& [n, k] : gemms.bodies) tiles = tiles && fast::mma_gemm_worth(k, rows);
  if (!tiles) return gemms.flush(ex_);
  for (const auto& [n, k] : gemms.bodies) ex_.run_chain(dk::MmaGemmChain{k, rows, mma_scope_.sums});
  gemms.bodies.clear();
}

template <class Exec>
void DeviceBackend<Exec>::rmsnorm(const float* x, int64_t rows, int64_t n, const float* weight, float* y) {
  ex_.for_each(rows, dk::RmsNormK{x, n, weight, static_cast<float>(config().rms_norm_eps), y});
}

template <class Exec>
void DeviceBackend<Exec>::collapse_norm(const dk::MhcCollapseK& collapse, int64_t rows, const float* weight) {
  ex_.run_chain(dk::CollapseNormChain{
      collapse, dk::RmsNormK{collapse.y, collapse.d, weight, static_cast<float>(config().rms_norm_eps), collapse.y},
      rows});
}

template <class Exec>
void DeviceBackend<Exec>::rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* cos, const float* sin,
                               int64_t row0, bool inverse) {
  const int rd = model_.rope().rope_dim();
  ex_.for_each(rows * heads * (rd / 2), dk::RopeK{x, heads, dim, rd, cos, sin, row0, inverse});
}

template <class Exec>
const float* DeviceBackend<Exec>::rope_table(RopeKind kind, bool sin) const {
  if (kind == RopeKind::kMain) return sin ? sin_main_ : cos_main_;
  return sin ? sin_comp_ : cos_comp_;
}

template <class Exec>
void DeviceBackend<Exec>::mhc_coefficients(const float* fn, const float* base, const float* scale, const float* x,
                                           int64_t n, float* pre, float* post, float* comb) {
  const MhcShape& s = model_.mhc_shape();
  const int64_t flat = s.hc * s.dim, mix = s.mix_width();
  scratch_r_.reserve(n);
  scratch_m_.reserve(n * mix);
  // Partial sums for the split mix of a few tokens (decode at small batch; fast_kernels.cu).
  constexpr int64_t kSplitTokens = 8, kFloats = kSplitTokens * dk::MhcCoeffChain::kMhcPartials * 2;
  scratch_mhc_.reserve(kFloats);
  const dk::MhcCoeffChain chain{
      dk::MhcRsqrtK{x, flat, s.norm_eps, scratch_r_.data()},
      dk::MhcMixK{x, scratch_r_.data(), fn, flat, mix, scratch_m_.data()},
      dk::MhcFinishK{scratch_m_.data(), base, scale, s.hc, s.sinkhorn_iters, s.hc_eps, pre, post, comb}, n,
      reinterpret_cast<double*>(scratch_mhc_.data()), kSplitTokens};
  // An expand deferred by attention_output that writes these streams runs in front of them.
  for (auto e = pending_expands_.begin(); e != pending_expands_.end(); ++e)
    if (e->k.out == x && e->rows == n) {
      const dk::MhcExpandK expand = e->k;
      pending_expands_.erase(e);
      return ex_.run_chain(dk::ExpandCoeffChain{expand, chain});
    }
  flush_expands();  // (none expected: attention_output's expands are ffn's inputs, read here first)
  ex_.run_chain(chain);
}

template <class Exec>
void DeviceBackend<Exec>::flush_expands() {
  for (const PendingExpand& e : pending_expands_) ex_.for_each(e.rows * e.k.hc * e.k.d, e.k);
  pending_expands_.clear();
}

template <class Exec>
void DeviceBackend<Exec>::fake_quant(float* dev, int64_t values, RowKind kind) {
  ex_.for_each(values / dk::FakeQuantK::block(kind), dk::FakeQuantK{dev, kind});
}

template <class Exec>
void DeviceBackend<Exec>::flush_staged() {
  if (pending_.empty() && compressed_.empty()) return;
  if (staged_ > host_down_cap_) {
    ex_.release_host(host_down_);
    host_down_cap_ = std::max(staged_, 2 * host_down_cap_);
    host_down_ = static_cast<float*>(ex_.alloc_host(host_down_cap_ * int64_t(sizeof(float))));
    if (!host_down_) host_down_cap_ = 0;
  }
  if (host_down_) ex_.download(host_down_, stage_.data(), staged_ * int64_t(sizeof(float)));
  async_in_flight_ = false;  // the download waited for every queued upload
  // After a device error the staged rows are garbage: nothing is published (the error is sticky).
  const bool ok = ex_.status().ok() && host_down_;
  const float* host = host_down_;
  for (const PendingCompress& pc : compressed_) {
    KvSourceCache& kv = *pc.kv;
    Mirror& m = *pc.mirror;
    m.staged = 0;
    m.publishing = false;
    if (!ok) {
      m.rows = 0;  // rebuilt from the cache when next read
      m.pend_rows = -1;
      continue;
    }
    const int64_t D = kv.dim, Di = kv.index_dim, r = kv.ratio;
    if (pc.proj >= 0) {  // ratio ≥ 2: history, then the new open group (as compress leaves them)
      const float* a = host + pc.proj;
      const float* b = host + pc.gate;
      for (int64_t i = 0; i < pc.T; ++i) kv.remember(pc.first_pos + i, a + i * D, b + i * D);
      if (pc.groups == 0) {
        kv.pending_kv.insert(kv.pending_kv.end(), a, a + pc.T * D);
        kv.pending_gate.insert(kv.pending_gate.end(), b, b + pc.T * D);
      } else {
        const int64_t from = pc.groups * r - pc.P;  // the first new row left open
        kv.pending_kv.assign(a + from * D, a + pc.T * D);
        kv.pending_gate.assign(b + from * D, b + pc.T * D);
      }
      kv.pending = pc.P + pc.T - pc.groups * r;
      m.pend_kv_host = kv.pending_kv;
      m.pend_gate_host = kv.pending_gate;
    }
    for (int64_t i = 0; i < pc.groups; ++i) {
      row_pack(RowKind::kIndex, host + pc.keys + i * Di, size_t(Di), kv.index.append());
      row_pack(RowKind::kMain, host + pc.lat + i * D, size_t(D), kv.main.append());
    }
    if (pc.groups > 0) remember_tail(m, *pc.cache, kv);
  }
  compressed_.clear();
  for (const PendingPush& p : pending_) {
    if (!host) break;
    WindowRing& ring = *p.ring;
    // Positions older than the ring's slots are skipped as push_rows skips them.
    if (p.rows > p.staged) ring.set_positions(ring.start(), ring.length() + (p.rows - p.staged));
    ring.push_rows(host + p.offset, p.staged);
    // The records the ring now holds for the copy's newest positions (see window_copy).
    if (!p.copy) continue;
    WindowCopy& w = *p.copy;
    const int64_t rb = ring.record_bytes();
    for (int64_t q = std::max(ring.length() - std::min(p.staged, w.slots), w.lo); q < ring.length(); ++q)
      std::memcpy(w.records.data() + (q % w.slots) * rb, ring.record(q), size_t(rb));
  }
  pending_.clear();
  staged_ = 0;
}

template <class Exec>
typename DeviceBackend<Exec>::Mirror& DeviceBackend<Exec>::mirror(const SequenceCache* cache, const KvSourceCache& kv) {
  Mirror& m = mirror_slot(cache, kv);
  const int64_t mb = kv.main.record_bytes(), ib = kv.index.record_bytes();
  m.last_used = batches_;
  if (m.staged > 0) return m;  // ahead of the cache by this batch's entries (published at end_batch)
  const int64_t G = kv.entries();
  // Still the same cache? Its newest mirrored records must be unchanged (or, rolled back, the
  // cache's newest must be the mirror's record of that row); else rebuild.
  const bool rebuild =
      m.rows > G ? !follow_rollback(m, kv)
                 : m.rows > 0 && (std::memcmp(kv.main.row(m.rows - 1), &m.tail_main[size_t((m.tail - 1) * mb)],
                                              size_t(mb)) != 0 ||
                                  std::memcmp(kv.index.row(m.rows - 1), &m.tail_index[size_t((m.tail - 1) * ib)],
                                              size_t(ib)) != 0);
  if (rebuild) m.rows = 0;
  if (m.rows != G) {
    // The cache's records of rows [m.rows, G) as they are (its pages gathered), an upload per page.
    const int64_t n = G - m.rows;
    if (!reserve_rows(m, G)) return m;  // a device error (sticky): nothing to upload into
    host_bytes_.resize(static_cast<size_t>(n * std::max(mb, ib)));
    for (int64_t g = m.rows; g < G; ++g) std::memcpy(host_bytes_.data() + (g - m.rows) * mb, kv.main.row(g), size_t(mb));
    m.main.upload_rows(host_bytes_.data(), n, m.rows);
    for (int64_t g = m.rows; g < G; ++g) std::memcpy(host_bytes_.data() + (g - m.rows) * ib, kv.index.row(g), size_t(ib));
    m.index.upload_rows(host_bytes_.data(), n, m.rows);
    m.rows = G;
    remember_tail(m, *cache, kv);
  }
  // A rebuilt mirror gives back the pages past its rows. One that followed a rollback keeps them
  // (at most the rows a rollback takes back: re-taken by the next verify step, no churn).
  if (rebuild) {
    m.main.trim(m.rows);
    m.index.trim(m.rows);
  }
  return m;
}

template <class Exec>
typename DeviceBackend<Exec>::Mirror& DeviceBackend<Exec>::mirror_slot(const SequenceCache* cache,
                                                                      const KvSourceCache& kv) {
  std::unique_ptr<Mirror>& slot = mirrors_[{cache, kv.layer}];
  if (slot) return *slot;
  const int64_t mb = kv.main.record_bytes(), ib = kv.index.record_bytes();
  if (!main_pages_) {
    main_pages_ = std::make_unique<DevicePagePool<Exec>>(&ex_, mb << page_shift_);
    index_pages_ = std::make_unique<DevicePagePool<Exec>>(&ex_, ib << page_shift_);
  }
  slot = std::make_unique<Mirror>();
  slot->main.bind(&ex_, main_pages_.get(), mb, page_shift_);
  slot->index.bind(&ex_, index_pages_.get(), ib, page_shift_);
  slot->pend_kv.bind(&ex_);
  slot->pend_gate.bind(&ex_);
  return *slot;
}

template <class Exec>
void DeviceBackend<Exec>::fork_cache(const SequenceCache& from, const SequenceCache& to) {
  flush_staged();  // nothing staged between forwards; stay right if a caller did stage
  const auto up = [&](void* dst, const void* src, int64_t bytes) { upload_staged(dst, src, bytes); };
  for (int l = 0; l < to.num_layers(); ++l) {
    const KvSourceCache* kv = to.kv_source(l);
    const KvSourceCache* parent_kv = from.kv_source(l);
    if (!kv || kv->layer != l || !parent_kv) continue;
    Mirror* parent = find_mirror(&from, l);
    const int64_t n = kv->entries();
    // Only a mirror in step with its cache, holding at least the fork's entries (the fork's
    // records are the parent's first n: the host shares those pages too).
    if (!parent || !in_step(*parent, *parent_kv) || parent->rows < n || n == 0) continue;
    Mirror& m = mirror_slot(&to, *kv);
    m.last_used = batches_;
    if (!m.main.share_from(parent->main, n, up) || !m.index.share_from(parent->index, n, up)) {
      m.rows = m.tail = 0;  // a device error (sticky)
      continue;
    }
    m.rows = n;
    remember_tail(m, to, *kv);
  }
}

template <class Exec>
bool DeviceBackend<Exec>::in_step(const Mirror& m, const KvSourceCache& kv) {
  const int64_t mb = kv.main.record_bytes(), ib = kv.index.record_bytes();
  return m.staged == 0 && m.rows == kv.entries() && m.tail > 0 &&
         std::memcmp(kv.main.row(m.rows - 1), &m.tail_main[size_t((m.tail - 1) * mb)], size_t(mb)) == 0 &&
         std::memcmp(kv.index.row(m.rows - 1), &m.tail_index[size_t((m.tail - 1) * ib)], size_t(ib)) == 0;
}

template <class Exec>
bool DeviceBackend<Exec>::reserve_rows(Mirror& m, int64_t rows) {
  const auto up = [&](void* dst, const void* src, int64_t bytes) { upload_staged(dst, src, bytes); };
  // Rows from m.rows on are written next (packed entries, uploaded records): their pages private.
  if (m.main.own_from(m.rows, up) && m.index.own_from(m.rows, up) && m.main.reserve(rows, up) &&
      m.index.reserve(rows, up))
    return true;
  m.rows = m.tail = 0;  // the device error is sticky: every later step fails
  return false;
}

template <class Exec>
void DeviceBackend<Exec>::remember_tail(Mirror& m, const SequenceCache& cache, const KvSourceCache& kv) {
  // What one rollback can take back (k ≤ rollback_tokens positions: at most ⌈k / r⌉ entries),
  // plus the row before them that the check compares.
  const int64_t r = std::max(kv.ratio, 1), undo = (cache.rollback_tokens() + r - 1) / r;
  if (m.rows != kv.entries()) {  // not in step with the cache: rebuilt when next read
    m.rows = m.tail = 0;
    return;
  }
  m.tail = std::min(m.rows, undo + 1);
  const int64_t mb = kv.main.record_bytes(), ib = kv.index.record_bytes();
  m.tail_main.resize(size_t(m.tail * mb));
  m.tail_index.resize(size_t(m.tail * ib));
  for (int64_t i = 0; i < m.tail; ++i) {
    const int64_t g = m.rows - m.tail + i;
    std::memcpy(&m.tail_main[size_t(i * mb)], kv.main.row(g), size_t(mb));
    std::memcpy(&m.tail_index[size_t(i * ib)], kv.index.row(g), size_t(ib));
  }
}

template <class Exec>
bool DeviceBackend<Exec>::follow_rollback(Mirror& m, const KvSourceCache& kv) const {
  const int64_t G = kv.entries(), back = m.rows - G;
  if (G == 0) {  // nothing left to keep or to upload
    m.rows = m.tail = 0;
    return true;
  }
  if (!follow_rollbacks_ || back >= m.tail) return false;
  const int64_t mb = kv.main.record_bytes(), ib = kv.index.record_bytes(), i = m.tail - 1 - back;  // row G − 1
  if (std::memcmp(kv.main.row(G - 1), &m.tail_main[size_t(i * mb)], size_t(mb)) != 0 ||
      std::memcmp(kv.index.row(G - 1), &m.tail_index[size_t(i * ib)], size_t(ib)) != 0)
    return false;
  m.rows = G;
  m.tail -= back;
  m.tail_main.resize(size_t(m.tail * mb));
  m.tail_index.resize(size_t(m.tail * ib));
  return true;
}

template <class Exec>
typename DeviceBackend<Exec>::WindowCopy& DeviceBackend<Exec>::window_copy(const SequenceCache* cache, int layer,
                                                                          const WindowRing& ring, int64_t first,
                                                                          int64_t start) {
  std::unique_ptr<WindowCopy>& slot = windows_[{cache, layer}];
  const int64_t rb = ring.record_bytes();
  if (!slot || slot->slots != ring.slots()) {
    slot = std::make_unique<WindowCopy>();
    slot->rows.bind(&ex_, &cache_alloc_.window);
    slot->slots = ring.slots();  // ≥ window: rows a rollback of the ring keeps stay held
    slot->rows.reserve(slot->slots * rb);
    slot->records.assign(static_cast<size_t>(slot->slots * rb), 0);
  }
  WindowCopy& w = *slot;
  w.last_used = batches_;
  // Still the rows of this ring? It must continue at `start`, the copy must hold [first, start),
  // and the ring's record of start − 1 must be the one the copy was made from (rows before it
  // are then the same: a ring only changes at its end, or restarts, which empties it).
  const uint8_t* newest = start > 0 ? w.records.data() + ((start - 1) % w.slots) * rb : nullptr;
  const bool valid = keep_window_copies_ &&
                     (first == start || (ring.length() == start && w.lo <= first && start <= w.hi &&
                                         std::memcmp(ring.record(start - 1), newest, size_t(rb)) == 0));
  if (valid) {
    w.lo = first;
    w.hi = start;
    return w;
  }
  // Rebuilt from the ring: its records [first, start) as they are, in their slots.
  for (int64_t p = first; p < start; ++p)
    std::memcpy(w.records.data() + (p % w.slots) * rb, ring.record(p), size_t(rb));
  ex_.upload(w.rows.data(), w.records.data(), w.slots * rb);
  w.lo = first;
  w.hi = start;
  return w;
}

template <class Exec>
DeviceCacheBytes DeviceBackend<Exec>::cache_bytes_held() const {
  DeviceCacheBytes b;
  const ModelConfig& c = config();
  for (const auto& [key, m] : mirrors_) {
    b.main += m->rows * dk::record_bytes(RowKind::kMain, c.head_dim);
    b.index += m->rows * dk::record_bytes(RowKind::kIndex, c.index_head_dim);
  }
  for (const auto& [key, w] : windows_) b.window += w->slots * dk::record_bytes(RowKind::kWindow, c.head_dim);
  return b;
}

template <class Exec>
DeviceCacheBytes DeviceBackend<Exec>::cache_bytes_allocated() const {
  DeviceCacheBytes b;  // a page that forks share counted once
  b.main = main_pages_ ? main_pages_->pages_in_use() * main_pages_->page_bytes() : 0;
  b.index = index_pages_ ? index_pages_->pages_in_use() * index_pages_->page_bytes() : 0;
  b.window = cache_alloc_.window;
  return b;
}

template <class Exec>
DeviceCacheBytes DeviceBackend<Exec>::cache_bytes_reserved() const {
  DeviceCacheBytes b;
  b.main = main_pages_ ? main_pages_->bytes_reserved() : 0;
  b.index = index_pages_ ? index_pages_->bytes_reserved() : 0;
  b.window = cache_alloc_.window;
  return b;
}

template <class Exec>
std::vector<uint8_t> DeviceBackend<Exec>::device_records(const SequenceCache* cache, int layer, RowKind kind, int64_t p) {
  const ModelConfig& c = config();
  std::vector<uint8_t> out;
  if (kind == RowKind::kWindow) {
    const auto it = windows_.find({cache, layer});
    if (it == windows_.end() || p < it->second->lo || p >= it->second->hi) return out;
    const WindowCopy& w = *it->second;
    const int64_t rb = dk::record_bytes(kind, c.head_dim);
    out.resize(size_t(rb));
    ex_.download(out.data(), w.rows.data() + (p % w.slots) * rb, rb);
    return out;
  }
  const Mirror* m = find_mirror(cache, layer);
  if (!m) return out;
  const int64_t rb = dk::record_bytes(kind, kind == RowKind::kMain ? c.head_dim : c.index_head_dim);
  out.resize(size_t(m->rows * rb));
  (kind == RowKind::kMain ? m->main : m->index).download_rows(out.data(), m->rows);
  return out;
}

template <class Exec>
void DeviceBackend<Exec>::begin_batch(const BatchLayout& layout, ForwardTrace* trace) {
  (void)trace;  // no trace on this backend (device_backend.h)
  const ModelConfig& c = config();
  const int64_t n = layout.rows, d = c.hidden_size, hc = c.hc_mult;
  const int64_t H = c.num_attention_heads, D = c.head_dim, k = model_.moe_shape().top_k;
  flush_expands();
  flush_staged();  // a caller that skipped end_batch (or feed_draft_rings): the caches first
  ex_.graph_end();
  publish_at_feed_ = false;
  layout_ = layout;
  segments_.assign(layout.segments.begin(), layout.segments.end());
  layout_.segments = segments_;
  ++batches_;
  std::erase_if(mirrors_, [&](const auto& kv) { return kv.second->last_used < batches_ - kMirrorIdleBatches; });
  std::erase_if(windows_, [&](const auto& kv) { return kv.second->last_used < batches_ - kMirrorIdleBatches; });
  // Per-segment state is reset, its device buffers kept (a cudaFree waits for the device).
  for (size_t s = 0; s < segments_.size(); ++s) {
    if (s == seg_.size()) {
      seg_.push_back(std::make_unique<SegState>());
      seg_.back()->topk.bind(&ex_);
      seg_.back()->candidates.bind(&ex_);
    }
    SegState& st = *seg_[s];
    st.kv_layer = st.index_layer = st.candidate_layer = -1;
    st.entries = st.topk_row0 = st.candidate_row0 = st.call_row0 = 0;
  }
  // The pinned upload staging is reused from here: the last batch's copies out of it are done.
  if (async_in_flight_) ex_.sync();
  async_in_flight_ = false;
  host_up_used_ = 0;
  // A decode step (one row a segment, no image rows) is recorded as graphs and replayed from here
  // to its logits download (Exec::graph_begin; the same launches, so the same bits); so is a short
  // step (a verify step of DSpark), with graphs of its own per sequence count
  // (set_verify_graphs_by_sequences); longer prefill and mixed batches launch kernel by kernel.
  prepare_mirrors();
  if (!layout.types) {
    bool short_step = short_step_graphs_ && n <= kShortBatchRows;
    for (const SegmentRows& s : segments_) short_step = short_step && s.rows <= kShortRows;
    if (n == int64_t(segments_.size()))
      ex_.graph_begin(kDecodeProgram);
    else if (short_step)
      ex_.graph_begin(kShortStepPrograms + int(verify_graphs_by_sequences_ ? int64_t(segments_.size()) : n));
  }
  // The batch's tables, computed on the host (Rope::cos_sin) and uploaded in one copy: tokens,
  // RoPE rows of both kinds, then per compressor ratio r the compress RoPE of the group a row
  // completes (position + 1 − r; compress_segments gathers the rows of the groups that do).
  const int64_t half = model_.rope().rope_dim() / 2, tables = 4 + 2 * int64_t(ratios_.size());
  host_tables_.resize(size_t(n + tables * n * half));
  static_assert(sizeof(int32_t) == sizeof(float));
  std::memcpy(host_tables_.data(), layout.tokens, size_t(n) * sizeof(int32_t));
  float* tab = host_tables_.data() + n;
  const auto fill = [&](RopeKind kind, int64_t back, float* cos, float* sin) {
    for (int64_t t = 0; t < n; ++t)
      model_.rope().cos_sin(kind, std::max<int64_t>(layout.positions[t] - back, 0), cos + t * half, sin + t * half);
  };
  fill(RopeKind::kMain, 0, tab, tab + n * half);
  fill(RopeKind::kCompress, 0, tab + 2 * n * half, tab + 3 * n * half);
  for (size_t i = 0; i < ratios_.size(); ++i)
    fill(RopeKind::kCompress, ratios_[i] - 1, tab + (4 + 2 * i) * n * half, tab + (5 + 2 * i) * n * half);
  tables_.reserve(int64_t(host_tables_.size()));
  upload_staged(tables_.data(), host_tables_.data(), int64_t(host_tables_.size() * sizeof(float)));
  tokens_dev_ = reinterpret_cast<const int32_t*>(tables_.data());
  const float* dtab = tables_.data() + n;
  cos_main_ = dtab;
  sin_main_ = dtab + n * half;
  cos_comp_ = dtab + 2 * n * half;
  sin_comp_ = dtab + 3 * n * half;
  ratio_cos_.resize(ratios_.size());
  for (size_t i = 0; i < ratios_.size(); ++i) ratio_cos_[i] = dtab + (4 + 2 * i) * n * half;
  for (F32* b : {&x_, &x2_}) b->reserve(n * hc * d);
  for (F32* b : {&h_, &a_}) b->reserve(n * d);
  for (F32* b : {&p_, &pre_a_, &post_a_, &post_b_}) b->reserve(n * hc);
  for (F32* b : {&comb_a_, &comb_b_}) b->reserve(n * hc * hc);
  c_.reserve(n * c.q_lora_rank);
  q_.reserve(n * H * D);
  o_.reserve(n * H * D);
  kv_.reserve(n * D);
  experts_.reserve(n * k);
  weights_.reserve(n * k);
  if (capture_) features_.reserve(n * drafter_->feature_width());
  ex_.for_each(n * d, dk::GatherRowsK{embed_, tokens_dev_, d, h_.data()});
  // Image-span rows take their image embeddings instead (model.md §3.1, §3.10; CpuBackend).
  is_image_.clear();
  if (layout.types) {
    is_image_.resize(static_cast<size_t>(n));
    const float* image_row = layout.image_embeddings;
    for (int64_t t = 0; t < n; ++t)
      if (layout.types[t] >= 0) {
        ex_.upload(h_.data() + t * d, image_row, d * int64_t(sizeof(float)));
        image_row += d;
        is_image_[t] = 1;
      }
    is_image_dev_.upload(is_image_.data(), n);
  }
  ex_.for_each(n * hc * d, dk::MhcInitK{h_.data(), int(hc), d, x_.data(), p_.data()});
}

template <class Exec>
void DeviceBackend<Exec>::prepare_mirrors() {
  for (const SegmentRows& s : segments_)
    for (int l = 0; l < s.cache->num_layers(); ++l) {
      const KvSourceCache* kv = s.cache->kv_source(l);
      if (!kv || kv->layer != l) continue;  // a layer reading another's cache: done at its source
      Mirror* m = find_mirror(s.cache, l);
      if (!m) continue;
      if (follow_rollbacks_ && kv->ratio > 1 && m->pend_rows >= 0) sync_pending(*m, *kv);
      if (m->staged > 0) continue;
      const int64_t r = std::max(kv->ratio, 1), open = r > 1 ? kv->pending : 0;
      reserve_rows(*m, kv->entries() + (open + s.rows) / r);
    }
}

template <class Exec>
void DeviceBackend<Exec>::feed_draft_rings(std::span<const DraftFeed> feeds) {
  const bool publish = publish_at_feed_;  // end_batch's publication, left to here
  publish_at_feed_ = false;
  if (capture_ && !feeds.empty()) {
    if (draft_dev_ && device_drafter_) {
      feed_rings_on_device(feeds);  // its rows and the batch's in one download
    } else {
      const int64_t values = layout_.rows * drafter_->feature_width();
      host_features_.resize(static_cast<size_t>(values));
      ex_.download(host_features_.data(), features_.data(), values * int64_t(sizeof(float)));
      feed_drafter_rings(*drafter_, config().head_dim, segments_, layout_.positions, host_features_.data(), feeds,
                         feed_scratch_);
    }
  }
  if (publish) {
    flush_staged();
    ex_.graph_end();
  }
}

template <class Exec>
Status DeviceBackend<Exec>::engram(int layer, const int64_t* row_ids, int64_t row0, int64_t rows) {
  if (is_image_.empty()) return engram_run(layer, row_ids, row0, rows);
  // The gate is 0 on image-span rows (model.md §3.8, §3.10): only the runs of text rows run.
  const int64_t cols = model_.engram_shape().columns;
  for (int64_t t = row0; t < row0 + rows;) {
    if (is_image_[size_t(t)]) {
      ++t;
      continue;
    }
    int64_t end = t;
    while (end < row0 + rows && !is_image_[size_t(end)]) ++end;
    DSV41_RETURN_IF_ERROR(engram_run(layer, row_ids + (t - row0) * cols, t, end - t));
    t = end;
  }
  return ok_status();
}

template <class Exec>
Status DeviceBackend<Exec>::engram_run(int layer, const int64_t* row_ids, int64_t row0, int64_t rows) {
  const EngramShape& s = model_.engram_shape();
  const LayerDev& L = layers_[layer];
  const int64_t in = s.columns * s.head_dim, out = (s.hc + 1) * s.dim;
  if (!L.e_wkv.f32 && !L.e_wkv.stored()) return internal_error("engram: layer " + std::to_string(layer) + " has no Engram weights");
  host_tmp_.resize(static_cast<size_t>(rows * in));
  // Rows gathered on the host from the table as stored (dense or FP8 rows), checked ids.
  if (Status st = engram_gather_reference(s, model_.layer(layer).engram(), row_ids, rows, host_tmp_.data()); !st.ok())
    return st;
  engram_r_.reserve(rows * in);
  upload_staged(engram_r_.data(), host_tmp_.data(), rows * in * int64_t(sizeof(float)));
  engram_kv_.reserve(rows * out);
  engram_gate_.reserve(rows * s.hc);
  float* x = x_.data() + row0 * s.hc * s.dim;
  gemm(engram_r_.data(), rows, in, L.e_wkv, out, engram_kv_.data());
  ex_.for_each(rows * s.hc, dk::EngramGateK{x, engram_kv_.data(), L.e_q, L.e_k, s.hc, s.dim, s.eps, engram_gate_.data()});
  ex_.for_each(rows * s.hc * s.dim, dk::EngramWriteK{x, engram_kv_.data(), engram_gate_.data(), s.hc, s.dim});
  return ex_.status();
}

template <class Exec>
void DeviceBackend<Exec>::attention_input(int layer, std::span<const RowRange> rows) {
  flush_expands();
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  const LayerDev& L = layers_[layer];
  if (capture_ && target_slot_[size_t(layer)] >= 0) {  // DSpark's features: the streams entering the layer
    const int64_t width = drafter_->feature_width(), slot = target_slot_[size_t(layer)];
    for (const RowRange& r : rows)
      ex_.for_each((r.end - r.begin) * d, dk::StreamMeanK{x_.data() + r.begin * hc * d, int(hc), d, width,
                                                          features_.data() + r.begin * width + slot * d});
  }
  for (const RowRange& r : rows) {
    const int64_t n = r.end - r.begin, r0 = r.begin;
    mhc_coefficients(L.hca_fn, L.hca_base, L.hca_scale, x_.data() + r0 * hc * d, n, pre_a_.data() + r0 * hc,
                     post_a_.data() + r0 * hc, comb_a_.data() + r0 * hc * hc);
    collapse_norm(dk::MhcCollapseK{x_.data() + r0 * hc * d, p_.data() + r0 * hc, nullptr, int(hc), d, h_.data() + r0 * d},
                  n, L.attn_norm);
  }
}

template <class Exec>
void DeviceBackend<Exec>::attention_projections(int layer, std::span<const RowRange> rows) {
  const ModelConfig& c = config();
  const LayerDev& L = layers_[layer];
  const RopeKind kind = plan().layers[layer].rope;
  const int64_t d = c.hidden_size, H = c.num_attention_heads, D = c.head_dim, ql = c.q_lora_rank;
  for (const RowRange& r : rows) {
    const int64_t n = r.end - r.begin, r0 = r.begin;
    float* cr = c_.data() + r0 * ql;
    float* qr = q_.data() + r0 * H * D;
    float* kvr = kv_.data() + r0 * D;
    // wq_a and wkv read the same rows: one launch; their norms another (dk::Batched).
    Launches<dk::GemmK> down;
    down.add(n * ql, dk::GemmK{h_.data() + r0 * d, d, L.wq_a, d, ql, cr, ql});
    down.add(n * D, dk::GemmK{h_.data() + r0 * d, d, L.wkv, d, D, kvr, D});
    flush_gemms(down, n);
    const float eps = static_cast<float>(c.rms_norm_eps);
    Launches<dk::RmsNormK> norms;
    norms.add(n, dk::RmsNormK{cr, ql, L.q_norm, eps, cr});
    norms.add(n, dk::RmsNormK{kvr, D, L.kv_norm, eps, kvr});
    norms.flush(ex_);
    gemm(cr, n, ql, L.wq_b, H * D, qr);
    const int rd = model_.rope().rope_dim();
    const dk::RopeK q_rope{qr, H, D, rd, rope_table(kind, false), rope_table(kind, true), r0, false};
    const dk::RopeK kv_rope{kvr, 1, D, rd, rope_table(kind, false), rope_table(kind, true), r0, false};
    const dk::RopeQuantK kv_quant{kv_rope, dk::FakeQuantK{kvr, RowKind::kWindow}};  // FP8 window values
    if (fused_ && kv_quant.fits()) {  // q's RoPE and kv's RoPE + FakeQuant in one launch
      const int64_t nq = n * H * (rd / 2);
      ex_.for_each(nq + kv_quant.blocks(n), dk::Both<dk::RopeK, dk::RopeQuantK>{q_rope, nq, kv_quant});
      continue;
    }
    Launches<dk::RopeK> ropes;  // q and kv in one launch
    ropes.add(n * H * (rd / 2), q_rope);
    ropes.add(n * (rd / 2), kv_rope);
    ropes.flush(ex_);
    fake_quant(kvr, n * D, RowKind::kWindow);  // FP8 window values (what the ring packs)
  }
}

template <class Exec>
void DeviceBackend<Exec>::compress(int layer, int segment, int64_t first_row) {
  const ModelConfig& c = config();
  const SegmentRows& s = segments_[segment];
  const LayerDev& L = layers_[layer];
  KvSourceCache& kv = *s.cache->kv_source(layer);
  const int64_t d = c.hidden_size, D = kv.dim, Di = kv.index_dim;
  const int r = kv.ratio;
  if (const Mirror* m = find_mirror(s.cache, layer); m && m->publishing) flush_staged();  // its entries first
  if (first_row < s.rows) {
    const int64_t T = s.rows - first_row;
    const float* x = h_.data() + (s.row0 + first_row) * d;
    const int64_t first_group = kv.entries();
    // The new entries' latents [groups, D] then their index keys [groups, Di] in one buffer (one
    // download for both).
    const int64_t most = r == 1 ? T : (kv.pending + T) / r;
    cmp_lat_.reserve(std::max<int64_t>(most, 1) * (D + Di));
    float* lat = cmp_lat_.data();
    int64_t groups = 0;
    if (r == 1) {
      groups = T;
      gemm(x, T, d, {L.c_wkv, nullptr}, D, lat);
    } else {
      // Projections of the pending and the new tokens, [pending + T, D] each, one after the other
      // in cmp_ab_ (one download); the pending ones come from the cache (host), the new ones go
      // back to it (pending remainder, history).
      const int64_t n = kv.pending + T;
      cmp_ab_.reserve(2 * n * D);
      float* da = cmp_ab_.data();
      float* db = da + n * D;
      ex_.upload(da, kv.pending_kv.data(), kv.pending * D * int64_t(sizeof(float)));
      ex_.upload(db, kv.pending_gate.data(), kv.pending * D * int64_t(sizeof(float)));
      gemm(x, T, d, {L.c_wkv, nullptr}, D, da + kv.pending * D);
      gemm(x, T, d, {L.c_wgate, nullptr}, D, db + kv.pending * D);
      host_tmp_.resize(static_cast<size_t>(2 * n * D));
      ex_.download(host_tmp_.data(), da, 2 * n * D * int64_t(sizeof(float)));
      const float* a = host_tmp_.data();
      const float* b = a + n * D;
      const int64_t first_pos = kv.entries() * r + kv.pending;
      for (int64_t i = 0; i < T; ++i) kv.remember(first_pos + i, a + (kv.pending + i) * D, b + (kv.pending + i) * D);
      groups = n / r;
      ex_.for_each(groups * D, dk::PoolK{da, db, r, D, lat});
      kv.pending = n - groups * r;
      kv.pending_kv.assign(a + groups * r * D, a + n * D);
      kv.pending_gate.assign(b + groups * r * D, b + n * D);
    }
    if (groups > 0) {
      float* keys = lat + groups * D;
      rmsnorm(lat, groups, D, L.c_norm, lat);
      // Publication (compressor_publish): index keys from the pre-RoPE latents, then RoPE at the
      // group's first position on both; packed on the host into the cache.
      gemm(lat, groups, D, {L.i_wk, nullptr}, Di, keys);
      rmsnorm(keys, groups, Di, L.i_knorm, keys);
      const int64_t half = model_.rope().rope_dim() / 2;
      std::vector<float> cs(static_cast<size_t>(2 * groups * half));  // cos rows, then sin rows
      for (int64_t i = 0; i < groups; ++i)
        model_.rope().cos_sin(RopeKind::kCompress, (first_group + i) * r, cs.data() + i * half,
                              cs.data() + (groups + i) * half);
      cmp_cos_.upload(cs.data(), 2 * groups * half);
      const float* cosd = cmp_cos_.data();
      const float* sind = cosd + groups * half;
      rope(keys, groups, 1, Di, cosd, sind, 0, false);
      rope(lat, groups, 1, D, cosd, sind, 0, false);
      std::vector<float> out(static_cast<size_t>(groups * (D + Di)));
      ex_.download(out.data(), lat, groups * (D + Di) * int64_t(sizeof(float)));
      if (ex_.status().ok()) {
        for (int64_t i = 0; i < groups; ++i) {
          row_pack(RowKind::kIndex, out.data() + groups * D + i * Di, Di, kv.index.append());
          row_pack(RowKind::kMain, out.data() + i * D, D, kv.main.append());
        }
      }
    }
  }
  seg_[segment]->kv_layer = layer;
  seg_[segment]->entries = kv.entries();
}

template <class Exec>
void DeviceBackend<Exec>::sync_pending(Mirror& m, const KvSourceCache& kv) {
  const int64_t values = kv.pending * kv.dim;
  // The device's rows [0, kv.pending) are the cache's group: the same group, or (a rollback that
  // reopened no group: the cache's group cut back) the first rows of the device's.
  const bool cut = follow_rollbacks_ && m.pend_rows > kv.pending;
  const auto starts_with = [&](const std::vector<float>& device, const std::vector<float>& cache) {
    return int64_t(cache.size()) == values && (cut ? device.size() >= cache.size() : device.size() == cache.size()) &&
           std::equal(cache.begin(), cache.end(), device.begin());
  };
  if ((m.pend_rows == kv.pending || cut) && starts_with(m.pend_kv_host, kv.pending_kv) &&
      starts_with(m.pend_gate_host, kv.pending_gate)) {
    m.pend_rows = kv.pending;
    m.pend_kv_host.resize(size_t(values));
    m.pend_gate_host.resize(size_t(values));
    return;
  }
  // A cache the device did not follow (a rollback that reopened a group, restored, forked, new):
  // its group uploaded from staging, queued before the launches that read it (no wait).
  m.pend_kv.reserve(values);
  m.pend_gate.reserve(values);
  if (m.pend_kv.data() && m.pend_gate.data()) {
    upload_staged(m.pend_kv.data(), kv.pending_kv.data(), values * int64_t(sizeof(float)));
    upload_staged(m.pend_gate.data(), kv.pending_gate.data(), values * int64_t(sizeof(float)));
  }
  m.pend_kv_host = kv.pending_kv;
  m.pend_gate_host = kv.pending_gate;
  m.pend_rows = kv.pending;
}

template <class Exec>
void DeviceBackend<Exec>::compress_segments(int layer, std::span<const SegmentCompress> jobs) {
  if (!batched_compress_ || jobs.empty()) return Backend::compress_segments(layer, jobs);
  const ModelConfig& c = config();
  const LayerDev& L = layers_[layer];
  const int64_t d = c.hidden_size, half = model_.rope().rope_dim() / 2;
  // A second compress of a cache in one batch (not from the engine): the staged entries first.
  for (const SegmentCompress& j : jobs)
    if (const Mirror* m = find_mirror(segments_[j.segment].cache, layer); m && m->publishing) {
      flush_staged();
      break;
    }
  struct Job {
    int segment;
    KvSourceCache* kv;
    Mirror* m;
    int64_t r0, T, P, groups, fed, group;  // fed, group: its first new row / entry in the layer's
  };
  std::vector<Job> js;
  int64_t fed = 0, groups = 0, D = 0, Di = 0;
  int r = 0;
  const float* rtab = nullptr;  // the ratio's RoPE rows (begin_batch)
  for (const SegmentCompress& j : jobs) {
    const SegmentRows& s = segments_[j.segment];
    KvSourceCache& kv = *s.cache->kv_source(layer);
    const auto found = std::find(ratios_.begin(), ratios_.end(), kv.ratio);
    // Batched where the compressor continues at the first fed row (the engine's write floor
    // guarantees it); anything else (and nothing to feed) through the per-segment path.
    if (j.first_row >= s.rows || found == ratios_.end() || kv.next_position() != s.start + j.first_row) {
      compress(layer, j.segment, j.first_row);
      continue;
    }
    r = kv.ratio;
    D = kv.dim;
    Di = kv.index_dim;
    rtab = ratio_cos_[size_t(found - ratios_.begin())];
    Mirror& m = mirror(s.cache, kv);
    const int64_t T = s.rows - j.first_row, P = r > 1 ? kv.pending : 0;
    const int64_t g = r > 1 ? (P + T) / r : T;
    if (r > 1) {
      sync_pending(m, kv);
      m.pend_kv.reserve((P + T) * D, P * D);  // room for the new open group (rows kept)
      m.pend_gate.reserve((P + T) * D, P * D);
    }
    reserve_rows(m, m.rows + g);
    js.push_back({j.segment, &kv, &m, s.row0 + j.first_row, T, P, g, fed, groups});
    fed += T;
    groups += g;
  }
  if (js.empty()) return;
  // Staging: new projections (ratio ≥ 2, kv then gate, [fed, D] each), latents [groups, D], keys
  // [groups, Di]; downloaded and packed at end_batch.
  const int64_t proj = r > 1 ? staged_ : -1, lat = staged_ + (r > 1 ? 2 * fed * D : 0), keys = lat + groups * D;
  stage_.reserve(keys + groups * Di, staged_);
  staged_ = keys + groups * Di;
  float* const base = stage_.data();
  float* const pkv = r > 1 ? base + proj : nullptr;
  float* const pgate = r > 1 ? pkv + fed * D : nullptr;
  // Projections over runs of adjacent fed rows (a decode batch: one run).
  for (size_t a = 0; a < js.size();) {
    const int64_t r0 = js[a].r0, at = js[a].fed;
    int64_t r1 = r0 + js[a].T;
    for (++a; a < js.size() && js[a].r0 == r1; ++a) r1 += js[a].T;
    const float* x = h_.data() + r0 * d;
    if (r == 1) {
      gemm(x, r1 - r0, d, {L.c_wkv, nullptr}, D, base + lat + at * D);
    } else {
      gemm(x, r1 - r0, d, {L.c_wkv, nullptr}, D, pkv + at * D);
      gemm(x, r1 - r0, d, {L.c_wgate, nullptr}, D, pgate + at * D);
    }
  }
  if (r > 1) {
    // Gated pooling of the completed groups (pending rows from the device's open group), then the
    // new open group: the remaining new rows after the pending ones kept (no group completed) or
    // in their place.
    Launches<dk::SplitPoolK> pool;
    Launches<dk::StridedRowsK> open;
    for (const Job& j : js) {
      Mirror& m = *j.m;
      pool.add(j.groups * D, dk::SplitPoolK{m.pend_kv.data(), m.pend_gate.data(), j.P, pkv + j.fed * D,
                                            pgate + j.fed * D, r, D, base + lat + j.group * D});
      const int64_t from = j.groups > 0 ? j.groups * r - j.P : 0, to = j.groups > 0 ? 0 : j.P;
      open.add((j.T - from) * D, dk::StridedRowsK{pkv + (j.fed + from) * D, D, D, m.pend_kv.data() + to * D});
      open.add((j.T - from) * D, dk::StridedRowsK{pgate + (j.fed + from) * D, D, D, m.pend_gate.data() + to * D});
      m.pend_rows = j.P + j.T - j.groups * r;
    }
    pool.flush(ex_);
    open.flush(ex_);
  }
  if (groups > 0) {
    float* lt = base + lat;
    float* ks = base + keys;
    rmsnorm(lt, groups, D, L.c_norm, lt);
    // Publication (compressor_publish): index keys from the pre-RoPE latents, then RoPE at each
    // group's first position on both (the rows of the rows completing them, begin_batch's table).
    gemm(lt, groups, D, {L.i_wk, nullptr}, Di, ks);
    rmsnorm(ks, groups, Di, L.i_knorm, ks);
    cmp_cos_.reserve(2 * groups * half);
    float* cosd = cmp_cos_.data();
    float* sind = cosd + groups * half;
    const int64_t rows = layout_.rows;
    Launches<dk::StridedRowsK> gather;
    for (const Job& j : js) {
      const int64_t t0 = j.r0 + (r - j.P - 1);  // the row completing the segment's first group
      gather.add(j.groups * half, dk::StridedRowsK{rtab + t0 * half, r * half, half, cosd + j.group * half});
      gather.add(j.groups * half,
                 dk::StridedRowsK{rtab + rows * half + t0 * half, r * half, half, sind + j.group * half});
    }
    gather.flush(ex_);
    rope(ks, groups, 1, Di, cosd, sind, 0, false);
    rope(lt, groups, 1, D, cosd, sind, 0, false);
    // The new entries into the mirrors, packed (the records end_batch packs into the cache).
    Launches<dk::PackPagedK> append;
    for (const Job& j : js) {
      Mirror& m = *j.m;
      append.add(j.groups * D / dk::FakeQuantK::block(RowKind::kMain),
                 dk::PackPagedK{lt + j.group * D, D, RowKind::kMain, m.main.table(), m.main.shift(), m.rows});
      append.add(j.groups * Di / dk::FakeQuantK::block(RowKind::kIndex),
                 dk::PackPagedK{ks + j.group * Di, Di, RowKind::kIndex, m.index.table(), m.index.shift(), m.rows});
    }
    append.flush(ex_);
  }
  for (const Job& j : js) {
    KvSourceCache& kv = *j.kv;
    j.m->rows += j.groups;
    j.m->staged += j.groups;
    // Published at end_batch even when no group completed (the open group, the history).
    j.m->publishing = true;
    compressed_.push_back({segments_[j.segment].cache, &kv, j.m, j.T, j.P, j.groups, kv.next_position(),
                           r > 1 ? proj + j.fed * D : -1, r > 1 ? proj + (fed + j.fed) * D : -1, lat + j.group * D,
                           keys + j.group * Di});
    seg_[j.segment]->kv_layer = layer;
    seg_[j.segment]->entries = kv.entries() + j.m->staged;
  }
}

template <class Exec>
void DeviceBackend<Exec>::index(int layer, int segment, int64_t first_row, int kv_layer, bool restricted) {
  const SegmentAttention job{segment, first_row, true, kv_layer, restricted, -1};
  index_batch(layer, std::span<const SegmentAttention>(&job, 1));
}

template <class Exec>
void DeviceBackend<Exec>::index_batch(int layer, std::span<const SegmentAttention> jobs) {
  const ModelConfig& c = config();
  const LayerInfo& info = plan().layers[layer];
  const LayerDev& L = layers_[layer];
  const int k = c.index_topk;
  const int64_t nh = c.index_n_heads, dh = c.index_head_dim, ql = c.q_lora_rank, d = c.hidden_size;
  const int nb = c.candidate_topk_blocks, bs = c.candidate_block_size;
  struct Job {
    SegState* st;
    int64_t r0, T, start, G, blocks;
    dk::KeyRows keys;
    bool restricted, candidates;
  };
  std::vector<Job> js;
  int64_t scores = 0, bmaxes = 0, select_bytes = 0, chained_rows = 0;
  for (const SegmentAttention& a : jobs) {
    const SegmentRows& s = segments_[a.segment];
    SegState& st = *seg_[a.segment];
    const KvSourceCache& kv = *s.cache->kv_source(a.index_kv_layer);
    Job j{&st, s.row0 + a.first_row, s.rows - a.first_row, s.start + a.first_row, entries_of(s.cache, kv), 0, {},
          false, false};
    st.call_row0 = a.first_row;
    st.topk.reserve(j.T * k);  // the previous top-k is not read by this step: overwritten in place
    if (j.G > 0) {
      const Mirror& m = mirror(s.cache, kv);
      j.keys = dk::KeyRows::paged(m.index.table(), m.index.shift(), RowKind::kIndex, dh);
      j.restricted = a.restricted && st.candidate_layer >= 0;
      j.candidates = !j.restricted && info.candidate_source;
      // (A restricted job reads its pool from st.candidates; only an unrestricted one rewrites it.)
      if (j.candidates) {
        j.blocks = (j.G + bs - 1) / bs;
        st.candidates.reserve(j.T * nb);
        bmaxes += j.T * j.blocks;
        select_bytes += dk::TopkBatch::scratch_bytes(j.T, j.blocks, nb);
      }
      scores += j.T * j.G;
      select_bytes += dk::TopkBatch::scratch_bytes(j.T, j.G, k);
      if (!j.restricted) chained_rows += j.T;
    }
    js.push_back(j);
  }
  // Queries: RoPE (compress table) then MXFP4 per head; head weights × nh^-1/2 (indexer_queries),
  // at their batch rows, over runs of adjacent rows of the jobs that have keys to score.
  iq_.reserve(layout_.rows * nh * dh);
  ihw_.reserve(layout_.rows * nh);
  for (size_t a = 0; a < js.size();) {
    if (js[a].G == 0) {
      ++a;
      continue;
    }
    const int64_t r0 = js[a].r0;
    int64_t r1 = r0 + js[a].T;
    for (++a; a < js.size() && js[a].G > 0 && js[a].r0 == r1; ++a) r1 += js[a].T;
    const int64_t n = r1 - r0;
    float* q = iq_.data() + r0 * nh * dh;
    float* hw = ihw_.data() + r0 * nh;
    gemm(c_.data() + r0 * ql, n, ql, L.i_wqb, nh * dh, q);
    gemm(h_.data() + r0 * d, n, d, {L.i_wproj, nullptr}, nh, hw);
    const int rd = model_.rope().rope_dim();
    const dk::RopeQuantK q_quant{dk::RopeK{q, nh, dh, rd, cos_comp_, sin_comp_, r0, false},
                                 dk::FakeQuantK{q, RowKind::kIndex}};  // MXFP4 per head
    const dk::ScaleK head_scale{hw, static_cast<float>(std::pow(double(nh), -0.5)), false};
    if (fused_ && q_quant.fits()) {  // RoPE + FakeQuant of q and the head weights' scale in one launch
      const int64_t nb = q_quant.blocks(n);
      ex_.for_each(nb + n * nh, dk::Both<dk::RopeQuantK, dk::ScaleK>{q_quant, nb, head_scale});
      continue;
    }
    rope(q, n, nh, dh, cos_comp_, sin_comp_, r0, false);
    fake_quant(q, n * nh * dh, RowKind::kIndex);
    ex_.for_each(n * nh, head_scale);
  }
  scores_.reserve(scores);
  bmax_.reserve(bmaxes);
  select_scratch_.reserve(select_bytes);
  index_work_.reserve(chained_rows * dk::IndexSelectChain::kWorkFloats);
  Launches<dk::IndexScoreK> score;
  Launches<dk::FillK<int32_t>> fill;
  // The min(width, size) largest of each of `rows` rows of v [rows, size] into out [rows, width]
  // (indexer.h), run after the scores and block maxima as dk::TopkBatch units.
  std::vector<dk::TopkBatch::Job>& selects = topk_jobs_;
  selects.clear();
  int64_t at_select = 0;
  const auto scratch = [&](int64_t rows, int64_t size, int width) {
    uint8_t* at = select_scratch_.data() + at_select;
    at_select += dk::TopkBatch::scratch_bytes(rows, size, width);
    return at;
  };
  // A restricted job's scores are −inf outside its pool: the fast top-k reads only the pool's entries.
  const auto select = [&](const float* v, int64_t rows, int64_t size, int width, int32_t* out, const int32_t* pool) {
    dk::TopkBatch::Job t{v, rows, size, width, out, scratch(rows, size, width)};
    if (pool) t.kept = pool, t.nb = nb, t.bs = bs;
    selects.push_back(t);
  };
  // Jobs without a pool: their scores and both selections as IndexSelectChain units, which a fast
  // executor runs by filter and refine (the same ids).
  std::vector<dk::IndexSelectChain>& chains = index_chains_;
  chains.clear();
  const float scale = static_cast<float>(std::pow(double(dh), -0.5));
  int64_t at_s = 0, at_b = 0, at_w = 0;
  for (const Job& j : js) {
    SegState& st = *j.st;
    if (j.G == 0) {  // nothing to select from yet: an all −1 top-k (attention_index)
      fill.add(j.T * k, dk::FillK<int32_t>{st.topk.data(), -1});
      continue;
    }
    const int32_t* pool = j.restricted ? st.candidates.data() + (st.call_row0 - st.candidate_row0) * nb : nullptr;
    float* sc = scores_.data() + at_s;
    at_s += j.T * j.G;
    const dk::IndexScoreK body{iq_.data() + j.r0 * nh * dh, ihw_.data() + j.r0 * nh, j.keys, j.G, nh, dh,
                               j.start, info.ratio, scale, pool, nb, bs, sc};
    if (!j.restricted) {
      if (chains.empty() || chains.back().n == dk::IndexSelectChain::kMax) chains.push_back({});
      dk::IndexSelectChain& chain = chains.back();
      chain.k = k;
      dk::IndexSelectChain::Job& cj = chain.jobs[chain.n++];
      cj = {body, j.T, st.topk.data(), scratch(j.T, j.G, k), 0, bs, nb, nullptr, nullptr, nullptr,
            index_work_.data() + at_w};
      at_w += j.T * dk::IndexSelectChain::kWorkFloats;
      if (j.candidates) {
        cj.blocks = j.blocks;
        cj.bmax = bmax_.data() + at_b;
        at_b += j.T * j.blocks;
        cj.candidates = st.candidates.data();
        cj.cand_scratch = scratch(j.T, j.blocks, nb);
      }
      continue;
    }
    score.add(j.T * j.G, body);
    select(sc, j.T, j.G, k, st.topk.data(), pool);
  }
  score.flush(ex_);
  fill.flush(ex_);
  for (size_t a = 0; a < selects.size(); a += dk::TopkBatch::kMax) {
    dk::TopkBatch unit;
    for (size_t j = a; j < selects.size() && unit.n < dk::TopkBatch::kMax; ++j) unit.jobs[unit.n++] = selects[j];
    ex_.run_chain(unit);
  }
  for (const dk::IndexSelectChain& chain : chains) ex_.run_chain(chain);
  for (const Job& j : js) {
    j.st->index_layer = layer;
    j.st->topk_row0 = j.st->call_row0;
    if (j.candidates) {
      j.st->candidate_layer = layer;
      j.st->candidate_row0 = j.st->call_row0;
    }
  }
}

template <class Exec>
typename DeviceBackend<Exec>::AttendPrep DeviceBackend<Exec>::attend_prepare(int layer, int segment,
                                                                            int64_t first_row, int kv_layer) {
  const ModelConfig& c = config();
  const SegmentRows& s = segments_[segment];
  const SegState& st = *seg_[segment];
  const int64_t H = c.num_attention_heads, D = c.head_dim, win = c.sliding_window;
  const int64_t r0 = s.row0 + first_row, T = s.rows - first_row, start = s.start + first_row;
  const int k = c.index_topk;
  WindowRing& ring = s.cache->window(layer);
  // A second attend of this ring in one batch (not from the engine, but stay right): its staged
  // rows first. Rings are per layer and staged in layer order: only this layer's tail to scan.
  for (auto p = pending_.rbegin(); p != pending_.rend() && p->layer == layer; ++p)
    if (p->ring == &ring) {
      flush_staged();
      break;
    }
  const int64_t floor = ring.start();
  const int64_t first = std::max<int64_t>(floor, start - (win - 1));
  // Keys of the window: ring rows [first, start) read in place from the device copy, then the
  // segment's own rows from kv_ (AttnGeom's ring mode).
  WindowCopy& w = window_copy(s.cache, layer, ring, first, start);
  dk::KeyRows main;
  const int32_t* topk = nullptr;
  if (kv_layer >= 0) {
    const Mirror& m = mirror(s.cache, *s.cache->kv_source(kv_layer));
    main = dk::KeyRows::paged(m.main.table(), m.main.shift(), RowKind::kMain, D);
    topk = st.topk.data() + (first_row - st.topk_row0) * k;
  }
  AttendPrep a;
  dk::AttnGeom g{T, H, D, win + k, start, win, floor, first, k, nullptr, main, topk};
  g.ring = dk::KeyRows::records(w.rows.data(), RowKind::kWindow, D);
  g.slots = w.slots;
  g.fresh = kv_.data() + r0 * D;
  a.job = {g, q_.data() + r0 * H * D, nullptr, o_.data() + r0 * H * D};
  a.copy = &w;
  a.ring = &ring;
  a.r0 = r0;
  a.T = T;
  a.start = start;
  return a;
}

template <class Exec>
void DeviceBackend<Exec>::attend_run(int layer, std::span<AttendPrep> preps) {
  const ModelConfig& c = config();
  const LayerDev& L = layers_[layer];
  const int64_t H = c.num_attention_heads, D = c.head_dim;
  if (preps.empty()) return;
  // Logits scratch [T, H, L] per segment, one after the other.
  int64_t scratch = 0, rows = 0, query_rows = 0;
  for (const AttendPrep& a : preps) {
    scratch += a.T * H * a.job.g.L;
    rows += std::min<int64_t>(a.T, a.ring->slots());
    query_rows += a.T;
  }
  const bool tensor = tensor_attention_ && query_rows >= tensor_attention_min_rows_;
  logits_buf_.reserve(scratch);
  stage_.reserve(staged_ + rows * D, staged_);
  const float scaling = static_cast<float>(std::pow(double(D), -0.5));
  int64_t at = 0;
  for (size_t b = 0; b < preps.size(); b += dk::AttnBatch::kMax) {
    dk::AttnBatch batch;
    batch.sink = L.sink;
    batch.scaling = scaling;
    batch.tensor = tensor;
    for (size_t j = b; j < preps.size() && batch.n < dk::AttnBatch::kMax; ++j) {
      dk::AttnBatch::Job job = preps[j].job;
      job.logits = logits_buf_.data() + at;
      at += preps[j].T * H * job.g.L;
      batch.jobs[batch.n++] = job;
    }
    ex_.run_chain(batch);
  }
  // Inverse RoPE of the outputs, once per run of adjacent rows (the same table rows either way).
  // Fused: a single run goes with the window stores' launch below (they touch other memory).
  const RopeKind kind = plan().layers[layer].rope;
  const int rd = model_.rope().rope_dim();
  std::vector<dk::RopeK>& inverse = inverse_ropes_;
  inverse.clear();
  inverse_rows_.clear();
  for (size_t j = 0; j < preps.size();) {
    const int64_t r0 = preps[j].r0;
    int64_t r1 = r0 + preps[j].T;
    for (++j; j < preps.size() && preps[j].r0 == r1; ++j) r1 += preps[j].T;
    inverse.push_back({o_.data() + r0 * H * D, H, D, rd, rope_table(kind, false), rope_table(kind, true), r0, true});
    inverse_rows_.push_back(r1 - r0);
  }
  const bool pair = fused_ && inverse.size() == 1 && preps.size() <= size_t(dk::WindowStoreK::kMax);
  for (size_t j = 0; j < inverse.size() && !pair; ++j)
    ex_.for_each(inverse_rows_[j] * H * (rd / 2), inverse[j]);
  // Each segment's newest rows (positions start … start + T − 1; at most the ring's slots, which
  // the ring packs no more of) into its device copy and, for end_batch, the staging buffer.
  // (A ring that does not continue at `start` breaks the engine's contract; its copy is dropped
  // rather than trusted: it is rebuilt from the ring when next read.)
  for (size_t b = 0; b < preps.size(); b += dk::WindowStoreK::kMax) {
    dk::WindowStoreK store;
    store.D = D;
    int64_t values = 0;
    for (size_t j = b; j < preps.size() && store.n < dk::WindowStoreK::kMax; ++j) {
      AttendPrep& a = preps[j];
      WindowCopy& w = *a.copy;
      WindowRing& ring = *a.ring;
      const int64_t m = std::min<int64_t>(a.T, std::min(ring.slots(), w.slots));
      store.jobs[store.n++] = {kv_.data() + (a.r0 + a.T - m) * D, w.rows.data(), w.slots, a.start + a.T - m, m,
                               stage_.data() + staged_};
      values += m * D;
      const bool continues = ring.length() == a.start;
      w.hi = continues ? a.start + a.T : 0;
      w.lo = continues ? std::max(w.lo, w.hi - w.slots) : 0;
      pending_.push_back({&ring, continues ? &w : nullptr, layer, a.T, m, staged_});
      staged_ += m * D;
    }
    if (pair) {  // the inverse RoPE and the stores (one index per scale block) in one launch
      const int64_t nr = inverse_rows_[0] * H * (rd / 2);
      ex_.for_each(nr + values / 32, dk::Both<dk::RopeK, dk::WindowStoreK>{inverse[0], nr, store});
    } else {
      ex_.for_each(values / 32, store);  // one index per scale block (dk::WindowStoreK)
    }
  }
  inverse_rows_.clear();
}

template <class Exec>
void DeviceBackend<Exec>::attend(int layer, int segment, int64_t first_row, int kv_layer) {
  AttendPrep a = attend_prepare(layer, segment, first_row, kv_layer);
  attend_run(layer, std::span<AttendPrep>(&a, 1));
}

template <class Exec>
void DeviceBackend<Exec>::index_and_attend(int layer, std::span<const SegmentAttention> jobs) {
  // Batched only when every job has its own cache (so its own window ring and mirrors): then the
  // jobs touch disjoint state and running the attentions together equals running them in turn.
  if (!batched_segments_) return Backend::index_and_attend(layer, jobs);
  for (size_t i = 0; i < jobs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (segments_[jobs[i].segment].cache == segments_[jobs[j].segment].cache)
        return Backend::index_and_attend(layer, jobs);
  index_jobs_.clear();
  for (const SegmentAttention& j : jobs)
    if (j.index) index_jobs_.push_back(j);
  if (!index_jobs_.empty()) index_batch(layer, index_jobs_);
  // After the indexes (a segment's top-k buffer may move when its index sizes it).
  preps_.clear();
  for (const SegmentAttention& j : jobs)
    preps_.push_back(attend_prepare(layer, j.segment, j.first_row, j.attend_kv_layer));
  attend_run(layer, preps_);
}

template <class Exec>
void DeviceBackend<Exec>::attention_output(int layer, std::span<const RowRange> rows) {
  flush_expands();
  const ModelConfig& c = config();
  const LayerDev& L = layers_[layer];
  const int64_t d = c.hidden_size, hc = c.hc_mult, HD = c.num_attention_heads * c.head_dim;
  const int64_t groups = c.o_groups, olr = c.o_lora_rank, gin = HD / groups;
  for (const RowRange& r : rows) {
    const int64_t n = r.end - r.begin, r0 = r.begin;
    mid_.reserve(n * groups * olr);
    Launches<dk::GemmK> group_gemms;  // one launch for the groups (dk::Batched)
    for (int64_t g = 0; g < groups; ++g)
      group_gemms.add(n * olr, dk::GemmK{o_.data() + r0 * HD + g * gin, HD, L.wo_a.offset(g * olr * gin), gin, olr,
                                         mid_.data() + g * olr, groups * olr});
    flush_gemms(group_gemms, n);
    gemm(mid_.data(), n, groups * olr, L.wo_b, d, a_.data() + r0 * d);
    const dk::MhcExpandK expand{a_.data() + r0 * d, x_.data() + r0 * hc * d, post_a_.data() + r0 * hc,
                                comb_a_.data() + r0 * hc * hc, int(hc), d, x2_.data() + r0 * hc * d};
    if (fused_)  // deferred to ffn's mHC coefficients of these rows, which read x2_ first
      pending_expands_.push_back({expand, n});
    else
      ex_.for_each(n * hc * d, expand);
  }
}

// ffn's first steps for rows [r0, r0 + m): the mHC coefficients, the collapse + RMSNorm into h_,
// and the router (moe_forward_reference's order) into experts_ / weights_.
template <class Exec>
void DeviceBackend<Exec>::ffn_route(const LayerDev& L, int64_t r0, int64_t m) {
  const ModelConfig& c = config();
  const MoeShape& ms = model_.moe_shape();
  const int64_t d = c.hidden_size, hc = c.hc_mult, k = ms.top_k, E = ms.n_experts;
  float* x2 = x2_.data() + r0 * hc * d;
  float* h = h_.data() + r0 * d;
  // pre straight into p_, where the next layer's collapse (and the head) read it: nothing reads
  // p_ in between (this collapse takes the attention's pre_a_).
  mhc_coefficients(L.hcf_fn, L.hcf_base, L.hcf_scale, x2, m, p_.data() + r0 * hc, post_b_.data() + r0 * hc,
                   comb_b_.data() + r0 * hc * hc);
  collapse_norm(dk::MhcCollapseK{x2, pre_a_.data() + r0 * hc, nullptr, int(hc), d, h}, m, L.ffn_norm);
  router_.reserve(m * E);
  ex_.run_chain(dk::RouterChain{
      dk::GemmK{h, d, {L.gate, nullptr}, d, E, router_.data(), E}, dk::ScaleK{router_.data(), ms.gate_temp, true},
      dk::RouteK{router_.data(), L.gate_bias, int(E), int(k), dk::Scoring(int(ms.scoring)), ms.norm_topk_prob,
                 ms.routed_scaling_factor, experts_.data() + r0 * k, weights_.data() + r0 * k, L.gate_bias_vl,
                 is_image_.empty() ? nullptr : is_image_dev_.data() + r0},
      m});
}

template <class Exec>
void DeviceBackend<Exec>::ffn(int layer, std::span<const RowRange> rows) {
  const ModelConfig& c = config();
  const MoeShape& ms = model_.moe_shape();
  const LayerDev& L = layers_[layer];
  const int64_t d = c.hidden_size, hc = c.hc_mult, k = ms.top_k;
  if (ep_comm_) return ffn_expert_parallel(layer, rows);
  for (const RowRange& r : rows) {
    const int64_t m = r.end - r.begin, r0 = r.begin;
    float* x2 = x2_.data() + r0 * hc * d;
    float* h = h_.data() + r0 * d;
    ffn_route(L, r0, m);
    // Routed experts, shared expert.
    int32_t* ex = experts_.data() + r0 * k;
    float* wt = weights_.data() + r0 * k;
    hexp_.reserve(m * k * ms.inter);
    if (L.shared) hshared_.reserve(m * ms.shared_inter);
    const dk::ExpertUpK up{h, L.experts, ex, wt, int(k), d, ms.inter, ms.swiglu_limit, hexp_.data()};
    const dk::ExpertUpK shared_up{h, L.shared, nullptr, nullptr, 1, d, ms.shared_inter, ms.swiglu_limit,
                                  hshared_.data()};
    const dk::ExpertDownK down{L.experts, ex, int(k), d, ms.inter, hexp_.data(), L.shared,
                               ms.shared_inter, hshared_.data(), a_.data() + r0 * d};
    const dk::MhcExpandK expand{a_.data() + r0 * d, x2, post_b_.data() + r0 * hc,
                                comb_b_.data() + r0 * hc * hc, int(hc), d, x_.data() + r0 * hc * d};
    if (mma_gemm_ && mma_scope_.experts && m >= mma_min_rows_ && L.experts_mma) {  // grouped on tensor cores (set_mma_gemm)
      ffn_grouped(L, h, ex, wt, m, a_.data() + r0 * d);
      ex_.for_each(m * hc * d, expand);
      continue;
    }
    // Routed + shared up in one launch; down + expand as one chain for a few rows only
    // (down_expand_rows_).
    if (fused_) {
      Launches<dk::ExpertUpK> ups;
      ups.add(m * k * ms.inter, up);
      if (L.shared) ups.add(m * ms.shared_inter, shared_up);
      ups.flush(ex_);
      if (m <= down_expand_rows_) {
        ex_.run_chain(dk::DownExpandChain{down, expand, m});
        continue;
      }
    } else {
      ex_.for_each(m * k * ms.inter, up);
      if (L.shared) ex_.for_each(m * ms.shared_inter, shared_up);
    }
    ex_.for_each(m * d, down);
    ex_.for_each(m * hc * d, expand);
  }
}

// ffn with expert parallelism: per range the mHC coefficients, the collapse + norm and the router
// as ffn runs them; the FFN inputs and routing of every range downloaded and exchanged at once
// (every rank makes the same calls per layer); per range the combine of the returned expert rows
// with the shared expert, and the mHC expand.
template <class Exec>
void DeviceBackend<Exec>::ffn_expert_parallel(int layer, std::span<const RowRange> rows) {
  const ModelConfig& c = config();
  const MoeShape& ms = model_.moe_shape();
  const LayerDev& L = layers_[layer];
  const int64_t d = c.hidden_size, hc = c.hc_mult, k = ms.top_k;
  int64_t m = 0;
  for (const RowRange& r : rows) m += r.end - r.begin;
  ep_h_.resize(static_cast<size_t>(m * d));
  ep_chosen_.resize(static_cast<size_t>(m * k));
  ep_weights_.resize(static_cast<size_t>(m * k));
  int64_t at = 0;
  for (const RowRange& r : rows) {
    const int64_t n = r.end - r.begin, r0 = r.begin;
    ffn_route(L, r0, n);
    ex_.download(ep_h_.data() + at * d, h_.data() + r0 * d, n * d * int64_t(sizeof(float)));
    ex_.download(ep_chosen_.data() + at * k, experts_.data() + r0 * k, n * k * int64_t(sizeof(int32_t)));
    ex_.download(ep_weights_.data() + at * k, weights_.data() + r0 * k, n * k * int64_t(sizeof(float)));
    at += n;
  }
  // After a failed exchange the rows' FFN output is left as it was: the forward fails
  // (take_step_failure) and its results are not used.
  if (!ep_exchange(layer, m)) return;
  at = 0;
  for (const RowRange& r : rows) {
    const int64_t n = r.end - r.begin, r0 = r.begin;
    if (L.shared) {  // the shared expert's row as ExpertDownK sums it (k = 0: the shared alone)
      hshared_.reserve(n * ms.shared_inter);
      ep_shared_.reserve(n * d);
      ex_.for_each(n * ms.shared_inter, dk::ExpertUpK{h_.data() + r0 * d, L.shared, nullptr, nullptr, 1, d,
                                                      ms.shared_inter, ms.swiglu_limit, hshared_.data()});
      ex_.for_each(n * d, dk::ExpertDownK{L.experts, nullptr, 0, d, ms.inter, nullptr, L.shared, ms.shared_inter,
                                          hshared_.data(), ep_shared_.data()});
    }
    ex_.for_each(n * d, dk::ExpertCombineK{ep_ret_.data(), ep_pair_row_.data() + at * k, int(k), d,
                                           L.shared ? ep_shared_.data() : nullptr, a_.data() + r0 * d});
    ex_.for_each(n * hc * d, dk::MhcExpandK{a_.data() + r0 * d, x2_.data() + r0 * hc * d, post_b_.data() + r0 * hc,
                                            comb_b_.data() + r0 * hc * hc, int(hc), d, x_.data() + r0 * hc * d});
    at += n;
  }
}

// The exchange of one layer's MoE (parallel/expert_parallel.h's ep_dispatch / ep_return): every
// rank calls it once per layer and forward, with its m rows (0 when idle). The pairs this rank
// computes run as one row each (k = 1: ExpertUpK weights the row, ExpertDownK's float sum is the
// pair's output), their rows gathered on the host from the received records.
template <class Exec>
bool DeviceBackend<Exec>::ep_exchange(int layer, int64_t m) {
  const MoeShape& ms = model_.moe_shape();
  const LayerDev& L = layers_[layer];
  const int64_t d = config().hidden_size, k = ms.top_k;
  // After a failed exchange of this forward nothing more is exchanged (the communicator stays
  // failed); a device error sends no tokens and flags this rank's returned rows as failed.
  if (!ep_failure_.ok()) return false;
  const bool device_failed = !ex_.status().ok();
  int64_t pairs = 0;
  const Status dispatched = ep_dispatch(*ep_comm_, ms.n_experts, int(k), d, ep_chosen_.data(), ep_weights_.data(),
                                        ep_h_.data(), device_failed ? 0 : m, ep_, &pairs);
  ep_.ret_send.assign(static_cast<size_t>(pairs * d), 0.0f);
  if (dispatched.ok() && pairs > 0) {
    ep_pair_x_.resize(static_cast<size_t>(pairs * d));
    for (int64_t p = 0; p < pairs; ++p)
      std::copy_n(ep_.xr.data() + ep_.pair_record[p] * d, d, ep_pair_x_.data() + p * d);
    ep_x_.reserve(pairs * d);
    ep_ex_.reserve(pairs);
    ep_wt_.reserve(pairs);
    hexp_.reserve(pairs * ms.inter);
    ep_parts_.reserve(pairs * d);
    ex_.upload(ep_x_.data(), ep_pair_x_.data(), pairs * d * int64_t(sizeof(float)));
    ex_.upload(ep_ex_.data(), ep_.pair_expert.data(), pairs * int64_t(sizeof(int32_t)));
    ex_.upload(ep_wt_.data(), ep_.pair_weight.data(), pairs * int64_t(sizeof(float)));
    ex_.for_each(pairs * ms.inter, dk::ExpertUpK{ep_x_.data(), L.experts, ep_ex_.data(), ep_wt_.data(), 1, d, ms.inter,
                                                 ms.swiglu_limit, hexp_.data()});
    ex_.for_each(pairs * d, dk::ExpertDownK{L.experts, ep_ex_.data(), 1, d, ms.inter, hexp_.data(), nullptr, 0,
                                            nullptr, ep_parts_.data()});
    ex_.download(ep_.ret_send.data(), ep_parts_.data(), pairs * d * int64_t(sizeof(float)));
  }
  // The return runs whatever happened, flagged failed after an error, so that no peer waits for
  // this rank and none uses its rows (ep_return); the device's status fails this rank's forward.
  const Status returned = ep_return(*ep_comm_, int(k), d, ep_, !dispatched.ok() || !ex_.status().ok());
  const Status st = !dispatched.ok() ? dispatched : returned;
  if (!st.ok()) {
    if (ep_failure_.ok()) ep_failure_ = st.with_context("layer " + std::to_string(layer) + " expert-parallel MoE");
    return false;
  }
  const int64_t ret_rows = static_cast<int64_t>(ep_.ret_recv.size()) / std::max<int64_t>(d, 1);
  ep_ret_.reserve(ret_rows * d);
  ep_pair_row_.reserve(m * k);
  ex_.upload(ep_ret_.data(), ep_.ret_recv.data(), ret_rows * d * int64_t(sizeof(float)));
  ex_.upload(ep_pair_row_.data(), ep_.plan.pair_row.data(), m * k * int64_t(sizeof(int64_t)));
  return true;
}

template <class Exec>
void DeviceBackend<Exec>::idle_forward() {
  if (!ep_comm_) return;
  ep_h_.clear();
  ep_chosen_.clear();
  ep_weights_.clear();
  for (const LayerInfo& info : plan().layers) ep_exchange(info.index, 0);
}

// The experts of m tokens (rows h, choices ex, weights wt) into y [m, hidden] as grouped GEMMs
// (mma_gemm.h), in rounds of kMmaRoundTokens tokens: each round's up then down chain (their simple
// launches where the tiles decline, e.g. on HostExec: the unfused bodies, the same bits as ffn's).
template <class Exec>
void DeviceBackend<Exec>::ffn_grouped(const LayerDev& L, const float* h, int32_t* ex, float* wt, int64_t m,
                                      float* y) {
  const MoeShape& ms = model_.moe_shape();
  const int64_t d = config().hidden_size, k = ms.top_k, E = ms.n_experts;
  const int64_t round = std::min(m, kMmaRoundTokens);
  mma_groups_.reserve(round * (k + 1) + 2 * (E + 2));
  mma_parts_.reserve(round * (k + 1) * d);
  hexp_.reserve(round * k * ms.inter);
  if (L.shared) hshared_.reserve(round * ms.shared_inter);
  const dk::ExpertGroups groups{mma_groups_.data(), mma_groups_.data() + round * (k + 1),
                                mma_groups_.data() + round * (k + 1) + (E + 2)};
  for (int64_t t0 = 0; t0 < m; t0 += round) {
    const int64_t n = std::min(round, m - t0);
    const dk::ExpertUpK up{h + t0 * d, L.experts, ex + t0 * k, wt + t0 * k, int(k), d, ms.inter,
                           ms.swiglu_limit, hexp_.data()};
    const dk::ExpertUpK shared_up{h + t0 * d, L.shared, nullptr, nullptr, 1, d, ms.shared_inter,
                                  ms.swiglu_limit, hshared_.data()};
    const dk::ExpertDownK down{L.experts, ex + t0 * k, int(k), d, ms.inter, hexp_.data(), L.shared,
                               ms.shared_inter, hshared_.data(), y + t0 * d};
    ex_.run_chain(dk::GroupedUpChain{up, shared_up, n, int(E), groups, mma_scope_.sums});
    ex_.run_chain(dk::GroupedDownChain{down, n, int(E), groups, mma_parts_.data(), mma_scope_.sums});
  }
}

template <class Exec>
void DeviceBackend<Exec>::logits(std::span<const int64_t> rows, float* out) {
  flush_expands();
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, hc = c.hc_mult, n = static_cast<int64_t>(rows.size()), V = c.vocab_size;
  if (n == 0) return;
  rows_.reserve(n);
  upload_staged(rows_.data(), rows.data(), n * int64_t(sizeof(int64_t)));
  a_.reserve(n * d);
  ex_.for_each(n * d, dk::MhcCollapseK{x_.data(), p_.data(), rows_.data(), int(hc), d, a_.data()});
  rmsnorm(a_.data(), n, d, final_norm_, a_.data());
  logits_buf_.reserve(n * V);
  gemm(a_.data(), n, d, head_, V, logits_buf_.data());
  ex_.download(out, logits_buf_.data(), n * V * int64_t(sizeof(float)));
  async_in_flight_ = false;
  if (!ex_.status().ok()) std::fill(out, out + n * V, std::nanf(""));
}

}  // namespace dsv41

#include "backends/cuda/device_drafter_impl.h"
