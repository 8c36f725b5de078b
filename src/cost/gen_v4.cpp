// Cost model of DeepSeek-V4 (V4-Flash, V4-Pro): every layer keeps a 128-row sliding window;
// every compressed layer owns its cache: CSA layers (ratio 4, overlapping compressor, their own
// lightning indexer with FP4 keys, sparse top-k attention) and HCA layers (ratio 128, dense
// attention over all compressed entries, no indexer).
// Spec: system.md §1 (per-layer CSA/HCA caches), model.md §1.4 (V4-Flash config). Layer roles as in
// the V4 release inference/model.py (Attention/Compressor/Indexer; copy: V4-OFF).
#include <numeric>

#include <fmt/format.h>

#include "cost/config_keys.h"
#include "cost/generations.h"
#include "cost/record_formats.h"

namespace dsv41::cost_internal {
namespace {
// V4 inference/model.py: `overlap = compress_ratio == 4` in Compressor and `if compress_ratio == 4:
// indexer = Indexer(...)` in Attention. The CSA/HCA split is this rule of the release, not a size.
constexpr int64_t kV4CsaRatio = 4;
}  // namespace

Result<CostModel> build_v4_cost(const nlohmann::json& json, const std::string& source, const CostOptions& options) {
  ConfigKeys k(json, source);
  const int64_t d = k.positive("hidden_size", "the projection sizes");
  const int64_t layers = k.layer_count();
  const int64_t heads = k.positive("num_attention_heads", "the attention heads");
  const int64_t head_dim = k.positive("head_dim", "the KV record");
  const int64_t rope = k.positive("qk_rope_head_dim", "the KV record (BF16 RoPE part)");
  const int64_t q_lora = k.positive("q_lora_rank", "the query projection");
  const int64_t o_lora = k.positive("o_lora_rank", "the grouped output projection");
  const int64_t o_groups = k.positive("o_groups", "the grouped output projection");
  const int64_t window = k.positive("sliding_window", "the window rows");
  const std::vector<int64_t> ratios = k.int_list("compress_ratios", "the per-layer CSA/HCA caches");
  const int64_t idx_heads = k.positive("index_n_heads", "the CSA indexer");
  const int64_t idx_dim = k.positive("index_head_dim", "the indexer key record");
  const int64_t idx_topk = k.positive("index_topk", "the CSA sparse attention width");
  const int64_t hc = k.positive("hc_mult", "the mHC mixing");
  const int64_t vocab = k.positive("vocab_size", "the output head");
  FfnShape moe = read_routed_experts(k, d, 1);
  const int64_t hash_layers = k.non_negative_or("num_hash_layers", 0);
  if (!k.status().ok()) return k.status();
  // compress_ratios also lists the MTP/DSpark layers after the backbone; only the first
  // num_hidden_layers describe the backbone.
  if (int64_t(ratios.size()) < layers)
    return invalid_argument(fmt::format("{}: compress_ratios has {} entries but num_hidden_layers is {}", source,
                                        ratios.size(), layers));
  if (rope >= head_dim)
    return invalid_argument(fmt::format("{}: qk_rope_head_dim {} must be below head_dim {}", source, rope, head_dim));
  int64_t lcm = 1;
  for (int64_t i = 0; i < layers; ++i) {
    if (ratios[i] == 0) continue;
    const int64_t step = lcm / std::gcd(lcm, ratios[i]);
    if (step > (int64_t(1) << 40) / ratios[i])  // keeps the product exact; no real schedule comes close
      return invalid_argument(fmt::format("{}: compress_ratios have no common multiple below 2^40", source));
    lcm = step * ratios[i];
  }
  if (options.swa_checkpoint_interval <= 0 || options.swa_checkpoint_interval % lcm != 0)
    return invalid_argument(fmt::format(
        "SWA checkpoint interval {} must be a positive multiple of every compress ratio (lcm {}) so that no "
        "partial compressor group has to be stored",
        options.swa_checkpoint_interval, lcm));

  const WeightPrecision wp = read_weight_precision(json);
  const auto [dense, experts] = linear_operands(wp.fp8_linear, wp.fp4_experts);

  CostModel m;
  m.generation = Generation::kDeepSeekV4;
  m.source = source;
  const RecordFormat& kv_fmt = record_format(RecordKind::kV4KvFp8);
  const RecordFormat& idx_fmt = record_format(RecordKind::kV4IndexKeyFp4);
  const double kv_bytes = record_bytes(kv_fmt, int(head_dim), int(rope));  // 584
  const double idx_bytes = record_bytes(idx_fmt, int(idx_dim), 0);         // 68
  m.records.push_back({"compressed entry (CSA/HCA)", describe_record(kv_fmt, int(head_dim), int(rope)), kv_bytes,
                       kv_fmt.source});
  m.records.push_back({"CSA indexer key", describe_record(idx_fmt, int(idx_dim), 0), idx_bytes, idx_fmt.source});
  m.records.push_back({"window row (every layer)", describe_record(kv_fmt, int(head_dim), int(rope)), kv_bytes,
                       kv_fmt.source});

  double checkpoint_bytes = 0;
  for (int64_t i = 0; i < layers; ++i) {
    const int64_t r = ratios[i];
    const bool csa = r == kV4CsaRatio;
    LayerCost l;
    l.index = int(i);
    l.kind = r == 0 ? "SWA" : csa ? "CSA" : "HCA";
    l.ratio = int(r);
    l.window_rows = window;
    l.window_row_bytes = kv_bytes;
    l.work.heads = int(heads);
    l.work.flops_per_head_entry = 4.0 * head_dim;  // K = V: score 2·hd + value sum 2·hd, BF16
    l.work.window = window;
    // Attention projections: wq_a [d → q_lora], wq_b [q_lora → H·hd], wkv [d → hd] (FP8);
    // wo_a grouped [H·hd/g → o_lora] per group (BF16 einsum in the release); wo_b [g·o_lora → d].
    l.weight_flops.add_matvec(
        "attention projections", dense,
        double(d) * q_lora + double(q_lora) * heads * head_dim + double(d) * head_dim + double(o_groups) * o_lora * d);
    l.weight_flops.add_matvec("attention wo_a (grouped)", kBf16Op, double(heads) * head_dim * o_lora);
    // mHC: hc_attn_fn and hc_ffn_fn [(2+hc)·hc, hc·d], FP32.
    l.weight_flops.add_matvec("mHC", kBf16Op, 2.0 * (2 + hc) * hc * hc * d);
    if (r > 0) {
      const int64_t coff = csa ? 2 : 1;  // overlapping compressor projects 2·hd channels
      l.main_record_bytes = kv_bytes;
      // Compressor wkv and wgate [d → coff·hd], FP32, applied to every token.
      l.weight_flops.add_matvec("compressor", kBf16Op, 2.0 * d * coff * head_dim);
      l.work.ratio = int(r);
      l.reads = "own";
      if (csa) {
        l.index_record_bytes = idx_bytes;
        l.work.topk = idx_topk;  // sparse: index_topk compressed entries + the window
        // Indexer: wq_b [q_lora → idx_heads·idx_dim] (FP8), weights_proj [d → idx_heads] (BF16),
        // its own overlapping compressor wkv/wgate [d → 2·idx_dim] (FP32).
        l.weight_flops.add_matvec("indexer query", dense, double(q_lora) * idx_heads * idx_dim);
        l.weight_flops.add_matvec("indexer weights", kBf16Op, double(d) * idx_heads);
        l.weight_flops.add_matvec("compressor", kBf16Op, 2.0 * d * coff * idx_dim);
        // Scores every visible compressed key: 2·idx_dim per head + weighted head sum, FP4
        // (V4 "fp4 simulation for q and kv in indexer"): FP4 × FP4, the one FP4-rate operation.
        l.work.index_heads = int(idx_heads);
        l.work.flops_per_index_head_entry = 2.0 * idx_dim + 2.0;
        l.work.index_scan_cap = -1;
        l.work.index_operands = Operands{Precision::kFp4, Precision::kFp4};
        // Carry state at a checkpoint boundary: the overlapping compressors keep the previous
        // group's r tokens of (kv, score) [r, 2·dim] FP32 — main (hd) and indexer (idx_dim).
        l.carry_state_bytes = 2.0 * r * coff * (head_dim + idx_dim) * 4;
      }
      l.global_bytes_per_token = (l.main_record_bytes + l.index_record_bytes) / double(r);
    }
    FfnShape f = moe;
    f.gate_matmul = i >= hash_layers;  // hash-routed layers look experts up by token id
    add_ffn_flops(l.weight_flops, f, dense, experts);
    checkpoint_bytes += double(l.window_rows) * l.window_row_bytes + l.carry_state_bytes;
    m.layers.push_back(l);
  }
  // Output head [d → vocab] and the head's mHC collapse hc_head_fn [hc, hc·d].
  m.head_flops.add_matvec("output head", kBf16Op, double(d) * vocab);
  m.head_flops.add_matvec("mHC", kBf16Op, double(hc) * hc * d);
  m.max_context = k.non_negative_or("max_position_embeddings", 0);
  m.geometry = fmt::format(
      "{} layers · hidden {} · {} heads × {} · window {} · experts {}/{} + {} shared · indexer {}×{}, top-{}", layers,
      d, heads, head_dim, window, moe.top_k, moe.n_routed, moe.n_shared, idx_heads, idx_dim, idx_topk);
  m.weight_note = "attention projections, compressors and CSA indexers, mHC, MoE router + top-k routed (FP4 "
                  "weights × FP8 activations) + shared experts, output head; MTP/DSpark layers not counted";
  m.persistent_extra_bytes_per_token = checkpoint_bytes / double(options.swa_checkpoint_interval);
  m.window = window;
  m.persistent_definition = fmt::format(
      "global KV + one SWA checkpoint every {} tokens (every layer's {} window rows × {:g} B + the CSA "
      "compressors' FP32 carry state = {:.2f} MiB), amortised per token",
      options.swa_checkpoint_interval, window, kv_bytes, checkpoint_bytes / double(1 << 20));
  m.assumptions.push_back(fmt::format(
      "V4 persistence: periodic SWA checkpointing (V4 report's on-disk strategy) every {} tokens; set with "
      "--swa-checkpoint-interval (must be a multiple of {})",
      options.swa_checkpoint_interval, lcm));
  m.assumptions.push_back("V4 window rows use the same 584 B FP8 layout as compressed entries (one KV pool ABI)");
  m.assumptions.push_back(fmt::format(
      "V4 indexer keys at the release's FP4 ({:g} B); serving engines that keep them in FP8 (132 B) store more",
      idx_bytes));
  return m;
}

}  // namespace dsv41::cost_internal
