// DeviceBackend's drafter (see device_drafter.h), included at the end of device_backend_impl.h.
// Each step follows Drafter (model/dspark.cpp) line by line with the backbone's kernel bodies;
// the drafter's attention is its own (device_kernels_draft.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "backends/cuda/device_backend.h"
#include "model/dspark_weights.h"

namespace dsv41 {

template <class Exec>
void DeviceBackend<Exec>::upload_drafter(const DrafterWeights& w) {
  auto st = std::make_unique<DeviceDraftState<Exec>>();
  DeviceDraftState<Exec>& S = *st;
  for (DeviceArray<Exec, float>* b : {&S.main, &S.x, &S.x2, &S.p, &S.h, &S.c, &S.q, &S.kv, &S.o, &S.a, &S.pre_a,
                                      &S.post_a, &S.comb_a, &S.pre_b, &S.post_b, &S.comb_b, &S.router, &S.hexp,
                                      &S.hshared, &S.weights, &S.attn, &S.out, &S.tables})
    b->bind(&ex_);
  S.experts.bind(&ex_);
  S.ids.bind(&ex_);
  S.rings.bind(&ex_);
  S.rows.resize(w.stages.size());
  for (auto& r : S.rows) r.bind(&ex_);
  for (const LayerWeights& L : w.stages) {
    DraftStageDev D;
    put_block(L, w.shape.moe.has_shared, D);
    S.stages.push_back(D);
  }
  S.main_proj = put(w.main_proj.ref(), elements(w.main_proj));
  S.main_norm = put(w.main_norm);
  S.norm = put(w.norm);
  S.markov_embed = put(w.markov_embed);
  S.markov_head = put(w.markov_head);
  S.confidence = put(w.confidence);
  draft_dev_ = std::move(st);
}

// Drafter::ring_rows over the fed rows (their features gathered from the device's capture, their
// RoPE rows uploaded), then each fed segment's rows into its rings' device copies and, through the
// staging download, into the SequenceCache's rings (flush_staged).
template <class Exec>
void DeviceBackend<Exec>::feed_rings_on_device(std::span<const DraftFeed> feeds) {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const int64_t d = c.hidden_size, D = c.head_dim, win = c.sliding_window, width = drafter_->feature_width();
  const int64_t half = model_.rope().rope_dim() / 2;
  const int stages = int(S.stages.size());
  // The fed rows (a decode batch's are all its rows; replays may feed a tail only): batch row ids,
  // then RoPE cos and sin rows at their positions, in one upload.
  S.host_ids.clear();
  for (const DraftFeed& f : feeds) {
    const SegmentRows& seg = segments_[size_t(f.segment)];
    for (int64_t r = seg.row0 + f.first_row; r < seg.row0 + seg.rows; ++r) S.host_ids.push_back(int32_t(r));
  }
  const int64_t n = int64_t(S.host_ids.size());
  if (n == 0) return;
  S.host_tables.resize(size_t(n + 2 * n * half));
  std::memcpy(S.host_tables.data(), S.host_ids.data(), size_t(n) * sizeof(int32_t));
  float* cos = S.host_tables.data() + n;
  for (int64_t i = 0; i < n; ++i)
    model_.rope().cos_sin(RopeKind::kMain, layout_.positions[S.host_ids[size_t(i)]], cos + i * half,
                          cos + (n + i) * half);
  S.tables.reserve(int64_t(S.host_tables.size()));
  upload_staged(S.tables.data(), S.host_tables.data(), int64_t(S.host_tables.size() * sizeof(float)));
  const int32_t* ids = reinterpret_cast<const int32_t*>(S.tables.data());
  const float* cos_dev = S.tables.data() + n;
  const float* sin_dev = cos_dev + n * half;
  S.x.reserve(n * width);
  ex_.for_each(n * width, dk::GatherRowsK{features_.data(), ids, width, S.x.data()});
  S.main.reserve(n * d);
  gemm(S.x.data(), n, width, S.main_proj, d, S.main.data());
  rmsnorm(S.main.data(), n, d, S.main_norm, S.main.data());
  // Each stage's window rows; with fused launches the stages' projections in one launch, their
  // norms in another and their RoPE + FakeQuant in a third (the same bits as a launch each).
  const int rd = model_.rope().rope_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  Launches<dk::GemmK> projections;
  Launches<dk::RmsNormK> norms;
  Launches<dk::RopeQuantK> quants;
  bool quants_fit = true;
  for (int s = 0; s < stages; ++s) {
    S.rows[size_t(s)].reserve(n * D);
    float* kv = S.rows[size_t(s)].data();
    const dk::RopeQuantK q{dk::RopeK{kv, 1, D, rd, cos_dev, sin_dev, 0, false}, dk::FakeQuantK{kv, RowKind::kWindow}};
    quants_fit = quants_fit && q.fits();
    projections.add(n * D, dk::GemmK{S.main.data(), d, S.stages[size_t(s)].wkv, d, D, kv, D});
    norms.add(n, dk::RmsNormK{kv, D, S.stages[size_t(s)].kv_norm, eps, kv});
    quants.add(q.blocks(n), q);
  }
  if (fused_ && quants_fit) {
    projections.flush(ex_);
    norms.flush(ex_);
    quants.flush(ex_);
  } else {
    for (int s = 0; s < stages; ++s) {
      const auto& p = projections.bodies[size_t(s)];
      ex_.for_each(p.first, p.second);
      ex_.for_each(n, norms.bodies[size_t(s)].second);
      ex_.for_each(n * (rd / 2), quants.bodies[size_t(s)].second.rope);
      fake_quant(S.rows[size_t(s)].data(), n * D, RowKind::kWindow);
    }
  }
  // Each fed segment's rows, per stage, into the ring copy (layer key num_hidden_layers + s) and
  // the staging buffer (at most the ring's slots: the ring packs no more).
  dk::WindowStoreK store;
  store.D = D;
  int64_t values = 0;
  const auto launch = [&] {
    ex_.for_each(values / 32, store);
    store.n = 0;
    values = 0;
  };
  int64_t total = 0;  // staging room for every push first (the store jobs point into it)
  for (const DraftFeed& f : feeds)
    for (int s = 0; s < stages; ++s) {
      const SegmentRows& seg = segments_[size_t(f.segment)];
      total += std::min<int64_t>(std::max<int64_t>(seg.rows - f.first_row, 0), seg.cache->draft_ring(s).slots()) * D;
    }
  stage_.reserve(staged_ + total, staged_);
  int64_t r0 = 0;  // the feed's first row among the fed rows
  for (const DraftFeed& f : feeds) {
    const SegmentRows& seg = segments_[size_t(f.segment)];
    const int64_t m = seg.rows - f.first_row, start = seg.start + f.first_row;
    if (m <= 0) continue;
    for (int s = 0; s < stages; ++s) {
      WindowRing& ring = seg.cache->draft_ring(s);
      const int layer = c.num_hidden_layers + s;
      const int64_t kept = std::min<int64_t>(m, ring.slots());
      const float* src = S.rows[size_t(s)].data() + (r0 + m - kept) * D;
      WindowCopy* w = nullptr;
      if (ring.length() == start) {
        w = &window_copy(seg.cache, layer, ring, std::max<int64_t>(ring.start(), start - (win - 1)), start);
        if (store.n == dk::WindowStoreK::kMax) launch();
        store.jobs[store.n++] = {src, w->rows.data(), w->slots, start + m - kept, kept, stage_.data() + staged_};
        values += kept * D;
        w->hi = start + m;
        w->lo = std::max(w->lo, w->hi - w->slots);
      } else {
        // A ring that does not continue here breaks the feeding contract; its rows are pushed
        // all the same (as the host feed does) and no copy follows it (rebuilt when next read).
        ex_.copy(stage_.data() + staged_, src, kept * D * int64_t(sizeof(float)));
      }
      pending_.push_back({&ring, w, layer, m, kept, staged_});
      staged_ += kept * D;
    }
    r0 += m;
  }
  if (store.n > 0) launch();
  flush_staged();
}

// A draft's tables in one upload — block tokens (anchor, then noise) [R], RoPE cos then sin
// [R, half] at positions last + 1 … last + B, the head's rows (each request's wanted slots) — and
// each request's ring geometry per stage (its entries read in place from the device ring copies).
template <class Exec>
void DeviceBackend<Exec>::draft_tables(std::span<const DraftRequest> requests) {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const DrafterWeights& w = *model_.drafter();
  const int64_t B = w.shape.block, D = c.head_dim, W = c.sliding_window, half = model_.rope().rope_dim() / 2;
  const int stages = int(S.stages.size());
  const int64_t n = S.n, R = S.R;
  S.head_rows.assign(size_t(n + 1), 0);
  for (int64_t i = 0; i < n; ++i)
    S.head_rows[size_t(i + 1)] = S.head_rows[size_t(i)] + (requests[i].slots > 0 ? std::min<int64_t>(requests[i].slots, B) : B);
  S.want = S.head_rows[size_t(n)];
  S.host_tables.resize(size_t(R + 2 * R * half + S.want + n + n + 1));
  int32_t* tokens = reinterpret_cast<int32_t*>(S.host_tables.data());
  float* cos = S.host_tables.data() + R;
  float* sin = cos + R * half;
  int32_t* head = reinterpret_cast<int32_t*>(sin + R * half);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < B; ++j) {
      const int64_t t = i * B + j;
      tokens[t] = int32_t(j == 0 ? requests[i].anchor : w.shape.noise_id);
      model_.rope().cos_sin(RopeKind::kMain, requests[i].last + 1 + j, cos + t * half, sin + t * half);
      if (S.head_rows[size_t(i)] + j < S.head_rows[size_t(i + 1)]) head[S.head_rows[size_t(i)] + j] = int32_t(t);
    }
  int32_t* anchors = head + S.want;
  int32_t* head_rows = anchors + n;
  for (int64_t i = 0; i < n; ++i) anchors[i] = requests[i].anchor;
  for (int64_t i = 0; i <= n; ++i) head_rows[i] = int32_t(S.head_rows[size_t(i)]);
  S.tables.reserve(int64_t(S.host_tables.size()));
  upload_staged(S.tables.data(), S.host_tables.data(), int64_t(S.host_tables.size() * sizeof(float)));
  S.tokens_dev = reinterpret_cast<const int32_t*>(S.tables.data());
  S.cos_dev = S.tables.data() + R;
  S.sin_dev = S.cos_dev + R * half;
  S.head_dev = reinterpret_cast<const int32_t*>(S.sin_dev + R * half);
  S.anchors_dev = S.head_dev + S.want;
  S.head_rows_dev = S.anchors_dev + n;
  S.host_rings.resize(size_t(stages * n));
  S.longest = 0;
  for (int s = 0; s < stages; ++s)
    for (int64_t i = 0; i < n; ++i) {
      const WindowRing& ring = requests[i].cache->draft_ring(s);
      const int64_t last = requests[i].last;
      const int64_t lo = std::max({ring.start(), ring.first_held(), last - W + 1});
      WindowCopy& copy = window_copy(requests[i].cache, c.num_hidden_layers + s, ring, lo, last + 1);
      S.host_rings[size_t(s * n + i)] = {dk::KeyRows::records(copy.rows.data(), RowKind::kWindow, D), copy.slots, lo,
                                         last + 1 - lo};
      S.longest = std::max(S.longest, last + 1 - lo);
    }
  S.rings.reserve(stages * n);
  upload_staged(S.rings.data(), S.host_rings.data(), stages * n * int64_t(sizeof(dk::DraftRing)));
}

// Drafter::stage's attention site over the draft's R block rows (x → x2), launched as the
// backbone's (attention_projections, attention_output): the collapse and its norm as one chain,
// wq_a and wkv in one launch (they read the same rows) and their norms in another, the wo_a groups
// in one launch; with fused launches (set_fused) also q's RoPE with kv's RoPE + FakeQuant in one
// launch and the mHC expand deferred into the FFN site's coefficient chain (the same bits).
template <class Exec>
void DeviceBackend<Exec>::draft_attention(int s) {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const DraftStageDev& L = S.stages[size_t(s)];
  const int64_t B = model_.drafter()->shape.block, d = c.hidden_size, hc = c.hc_mult, H = c.num_attention_heads;
  const int64_t D = c.head_dim, R = S.R, ql = c.q_lora_rank;
  const int rd = model_.rope().rope_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  mhc_coefficients(L.hca_fn, L.hca_base, L.hca_scale, S.x.data(), R, S.pre_a.data(), S.post_a.data(), S.comb_a.data());
  const dk::MhcCollapseK collapse{S.x.data(), S.p.data(), nullptr, int(hc), d, S.h.data()};
  const dk::GemmK q_down{S.h.data(), d, L.wq_a, d, ql, S.c.data(), ql}, kv_down{S.h.data(), d, L.wkv, d, D, S.kv.data(), D};
  const dk::RmsNormK q_norm{S.c.data(), ql, L.q_norm, eps, S.c.data()}, kv_norm{S.kv.data(), D, L.kv_norm, eps, S.kv.data()};
  const dk::RopeK q_rope{S.q.data(), H, D, rd, S.cos_dev, S.sin_dev, 0, false};
  const dk::RopeQuantK kv_quant{dk::RopeK{S.kv.data(), 1, D, rd, S.cos_dev, S.sin_dev, 0, false},
                                dk::FakeQuantK{S.kv.data(), RowKind::kWindow}};  // FP8 window values
  collapse_norm(collapse, R, L.attn_norm);
  Launches<dk::GemmK> down;
  down.add(R * ql, q_down);
  down.add(R * D, kv_down);
  down.flush(ex_);
  Launches<dk::RmsNormK> norms;
  norms.add(R, q_norm);
  norms.add(R, kv_norm);
  norms.flush(ex_);
  gemm(S.c.data(), R, ql, L.wq_b, H * D, S.q.data());
  if (fused_ && kv_quant.fits()) {  // q's RoPE and kv's RoPE + FakeQuant in one launch
    const int64_t nq = R * H * (rd / 2);
    ex_.for_each(nq + kv_quant.blocks(R), dk::Both<dk::RopeK, dk::RopeQuantK>{q_rope, nq, kv_quant});
  } else {
    ex_.for_each(R * H * (rd / 2), q_rope);
    ex_.for_each(R * (rd / 2), kv_quant.rope);
    fake_quant(S.kv.data(), R * D, RowKind::kWindow);
  }
  const dk::DraftAttnGeom g{S.rings.data() + s * S.n, B, H, D, S.key_slots, S.kv.data()};
  ex_.run_chain(dk::DraftAttnChain{dk::DraftAttnLogitsK{g, S.q.data(), float(std::pow(double(D), -0.5)), S.attn.data()},
                                   dk::DraftAttnSoftmaxK{g, L.sink, S.attn.data()},
                                   dk::DraftAttnValuesK{g, S.attn.data(), S.o.data()}, R,
                                   draft_keys_in_shared_});
  rope(S.o.data(), R, H, D, S.cos_dev, S.sin_dev, 0, true);
  // attention_output: grouped wo_a, then wo_b; mHC expand.
  const int64_t HD = H * D, groups = c.o_groups, olr = c.o_lora_rank, gin = HD / groups;
  Launches<dk::GemmK> group_gemms;  // one launch for the groups (dk::Batched)
  for (int64_t gi = 0; gi < groups; ++gi)
    group_gemms.add(R * olr, dk::GemmK{S.o.data() + gi * gin, HD, L.wo_a.offset(gi * olr * gin), gin, olr,
                                       mid_.data() + gi * olr, groups * olr});
  group_gemms.flush(ex_);
  gemm(mid_.data(), R, groups * olr, L.wo_b, d, S.a.data());
  const dk::MhcExpandK expand{S.a.data(), S.x.data(), S.post_a.data(), S.comb_a.data(), int(hc), d, S.x2.data()};
  if (fused_)  // deferred to draft_moe's mHC coefficients, which read x2 first
    pending_expands_.push_back({expand, R});
  else
    ex_.for_each(R * hc * d, expand);
}

// Drafter::stage's FFN site: the stage's MoE with text routing (x2 → x; p ← this site's pre),
// launched as the backbone's (ffn): the collapse and its norm as one chain, the router as one
// chain; with fused launches (set_fused) also the routed and shared up projections in one launch
// and, for a few rows, the down projection with the mHC expand as one chain (the same bits).
template <class Exec>
void DeviceBackend<Exec>::draft_moe(int s) {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const DraftStageDev& L = S.stages[size_t(s)];
  const MoeShape& ms = model_.drafter()->shape.moe;
  const int64_t d = c.hidden_size, hc = c.hc_mult, E = ms.n_experts, k = ms.top_k, R = S.R;
  mhc_coefficients(L.hcf_fn, L.hcf_base, L.hcf_scale, S.x2.data(), R, S.pre_b.data(), S.post_b.data(), S.comb_b.data());
  const dk::MhcCollapseK collapse{S.x2.data(), S.pre_a.data(), nullptr, int(hc), d, S.h.data()};
  const dk::RouterChain router{
      dk::GemmK{S.h.data(), d, {L.gate, nullptr}, d, E, S.router.data(), E}, dk::ScaleK{S.router.data(), ms.gate_temp, true},
      dk::RouteK{S.router.data(), L.gate_bias, int(E), int(k), dk::Scoring(int(ms.scoring)), ms.norm_topk_prob,
                 ms.routed_scaling_factor, S.experts.data(), S.weights.data()},
      R};
  const dk::ExpertUpK up{S.h.data(), L.experts, S.experts.data(), S.weights.data(), int(k), d, ms.inter,
                         ms.swiglu_limit, S.hexp.data()};
  const dk::ExpertUpK shared_up{S.h.data(), L.shared, nullptr, nullptr, 1, d, ms.shared_inter, ms.swiglu_limit,
                                S.hshared.data()};
  const dk::ExpertDownK down{L.experts, S.experts.data(), int(k), d, ms.inter, S.hexp.data(), L.shared,
                             ms.shared_inter, S.hshared.data(), S.a.data()};
  const dk::MhcExpandK expand{S.a.data(), S.x2.data(), S.post_b.data(), S.comb_b.data(), int(hc), d, S.x.data()};
  collapse_norm(collapse, R, L.ffn_norm);
  ex_.run_chain(router);
  if (fused_) {
    Launches<dk::ExpertUpK> ups;
    ups.add(R * k * ms.inter, up);
    if (L.shared) ups.add(R * ms.shared_inter, shared_up);
    ups.flush(ex_);
  } else {
    ex_.for_each(R * k * ms.inter, up);
    if (L.shared) ex_.for_each(R * ms.shared_inter, shared_up);
  }
  // The down + expand chain only for a few rows (batches of up to 3 drafts): on the H200 (session
  // 14's profile) it took 19 µs a stage at batch 1 (R = 5) but 59 µs at batch 8 (R = 40), where
  // the down launch alone had taken about 25 µs (session 13's profile) and the expand a few.
  constexpr int64_t kDownExpandRows = 16;
  if (fused_ && R <= kDownExpandRows) {
    ex_.run_chain(dk::DownExpandChain{down, expand, R});
  } else {
    ex_.for_each(R * d, down);
    ex_.for_each(R * hc * d, expand);
  }
  std::swap(S.p, S.pre_b);  // the next site's pre (the buffers have the same size)
}

// Room for every buffer a draft of the current shape writes, before any launch: an allocation
// between launches would end the executor's graph there (draft_on_device).
template <class Exec>
void DeviceBackend<Exec>::reserve_draft_buffers() {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const MoeShape& ms = model_.drafter()->shape.moe;
  const int64_t R = S.R, d = c.hidden_size, hc = c.hc_mult, H = c.num_attention_heads, D = c.head_dim;
  for (auto* b : {&S.x, &S.x2}) b->reserve(R * hc * d);
  for (auto* b : {&S.h, &S.a}) b->reserve(R * d);
  for (auto* b : {&S.p, &S.pre_a, &S.post_a, &S.pre_b, &S.post_b}) b->reserve(R * hc);
  for (auto* b : {&S.comb_a, &S.comb_b}) b->reserve(R * hc * hc);
  S.c.reserve(R * c.q_lora_rank);
  S.q.reserve(R * H * D);
  S.o.reserve(R * H * D);
  S.kv.reserve(R * D);
  S.experts.reserve(R * ms.top_k);
  S.weights.reserve(R * ms.top_k);
  S.attn.reserve(R * H * S.key_slots);
  S.router.reserve(R * ms.n_experts);
  S.hexp.reserve(R * ms.top_k * ms.inter);
  if (ms.has_shared) S.hshared.reserve(R * ms.shared_inter);
  S.out.reserve(S.want * c.vocab_size + R * d + S.want + S.n * model_.drafter()->shape.block);
  mid_.reserve(R * c.o_groups * c.o_lora_rank);
  scratch_r_.reserve(R);
  scratch_m_.reserve(R * model_.mhc_shape().mix_width());
}

// An executor's fast-kernel switch where it has one (CudaExec), else 0 (HostExec runs the simple bodies).
template <class E>
auto executor_fast_kernels(const E& e, int) -> decltype(bool(e.fast_kernels())) {
  return e.fast_kernels();
}
template <class E>
bool executor_fast_kernels(const E&, long) {
  return false;
}

// What a kept draft graph (set_draft_replay) was captured for: the draft's shape, the switches
// that change its launches, and the address of every buffer its launches read or write (the
// stages swap p and pre_b, so two keys alternate; a buffer that grew elsewhere means a new capture).
template <class Exec>
uint64_t DeviceBackend<Exec>::draft_graph_key() const {
  const DeviceDraftState<Exec>& S = *draft_dev_;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the words below
  const auto mix = [&h](uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  const int64_t words[] = {S.n,
                           S.R,
                           S.want,
                           S.key_slots,
                           int64_t(S.tail),
                           int64_t(fused_),
                           int64_t(executor_fast_kernels(ex_, 0)),
                           int64_t(draft_slots_one_launch_),
                           int64_t(draft_keys_in_shared_)};
  for (int64_t v : words) mix(uint64_t(v));
  const void* buffers[] = {S.x.data(),      S.x2.data(),     S.p.data(),       S.h.data(),      S.c.data(),
                           S.q.data(),      S.kv.data(),     S.o.data(),       S.a.data(),      S.pre_a.data(),
                           S.post_a.data(), S.comb_a.data(), S.pre_b.data(),   S.post_b.data(), S.comb_b.data(),
                           S.router.data(), S.hexp.data(),   S.hshared.data(), S.weights.data(), S.attn.data(),
                           S.out.data(),    S.tables.data(), S.experts.data(), S.rings.data(),  mid_.data(),
                           scratch_r_.data(), scratch_m_.data(), scratch_mhc_.data()};
  for (const void* p : buffers) mix(uint64_t(reinterpret_cast<uintptr_t>(p)));
  return h;
}

// The draft's launches, from the block's embeddings to the wanted rows' logits [want, V] and the
// collapsed rows [R, d] in S.out (no copies: they can be captured). S.out: [want, V] logits, [want]
// confidences and [n, B] picks (the device tail's), then [R, d] collapsed rows.
template <class Exec>
void DeviceBackend<Exec>::draft_kernels() {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const int64_t R = S.R, d = c.hidden_size, hc = c.hc_mult, V = c.vocab_size;
  ex_.for_each(R * d, dk::GatherRowsK{embed_, S.tokens_dev, d, S.h.data()});
  ex_.for_each(R * hc * d, dk::MhcInitK{S.h.data(), int(hc), d, S.x.data(), S.p.data()});
  for (int s = 0; s < int(S.stages.size()); ++s) {
    draft_attention(s);
    draft_moe(s);
  }
  // Head: collapse with the last FFN pre (kept for the confidence), norm, the wanted rows' logits.
  float* logits = S.out.data();
  float* xrows = logits + S.want * V + S.want + S.n * model_.drafter()->shape.block;
  ex_.for_each(R * d, dk::MhcCollapseK{S.x.data(), S.p.data(), nullptr, int(hc), d, xrows});
  rmsnorm(xrows, R, d, S.norm, S.a.data());
  ex_.for_each(S.want * d, dk::GatherRowsK{S.a.data(), S.head_dev, d, S.h.data()});
  gemm(S.h.data(), S.want, d, head_, V, logits);
}

// The greedy tail on the device (draft_block_tail without a picker): each slot's Markov bias and
// argmax in turn (slot j's bias follows slot j − 1's pick), then every slot's confidence.
template <class Exec>
void DeviceBackend<Exec>::draft_tail_kernels() {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const DrafterWeights& w = *model_.drafter();
  const int64_t B = w.shape.block, d = c.hidden_size, V = c.vocab_size;
  float* logits = S.out.data();
  float* conf = logits + S.want * V;
  int32_t* ids = reinterpret_cast<int32_t*>(conf + S.want);
  const float* xrows = conf + S.want + S.n * B;
  dk::DraftSlot slot{S.markov_embed, S.markov_head, S.anchors_dev, S.head_rows_dev, V, w.shape.markov_rank, B, 0,
                     logits, ids};
  if (draft_slots_one_launch_) {
    ex_.run_chain(dk::DraftSlotsChain{slot, S.n});
  } else {
    for (int j = 0; j < B; ++j) {
      slot.j = j;
      ex_.run_chain(dk::DraftSlotChain{dk::DraftMarkovK{slot}, dk::DraftPickK{slot}, S.n});
    }
  }
  ex_.for_each(S.want, dk::DraftConfidenceK{slot, S.confidence, xrows, S.n, d, conf});
}

template <class Exec>
Status DeviceBackend<Exec>::draft_on_device(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out,
                                            const DraftPicker& pick) {
  DeviceDraftState<Exec>& S = *draft_dev_;
  const ModelConfig& c = config();
  const DrafterWeights& w = *model_.drafter();
  const int64_t B = w.shape.block, d = c.hidden_size, V = c.vocab_size;
  const int stages = int(S.stages.size());
  DSV41_RETURN_IF_ERROR(check_draft_requests(requests, stages, V));
  const auto t0 = std::chrono::steady_clock::now();
  S.n = static_cast<int64_t>(requests.size());
  S.R = S.n * B;
  const int64_t n = S.n, R = S.R;
  if (n == 0) {
    out.clear();
    return ok_status();
  }
  flush_staged();  // rings first (a caller that skipped end_batch)
  draft_tables(requests);
  // The draft's launches as CUDA graphs (the executor's, as a decode step's: recorded and
  // replayed, Exec::graph_begin) or launch by launch; the same launches, so the same bits. Every
  // buffer is reserved first: an allocation would end a graph early.
  const bool graph = draft_graphs_ && ex_.graphs();
  // A kept graph is replayed while the rings grow: its attention spans the window's W + B key
  // slots, the slots beyond a ring's entries and the block's rows absent (−inf logits, skipped
  // values: the same bits as spanning the longest ring + B).
  const bool replay = graph && draft_replay_;
  S.key_slots = (replay ? std::max<int64_t>(c.sliding_window, S.longest) : S.longest) + B;
  reserve_draft_buffers();
  S.tail = !pick && draft_tail_on_device_;
  const auto launches = [&] {
    draft_kernels();
    if (S.tail) draft_tail_kernels();
  };
  if (replay) {
    ex_.run_kept(draft_graph_key(), launches);
  } else {
    // The drafts' own executable graphs, so a draft and the decode step after it each update
    // theirs instead of instantiating the other's anew (StreamGraphs::restart).
    if (graph) ex_.graph_begin(kDraftProgram);
    launches();
    if (graph) ex_.graph_end();
  }
  // One download: with the tail on the device the [want] confidences and [n, B] picks, after the
  // [want, V] logits where a request reads them; else the logits and the collapsed rows [R, d]
  // (S.out's layout, draft_kernels).
  const int64_t want = S.want, picks = want * V + want, rows = picks + n * B;
  const bool logits =
      !S.tail || std::any_of(requests.begin(), requests.end(), [](const DraftRequest& r) { return r.logits; });
  const int64_t from = logits ? 0 : want * V, to = S.tail ? rows : rows + R * d;
  S.host_out.resize(size_t(to));
  const auto t1 = std::chrono::steady_clock::now();
  ex_.download(S.host_out.data() + from, S.out.data() + from, (to - from) * int64_t(sizeof(float)));
  async_in_flight_ = false;
  const auto t2 = std::chrono::steady_clock::now();
  S.timing.host_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
  S.timing.wait_ms += std::chrono::duration<double, std::milli>(t2 - t1).count();
  ++S.timing.drafts;
  DSV41_RETURN_IF_ERROR(ex_.status());
  out.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    DraftBlock& b = out[size_t(i)];
    const int64_t first = S.head_rows[size_t(i)], m = S.head_rows[size_t(i + 1)] - first;
    b.ids.resize(size_t(m));
    b.confidence.resize(size_t(m));
    if (logits) b.logits.assign(S.host_out.begin() + first * V, S.host_out.begin() + (first + m) * V);
    else b.logits.clear();
    if (!S.tail) {
      draft_block_tail(w, d, V, requests[i].anchor, S.host_out.data() + rows + i * B * d, i, pick, b);
      continue;
    }
    std::copy_n(S.host_out.data() + want * V + first, m, b.confidence.begin());
    std::memcpy(b.ids.data(), S.host_out.data() + picks + i * B, size_t(m) * sizeof(int32_t));
  }
  return ok_status();
}

}  // namespace dsv41
