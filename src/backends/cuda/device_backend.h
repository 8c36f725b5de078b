// The device backend: the engine's steps (engine/backend.h) on an accelerator, written once over
// an executor (Exec = CudaExec for the GPU, cuda_backend.h; HostExec for the CPU emulation that
// tests it anywhere, host_device_backend.h). Spec: model.md §3; issue 14.
//
// First slice — the same function, simple kernels (device_kernels.h), speed later:
// - Weights are uploaded once at construction, as the loaded Model holds them: the checkpoint's
//   FP8 E4M3 / FP4 E2M1 bytes and UE8M0 scales where the model reads a matrix in place (the
//   default load: attention projections, indexer wq_b, experts, Engram wkv, the head when stored
//   so), decoded in registers inside the GEMM / expert kernels (dk::DevWeight: code × scale, the
//   widened bits); bf16 bits where the model keeps a matrix as bf16; float32 otherwise (norms,
//   mHC, router, compressor, indexer wk / weights_proj, embedding).
// - The batch's activations live on the device (x, p, h, c, q, kv, o, a, x2, mHC coefficients,
//   routing) and only the logits asked for come back, plus the small copies below.
// - Caches. The engine's SequenceCache stays the authoritative copy in host memory, in its real
//   packed records (so snapshots, forks, rollback and the SSD store work unchanged).
//   Main rows + index keys are produced on the device as float32 rows; the device holds a mirror
//   per (SequenceCache, kv-source layer) of them in their packed records (288 B NVFP4 main rows,
//   68 B MXFP4 index keys at the real widths; the cache's bytes, device_kernels_records.h), which
//   the attention and indexer kernels decode on read. compress_segments runs the compressor of all
//   segments of a layer in batched launches (the pending projections of each cache's open group
//   kept on the device beside its mirror, checked against the cache's and uploaded again when
//   they differ), packs the new entries into the mirrors on the device (dk::PackK, the bytes
//   row_pack gives) and stages
//   the float rows and the new projections; end_batch() downloads them with the window rows in one
//   copy and packs them into the cache by the same codec the CPU engine uses (rows appended,
//   pending group, rollback history). Until then the backend counts the staged entries as the
//   cache's (entries_of). (compress, per segment, is the older path, kept as the reference the
//   batched one is tested against: it downloads and packs at once.) A mirror follows a rollback
//   of its cache (fewer entries, the cache's newest equal to the record the mirror holds at that
//   row: its row count is cut back, nothing uploaded; Mirror::tail); one whose newest record no
//   longer matches the cache otherwise (a restore, a new cache at a freed address) is rebuilt
//   from the cache's record bytes (uploaded as they are); one unused for 256 batches is dropped.
//   Likewise the open group: a rolled-back cache's group that is the first rows of the device's
//   is kept; any other is uploaded from staging.
//   Window rows are fake-quantised on the device (FakeQuantK, bit-identical to row_fake_quant);
//   attend reads the earlier ones from a device copy of each (cache, layer) ring in its FP8
//   records (WindowCopy, 528 B a row at the real width; appended by packing those rows on the
//   device, checked against the ring's newest packed record and rebuilt from the ring's bytes
//   when it no longer matches), and stages the new ones as floats; end_batch() downloads every
//   layer's staged rows in one copy and pushes them into the rings (packed by the CPU codec).
//   cache_bytes() counts what the backend allocates for these device caches, by kind.
// - The MXFP4 indexer queries are fake-quantised on the device too.
// - Host ↔ device copies of a step: the batch's tokens, RoPE tables (both kinds, and per compressor
//   ratio the rows of the groups each row completes) in one upload at begin_batch; each Engram
//   layer's rows; the logit rows; an open group the device does not hold — all asynchronous, from
//   pinned staging (upload_staged). Two blocking downloads: the staged rows at end_batch and the
//   logits. (Rebuilding a mirror or a window copy uploads at once: DSpark's rollbacks do not.)
// - Engram rows are gathered on the host from the table (dense or stored, as the CPU engine
//   reads it) and uploaded; projection and gate run on the device.
// - Steps 4–5 of a layer (index_and_attend) run for all segments of the batch together: the
//   indexer queries over runs of adjacent rows, then scores, candidate blocks and the counting
//   selections, the sink attention (dk::AttnBatch, window keys read in place from each ring copy),
//   the inverse RoPE and the window-row stores one launch each for up to 16 segments (dk::Batched;
//   the indexer's selections of up to 64: dk::IndexSelectChain, dk::TopkBatch), so a decode batch
//   pays for them per layer, not per sequence.
// The executors count launches and copies (exec_counts()); docs/CUDA.md has the per-step counts.
// Device errors are sticky in the executor: status() reports the first; steps after it do nothing
// and logits() fills NaN. No ForwardTrace (dumps stay on the CPU backend).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/device_drafter.h"
#include "backends/cuda/device_kernels.h"
#include "backends/cuda/device_pages.h"
#include "backends/cuda/exec_counts.h"
#include "backends/cuda/mma_gemm.h"
#include "cache/records.h"
#include "engine/backend.h"
#include "engine/draft_feed.h"
#include "model/dspark.h"
#include "model/model.h"
#include "parallel/expert_parallel.h"

namespace dsv41 {

// A device array of T owned through an executor. resize() drops the contents unless keep.
template <class Exec, typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(Exec* ex) : ex_(ex) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept
      : ex_(o.ex_), counter_(o.counter_), p_(std::exchange(o.p_, nullptr)), cap_(std::exchange(o.cap_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      free();
      ex_ = o.ex_;
      counter_ = o.counter_;
      p_ = std::exchange(o.p_, nullptr);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  ~DeviceArray() { free(); }
  // counter (optional): a running total of the bytes this array holds allocated, kept up to date
  // by every allocation and release (the backend's cache byte counts).
  void bind(Exec* ex, int64_t* counter = nullptr) {
    ex_ = ex;
    counter_ = counter;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  int64_t capacity() const { return cap_; }
  // Room for n elements; keep = preserve the first `keep` elements across a reallocation.
  void reserve(int64_t n, int64_t keep = 0) {
    if (n <= cap_) return;
    const int64_t cap = std::max<int64_t>(n, cap_ * 2);
    T* q = static_cast<T*>(ex_->alloc(cap * int64_t(sizeof(T))));
    if (!q) return;
    if (p_ && keep > 0) ex_->copy(q, p_, keep * int64_t(sizeof(T)));
    free();
    p_ = q;
    cap_ = cap;
    if (counter_) *counter_ += cap * int64_t(sizeof(T));
  }
  void upload(const T* src, int64_t n, int64_t at = 0) {
    reserve(at + n, at);
    if (p_) ex_->upload(p_ + at, src, n * int64_t(sizeof(T)));
  }

 private:
  void free() {
    if (!p_) return;
    ex_->release(p_);
    if (counter_) *counter_ -= cap_ * int64_t(sizeof(T));
    p_ = nullptr;
    cap_ = 0;
  }
  Exec* ex_ = nullptr;
  int64_t* counter_ = nullptr;
  T* p_ = nullptr;
  int64_t cap_ = 0;
};

// The device memory of the caches by kind (DeviceBackend::cache_bytes_*): `held` are the records in
// use (mirrored main rows and index keys × their record bytes; every ring slot of the window
// copies), `allocated` what the sequences hold for them (whole pages of the mirrors: held rounded
// up to a page per mirror), `reserved` what the backend took from the device (the page pools'
// slabs, free pages included).
struct DeviceCacheBytes {
  int64_t main = 0, index = 0, window = 0;
  int64_t global() const { return main + index; }
  int64_t total() const { return main + index + window; }
};

template <class Exec>
class DeviceBackend : public Backend {
 public:
  // The model is borrowed (its config, plan, RoPE, Engram tables and host-side weights for the
  // host steps above) and must outlive the backend.
  //
  // experts (borrowed, optional): expert parallelism (issue 17, docs/PARALLEL.md) — this backend is
  // rank experts->rank() of experts->size(), uploads only its own routed experts (e ≡ rank mod
  // size) and runs each layer's MoE through parallel/expert_parallel.h's exchange: the batch's
  // FFN inputs and routing downloaded, the records exchanged on the host, this rank's experts run
  // on the device over what it received (one row per (token, expert) pair), their outputs sent
  // back and combined on the device in the one-rank kernels' order (dk::ExpertCombineK; each
  // expert's sum, the shared one's included, formed by the same ExpertDownK kernel as one rank's),
  // so the same bits as one rank where the one-rank step runs the simple or warp expert kernels
  // (not the grouped tensor-core ones, which take steps of ≥ kMmaMinRows rows there). Host-staged: two
  // blocking downloads and three uploads per layer; NCCL's device-pointer exchange is not used yet.
  explicit DeviceBackend(const Model& model, Communicator* experts = nullptr);
  ~DeviceBackend() override;

  std::string name() const override { return ex_.name(); }
  const ModelConfig& config() const override { return model_.config(); }
  const LayerPlan& plan() const override { return model_.plan(); }
  // The first device error, if any (sticky).
  Status status() const { return ex_.status(); }
  // Bytes of weights held on the device.
  int64_t weight_bytes() const { return weight_bytes_; }
  // Device bytes of the caches (see DeviceCacheBytes): records in use, and allocated.
  DeviceCacheBytes cache_bytes_held() const;
  // Global-KV bytes the device can hold (Backend::cache_capacity_bytes): its free memory at
  // construction less max(kDeviceReserveBytes, 1/8 of it); 0 where the executor cannot tell
  // (HostExec). Counted as the host's pages count them (forks share their prefix's pages on the
  // device as on the host: fork_cache).
  static constexpr int64_t kDeviceReserveBytes = int64_t(4) << 30;
  int64_t cache_capacity_bytes() const override { return cache_capacity_; }
  // Drops the mirrors and window copies of the cache (their pages back to the pools at once,
  // instead of after kMirrorIdleBatches unused batches).
  void forget_cache(const SequenceCache* cache) override {
    flush_staged();  // nothing staged between forwards; stay right if a caller did stage
    std::erase_if(mirrors_, [&](const auto& kv) { return kv.first.first == cache; });
    std::erase_if(windows_, [&](const auto& kv) { return kv.first.first == cache; });
  }
  // A fork's mirrors share its parent's device pages (the parent's mirrors, where they are in
  // step with its cache; a page is copied when either side writes into it). Window copies and
  // open groups are not shared: they are made from the fork's cache when it is next read.
  void fork_cache(const SequenceCache& from, const SequenceCache& to) override;
  // What the sequences' device caches hold allocated: the mirrors' pages (whole pages, a page
  // that forks share once) and the window copies (their slots).
  DeviceCacheBytes cache_bytes_allocated() const;
  // What the backend took from the device for them: the page pools' slabs (pages in use and free)
  // and the window copies.
  DeviceCacheBytes cache_bytes_reserved() const;
  // Rows of the compressed-cache mirrors per device page (a power of two; before the first step,
  // tests: small pages put page boundaries everywhere). Default 2^kDevicePageShift.
  static constexpr int kDevicePageShift = 6;
  void set_page_rows(int64_t rows) {
    int shift = 0;
    while ((int64_t(1) << (shift + 1)) <= rows) ++shift;
    if (!main_pages_) page_shift_ = shift;
  }
  // Test support: the device's packed records, downloaded — the main rows (kind kMain) or index
  // keys (kIndex) of the mirror of (cache, kv-source layer), all its rows (empty: no mirror); the
  // window copy's record of position p of (cache, layer) (kWindow; empty unless the copy holds p).
  std::vector<uint8_t> device_records(const SequenceCache* cache, int layer, RowKind kind, int64_t p = 0);
  // Test support: whether the mirror of (cache, kv-source layer) was read by the last batch (one
  // that was not may lag its cache until it is read again).
  bool mirror_used(const SequenceCache* cache, int layer) {
    const Mirror* m = find_mirror(cache, layer);
    return m && m->last_used == batches_;
  }
  // Kernel launches and copies so far (exec_counts.h).
  const ExecCounts& exec_counts() const { return ex_.counts(); }
  // The executor (for its diagnostics, e.g. CudaExec's per-kernel profile).
  Exec& executor() { return ex_; }
  const Exec& executor() const { return ex_; }
  // Test support. Off: every attend rebuilds the window rows it reads from the host ring (the data
  // path before the device window copies); the results are the same bits either way.
  void set_window_copies(bool keep) { keep_window_copies_ = keep; }
  // Test support. Off: index_and_attend runs its jobs one by one (Backend's default) instead of
  // each step for all segments in one launch; the results are the same bits either way.
  void set_batched_segments(bool on) { batched_segments_ = on; }
  // Test support. Off: compress_segments runs compress per segment (download and pack at once)
  // instead of the batched, deferred path; the results are the same bits either way.
  void set_batched_compress(bool on) { batched_compress_ = on; }
  // Test support. Off: a rolled-back cache's mirror is rebuilt (every record uploaded again) and
  // its open group uploaded whenever it differs from the device's, as before rollbacks were
  // followed; on (the default), a mirror whose cache lost only its newest entries keeps the rest
  // and an open group cut to a prefix of the device's is kept. The same bits either way.
  void set_follow_rollbacks(bool on) { follow_rollbacks_ = on; }
  // Fused launches: neighbouring small launches of a step as one where the same float operations
  // run in the same order (RoPE + FakeQuant, inverse RoPE + window stores, the routed and shared
  // experts' up projections, the experts' down projection + mHC expand); off, each on its own.
  // The results are the same bits either way (GPU and emulation tests compare both ways). On by
  // default since their first H200 run (session 14: mini-flash batch 1 2.95 → 2.66 ms a step);
  // the bench's `cuda-unfused` is the old path.
  void set_fused(bool on) { fused_ = on; }
  // With fused launches, the experts' down projection + mHC expand run as one chain for steps of
  // up to this many rows (ffn), else as two launches; the same bits either way. Benchmark support
  // (the limit was measured on mini-flash only; docs/CUDA.md).
  void set_down_expand_rows(int64_t rows) { down_expand_rows_ = rows; }
  // Steps of at least min_rows rows on bf16 tensor cores (mma_gemm.h: fp32 sums of exact products,
  // activations split in three bf16 parts) instead of the warp kernels' double sums: the routed +
  // shared experts as grouped GEMMs, and the GEMMs of stored FP8 / FP4 or bf16 weights where the
  // grid is wide enough (float32 weights and shapes the tiles do not take keep the old path). On by
  // default since session 20 (H200: mini-flash 4K prefill and batch-64 decode faster, dsv41-mini
  // within the CPU engine's own spread; docs/CUDA.md); off: the warp kernels, the A/B's before.
  void set_mma_gemm(bool on, int64_t min_rows = kMmaMinRows) {
    mma_gemm_ = on;
    mma_min_rows_ = min_rows;
  }
  // The smallest measured win (H200, synthetic model's experts: 0.8× at 16 tokens, 3.0× at 64).
  static constexpr int64_t kMmaMinRows = 64;
  // The sink attention of steps of at least min_rows rows (all segments of a layer together) on
  // bf16 tensor cores (fast_kernels.h launch_attn_tensor: head_dim 512, fp32 sums within a bound of
  // the simple bodies, not their bits) instead of the split kernels' double sums. Other head_dims,
  // and HostExec, keep the simple path.
  void set_tensor_attention(bool on, int64_t min_rows = kTensorAttentionMinRows) {
    tensor_attention_ = on;
    tensor_attention_min_rows_ = min_rows;
  }
  // From 2 rows (H200, session 27, mini-flash at 1K: batch 8 1.35×, 16 1.42×, 64 1.88× the split
  // kernels; 4K prefill 2.92×; batch 1 equal within noise, so a single decode row keeps the exact
  // path: batch-1 logits stay the simple bodies' bits).
  static constexpr int64_t kTensorAttentionMinRows = 2;
  // What set_mma_gemm puts on the tiles (the experts, the dense GEMMs) and how the tiles sum
  // (dk::MmaSums): diagnostics and A/B (MmaGemmCuda.DISABLED_MiniTilesDiagnostics). Default: both,
  // kPer16.
  struct MmaScope {
    bool experts = true, dense = true;
    dk::MmaSums sums = dk::MmaSums::kPer16;
  };
  void set_mma_scope(const MmaScope& scope) { mma_scope_ = scope; }
  // Decode steps as CUDA graphs (Exec::set_graphs: on by default on the GPU, emulated by deferral on
  // HostExec where tests turn it on); off: every kernel launched on its own (the "before" of
  // benchmarks). chunk: launches per graph (0: the whole step up to its logits download).
  void set_graphs(bool on, int64_t chunk) { ex_.set_graphs(on, chunk); }
  // Short multi-row steps (DSpark's verify steps: k + 1 rows of each decoding sequence; any batch
  // of at most kShortRows rows a segment and kShortBatchRows in all, without image rows) recorded
  // as graphs like decode steps (on by default; off: launched kernel by kernel as before, the A/B
  // of benchmarks). The same bits either way.
  void set_short_step_graphs(bool on) { short_step_graphs_ = on; }
  // Which executable graphs a short step updates: those of its number of sequences (on, the
  // default) or of its number of rows (off, session 15's keying). A step's kernels follow its
  // segments (attention, index and compressor launches are per segment), not its rows, whose
  // count only changes grids, which an update takes. Keyed by rows, every new total of verify
  // rows (auto's k* gives each sequence its own k, so at batch 8 a run meets 20–40 of them) made
  // all of the step's graphs anew — on an H200 a first-seen row count cost ≈ 0.35 ms more a step
  // at 8 sequences and ≈ 0.7 ms at 1–3 (docs/DSPARK.md, session 19) — where an update of the
  // sequence count's graphs serves. The same launches either way, so the same bits.
  void set_verify_graphs_by_sequences(bool on) { verify_graphs_by_sequences_ = on; }
  static constexpr int64_t kShortRows = 8, kShortBatchRows = 64;
  // The executor's graph programs (StreamGraphs::restart): decode steps, drafts, then one per
  // sequence count (or row count, above) of a short step.
  static constexpr int kDecodeProgram = 0, kDraftProgram = 1, kShortStepPrograms = 2;

  void begin_batch(const BatchLayout& layout, ForwardTrace* trace) override;
  Status engram(int layer, const int64_t* row_ids, int64_t row0, int64_t rows) override;
  Status engram_run(int layer, const int64_t* row_ids, int64_t row0, int64_t rows);  // rows all text
  void attention_input(int layer, std::span<const RowRange> rows) override;
  void attention_projections(int layer, std::span<const RowRange> rows) override;
  void compress(int layer, int segment, int64_t first_row) override;
  // Step 3 of the layer's segments in batched launches, published at end_batch (see "Caches").
  void compress_segments(int layer, std::span<const SegmentCompress> jobs) override;
  void index(int layer, int segment, int64_t first_row, int kv_layer, bool restricted) override;
  void attend(int layer, int segment, int64_t first_row, int kv_layer) override;
  // Steps 4–5 of the layer's segments: each job's index (per segment), then the sink attention of
  // every segment in one launch (dk::AttnBatch), the inverse RoPE once per run of adjacent rows
  // and the new window rows into their ring copies and the staging buffer in one launch
  // (dk::WindowStoreK). Jobs that share a cache run one by one (Backend's default).
  void index_and_attend(int layer, std::span<const SegmentAttention> jobs) override;
  void attention_output(int layer, std::span<const RowRange> rows) override;
  void ffn(int layer, std::span<const RowRange> rows) override;
  void end_batch() override {
    flush_expands();
    // The drafter's rings are fed after this batch (the engine feeds whenever it captures the
    // features): with set_publish_with_feeding the caches' rows wait for the feeding's, one
    // download (feed_draft_rings).
    if (publish_with_feeding_ && capture_) {
      publish_at_feed_ = true;
      return;
    }
    flush_staged();
    ex_.graph_end();
  }
  // A device error is sticky (the executor does nothing after it, logits() fills NaN): every
  // forward from then on fails all its segments with it (the engine resets their sequences), so
  // a caller such as the server answers each request with the error instead of NaN logits.
  // A failed expert-parallel exchange (a peer that never came, a transport error) fails the
  // forward it happened in the same way, and is then cleared.
  Status take_step_failure() override {
    if (!ex_.status().ok()) return ex_.status();
    Status st = ep_failure_;
    ep_failure_ = ok_status();
    return st;
  }
  // With expert parallelism: the exchanges of a forward without rows (one per layer, as ffn makes).
  void idle_forward() override;
  void logits(std::span<const int64_t> rows, float* out) override;

  // DSpark: the target features are taken on the device; the drafter runs there too
  // (device_drafter.h), or, with set_device_drafter(false), on the host (model/dspark.h, the CPU
  // backend's) from the features downloaded once per batch.
  int draft_stages() const override { return drafter_ ? drafter_->stages() : 0; }
  void set_feature_capture(bool on) override { capture_ = on && drafter_ != nullptr; }
  void feed_draft_rings(std::span<const DraftFeed> feeds) override;
  Status draft(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick) override {
    if (!drafter_) return Backend::draft(requests, out, pick);
    if (draft_dev_ && device_drafter_) return draft_on_device(requests, out, pick);
    return drafter_->draft(requests, out, pick);
  }
  // Test support and the "before" of benchmarks. Off: the host drafter (both feed the same
  // SequenceCache rings, so a switch between drafts is allowed).
  void set_device_drafter(bool on) { device_drafter_ = on; }
  // Test support: the executor (e.g. HostExec::fail, a device error in the emulation).
  Exec& exec() { return ex_; }
  // The device drafter's draft as the executor's CUDA graphs (the default, when set_graphs is on)
  // or launch by launch (off: the A/B of benchmarks and the reference of tests). The same bits.
  void set_draft_graphs(bool on) { draft_graphs_ = on; }
  // Greedy drafts' tail (Markov bias, argmax picks, confidences) on the device (the default) or on
  // the host after downloading the logits and collapsed rows (off: the A/B and the tests' reference).
  void set_draft_tail_on_device(bool on) { draft_tail_on_device_ = on; }
  // With draft graphs on: each draft shape's launches captured once and replayed as they are
  // (Exec::run_kept; the attention then spans the window's W + B key slots, absent ones skipped,
  // so the same bits), instead of recorded and updated into the executor's graphs at every draft.
  // On by default since measured on the H200 (a batch-1 draft 0.530 → 0.462 ms; docs/DSPARK.md,
  // session 17); off: the A/B.
  void set_draft_replay(bool on) { draft_replay_ = on; }
  // Fewer draft kernels (fast executors; the same bits either way, tests compare both ways):
  // every greedy slot of the device tail in one launch (dk::DraftSlotsChain: a cluster of blocks
  // per request) instead of two launches a slot; and the block attention's values pass reading
  // the key rows its logits pass decoded into shared memory (DraftAttnChain::keys_in_shared).
  // Off: session 17's kernels (the A/B). docs/DSPARK.md, session 18.
  void set_draft_slots_one_launch(bool on) { draft_slots_one_launch_ = on; }
  void set_draft_keys_in_shared(bool on) { draft_keys_in_shared_ = on; }
  // While the drafter's rings are fed (DSpark, set_feature_capture): the batch's cache rows are
  // published with the rings' rows after the feeding (one download, one wait for the device a
  // forward; the feeding's launches recorded into the step's graphs) instead of at end_batch and
  // again after the feeding. The same rows either way. Needs feed_draft_rings after end_batch,
  // as Engine::forward calls them. Measured no faster on the H200 in session 17; on by default since
  // session 39 (H100: the 6-row verify 0.015 ms shorter, K = 5 1.75 against 1.74× off at batch 1,
  // batch 8 1.10 against 1.09×; docs/DSPARK.md).
  void set_publish_with_feeding(bool on) { publish_with_feeding_ = on; }
  // Diagnostics: the device drafter's host and wait time so far (zero without it).
  DraftTiming draft_timing() const { return draft_dev_ ? draft_dev_->timing : DraftTiming{}; }

 private:
  using F32 = DeviceArray<Exec, float>;
  using I32 = DeviceArray<Exec, int32_t>;
  using U8 = DeviceArray<Exec, uint8_t>;
  struct LayerDev {
    dk::DevWeight wq_a, wq_b, wkv, wo_a, wo_b;
    const float *q_norm = nullptr, *kv_norm = nullptr, *sink = nullptr;
    const float *c_wkv = nullptr, *c_wgate = nullptr, *c_norm = nullptr, *i_wk = nullptr, *i_knorm = nullptr;
    dk::DevWeight i_wqb;
    const float* i_wproj = nullptr;
    const float *attn_norm = nullptr, *ffn_norm = nullptr;
    const float *hca_fn = nullptr, *hca_base = nullptr, *hca_scale = nullptr;
    const float *hcf_fn = nullptr, *hcf_base = nullptr, *hcf_scale = nullptr;
    const float *gate = nullptr, *gate_bias = nullptr, *gate_bias_vl = nullptr;
    const dk::ExpertW* experts = nullptr;  // [E] on the device
    const dk::ExpertW* shared = nullptr;   // [1] on the device, or null
    bool experts_mma = false;              // every expert weight fits the tensor-core tiles
    dk::DevWeight e_wkv;
    const float *e_q = nullptr, *e_k = nullptr;
  };
  // Per segment of the batch: what SharedAttentionState holds on the CPU (attention.h).
  struct SegState {
    int kv_layer = -1, index_layer = -1, candidate_layer = -1;
    int64_t entries = 0, topk_row0 = 0, candidate_row0 = 0, call_row0 = 0;
    I32 topk, candidates;
  };
  // The newest window rows of one (SequenceCache, layer) ring on the device, in the ring's FP8
  // records (what attend decodes), position p in slot p mod slots; positions [lo, hi) held.
  // Appended by packing the device's own fake-quantised rows at attend; `records` keeps
  // the packed records of those positions as the ring got them, so a ring changed behind the
  // backend's back (rollback past them, restore, a new cache at a freed address) is noticed and
  // the copy rebuilt from it.
  struct WindowCopy {
    U8 rows;  // [slots, record bytes]
    int64_t slots = 0, lo = 0, hi = 0;
    int64_t last_used = 0;
    std::vector<uint8_t> records;  // [slots, record bytes]
  };
  struct Mirror {
    DevicePagedRows<Exec> main, index;  // [rows, record bytes] of each kind in pages: the cache's records
    int64_t rows = 0;
    int64_t staged = 0;                           // of the rows, those not yet in the cache
    bool publishing = false;                      // compress_segments staged into it this batch
    int64_t last_used = 0;                        // the batch that last read it
    // The newest mirrored records as the cache packed them, rows [rows − tail, rows) oldest first:
    // the newest one tells a cache changed behind the backend's back; the older ones let a rollback
    // (the cache cut back by at most what a rollback can undo) be followed without an upload.
    std::vector<uint8_t> tail_main, tail_index;
    int64_t tail = 0;
    // The compressor's open group on the device ([pend_rows, dim] projections and gates, ratio ≥ 2)
    // and the cache's values they were made from (−1: none held).
    F32 pend_kv, pend_gate;
    int64_t pend_rows = -1;
    std::vector<float> pend_kv_host, pend_gate_host;
  };

  template <typename T>
  const T* put(const T* src, int64_t n);  // uploads weights; owned by the backend
  const float* put(const std::vector<float>& v) { return v.empty() ? nullptr : put(v.data(), int64_t(v.size())); }
  dk::DevWeight put(const WeightRef& w, int64_t n);  // n: elements of a float32 / bf16 view
  dk::DevWeight put(const QuantWeights& q);           // the stored bytes and scales as they are
  dk::DevWeight put(const std::vector<float>& f32, const std::vector<uint16_t>& bf16, const QuantWeights& quant = {});
  template <class BlockDev>
  void put_block(const LayerWeights& L, bool has_shared, BlockDev& D, bool only_own_experts = false);  // what layers and drafter stages share
  void gemm(const float* x, int64_t xs, int64_t rows, int64_t in, dk::DevWeight w, int64_t out, float* y, int64_t ys);
  void gemm(const float* x, int64_t rows, int64_t in, dk::DevWeight w, int64_t out, float* y) {
    gemm(x, in, rows, in, w, out, y, out);
  }
  void rmsnorm(const float* x, int64_t rows, int64_t n, const float* weight, float* y);
  // MhcCollapseK into collapse.y, then RMSNorm of those rows in place (one launch with fast kernels).
  void collapse_norm(const dk::MhcCollapseK& collapse, int64_t rows, const float* weight);
  void rope(float* x, int64_t rows, int64_t heads, int64_t dim, const float* cos, const float* sin, int64_t row0,
            bool inverse);
  // attention_output's mHC expands, deferred while fused so that ffn's coefficient chain of the
  // same rows forms them (dk::ExpandCoeffChain); flush_expands launches any left on their own.
  struct PendingExpand {
    dk::MhcExpandK k;
    int64_t rows;
  };
  std::vector<PendingExpand> pending_expands_;
  void flush_expands();
  void mhc_coefficients(const float* fn, const float* base, const float* scale, const float* x, int64_t n,
                        float* pre, float* post, float* comb);
  // Row fake-quantiser of `kind` over `values` floats on the device (rows of a multiple of the
  // kind's block width; device_kernels_quant.h, bit-identical to row_fake_quant).
  void fake_quant(float* dev, int64_t values, RowKind kind);
  // One segment's attention as attend() sets it up: the job for dk::AttnBatch (logits scratch
  // not yet placed), its window copy and ring, its rows.
  struct AttendPrep {
    dk::AttnBatch::Job job;
    WindowCopy* copy = nullptr;
    WindowRing* ring = nullptr;
    int64_t r0 = 0, T = 0, start = 0;
  };
  // Step 4 of several segments (each its own cache): their queries over runs of adjacent rows,
  // then scores, candidate blocks and the counting selections of all of them, one launch each
  // (dk::Batched). `jobs` are index jobs (their attend fields unused).
  void index_batch(int layer, std::span<const SegmentAttention> jobs);
  // Launches of one body gathered, then run as dk::Batched launches of up to kMax bodies each
  // (nothing runs before flush: a step's bodies of one kind all go after those of the kind before).
  template <class K>
  struct Launches {
    std::vector<std::pair<int64_t, K>> bodies;
    void add(int64_t n, const K& k) {
      if (n > 0) bodies.emplace_back(n, k);
    }
    void flush(Exec& ex) {
      for (size_t a = 0; a < bodies.size(); a += dk::Batched<K>::kMax) {
        dk::Batched<K> b;
        int64_t total = 0;
        for (size_t j = a; j < bodies.size() && b.n < dk::Batched<K>::kMax; ++j) {
          b.count[b.n] = bodies[j].first;
          b.body[b.n++] = bodies[j].second;
          total += bodies[j].first;
        }
        ex.for_each(total, b);
      }
      bodies.clear();
    }
  };
  void flush_gemms(Launches<dk::GemmK>& gemms, int64_t rows);
  std::vector<SegmentAttention> index_jobs_;
  std::vector<dk::TopkBatch::Job> topk_jobs_;  // index_batch's selections of one call
  std::vector<dk::IndexSelectChain> index_chains_;  // index_batch's jobs without a pool (kept: no allocation a step)
  AttendPrep attend_prepare(int layer, int segment, int64_t first_row, int kv_layer);
  // The attention, inverse RoPE and window-row stores of prepared segments of `layer`.
  void attend_run(int layer, std::span<AttendPrep> preps);
  std::vector<AttendPrep> preps_;
  std::vector<dk::RopeK> inverse_ropes_;  // attend_run's inverse RoPE per run of rows, and the runs' rows
  std::vector<int64_t> inverse_rows_;
  // Pushes the window rows staged by this batch's attend calls into their rings and packs the
  // entries staged by compress_segments into their caches (one download for both).
  void flush_staged();
  Mirror& mirror(const SequenceCache* cache, const KvSourceCache& kv);
  // The mirror of (cache, kv's layer), made empty when there is none yet.
  Mirror& mirror_slot(const SequenceCache* cache, const KvSourceCache& kv);
  // Pages for the mirror's rows [0, rows); false after a device error (the mirror emptied).
  bool reserve_rows(Mirror& m, int64_t rows);
  // Whether the mirror holds the cache's entries as they are (none staged, as many, the newest the
  // same record; what mirror() would keep without an upload).
  static bool in_step(const Mirror& m, const KvSourceCache& kv);
  // Mirror::tail refreshed from the cache's newest records (m.rows of them in the mirror).
  static void remember_tail(Mirror& m, const SequenceCache& cache, const KvSourceCache& kv);
  // The mirror follows its cache cut back by a rollback: true when the cache's newest record is
  // the one the mirror holds at that row (then m.rows is cut back too, nothing uploaded).
  bool follow_rollback(Mirror& m, const KvSourceCache& kv) const;
  Mirror* find_mirror(const SequenceCache* cache, int layer) {
    auto it = mirrors_.find({cache, layer});
    return it == mirrors_.end() ? nullptr : it->second.get();
  }
  // The entries of kv as this batch's later steps see them: the cache's plus those staged.
  int64_t entries_of(const SequenceCache* cache, const KvSourceCache& kv) {
    const Mirror* m = find_mirror(cache, kv.layer);
    return kv.entries() + (m ? m->staged : 0);
  }
  // The device's pending group of kv made equal to the cache's: kept when the cache's is the
  // device's or (after a rollback) its first rows, else uploaded from staging without waiting.
  void sync_pending(Mirror& m, const KvSourceCache& kv);
  // At begin_batch, before the step's graphs are recorded, for each mirror of the batch's caches
  // (one pass): the open group the device does not hold (a rollback reopened a group) uploaded
  // from staging, then the pages the batch's entries will need (at most (open group + rows) /
  // ratio of them). Inside a recorded stretch either copy would change its graph's shape, so that
  // the stretch is instantiated anew instead of updated, and again at the next step without one.
  void prepare_mirrors();
  // Copies `bytes` from host memory into pinned staging and queues their upload to dst without
  // waiting (the staging is reused after the batch's blocking download, or a sync).
  void upload_staged(void* dst, const void* src, int64_t bytes);
  // The device window copy of `layer` of `cache`, holding positions [first, start) of its ring.
  WindowCopy& window_copy(const SequenceCache* cache, int layer, const WindowRing& ring, int64_t first, int64_t start);
  const float* rope_table(RopeKind kind, bool sin) const;

  const Model& model_;
  Exec ex_;
  std::vector<void*> owned_;  // weight allocations
  int64_t weight_bytes_ = 0;
  const float *embed_ = nullptr, *final_norm_ = nullptr;
  dk::DevWeight head_;
  std::vector<LayerDev> layers_;

  BatchLayout layout_;
  std::vector<SegmentRows> segments_;
  std::vector<std::unique_ptr<SegState>> seg_;
  DeviceCacheBytes cache_alloc_;  // the window copies' arrays (bind)
  // The mirrors' pages (made at the first mirror, rows per page 2^page_shift_); declared before
  // mirrors_, which give their pages back when they go.
  int64_t cache_capacity_ = 0;  // see cache_capacity_bytes
  int page_shift_ = kDevicePageShift;
  std::unique_ptr<DevicePagePool<Exec>> main_pages_, index_pages_;
  std::map<std::pair<const SequenceCache*, int>, std::unique_ptr<Mirror>> mirrors_;
  std::map<std::pair<const SequenceCache*, int>, std::unique_ptr<WindowCopy>> windows_;
  bool keep_window_copies_ = true;
  bool batched_segments_ = true;
  bool batched_compress_ = true;
  bool follow_rollbacks_ = true;  // see set_follow_rollbacks
  bool fused_ = true;  // see set_fused
  // See set_down_expand_rows. On the H200 (mini-flash, session 14) the chain took 0.115 ms a step
  // at batch 1 against 0.31 ms for the separate launches, but 0.471 against 0.34 ms at batch 8.
  int64_t down_expand_rows_ = 4;
  bool mma_gemm_ = true;  // see set_mma_gemm
  int64_t mma_min_rows_ = kMmaMinRows;
  bool tensor_attention_ = true;  // see set_tensor_attention
  int64_t tensor_attention_min_rows_ = kTensorAttentionMinRows;
  MmaScope mma_scope_;
  // Grouped experts in rounds of at most this many tokens (bounds the parts buffer: tokens ·
  // (k + 1) · hidden floats, 147 MB at 1024 tokens of V4.1-Flash's shape).
  static constexpr int64_t kMmaRoundTokens = 1024;
  void ffn_grouped(const LayerDev& L, const float* h, int32_t* ex, float* wt, int64_t m, float* y);
  // Expert parallelism (see the constructor): ffn's MoE for every range in one exchange, and the
  // exchange itself (m packed rows of ep_h_ / ep_chosen_ / ep_weights_ out, this rank's experts on
  // what came in, the returned parts into ep_ret_ at ep_pair_row_; false after a failure).
  void ffn_expert_parallel(int layer, std::span<const RowRange> rows);
  void ffn_route(const LayerDev& L, int64_t r0, int64_t m);
  bool ep_exchange(int layer, int64_t m);
  Communicator* ep_comm_ = nullptr;
  Status ep_failure_ = ok_status();  // the forward's first failed exchange (take_step_failure)
  ExpertParallelScratch ep_;
  std::vector<float> ep_h_, ep_weights_, ep_pair_x_;
  std::vector<int32_t> ep_chosen_;
  F32 ep_x_, ep_wt_, ep_parts_, ep_ret_, ep_shared_;
  I32 ep_ex_;
  DeviceArray<Exec, int64_t> ep_pair_row_;
  // Mirrors unused for this many batches are dropped (the engine does not tell a backend when a
  // cache goes; a dropped mirror of a live cache is rebuilt from it when next read).
  static constexpr int64_t kMirrorIdleBatches = 256;
  int64_t batches_ = 0;
  F32 x_, x2_, p_, h_, c_, q_, kv_, o_, a_, pre_a_, post_a_, comb_a_, post_b_, comb_b_;
  // The batch's tables (one upload, begin_batch): tokens, RoPE of both kinds per row, and per
  // compressor ratio r the compress RoPE of position + 1 − r per row (the group a row completes).
  F32 tables_;
  std::vector<float> host_tables_;
  const int32_t* tokens_dev_ = nullptr;
  const float *cos_main_ = nullptr, *sin_main_ = nullptr, *cos_comp_ = nullptr, *sin_comp_ = nullptr;
  std::vector<int> ratios_;                   // the model's compressor ratios
  std::vector<const float*> ratio_cos_;       // per ratios_ entry: [rows, half] cos then sin
  // Pinned staging: uploads (bump-allocated over a batch) and the end_batch download.
  uint8_t* host_up_ = nullptr;
  int64_t host_up_cap_ = 0, host_up_used_ = 0;
  bool async_in_flight_ = false;  // an upload_staged since the last blocking download / sync
  float* host_down_ = nullptr;
  int64_t host_down_cap_ = 0;
  F32 scratch_r_, scratch_m_, scratch_mhc_, mid_, logits_buf_, cmp_ab_, cmp_lat_, cmp_cos_, iq_, ihw_, scores_, bmax_, index_work_, router_, hexp_, hshared_, engram_r_, engram_kv_, engram_gate_;
  I32 experts_;
  I32 mma_groups_;  // dk::ExpertGroups of a grouped round
  F32 mma_parts_;   // GroupedDownChain's parts
  DeviceArray<Exec, float> weights_;
  DeviceArray<Exec, uint8_t> select_scratch_;  // index_batch's top-k selections (dk::TopkBatch::Job::scratch)
  // Image-span rows of the batch (BatchLayout::types ≥ 0): empty for a text batch; on the device
  // for the router's bias_vl selection.
  std::vector<uint8_t> is_image_;
  DeviceArray<Exec, uint8_t> is_image_dev_;
  DeviceArray<Exec, int64_t> rows_;
  // Window rows waiting for their ring: attend() stages each segment's newest rows (at most the
  // ring's slots; the ring packs no more) on the device, end_batch() downloads them in one copy and
  // pushes them (a ring read before that, by a second attend of the same ring, flushes first).
  struct PendingPush {
    WindowRing* ring = nullptr;
    WindowCopy* copy = nullptr;  // whose records follow the ring's
    int layer = -1;
    int64_t rows = 0, staged = 0, offset = 0;  // positions the ring advances, rows staged, at
  };
  std::vector<PendingPush> pending_;
  // Entries compress_segments staged (offsets in floats into stage_): the new projections (ratio
  // ≥ 2: kv then gate rows, T each), the latents then the index keys (groups each).
  struct PendingCompress {
    const SequenceCache* cache = nullptr;
    KvSourceCache* kv = nullptr;
    Mirror* mirror = nullptr;
    int64_t T = 0, P = 0, groups = 0, first_pos = 0;
    int64_t proj = -1, gate = -1, lat = 0, keys = 0;
  };
  std::vector<PendingCompress> compressed_;
  int64_t staged_ = 0;  // floats used in stage_
  F32 stage_;
  std::vector<float> host_tmp_;
  std::vector<uint8_t> host_bytes_;
  // DSpark (see draft_stages): the host drafter, target_slot_[layer] = the layer's place among the
  // targets or −1, and the batch's features [n, targets·hidden] on the device and on the host.
  std::unique_ptr<Drafter> drafter_;
  bool capture_ = false;
  std::vector<int> target_slot_;
  F32 features_;
  std::vector<float> host_features_;
  DraftFeedScratch feed_scratch_;
  // The device drafter (device_drafter.h, device_drafter_impl.h).
  std::unique_ptr<DeviceDraftState<Exec>> draft_dev_;
  bool device_drafter_ = true;
  bool draft_graphs_ = true;
  bool short_step_graphs_ = true;  // see set_short_step_graphs
  bool verify_graphs_by_sequences_ = true;  // see set_verify_graphs_by_sequences
  bool draft_tail_on_device_ = true;
  bool draft_replay_ = true;  // see set_draft_replay
  bool draft_slots_one_launch_ = true;  // see set_draft_slots_one_launch
  bool draft_keys_in_shared_ = true;    // see set_draft_keys_in_shared
  bool publish_with_feeding_ = true;  // see set_publish_with_feeding (on since session 39)
  bool publish_at_feed_ = false;       // end_batch left the batch's rows to feed_draft_rings
  void upload_drafter(const DrafterWeights& w);
  void feed_rings_on_device(std::span<const DraftFeed> feeds);
  Status draft_on_device(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick);
  void draft_tables(std::span<const DraftRequest> requests);
  void reserve_draft_buffers();
  uint64_t draft_graph_key() const;
  void draft_kernels();
  void draft_tail_kernels();
  void draft_attention(int stage);
  void draft_moe(int stage);
};

}  // namespace dsv41
