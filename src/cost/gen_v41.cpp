// Cost model of DeepSeek-V4.1 from the project's parsed config and layer plan: shared caches
// (only the Full / kv-source layers publish global KV: a main entry and an index key per
// compressed position; Reindex and Reuse layers read them), a per-layer sliding window that is
// not global KV, and CED prefill (encoder layers only, plus a w-token decoder replay).
// Spec: system.md §1 (the four costs), model.md §3.4 (layer roles), §3.5 (CED), §4 (records).
#include <fmt/format.h>

#include "cost/generations.h"
#include "cost/record_formats.h"

namespace dsv41::cost_internal {

Result<CostModel> build_v41_cost(const ModelConfig& c, const LayerPlan& plan) {
  if (int(plan.layers.size()) != c.num_hidden_layers)
    return internal_error(fmt::format("{}: layer plan has {} layers, config {}", c.source, plan.layers.size(),
                                      c.num_hidden_layers));
  const bool quantised = c.quantization.has_value() && c.quantization->quant_method == "fp8";
  const auto [dense, experts] =
      linear_operands(quantised, c.quantization.has_value() && c.quantization->expert_dtype == "fp4");

  CostModel m;
  m.generation = Generation::kDeepSeekV41;
  m.model_type = c.model_type;
  m.source = c.source;
  const RecordFormat& main_fmt = record_format(RecordKind::kV41MainFp4);
  const RecordFormat& idx_fmt = record_format(RecordKind::kV41IndexKeyFp4);
  const RecordFormat& win_fmt = record_format(RecordKind::kV41WindowFp8);
  const double main_bytes = record_bytes(main_fmt, c.head_dim, c.qk_rope_head_dim);  // 288
  const double idx_bytes = record_bytes(idx_fmt, c.index_head_dim, 0);                // 68
  const double win_bytes = record_bytes(win_fmt, c.head_dim, c.qk_rope_head_dim);    // 528
  m.records.push_back({"main entry (kv sources)", describe_record(main_fmt, c.head_dim, c.qk_rope_head_dim),
                       main_bytes, main_fmt.source});
  m.records.push_back({"index key (kv sources)", describe_record(idx_fmt, c.index_head_dim, 0), idx_bytes,
                       idx_fmt.source});
  m.records.push_back({"window row (every layer)", describe_record(win_fmt, c.head_dim, c.qk_rope_head_dim),
                       win_bytes, win_fmt.source});

  const double d = c.hidden_size, hc = c.hc_mult;
  const int64_t candidate_pool = int64_t(c.candidate_topk_blocks) * c.candidate_block_size;
  for (const LayerInfo& info : plan.layers) {
    LayerCost l;
    l.index = info.index;
    l.kind = layer_role_name(info.role);
    l.window_rows = c.sliding_window;
    l.window_row_bytes = win_bytes;
    l.work.heads = c.num_attention_heads;
    l.work.flops_per_head_entry = 4.0 * c.head_dim;  // K = V: score 2·hd + value sum 2·hd, BF16
    l.work.window = c.sliding_window;
    // Attention projections (model.md §2): wq_a [d → q_lora], wq_b [q_lora → H·hd], wkv [d → hd],
    // wo_b [g·o_lora → d] FP8; wo_a block-diagonal [H·hd/g → o_lora] per group in BF16 (§4).
    l.weight_flops.add_matvec(
        "attention projections", dense,
        d * c.q_lora_rank + double(c.q_lora_rank) * c.num_attention_heads * c.head_dim + d * c.head_dim +
            double(c.o_groups) * c.o_lora_rank * d);
    l.weight_flops.add_matvec("attention wo_a (grouped)", kBf16Op,
                              double(c.num_attention_heads) * c.head_dim * c.o_lora_rank);
    // mHC: hc_attn_fn, hc_ffn_fn [(2+hc)·hc, hc·d] FP32.
    l.weight_flops.add_matvec("mHC", kBf16Op, 2.0 * (2 + hc) * hc * hc * d);
    if (info.role != LayerRole::kSwaOnly) {
      l.work.ratio = info.ratio;
      l.work.topk = c.index_topk;  // reads the latest top-k (own or borrowed) + the window
      l.reads = info.role == LayerRole::kFull ? "own" : fmt::format("kv {}, idx {}", info.kv_source, info.index_source);
    }
    if (info.role == LayerRole::kFull) {
      // Publishes one main entry + one index key per `ratio` tokens: the only global KV.
      l.ratio = info.ratio;
      l.main_record_bytes = main_bytes;
      l.index_record_bytes = idx_bytes;
      l.global_bytes_per_token = (main_bytes + idx_bytes) / info.ratio;
      // Compressor: wkv [d → hd] every token (+ wgate for ratio > 1, FP32 pooling; ratio 1: BF16).
      l.weight_flops.add_matvec("compressor", kBf16Op, d * c.head_dim * (info.ratio > 1 ? 2 : 1));
      // Index-key projection wk [hd → idx_dim] runs once per compressed entry.
      l.weight_flops.add_matvec("compressor", kBf16Op, double(c.index_head_dim) * c.head_dim / info.ratio);
    }
    if (info.role == LayerRole::kFull || info.role == LayerRole::kReindex) {
      // Own indexer query: wq_b [q_lora → idx_heads·idx_dim] FP8, weights_proj [d → idx_heads] BF16.
      l.weight_flops.add_matvec("indexer query", dense, double(c.q_lora_rank) * c.index_n_heads * c.index_head_dim);
      l.weight_flops.add_matvec("indexer weights", kBf16Op, d * c.index_n_heads);
      // Scoring, MXFP4 q × MXFP4 keys (FP4 × FP4, the FP4 rate): Full scans every visible entry;
      // Reindex after the candidate source scans at most the candidate pool
      // (candidate_topk_blocks × candidate_block_size).
      l.work.index_heads = c.index_n_heads;
      l.work.flops_per_index_head_entry = 2.0 * c.index_head_dim + 2.0;
      l.work.index_scan_cap = info.restricted_to_candidates ? candidate_pool : -1;
      l.work.index_operands = Operands{Precision::kFp4, Precision::kFp4};
    }
    if (info.has_engram) {
      l.reads = l.reads.empty() ? "engram" : l.reads + ", engram";
      // Engram: wkv [(hc+1)·d ← (max_ngram−1)·n_heads·head_dim] FP8 (model.md §3.8); table lookups
      // and the per-stream gates are not matmuls and are left out.
      l.weight_flops.add_matvec(
          "Engram", dense, (hc + 1) * d * double(c.engram_max_ngram_size - 1) * c.engram_n_heads * c.engram_head_dim);
    }
    FfnShape f{true, c.hidden_size, 0, c.moe_intermediate_size, c.n_routed_experts, c.num_experts_per_tok,
               c.n_shared_experts, true};
    add_ffn_flops(l.weight_flops, f, dense, experts);
    m.layers.push_back(l);
  }
  m.head_flops.add_matvec("output head", kBf16Op, d * double(c.vocab_size));  // head [d → vocab], FP32 logits
  m.max_context = c.max_position_embeddings;
  m.geometry = fmt::format(
      "{} layers ({} encoder + {} decoder) · hidden {} · {} heads × {} · window {} · experts {}/{} + {} shared · "
      "indexer {}×{}, top-{} · candidate pool {}",
      c.num_hidden_layers, plan.decoder_start > 0 ? plan.decoder_start : c.num_hidden_layers,
      plan.decoder_start > 0 ? c.num_hidden_layers - plan.decoder_start : 0, c.hidden_size, c.num_attention_heads,
      c.head_dim, c.sliding_window, c.num_experts_per_tok, c.n_routed_experts, c.n_shared_experts, c.index_n_heads,
      c.index_head_dim, c.index_topk, candidate_pool);
  m.weight_note = "attention projections, kv-source compressors, indexers, Engram projections, mHC, MoE router + "
                  "top-k routed (FP4 weights × FP8 activations) + shared experts, output head; DSpark drafter and "
                  "vision not counted";
  m.persistent_definition =
      "global KV only: SWA states are rebuilt by bounded replay (system.md §3), the partial compressor group "
      "lives in the DRAM pool (§2), so nothing per-sequence is persisted";
  if (plan.decoder_start > 0)
    m.assumptions.push_back(fmt::format(
        "prefill token-layers come from the engine's replay rule (plan/replay_rule.h), which counts layer {}'s "
        "compressor-only rows (its attention norm, wkv and index-key wk on the new tokens outside the decoder tail) "
        "as encoder token-layers; the paper's N·L/2 + w·L/2 leaves them out (system.md §1, §3 step 3)",
        plan.decoder_start));
  m.ced = plan.decoder_start > 0;
  m.decoder_start = plan.decoder_start;
  m.window = c.sliding_window;
  m.plan = plan;
  return m;
}

}  // namespace dsv41::cost_internal
