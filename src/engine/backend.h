// The seam between the engine's layer-plan walk and the arithmetic. Spec: issue 9 item 2;
// model.md §3.1–§3.9 for what each step computes.
//
// The engine (engine/engine.h) decides, once for every backend, which step runs for which layer
// and segment: which kv source a layer reads, which layers run the indexer and whether they are
// restricted to the candidate pool, which layers only borrow the latest top-k. A Backend computes
// those steps over one batch: the token-wise steps over all rows of the batch at once (so a decode
// step reads each weight once for all sequences), the sequence-wise steps (compressor, indexer,
// sparse attention) per segment over that segment's own cache.
// A backend owns its weight storage (the CPU backend: float32 / bf16-exact views of a loaded
// Model; a CUDA one will hold the stored FP8/FP4 bytes on the device), its threads and its
// workspace (the batch's activations live there; the engine never sees them, only the logits it
// asks for). Calls come from one thread, in the order: begin_batch, then per layer
// begin_layer → engram? → attention_input → attention_projections → compress_segments? (compress
// per segment) → index_and_attend (index? then attend per segment) → attention_output → ffn, then end_batch,
// then logits (when any row wants them).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"
#include "cache/sequence_cache.h"
#include "engine/step_shape.h"
#include "format/config.h"
#include "model/dspark.h"
#include "plan/layer_plan.h"

namespace dsv41 {

struct ForwardTrace;  // model/model.h

// One segment as the backend sees it: batch rows [row0, row0 + rows) are positions
// start … start + rows − 1 of the sequence whose cache is `cache`.
struct SegmentRows {
  int64_t row0 = 0, rows = 0, start = 0;
  SequenceCache* cache = nullptr;
};

// Batch rows [begin, end): the rows a token-wise step runs on (with per-layer position ranges,
// plan/replay_rule.h, a layer may run only some rows of a batch; a decode batch is one range).
struct RowRange {
  int64_t begin = 0, end = 0;
};

struct BatchLayout {
  int64_t rows = 0;
  const int32_t* tokens = nullptr;     // [rows] token ids (validated by the engine)
  const int64_t* positions = nullptr;  // [rows] absolute positions
  std::span<const SegmentRows> segments;
  // Image spans (model.md §3.10), null when the batch has none (text batches pay nothing):
  // types [rows] (−1 text, 0..3 span: model/vision/image_span.h ImageTokenType) and the span rows'
  // embeddings [span rows, hidden] in row order, which replace the token embedding. Span rows
  // route with bias_vl and have the Engram gate off.
  const int8_t* types = nullptr;
  const float* image_embeddings = nullptr;
};

// One segment's steps 4–5 of a layer: index (when `index`) over kv source `index_kv_layer`, then
// attend from `first_row` on (over `attend_kv_layer`'s selected entries when ≥ 0).
struct SegmentAttention {
  int segment = 0;
  int64_t first_row = 0;
  bool index = false;
  int index_kv_layer = -1;
  bool restricted = false;
  int attend_kv_layer = -1;
};

// One segment's step 3 of a layer: its rows from `first_row` on through the compressor.
struct SegmentCompress {
  int segment = 0;
  int64_t first_row = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const LayerPlan& plan() const = 0;
  // How its step time grows with rows and sequences (engine/step_shape.h). Default: streaming.
  virtual StepShape step_shape() const { return kStreamingStep; }

  // Takes the batch: sizes the workspace (reused when the shape repeats) and embeds the tokens
  // (span rows: their image embeddings) into the residual streams. trace (optional, single-segment batches): named intermediates.
  virtual void begin_batch(const BatchLayout& layout, ForwardTrace* trace) = 0;
  // Start of a layer (before its Engram). Default: nothing.
  virtual void begin_layer(int layer) { (void)layer; }
  // Engram of an Engram layer for batch rows [row0, row0 + rows): row_ids [rows, columns] of this
  // layer; image-span rows stay unchanged (gate 0). Fails (naming the table) when a stored row cannot be decoded; rows are then unchanged.
  virtual Status engram(int layer, const int64_t* row_ids, int64_t row0, int64_t rows) = 0;
  // mHC attention site + RMSNorm_attn: the attention input of the given rows.
  virtual void attention_input(int layer, std::span<const RowRange> rows) = 0;
  // Query path and window KV of the given rows (attention steps 1–2).
  virtual void attention_projections(int layer, std::span<const RowRange> rows) = 0;
  // Step 3 (Full layers): the segment's rows from `first_row` on through the layer's compressor;
  // new entries are published into the segment's cache. Rows before first_row are positions the
  // cache already covers (a replay below the write floor): they are not fed again.
  virtual void compress(int layer, int segment, int64_t first_row) = 0;
  // Step 3 of several segments of one layer (each segment at most once, before the layer's
  // index_and_attend). The segments are independent; the results must be those of compress run
  // per job in order, and the entries must be in the caches when end_batch returns (the layer's
  // later steps in this batch read them through the backend). Default: compress per job.
  virtual void compress_segments(int layer, std::span<const SegmentCompress> jobs) {
    for (const SegmentCompress& j : jobs) compress(layer, j.segment, j.first_row);
  }
  // Step 4 (index sources): a new top-k for the segment's rows from `first_row` on over
  // kv-source `kv_layer`'s index keys (restricted: only inside the candidate pool published
  // earlier in this batch).
  virtual void index(int layer, int segment, int64_t first_row, int kv_layer, bool restricted) = 0;
  // Step 5: sparse sink attention of the segment's rows from `first_row` on over their window
  // and, when kv_layer ≥ 0, the entries of kv_layer named by the latest top-k; then their window
  // rows enter the ring (whose next position must be the first row's position).
  virtual void attend(int layer, int segment, int64_t first_row, int kv_layer) = 0;
  // Steps 4–5 of several segments of one layer (after every compress of the layer): for each
  // job, index (when asked) then attend. The segments are independent (each reads and writes only
  // its own cache and state), so a backend may run them concurrently; the results must be those
  // of the jobs run one by one. Default: one by one, in order, on the caller.
  virtual void index_and_attend(int layer, std::span<const SegmentAttention> jobs) {
    for (const SegmentAttention& j : jobs) {
      if (j.index) index(layer, j.segment, j.first_row, j.index_kv_layer, j.restricted);
      attend(layer, j.segment, j.first_row, j.attend_kv_layer);
    }
  }
  // Step 6 + mHC expansion of the attention site, for the given rows.
  virtual void attention_output(int layer, std::span<const RowRange> rows) = 0;
  // mHC FFN site, RMSNorm_ffn, MoE, expansion; the carried mix for the next layer (given rows).
  virtual void ffn(int layer, std::span<const RowRange> rows) = 0;
  // After the last layer of every batch (before logits, which not every batch asks for): the
  // caches must hold everything the batch wrote into them when this returns. A backend may defer
  // writes of its steps to here (the CUDA one pushes every layer's window rows in one copy).
  // Default: nothing.
  virtual void end_batch() {}
  // Final collapse, norm and head for the given batch rows: out [rows.size(), vocab], fp32.
  virtual void logits(std::span<const int64_t> rows, float* out) = 0;

  // Several ranks (docs/PARALLEL.md): a backend whose steps exchange data with other ranks (the
  // MoE under expert parallelism) must take part in every exchange of every forward, even when
  // its engine has nothing to run. idle_forward is that forward without rows (the engine calls it
  // when it admits no segment); take_step_failure returns (and clears) the failure of such an
  // exchange in the last forward, which then fails every segment of the batch (the steps
  // themselves return nothing). Defaults: a backend of one rank, nothing to do, never fails.
  virtual void idle_forward() {}
  virtual Status take_step_failure() { return ok_status(); }
  // The engine is about to destroy this cache (its sequence removed): what the backend keeps for
  // it (a device backend's mirrors and ring copies) can go now. Default: nothing kept.
  virtual void forget_cache(const SequenceCache* cache) { (void)cache; }
  // `to` was just forked from `from` (Engine::fork, fork_prefix: its records are the first ones
  // of `from`'s, on shared host pages): a backend that keeps copies of caches may share them too.
  // Default: nothing kept.
  virtual void fork_cache(const SequenceCache& from, const SequenceCache& to) {
    (void)from;
    (void)to;
  }
  // Bytes of global KV (main rows + index keys of all sequences together) this backend can hold
  // beside its weights and workspace — a device backend: what its device had free after the
  // weights, less a reserve —, or 0 when it sets no bound of its own (host memory). The engine's
  // page budget is capped by it, so that what the engine admits fits where the backend keeps it.
  virtual int64_t cache_capacity_bytes() const { return 0; }

  // DSpark (issue 15, model/dspark.h). Stages of the model's drafter this backend runs (0: none).
  virtual int draft_stages() const { return 0; }
  // Capture the drafter's target features in the coming batches (the streams entering each target
  // layer, averaged over the hc streams; taken in attention_input).
  virtual void set_feature_capture(bool on) { (void)on; }
  // After the layers: each listed segment's rows from its first row on (their features were
  // captured in this batch) enter its cache's drafter rings, whose next position must be that
  // row's. One call per forward, so the rows of every segment go through the drafter's
  // projections together.
  struct DraftFeed {
    int segment = 0;
    int64_t first_row = 0;
  };
  virtual void feed_draft_rings(std::span<const DraftFeed> feeds) { (void)feeds; }
  // Drafts (model/dspark.h Drafter::draft).
  virtual Status draft(std::span<const DraftRequest> requests, std::vector<DraftBlock>& out, const DraftPicker& pick) {
    (void)requests, (void)out, (void)pick;
    return unsupported(name() + " backend: no DSpark drafter");
  }
};

}  // namespace dsv41
