// The DeepSeek-V4.1 text backbone's weights as one object: config, layer plan, RoPE tables,
// float32 (or bf16-exact, held as bf16) weights of every layer, Engram hash constants. The forward
// pass that uses them is the engine's layer walk (engine/engine.h) with the CPU backend
// (backends/cpu/cpu_backend.h); Session (runtime/session.h) runs one sequence. Spec: model.md §3.1–§3.2 (embedding, single-pass block order),
// §3.3 (mHC), §3.7 (MoE), §3.8 (Engram), §3.9 (final collapse, norm, head), §4 (packed caches).
//
// Per block ℓ (streams X [T, hc, d], carried mix p [T, hc]):
//   X ← Engram_ℓ(X)                          (Engram layers)
//   (pre_A, post_A, C_A) = H_attn(X);  a = Attn(RMSNorm_attn(Σ p_j X_j))
//   X' = post_A·a + C_Aᵀ X
//   (pre_B, post_B, C_B) = H_ffn(X');  f = MoE(RMSNorm_ffn(Σ pre_A,j X'_j))
//   X'' = post_B·f + C_Bᵀ X';  p ← pre_B
// then y = Σ p_j X_j, logits = RMSNorm_final(y) · W_headᵀ.
// Numeric policy: every activation is fp32 (weights of any stored dtype are widened exactly to
// fp32, at load or, for the Engram tables, row by row when a row is looked up; the big matrices
// whose values are all bf16-exact are held as bf16 bits and widened exactly inside the GEMM,
// same bits as the fp32 copy: weight_matrix.h, ModelLoadOptions::f32_weights); the only
// roundings to a narrower format are the cache fake-quantisers inside attention (see
// attention.h). The blocks' fast paths (kernels/cpu/cpu_exec.h) sum in other orders than the
// scalar references, so the two agree to float rounding, not bit for bit (each block's header
// says which parts are bit-identical); the fast path's results do not depend on the thread count
// or on how a prompt is split into chunks.
// The model is immutable after load and may be shared by many engines and sequences.
// Owns: a thread pool and the CpuExec (ModelLoadOptions) that CPU backends use by default, so
// models with different options live side by side in one process.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "cache/sequence_cache.h"
#include "format/config.h"
#include "kernels/cpu/cpu_exec.h"
#include "model/attention.h"
#include "model/dspark_weights.h"
#include "model/engram.h"
#include "model/engram_hash.h"
#include "plan/layer_plan.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/rope.h"
#include "model/weight_matrix.h"
#include "model/weights.h"

namespace dsv41 {

class Tokenizer;

// bf16 when the checkpoint's values are all bf16-exact (see ModelLoadOptions::f32_weights).
struct ExpertStore {
  WeightMatrix w1, w3, w2;  // [inter, d], [inter, d], [d, inter]
  ExpertWeights view() const { return {w1.ref(), w3.ref(), w2.ref()}; }
};

// Float32 tensors of one backbone layer, release names `layers.i.*`.
struct LayerWeights {
  AttentionWeights attn;
  std::vector<float> attn_norm, ffn_norm;                 // [d]
  std::vector<float> hc_attn_fn, hc_attn_base, hc_attn_scale;  // [(2+hc)·hc, hc·d], [(2+hc)·hc], [3]
  std::vector<float> hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  std::vector<float> gate, gate_bias, gate_bias_vl;  // ffn.gate.weight [E, d], .bias [E], .bias_vl [E]
  std::vector<ExpertStore> experts;                  // ffn.experts.j.*
  ExpertStore shared;                                // ffn.shared_experts.*
  // Engram layers only. The table is either widened whole into engram_table (random models,
  // ModelLoadOptions::widen_engram_tables) or read row by row from the mapped checkpoint tensor
  // engram_stored (+ scale) at each lookup.
  std::vector<float> engram_table;  // engram.embed.weight (dequantised) [rows, head_dim], or empty
  std::optional<TensorView> engram_stored;           // the stored table when engram_table is empty
  const TensorView* engram_stored_scale = nullptr;  // its scale companion (owned by the registry)
  int64_t engram_rows = 0;
  std::vector<float> engram_wkv;                         // [(hc+1)·d, cols·head_dim] (empty when stored)
  QuantWeights engram_wkv_quant;                         // the stored FP8 view, or codes null
  std::vector<float> engram_q_weight, engram_k_weight;  // [hc, d]

  MhcWeights mhc_attn() const { return {hc_attn_fn.data(), hc_attn_base.data(), hc_attn_scale.data()}; }
  MhcWeights mhc_ffn() const { return {hc_ffn_fn.data(), hc_ffn_base.data(), hc_ffn_scale.data()}; }
  MoeWeights moe() const;
  EngramWeights engram() const;
};

// Named intermediates of one forward call, for dumps and golden comparisons.
struct ForwardTrace {
  std::vector<std::vector<float>> streams;         // [layers][T, hc, d] leaving each layer
  std::vector<std::vector<float>> pre;             // [layers][T, hc] FFN-site pre handed on
  std::vector<std::vector<int32_t>> router_experts;  // [layers][T, k]
  std::vector<std::vector<float>> router_weights;    // [layers][T, k]
  std::vector<std::vector<int32_t>> topk;            // [layers][T, index_topk] (empty if none)
  // Index sources only (Full / Reindex layers whose indexer had G > 0 entries), else empty:
  std::vector<std::vector<float>> index_scores;      // [layers][T, G] after masking (−inf = not eligible)
  std::vector<std::vector<uint8_t>> candidates;      // [layers][T, G] pool of the candidate source (1 = in)
  std::vector<int64_t> engram_rows;                  // [T, engram layers, columns]
  std::vector<float> final_hidden;                   // [T, d]
};

// How the FP8 / FP4 matrices of a checkpoint are held (issue 13). kStored: the checkpoint's own
// bytes, mapped, dequantised inside each product (gemm_quant.h; the same bits as kWidened);
// kWidened: widened at load to float32 / bf16 as before (for A/B runs and tests).
enum class WeightHolding : uint8_t { kStored, kWidened };

struct ModelLoadOptions {
  // Widen each Engram table to float32 at load instead of gathering rows from the mapped
  // checkpoint per lookup (same values; only sensible for small checkpoints, e.g. to test that).
  bool widen_engram_tables = false;
  // Hold every weight matrix as float32. By default the routed and shared experts, the head and
  // the attention projections wq_a / wq_b / wkv / wo_a / wo_b are held as bf16 when the checkpoint
  // stores them narrower than F32 (BF16, F16, FP8 or FP4 with power-of-two scales) and every
  // dequantised value round-trips through bf16 bit for bit; the logits are the same bits either
  // way (weight_matrix.h), only the bytes read per token halve (the app sets it from
  // DSV41_F32_WEIGHTS=1, for A/B runs). Random models are float32 anyway.
  bool f32_weights = false;
  // FP8 / FP4 matrices (attention projections, indexer wq_b, Engram wkv, shared and routed
  // experts, and the head when stored so) as stored or widened; anything else is widened either way. Random models
  // (create_random) are float32 whatever this says. App: --weights stored|widened.
  WeightHolding weights = WeightHolding::kStored;
  // Threads of the model's own pool, the caller included: 0 = hardware concurrency, 1 = no
  // worker threads (everything on the calling thread).
  int threads = 0;
  // Borrowed step timing of CPU forwards (base/step_profile.h; app: `bench --profile`), null =
  // none; must outlive the model. Diagnostics only: nothing computed changes.
  StepProfile* profile = nullptr;
  // The pool's threads spin longer between jobs (300 µs / 1 ms, not 100 µs: base/thread_pool.h):
  // can be faster on a machine whose cores are ours, slower on an oversubscribed one (app:
  // bench --pool-spin).
  bool pool_spin = false;
  // Run the blocks' scalar references (mHC, Engram, compressor) instead of their fast paths:
  // a diagnostic that checks the fast path (app: --scalar, DSV41_FORCE_SCALAR=1).
  bool force_scalar = false;
  // The highest instruction set the matrix products may use (kernels/cpu/cpu_exec.h; capped by the
  // CPU). Every ISA gives the same bits, so this only picks the speed: for A/B runs and tests
  // (app: --isa, DSV41_ISA=avx2|avx512|auto).
  CpuIsa isa = CpuIsa::kAvx512;
  // Expert parallelism (docs/PARALLEL.md): load only the routed experts e with
  // e mod expert_ranks = expert_rank, the others left empty: such a model runs only as rank
  // expert_rank of a RankGroup of expert_ranks (runtime/rank_group.h checks it). 1 = every expert.
  // The drafter's experts are always loaded (it is replicated).
  int expert_rank = 0, expert_ranks = 1;
};

class Model {
 public:
  // Loads DIR: config.json, the checkpoint (either naming scheme), tokenizer.json (for the
  // Engram token map; only needed when the config has Engram layers). Errors name the file,
  // field or tensor.
  // The checkpoint stays mapped for the model's lifetime (the Engram rows are read from it, so a
  // damaged Engram scale shows up as a forward error when its row is first looked up, not here).
  static Result<std::unique_ptr<Model>> load(const std::string& dir, const ModelLoadOptions& options = {});
  // Deterministic random weights for any valid config (tests of shapes unlike the fixtures);
  // defined in testing/random_model.cpp (one generator: testing/random_stream.h).
  // engram_num_embeddings is derived from the bucket primes; the Engram token map is
  // id mod engram_compressed_vocab_size (needs vocab_size ≥ engram_compressed_vocab_size).
  static Result<std::unique_ptr<Model>> create_random(ModelConfig config, uint64_t seed,
                                                      const ModelLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const LayerPlan& plan() const { return plan_; }
  const Rope& rope() const { return *rope_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // The weights and shapes, for backends (backends/cpu) that compute with them.
  const MhcShape& mhc_shape() const { return mhc_; }
  const MoeShape& moe_shape() const { return moe_; }
  const EngramShape& engram_shape() const { return engram_; }
  const EngramHashTables* engram_tables() const { return engram_tables_ ? &*engram_tables_ : nullptr; }
  const std::vector<float>& embedding() const { return embed_; }    // [V, d]
  const std::vector<float>& final_norm() const { return final_norm_; }  // [d]
  const WeightMatrix& head() const { return head_; }                // [V, d]
  const LayerWeights& layer(int i) const { return layers_[i]; }
  // The DSpark drafter (model/dspark_weights.h), null when the config or the checkpoint has none.
  const DrafterWeights* drafter() const { return drafter_.get(); }
  // Why there is no drafter although the config describes one (the checkpoint has no `mtp.*`
  // tensors), for the one log line the app prints; empty otherwise.
  const std::string& drafter_note() const { return drafter_note_; }
  // The default pool and kernel path of CPU backends over this model.
  const CpuExec& exec() const { return exec_; }
  // Bytes of the weight matrices held as bf16 / as float32 among those that may be narrowed: the
  // head, the routed and shared experts, attention wq_a / wq_b / wkv / wo_a / wo_b.
  struct MatrixBytes {
    int64_t bf16 = 0, f32 = 0, stored = 0;  // stored: FP8 / FP4 codes + scales read in place
  };
  MatrixBytes matrix_bytes() const;
  // Bytes of the weights as held in memory, split by what a decode step reads: every routed
  // expert of one layer (each the same size) apart, the embedding (one row per token) and the
  // Engram tables (rows per lookup) apart, everything else read once per step whatever the batch.
  struct HeldBytes {
    int64_t dense = 0;        // attention, norms, mHC, router, shared experts, Engram projections, head
    int64_t per_expert = 0;   // one routed expert (w1 + w3 + w2) of one layer
    int64_t routed = 0;       // every routed expert of every layer
    int64_t embedding = 0, embedding_row = 0;
  };
  HeldBytes held_bytes() const;
  // The routed experts this model holds (ModelLoadOptions::expert_rank / expert_ranks).
  int expert_rank() const { return expert_rank_; }
  int expert_ranks() const { return expert_ranks_; }

 private:
  Model() = default;
  Status load_layers(const std::string& dir, const ModelLoadOptions& options);
  Status init_common();
  void init_exec(const ModelLoadOptions& options);

  ModelConfig config_;
  LayerPlan plan_;
  std::optional<Rope> rope_;
  MhcShape mhc_;
  MoeShape moe_;
  EngramShape engram_;
  std::optional<EngramHashTables> engram_tables_;
  std::vector<float> embed_, final_norm_;  // [V, d], [d]
  WeightMatrix head_;                      // [V, d]
  std::vector<LayerWeights> layers_;
  std::unique_ptr<DrafterWeights> drafter_;
  int expert_rank_ = 0, expert_ranks_ = 1;
  std::string drafter_note_;
  std::unique_ptr<WeightRegistry> registry_;  // the mapped checkpoint (null for random models)
  std::unique_ptr<ThreadPool> pool_;          // null when options.threads == 1
  CpuExec exec_;                              // borrows pool_
};

}  // namespace dsv41
