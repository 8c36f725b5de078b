// The CPU backend: the engine's steps (engine/backend.h) computed with the float32 / bf16-exact
// weights of a loaded Model and the CPU kernels (scalar references or AVX2 fast paths, per the
// model's options). Spec: model.md §3.
//
// Workspace: the batch's activations, sized at begin_batch and reused while the batch shape
// repeats (steady-state decode allocates nothing here):
//   x [n, hc, d] residual streams, p [n, hc] carried mix, h [n, d] block input,
//   c [n, q_lora], q [n, H·D], kv [n, D], o [n, H·D], a [n, d], x2 [n, hc, d] streams after
//   attention, mHC coefficients of both sites, router choices [n, top_k], RoPE tables per kind,
//   and one SharedAttentionState per segment (its latest top-k and candidate pool); and the
//   blocks' scratch (mHC, Engram, compressor, indexer + attention, MoE), passed down to the kernels
//   so that they allocate nothing themselves.
// Row groups (decode batches of a small model): the token-wise steps of a batch run as row groups
// side by side on the pool, one job for attention_input + attention_projections and one for
// attention_output + ffn (see CpuBackendOptions). The engine calls those steps in pairs
// (engine/backend.h's order), so attention_input and attention_output only note their rows and
// the next step runs both; any other call first runs what is pending, one step after the other.
// Layer groups (CpuBackendOptions::layer_groups): when every segment is one decoding row, the
// steps from attention_projections to attention_output only note themselves too, and ffn runs the
// whole layer as one job of groups.
// Likewise compress() only notes its segment: the next other call runs the noted segments'
// compressor steps side by side on the pool (each segment's own cache state; small segments
// only), then publishes their entries one by one in call order (the page pool is shared).
// Every step's per-row arithmetic is independent of the other rows of its call, so the groups
// give the bits of the whole batch at once.
// The Model is borrowed and must outlive the backend. Kernels run on the given CpuExec (its pool
// and scalar/fast path) or on the model's.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/draft_feed.h"
#include "model/attention.h"
#include "model/attention_steps.h"
#include "model/compressor.h"
#include "model/dspark.h"
#include "model/model.h"
#include "model/selected_rows.h"
#include "parallel/expert_parallel.h"

namespace dsv41 {

struct CpuBackendOptions {
  // A batch of kMinGroupedRows … kMaxGroupedRows rows (and at least 2·group_rows) runs its
  // token-wise steps as min(threads, rows / group_rows) row groups side by side on the pool, each
  // group's products on its own thread (8 decoders on 16 threads: 8 groups of one row; on 2
  // threads: 2 groups of 4). 0 = never (every product over all rows, threaded inside). Only for
  // weights that stay in the shared cache (kMaxGroupedWeightBytes): each group reads every weight
  // once, so a model streamed from DRAM would read it once per group. Below 0: kDefaultGroupRows.
  // Smaller batches, and pools of fewer than kMinGroupedThreads threads, stay whole: there the
  // two jobs per layer, and the weights read once per group, cost more than they save
  // (docs/BENCHMARKS.md, "Row groups").
  int64_t group_rows = -1;
  // Expert parallelism (parallel/expert_parallel.h, docs/PARALLEL.md): this backend is rank
  // experts->rank() of experts->size(), holds routed expert e only when e mod size = rank and
  // exchanges every layer's MoE rows with the other ranks' backends (borrowed, must outlive the
  // backend; no row groups then); null = every expert here.
  Communicator* experts = nullptr;
  // Layer groups: when a batch runs as row groups and every segment is one decoding row (row s =
  // segment s), a layer's steps from attention_input to ffn run as ONE pool job instead of 6–9
  // (groups, compressor products and steps, index queries, segments' attention, groups again):
  // each group takes its rows through mHC, projections, its segments' compressor steps, index,
  // attention, output and FFN. The compressor's entries go into the shared page pool in call
  // order (a group waits for the earlier segments' publishes). Same bits; false = off (A/B).
  bool layer_groups = true;
  static constexpr int64_t kDefaultGroupRows = 1;
  static constexpr int64_t kMinGroupedRows = 8;
  static constexpr int kMinGroupedThreads = 4;
  static constexpr int64_t kMaxGroupedRows = 64;
  static constexpr int64_t kMaxGroupedWeightBytes = int64_t{64} << 20;
};

class CpuBackend : public Backend {
 public:
  // exec: the pool and kernel path (borrowed pool, must outlive the backend); null = the model's.
  // options.experts: expert parallelism (see CpuBackendOptions).
  explicit CpuBackend(const Model& model, const CpuExec* exec = nullptr, const CpuBackendOptions& options = {});

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return model_.config(); }
  const LayerPlan& plan() const override { return model_.plan(); }
  StepShape step_shape() const override;
  const Model& model() const { return model_; }

  void begin_batch(const BatchLayout& layout, ForwardTrace* trace) override;
  void begin_layer(int layer) override;
  Status engram(int layer, const int64_t* row_ids, int64_t row0, int64_t rows) override;
  void attention_input(int layer, std::span<const RowRange> rows) override;
  void attention_projections(int layer, std::span<const RowRange> rows) override;
  void compress(int layer, int segment, int64_t first_row) override;
  void compress_segments(int layer, std::span<const SegmentCompress> jobs) override;
  void index(int layer, int segment, int64_t first_row, int kv_layer, bool restricted) override;
  void attend(int layer, int segment, int64_t first_row, int kv_layer) override;
  // Runs the jobs' segments concurrently on the pool (one per chunk, each with its own attention
  // scratch; the kernels they call run inline there), the same bits as one by one.
  void index_and_attend(int layer, std::span<const SegmentAttention> jobs) override;
  void attention_output(int layer, std::span<const RowRange> rows) override;
  void ffn(int layer, std::span<const RowRange> rows) override;
  void end_batch() override { flush_pending(); }
  void logits(std::span<const int64_t> rows, float* out) override;
  void idle_forward() override;
  Status take_step_failure() override;
  int draft_stages() const override { return drafter_ ? drafter_->stages() : 0; }
  void set_feature_capture(bool on) override { capture_ = on && drafter_ != nullptr; }
  void feed_draft_rings(std::span<const DraftFeed> feeds) override;
  Status draft(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick) override;

  // Test hook: called before each layer with the batch's streams x [n, hc, d] and carried mix
  // p [n, hc], which it may overwrite (to feed a layer the reference's inputs). Empty = none.
  using LayerHook = std::function<void(int layer, float* x, float* p)>;
  // Routed experts read since the last reset: per layer and step, the number of distinct experts
  // the batch's tokens chose (what a decode step streams from memory beside the dense weights).
  int64_t expert_reads() const { return expert_reads_; }
  void reset_expert_reads() { expert_reads_ = 0; }
  void set_layer_hook(LayerHook hook) { hook_ = std::move(hook); }
  // Layers run as one layer-group job since construction (CpuBackendOptions::layer_groups).
  int64_t layer_group_runs() const { return layer_group_runs_; }
  // Row groups a token-wise step over `rows` batch rows runs as (1: the whole batch at once).
  int64_t row_groups(int64_t rows) const;

 private:
  void capture_features(int layer, std::span<const RowRange> rows);
  // The MoE of the given rows (h_ → a_, the routing into experts_ / weights_) through the
  // expert-parallel exchange: one exchange for all ranges (every rank makes the same calls).
  void moe_expert_parallel(int layer, std::span<const RowRange> rows);
  void index_with(int layer, int segment, int64_t first_row, int kv_layer, bool restricted, AttentionScratch* scratch);
  void attend_with(int layer, int segment, int64_t first_row, int kv_layer, AttentionScratch* scratch);
  // The token-wise steps on batch rows [r0, r0 + n) with the given scratch.
  struct RowScratch {
    MhcScratch mhc;
    AttentionScratch attention;
    MoeScratch moe;
  };
  void input_rows(int layer, int64_t r0, int64_t n, MhcScratch* scratch);
  void projection_rows(int layer, int64_t r0, int64_t n);
  void output_rows(int layer, int64_t r0, int64_t n, AttentionScratch* scratch);
  void ffn_rows(int layer, int64_t r0, int64_t n, MhcScratch* mhc, MoeScratch* moe);
  void ffn_input_rows(int layer, int64_t r0, int64_t n, MhcScratch* mhc);  // mHC coefficients, collapse, norm
  void ffn_expand_rows(int64_t r0, int64_t n);                               // after the MoE
  // fn(group scratch, r0, n) for row_groups(r.end − r.begin) balanced pieces of r, side by side.
  void run_groups(const RowRange& r, FunctionRef<void(RowScratch&, int64_t, int64_t)> fn);
  // Runs noted steps (see above): attention_input, then the compress jobs, then attention_output.
  void flush_pending();
  void flush_rows();  // the noted attention_input / attention_output only
  void run_compress_jobs();
  // Layer groups (CpuBackendOptions::layer_groups): the noted steps of layer_group_ as one pool
  // job, the FFN too when with_ffn; and a group's share of it, rows [b, e).
  void run_layer_group(bool with_ffn);
  void layer_group_compress(int layer, int64_t b, int64_t e);
  void layer_group_attend(int layer, int64_t b, int64_t e, AttentionScratch* scratch);

  const Model& model_;
  CpuExec ex_;
  int64_t group_rows_ = 0;  // 0: no row groups (options, or weights too large)
  // A noted step (layer ≥ 0) waiting for its pair: its layer and rows.
  struct Pending {
    int layer = -1;
    RowRange rows;
  };
  Pending pending_input_, pending_output_;
  std::vector<RowScratch> group_scratch_;  // one per row group (kept across steps)
  struct CompressJob {
    int layer = 0, segment = 0;
    int64_t first_row = 0;
  };
  std::vector<CompressJob> compress_jobs_;           // noted by compress(), in call order
  std::vector<CompressedGroups> job_groups_;         // per job: the groups its step completes
  std::vector<CompressorScratch> job_scratch_;       // per job (kept across steps)
  // The compressor projections W_ckv x, W_cg x [rows, D] of every noted job's rows, one product each.
  std::vector<float> job_a_, job_b_;
  // Layer groups: whether this batch may run them (options, one decoding row per segment), the
  // layer whose steps are noted (−1: none) and how far the engine got, the noted attention jobs,
  // per segment its compress / attention job (−1: none), and the compress jobs published so far.
  bool layer_groups_on_ = false, batch_layer_groups_ = false;
  struct LayerGroup {
    int layer = -1;
    bool attend = false, output = false;
  };
  LayerGroup layer_group_;
  std::vector<SegmentAttention> group_jobs_;
  std::vector<int32_t> segment_compress_, segment_attend_;
  std::atomic<int64_t> published_{0};
  int64_t layer_group_runs_ = 0;
  AttentionOptions attention_options_;
  std::vector<MoeWeights> moe_;  // per layer, built once (the views hold a vector)
  LayerHook hook_;
  int64_t expert_reads_ = 0;
  std::vector<uint8_t> expert_seen_;  // [n_routed_experts], scratch of the count above

  // Current batch.
  BatchLayout layout_;
  std::vector<SegmentRows> segments_;
  ForwardTrace* trace_ = nullptr;
  std::vector<SharedAttentionState> shared_;  // per segment
  std::vector<SelectedRows> selected_;        // per segment: its selection's main rows (one-row calls)
  std::map<RopeKind, RopeRows> rope_rows_;    // per RoPE kind the plan uses, [n, rope_dim/2]
  std::vector<float> x_, p_, h_, c_, q_, kv_, o_, a_, x2_, hidden_;
  std::vector<float> pre_a_, post_a_, comb_a_, pre_b_, post_b_, comb_b_;
  std::vector<int32_t> experts_;
  std::vector<uint8_t> is_image_;  // [n] image-span rows; empty for a text batch
  std::vector<float> weights_;
  MhcScratch mhc_scratch_;
  EngramScratch engram_scratch_;
  AttentionScratch attention_scratch_;
  std::vector<AttentionScratch> segment_scratch_;  // index_and_attend: one per job (kept across steps)
  MoeScratch moe_scratch_;
  // Expert parallelism (null: off): the communicator, the exchange's scratch, the rows of several
  // ranges packed together, and the first failure of an exchange in this forward.
  Communicator* experts_comm_ = nullptr;
  ExpertParallelScratch ep_scratch_;
  std::vector<float> ep_in_, ep_out_, ep_weights_;
  std::vector<int32_t> ep_experts_;
  std::vector<uint8_t> ep_image_;
  Status ep_failure_;
  // DSpark: the drafter (when the model has one), feature capture, and the batch's features
  // [n, targets·hidden]; target_slot_[layer] = its place among the targets, or −1.
  std::unique_ptr<Drafter> drafter_;
  bool capture_ = false;
  std::vector<int> target_slot_;
  std::vector<float> features_;
  DraftFeedScratch feed_scratch_;
};

}  // namespace dsv41
