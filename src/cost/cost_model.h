// The four costs of system.md §1, computed from a config.json alone (no weights), for every
// DeepSeek generation dsv41 compares against:
//   DeepSeek LLM (dense GQA/MHA), DeepSeek-V2/V3 (MLA), V3.2 (MLA + FP8 lightning indexer),
//   V4 (per-layer CSA/HCA caches) and V4.1 (shared caches, CED).
// Spec: ../shared/spec/system.md §1; model.md §1 (configs), §3.4/§3.5 (layer roles, CED), §4.
//
// A generation-specific builder (cost/gen_*.cpp) turns a config into a CostModel: one LayerCost
// per backbone layer (its global-KV bytes, its sliding-window state, its per-token weight FLOPs by
// operation and operand pair, and the parameters of its context-dependent attention/indexer work). Everything
// after that (totals, prefill, decode FLOPs at a context, the table and the JSON) is generic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/layer_plan.h"
#include "plan/replay_rule.h"

namespace dsv41 {

enum class Generation { kDeepSeekLlm, kDeepSeekMla, kDeepSeekV32, kDeepSeekV4, kDeepSeekV41 };
const char* generation_name(Generation g);

// Arithmetic split by the tensor-core rate it runs at (FLOPs, 1 multiply-add = 2 FLOPs).
// FP32 arithmetic (mHC, routers, V4 compressors) is counted with BF16: the formula has no FP32
// term and those matmuls are small.
struct PrecisionFlops {
  double bf16 = 0, fp8 = 0, fp4 = 0;
  // system.md §1: F = F_BF16 + 0.5·F_FP8 + 0.25·F_FP4.
  double weighted() const { return bf16 + 0.5 * fp8 + 0.25 * fp4; }
  double total() const { return bf16 + fp8 + fp4; }
  PrecisionFlops& operator+=(const PrecisionFlops& o) {
    bf16 += o.bf16, fp8 += o.fp8, fp4 += o.fp4;
    return *this;
  }
};
enum class Precision { kBf16, kFp8, kFp4 };
const char* precision_name(Precision p);  // "BF16", "FP8", "FP4"
double precision_weight(Precision p);     // the rate's weight in F: 1, 0.5, 0.25

// The two operands of a counted multiply: `a` the weights (or the first operand: the query of a
// score), `b` the activations (or the cached keys/values). A tensor core multiplies a mixed pair
// at the rate of its wider operand: FP4 expert weights against FP8 activations run on the FP8
// MMA (the FP4 side is widened on the way in), so only FP4 × FP4 work — MXFP4 index scoring —
// earns the FP4 weight 0.25, and anything with a BF16 side counts 1.
struct Operands {
  Precision a = Precision::kBf16, b = Precision::kBf16;
  Precision rate() const;
  std::string name() const;  // "FP4 × FP8"
  bool operator==(const Operands&) const = default;
};

// FLOPs of one named operation at one operand pair (raw, per decoded token), e.g.
// {"routed experts", FP4 × FP8, 2·params}; the rate follows from the operands.
struct OpFlops {
  std::string op;
  Operands operands;
  double flops = 0;
  double weighted() const { return flops * precision_weight(operands.rate()); }
};

// Per-token arithmetic kept twice: by rate (what F needs) and by operation (what the report
// explains). Entries with the same operation and operands are merged; order is first use.
struct OpLedger {
  PrecisionFlops by_rate;
  std::vector<OpFlops> ops;
  void add(const std::string& op, Operands operands, double flops);
  // One matrix-vector product with `params` weights: 2·params FLOPs.
  void add_matvec(const std::string& op, Operands operands, double params) { add(op, operands, 2.0 * params); }
  OpLedger& operator+=(const OpLedger& o);
  double weighted() const { return by_rate.weighted(); }
  double total() const { return by_rate.total(); }
};

// Context-dependent work of one layer for the decoded token at context C (C tokens visible,
// itself included). Entries of a cache with ratio r: floor(C / r).
struct ContextWork {
  // Core attention: `heads` query heads, each doing `flops_per_head_entry` per key it reads
  // (q·k and the weighted value sum), BF16 × BF16 (the published kernels dequantise FP8/FP4
  // caches to BF16 before the MMA).
  int heads = 0;
  double flops_per_head_entry = 0;
  int64_t window = 0;        // window rows read: min(C, window); 0 = no window
  int ratio = 0;             // compressed/per-token cache read by this layer: 0 = none
  int64_t topk = 0;          // > 0: reads min(topk, entries); 0: reads all entries (dense)
  // Indexer: scores `index_scan` entries with `index_heads` heads of `flops_per_index_head_entry`.
  int index_heads = 0;
  double flops_per_index_head_entry = 0;
  int64_t index_scan_cap = 0;  // 0: no indexer; -1: scans every visible entry; n: at most n
  Operands index_operands;     // (index query, cached index keys)
};

struct LayerCost {
  int index = 0;
  std::string kind;                 // "GQA", "MLA", "MLA+DSA", "SWA", "CSA", "HCA", "Full", "Reindex", "Reuse"
  int ratio = 0;                    // cache ratio this layer owns (0: owns no per-token cache)
  double main_record_bytes = 0;     // bytes of one owned main-cache entry (0 if none)
  double index_record_bytes = 0;    // bytes of one owned index-key entry (0 if none)
  double global_bytes_per_token = 0;  // (main + index) / ratio, owned caches only
  int64_t window_rows = 0;          // sliding-window rows kept per sequence (0: none)
  double window_row_bytes = 0;
  double carry_state_bytes = 0;     // per-sequence compressor carry state (FP32), V4 persistence
  OpLedger weight_flops;            // per decoded token, independent of context
  ContextWork work;
  std::string reads;                // "kv 2, idx 2" etc. for the table; empty if trivial
};

struct RecordUse {
  std::string role;      // "main entry", "index key", "window row", ...
  std::string encoding;  // describe_record() text
  double bytes = 0;
  std::string source;
};

struct CostModel {
  Generation generation = Generation::kDeepSeekLlm;
  std::string model_type, source;
  std::vector<LayerCost> layers;
  std::vector<RecordUse> records;
  OpLedger head_flops;                // output head (and V4 hc_head): per token, context-free
  std::string geometry;               // one line: layers, width, heads, experts, window
  int64_t max_context = 0;            // max_position_embeddings (0: not given)
  std::string weight_note;            // what the weight FLOPs count
  // Persistent cache (kept between turns): global KV plus, for V4, amortised SWA checkpoints.
  std::string persistent_definition;
  double persistent_extra_bytes_per_token = 0;
  // CED (V4.1): encoder layers [0, decoder_start), decoder replays the last `window` prompt tokens.
  bool ced = false;
  int decoder_start = 0;
  int64_t window = 0;
  // V4.1: the layer plan the engine runs, so prefill_cost asks the engine's replay rule
  // (plan/replay_rule.h) rather than a formula of its own. Empty for other generations.
  LayerPlan plan;
  std::vector<std::string> assumptions;  // printed under the table and in the JSON

  double global_kv_bytes_per_token() const;
  double global_entries_per_token() const;  // Σ over cache-owning layers of 1/ratio
  double persistent_bytes_per_token() const { return global_kv_bytes_per_token() + persistent_extra_bytes_per_token; }
  double window_bytes_per_sequence() const;
};

// Token-layers of a cold prefill of N new tokens at the three depths of the replay rule, counted
// by the engine's own plan_prefill (plan/replay_rule.h), so `dsv41 cost` and the engine's
// telemetry cannot drift apart. A generation without CED has no decoder to bound: every depth
// is full depth (count_token_layers without ranges, the same counter).
struct PrefillCost {
  int64_t new_tokens = 0;
  double full_depth = 0;                    // N · L
  TokenLayers bounded, exact;               // plan_prefill(…, kBounded / kExact).work
  PrefillDepth bounded_effective = PrefillDepth::kFull;  // kFull when N fits in the decoder tail
  PrefillDepth exact_effective = PrefillDepth::kFull;    // kFull when N fits in the pyramid
  double paper_ced = 0;                     // system.md §1: N·L_enc + min(N, w)·L_dec (0: not CED)
  double token_layers = 0;                  // bounded total: what the generation runs by default
  double encoder_part = 0, decoder_part = 0;  // bounded.encoder / bounded.decoder
};
// Sum of a TokenLayers' work (encoder + decoder + replay); full_depth is a reference, not work.
double token_layers_total(const TokenLayers& t);
// Fails only when the replay rule refuses the request (new_tokens < 1).
Result<PrefillCost> prefill_cost(const CostModel& model, int64_t new_tokens);

struct DecodeFlops {
  int64_t context = 0;
  PrecisionFlops weights, attention, indexer, total;
  // Every counted operation at this context (weights summed over layers, the head, attention
  // core, index scoring) with its operand pair; ops.by_rate equals `total`.
  OpLedger ops;
  double weighted() const { return total.weighted(); }
};
DecodeFlops decode_flops(const CostModel& model, int64_t context);

struct CostOptions {
  // V4 persistence: one SWA checkpoint (every layer's window rows + compressor carry state) is
  // stored every this many tokens (the V4 paper's periodic-checkpoint strategy; a deployment
  // choice, not in the config).
  int64_t swa_checkpoint_interval = 1024;
};

// Detects the generation from model_type / architectures and builds the model. Errors name the
// file and the missing or invalid key, or the unknown model_type.
Result<CostModel> build_cost_model(const std::string& json_text, const std::string& source,
                                   const CostOptions& options = {});
Result<CostModel> load_cost_model(const std::string& path, const CostOptions& options = {});

}  // namespace dsv41
