// Continuous batching: many generation requests through one Engine, up to `parallel` sequences
// at a time; a finished sequence's slot is refilled from the queue at the next step. Spec:
// issue 9 item 7; system.md §3 (serving), §4 (the speculative scheduler builds on this).
//
// Speculative steps (DSpark, options.dspark not off): before the forward, the drafter proposes a
// block after every decoding sequence's last position (anchor = its sampled, not yet fed token);
// each sequence verifies k ≤ block drafts as k + 1 rows [t, d_1 … d_k] of the same forward. Rows
// are then taken in order exactly as plain decoding would take them (constraint, the request's
// own Sampler: greedy, or seeded sampling): draft d_{j+1} is accepted while the token chosen from
// row j equals it. So every emitted token is the one plain decoding emits, for greedy AND for
// sampling with a seed. Sampled requests without a constraint or penalties instead use the
// rejection rule (options.sampled_rejection, runtime/speculative.h), which accepts more drafts and
// keeps the target distribution but not plain decoding's exact tokens. The positions of rejected drafts are rolled back (Engine::rollback) before anything
// is emitted, so a finished request's sequence holds exactly what plain decoding leaves.
// Each step is one Engine::forward over: a prefill chunk (≤ prefill_chunk tokens of one step of
// the request's prefill plan at its depth, plan/replay_rule.h; chunk boundaries at fixed multiples
// of prefill_chunk from the step's start; with a prompt's images, the types and span rows of its
// positions) for sequences still reading their prompt, at most max_prefill_tokens of those per step, and one decode token for every sequence
// that is generating. Every request has its own Sampler (seeded), and the engine's results do not
// depend on what else is in a batch, so a request's tokens do not depend on `parallel`, on the
// order of the queue or on the other requests.
// A request that cannot run (prompt over the context, bad token ids, bad sampling parameters)
// finishes with an error status; the others go on. cancel() ends a queued or running request
// at once (a server's client went away, or its stop string appeared): its sequence and pages
// leave the engine before the next step. Not thread-safe: one thread drives it.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "plan/replay_rule.h"
#include "runtime/auto_draft.h"
#include "runtime/confidence_calibration.h"
#include "runtime/draft_length.h"
#include "runtime/sampling.h"
#include "runtime/speculative.h"
#include "runtime/step_cost.h"
#include "runtime/shape_profile.h"
#include "runtime/token_constraint.h"

namespace dsv41 {

struct ImagePrompt;  // runtime/image_input.h

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 64;
  SamplingParams sampling;
  bool ignore_eos = false;  // generate exactly max_tokens
  PrefillDepth depth = PrefillDepth::kFull;  // prefill depth (plan/replay_rule.h)
  // Constrained decoding (null: none): each request gets its own constraint from the factory;
  // before each sample it masks the logits (the token callback still sees the raw ones).
  std::shared_ptr<const ConstraintFactory> constraint;
  // The prompt's images (issue 16), null for a text prompt: the per-position types and the span
  // rows (runtime/image_input.h place_images). Each prefill chunk (replays included) carries the
  // types and rows of its positions, so an image prompt prefills in the batch like text; a
  // request whose types and rows do not fit its prompt fails, naming the position. Shared, so
  // the choices of one request borrow the same rows. After depth, so brace-initialised requests
  // need not name it.
  std::shared_ptr<const ImagePrompt> images;
};

// kCancelled: ended by cancel() with that reason (a caller may also end a request as kStop).
enum class FinishReason { kStop, kLength, kError, kCancelled };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "error", "cancelled"

struct GenerationResult {
  Status status;                // not ok: finish is kError and ids may be partial
  std::vector<int32_t> ids;     // generated ids (the end-of-sequence token excluded)
  FinishReason finish = FinishReason::kLength;
  int64_t prompt_tokens = 0;
  PrefillDepth effective_depth = PrefillDepth::kFull;
  TokenLayers prefill_work;     // token-layers of the prefill, by kind
  // Wall time of the forwards that carried its prefill chunks (shared with the other segments of
  // those batches), by kind; zero for a request submitted prefilled.
  PrefillTiming prefill_timing;
};

struct SchedulerOptions {
  int parallel = 8;                 // sequences in the engine at once
  int64_t prefill_chunk = 512;      // prompt tokens per segment
  int64_t max_prefill_tokens = 512; // prompt tokens per step, all sequences together (≥ prefill_chunk)
  int64_t max_context = 4096;       // prompt + max_tokens per request
  int64_t eos_token_id = -1;        // −1: none
  // DSpark speculative decoding (issue 15; needs an engine made with EngineOptions::dspark):
  // off, a fixed draft length K, or auto (k* per sequence from the calibrated confidences and
  // the measured step cost, runtime/draft_length.h). See "Speculative steps" below.
  DsparkMode dspark{DsparkMode::Kind::kOff, 0};
  // Sampled requests (temperature > 0) without a constraint or penalties verify their drafts with
  // the speculative rejection rule (runtime/speculative.h: drafts drawn from the drafter's q,
  // accepted with min(1, p/q), the residual at the first rejection; the target distribution is
  // kept, the tokens differ from plain decoding's for the same seed). False: sample-and-match for
  // every request (the tokens are plain decoding's, fewer drafts accepted).
  bool sampled_rejection = true;
  // --dspark auto: the first drafting steps of each batch bucket that its measurement does not
  // count (runtime/auto_draft.h): they pay first touches (buffers sized for more verify rows).
  // −1: 1 where the backend's steps pay for a switch (StepShape::switch_cost: the device
  // backend), else 0 (the CPU backend).
  int dspark_auto_warmup = -1;
  // --dspark auto: measure each side in runs of steps and count only the settled ones
  // (runtime/auto_draft.h `settle`), so that neither side is charged for switching from the other.
  // −1: where the backend's steps pay for a switch (StepShape::switch_cost); 0 off; 1 on.
  int dspark_auto_settle = -1;
  // --dspark auto: the counted plain steps a measurement takes (runtime/auto_draft.h
  // plain_samples; AutoDraftSwitch::kMaxSamples: as many as drafting's). 4 measured no faster on
  // the H200 (docs/DSPARK.md, session 16), so the default keeps the sides even.
  int64_t dspark_auto_plain_samples = AutoDraftSwitch::kMaxSamples;
  // --dspark auto: how the k* planner shares a step's rows (runtime/draft_length.h DraftPlanRule;
  // the one-cap rule and the first-touch charge measured no faster: off by default).
  DraftPlanRule dspark_auto_plan{};
  // --dspark auto: value each sequence's drafts by its remaining tokens against the batch's most
  // (runtime/draft_length.h weigh_by_remaining): a closed batch finishes together. Not measured
  // yet (session 16): off.
  bool dspark_auto_weigh_laggards = false;
  // The confidence maps to start from (runtime/confidence_calibration.h: the model's measured
  // calibration, `dspark_calibration.json`; empty: the identity). Sets only how many drafts are
  // verified: the tokens emitted are the same either way.
  std::vector<SlotMap> dspark_calibration;
  // --dspark auto/K: the first steps of each verify shape (rows, batch bucket) whose time the
  // step-cost table does not store (runtime/step_cost.h record, unstored_steps_for): −1 by the
  // backend (2 where its steps pay for a switch: the device backend, whose second step of a new
  // shape still pays first touches; 1 on the CPU); ≥ 1 as given.
  int dspark_cost_unstored_steps = -1;
  // Keep a record of every decoding step in DsparkStats::step_trace (diagnostics; grows by one a step).
  bool dspark_step_trace = false;
  // Test hooks: picks the drafter's tokens instead of its argmax (model/dspark.h DraftPicker);
  // rewrites a sequence's drafts after drafting (history: the tokens it holds; anchor: the
  // token its next position takes), e.g. to force a known acceptance pattern.
  DraftPicker draft_pick;
  std::function<void(std::span<const int32_t> history, int32_t anchor, DraftBlock& block)> draft_override;
};

// Per-step counts, for benchmarks and telemetry.
struct StepStats {
  int64_t prefill_tokens = 0, decode_tokens = 0, segments = 0;
  int64_t drafted = 0, accepted = 0;  // DSpark: drafts verified and accepted in this step
};

// DSpark totals since the scheduler was made (for benchmarks and telemetry).
struct DsparkStats {
  int64_t steps = 0, verified = 0, accepted = 0, emitted = 0;  // sequence-steps with drafts, drafts, tokens
  std::vector<int64_t> slot_verified, slot_accepted;             // per draft slot
  double draft_ms = 0;  // wall time in the drafter
  // Calibration of the confidence head: verified drafts whose outcome the step judged, by the
  // head's raw acceptance estimate σ(c) in tenths (bucket b: [b/10, (b+1)/10)) — how many, the
  // sum of their estimates, how many were accepted (given the drafts before them were).
  static constexpr int kCalibrationBuckets = 10;
  std::array<int64_t, kCalibrationBuckets> calibration_drafts{}, calibration_accepted{};
  std::array<double, kCalibrationBuckets> calibration_estimate{};
  // Steps whose drafter ran.
  int64_t drafting_steps = 0;
  // The engine's forward in decode-only steps, by kind: [0] plain (nothing drafted), [1] drafting
  // (the verify rows): the sums and the steps (a verify forward against a plain one is what
  // drafting costs on top of the drafter).
  std::array<double, 2> decode_forward_ms{};
  std::array<int64_t, 2> decode_forward_steps{};
  // Auto's verdicts, one line each: step, batch bucket, won / lost, samples and tokens per ms a side.
  std::vector<std::string> auto_verdicts;
  // Every step that decoded or emitted (a prompt's first token comes from a prefill step: seqs 0),
  // when SchedulerOptions::dspark_step_trace is on (diagnostics:
  // `dsv41 bench --dspark --dspark-trace FILE`), so that a mode's tok/s can be taken apart.
  struct Step {
    int32_t seqs = 0, rows = 0;      // decoding sequences, verify rows (anchors + drafts)
    int32_t emitted = 0;             // tokens the step emitted
    bool drafted = false;            // the drafter ran (its drafts may all have been dropped)
    bool decode_only = false;        // no prefill chunk rode along
    char phase = '-';                // auto's verdict for the step's bucket: M(easure), P(lain), D(rafting); '-' otherwise
    float ms = 0, draft_ms = 0;      // the whole step (drafting included), the drafter alone
    float forward_ms = 0;            // the engine's forward alone (the rest: building the batch, accepting,
                                     // rolling back and emitting on the host)
  };
  std::vector<Step> step_trace;
  // Adds another scheduler's counts (several ranks' totals): counters, per-slot and calibration
  // counts and times summed; verdicts and step traces stay per scheduler (not added).
  void add(const DsparkStats& other);
};

class Scheduler {
 public:
  // The engine must outlive the scheduler; the scheduler owns the sequences it adds.
  static Result<std::unique_ptr<Scheduler>> create(Engine& engine, const SchedulerOptions& options);

  // Queues a request; returns its ticket (in submission order, from 0).
  int64_t submit(GenerationRequest request);
  // A request whose prompt is already in `sequence` (served through the cache tiers, e.g.
  // runtime/serve_turn.h), to be decoded from `last_logits` (the prompt's last position): it
  // takes a slot at once, beyond `parallel` if need be (the caller keeps count), and samples its
  // first token at the next step. The scheduler owns the sequence from here (removed when the
  // request finishes, or at once when the request is refused).
  int64_t submit_prefilled(GenerationRequest request, SequenceId sequence, std::vector<float> last_logits,
                           PrefillDepth effective, const TokenLayers& work);
  // A request whose sequence already holds the first engine.length(sequence) prompt tokens (a hit
  // imported from a cache tier, runtime/serve_turn.h open_turn): the rest of the prompt is
  // prefilled in the batch, chunk by chunk beside the other requests, with the windows' replay
  // first when `windows_present` is false (plan/replay_rule.h). It takes a slot at once, beyond
  // `parallel` if need be (the caller keeps count). The scheduler owns the sequence from here.
  int64_t submit_opened(GenerationRequest request, SequenceId sequence, bool windows_present);
  // Called once per request when its whole prompt is in the engine (after the prefill's last
  // forward, before the first token is sampled), with what the prefill did: e.g. to store the
  // prompt's chunks and snapshot its windows (close_prompt). Not for submit_prefilled requests.
  // Must not call the scheduler or run a forward.
  using PromptDoneCallback = std::function<void(int64_t ticket, SequenceId sequence, const GenerationResult& so_far)>;
  void on_prompt_done(PromptDoneCallback callback) { on_prompt_done_ = std::move(callback); }
  // Called for every generated token as it is sampled (ticket, token id, the raw logits the
  // token was sampled from, valid only during the call); EOS included. The callback must not
  // call cancel() or submit() (queue those for after step()).
  using TokenCallback = std::function<void(int64_t ticket, int32_t token, std::span<const float> logits)>;
  void on_token(TokenCallback callback) { on_token_ = std::move(callback); }
  // Called when a request that ran finishes without error (stop or length; not cancelled),
  // before its sequence leaves the engine: the caller may store the turn (end_turn) and return
  // true to keep the sequence (it then owns it and removes it later; e.g. the engine tier of the
  // cache), or false to let the scheduler remove it. Must not call the scheduler or run a forward.
  using FinishedCallback = std::function<bool(int64_t ticket, SequenceId sequence)>;
  void on_finished(FinishedCallback callback) { on_finished_ = std::move(callback); }
  // Ends a queued or running request now with `reason` (kCancelled or kStop): the ids sampled so
  // far stay in its result, its sequence leaves the engine. False when the ticket is unknown or
  // already finished. Not during step() (see on_token).
  bool cancel(int64_t ticket, FinishReason reason = FinishReason::kCancelled);
  // Ends a queued or running request now with kError and `status` (e.g. a round of the ranks
  // that could not run: server/engine_loop.h); like cancel otherwise.
  bool fail(int64_t ticket, Status status);

  // Start-up profile (runtime/shape_profile.h) of the shapes this scheduler's mode runs, at batch
  // sizes 1, 2, 4, … up to min(parallel, max_batch) (and that bound itself): plain steps and,
  // with DSpark, verify steps of up to K + 1 rows a sequence (auto: block + 1) after the drafter's
  // own drafts. It seeds the k* planner's step costs (StepCost::profile) and, in auto mode, the
  // plain side of each bucket's first measurement (AutoDraftSwitch::set_profiled_plain) and the
  // prediction that spares a clear loss its measurement (set_predicted_speedup, from the model's
  // measured acceptance: SchedulerOptions::dspark_calibration), and warms what the backend keeps
  // per shape. Before anything is submitted (refused after): its scratch sequences take room in
  // the engine. Tokens emitted later do not depend on it.
  Result<ShapeProfile> profile_shapes(int max_batch = 8);
  // Auto's prediction of drafting's speed against plain decoding at `seqs` sequences (NaN
  // unprofiled, or without measured acceptance rates).
  double predicted_draft_speedup(int64_t seqs) const { return auto_.predicted_speedup(seqs); }

  // One engine step; false when there was nothing left to do.
  bool step();
  void run_to_completion() {
    while (step()) {
    }
  }
  bool finished(int64_t ticket) const { return results_.count(ticket) != 0; }
  // The result of a finished request (moved out; a second call returns nullopt).
  std::optional<GenerationResult> take(int64_t ticket);
  const StepStats& last_step() const { return last_; }
  int active() const { return static_cast<int>(active_.size()); }
  const DsparkStats& dspark_stats() const { return dspark_; }
  // The confidence maps as fitted so far (`dsv41 bench --dspark-calibration-out` saves them).
  const ConfidenceCalibrator& confidence_calibration() const { return calibrator_; }
  int64_t queued() const { return static_cast<int64_t>(queue_.size()); }

 private:
  struct Active {
    int64_t ticket = 0;
    GenerationRequest request;
    SequenceId sequence = -1;
    std::optional<Sampler> sampler;
    int64_t prompt_done = 0;     // prompt tokens already in the engine
    PrefillPlan plan;            // the prompt's steps at its depth (replays of a hit first)
    size_t step = 0;             // the plan step the next prefill chunk belongs to (= size: done)
    int64_t cursor = 0;          // the next position of that step to run
    int32_t next_token = -1;     // sampled, not yet fed (−1: none)
    std::vector<float> first_logits;  // submit_prefilled: to sample the first token from
    std::unique_ptr<TokenConstraint> constraint;
    std::vector<float> masked;   // the logits after the constraint's mask
    GenerationResult result;
    std::vector<int32_t> verify;  // DSpark: [next_token, d_1 … d_k] of this step (empty: none)
    std::vector<float> confidence;  // the drafter's confidence logits of those drafts
    std::optional<SpeculativeSampler> spec;  // the rejection rule's sampler (sampled requests)
    std::vector<float> draft_logits;         // [k, V] q of this step's drafts (rejection rule)
    std::vector<int32_t> drafted;            // this step's drafts so far (while drafting)
    // A prompt with images: span rows at positions < p, for p in 0..prompt size (where a
    // chunk's rows start in request.images->embeddings); empty for text.
    std::vector<int64_t> span_before;
  };
  Scheduler(Engine& engine, const SchedulerOptions& options);
  void admit();
  void finish(Active& a, FinishReason reason, Status status = ok_status());
  bool end(int64_t ticket, FinishReason reason, Status status);
  // Validates a request against the engine and makes its sampler (the same checks for every path).
  Status prepare(Active& a);
  // The request's next prefill chunk as a segment (start, tokens, replay, depth, logits).
  Segment next_prefill_chunk(const Active& a) const;
  // Samples after a segment's last logits; finishes the request when it is done.
  void take_token(Active& a, const float* logits);
  // take_token in two halves: the token (constraint mask, sampler; −1 when the constraint
  // leaves nothing) and its emission (callback, EOS / length; false when the request finished).
  int32_t pick_token(Active& a, const float* logits);
  bool emit_token(Active& a, int32_t token, const float* logits);
  // DSpark: drafts for the decoding requests of this step into their `verify` rows.
  bool draft_step();  // whether the drafter ran
  // DSpark: the verification rows' logits of a request → accepted drafts, rollback, emission.
  void take_verified(Active& a, const SegmentResult& r);
  // Rolls back the rows a step fed beyond the `keep` tokens it emits, then emits them.
  void emit_verified(Active& a, const SegmentResult& r, std::span<const int32_t> tokens, std::span<const int> rows);

  Engine& engine_;
  SchedulerOptions options_;
  // The auto switch's warmup drafts and settling as the options give them, −1 by the backend.
  int auto_warmup() const {
    return options_.dspark_auto_warmup >= 0 ? options_.dspark_auto_warmup
                                            : engine_.backend().step_shape().switch_cost ? 1 : 0;
  }
  bool auto_settle() const {
    return options_.dspark_auto_settle >= 0 ? options_.dspark_auto_settle != 0
                                            : engine_.backend().step_shape().switch_cost;
  }
  std::deque<std::pair<int64_t, GenerationRequest>> queue_;
  std::vector<std::unique_ptr<Active>> active_;
  std::unordered_map<int64_t, GenerationResult> results_;
  TokenCallback on_token_;
  FinishedCallback on_finished_;
  PromptDoneCallback on_prompt_done_;
  int64_t next_ticket_ = 0;
  StepStats last_;
  std::vector<Segment> segments_;
  std::vector<Active*> owners_;
  // DSpark state: calibrated confidences, measured step costs, totals, and the step's drafts.
  ConfidenceCalibrator calibrator_{16, CalibrationOptions{.measured = options_.dspark_calibration}};
  StepCost step_cost_;
  DsparkStats dspark_;
  // Auto mode's measured choice (runtime/auto_draft.h); the window's steps refill the rings.
  AutoDraftSwitch auto_{engine_.config().sliding_window, auto_warmup(), auto_settle(), options_.dspark_auto_plain_samples};
  bool drafted_this_step_ = false;
  double draft_ms_this_step_ = 0;  // the drafter's wall time this step (not a verify cost)
  double forward_ms_this_step_ = 0;  // the engine's forward this step (the step trace)
  int64_t steps_ = 0;               // steps with active requests (diagnostics)
  int64_t emitted_this_step_ = 0;
  int64_t verified_this_step_ = 0;  // drafts the planner kept for verification
  bool want_draft(bool prefilling, int64_t decoding);
  void measure_step(double ms, bool decode_only);
  void trace_step(double ms, bool decode_only, int64_t seqs, int64_t rows);
  std::vector<Engine::DraftSpec> draft_specs_;
  std::vector<Active*> drafting_;
  std::vector<DraftBlock> drafts_;
};

}  // namespace dsv41
