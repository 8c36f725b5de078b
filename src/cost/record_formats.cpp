// The one table of cache record encodings (see record_formats.h). Each row cites where the
// encoding is published; the resulting per-record sizes for the published configs are checked
// in record_formats_test.cpp and cost_model_test.cpp.
#include "cost/record_formats.h"

#include <cmath>

#include <fmt/format.h>

namespace dsv41 {
namespace {

// clang-format off
const RecordFormat kFormats[] = {
  // DeepSeek LLM 7B/67B (LlamaForCausalLM, torch_dtype bfloat16): K and V are cached per KV head
  // in the activation dtype; 67B uses GQA with 8 KV heads (DeepSeek LLM paper, arXiv:2401.02954
  // §2.2; deepseek-ai/deepseek-llm-67b-base config.json num_key_value_heads 8).
  // 128 channels → 256 B per head row.
  {RecordKind::kGqaKvBf16, "GQA K/V head row (BF16)", 16, false, 0, 0, 1,
   "DeepSeek LLM (arXiv:2401.02954 §2.2); HF LlamaAttention caches K,V per KV head in BF16"},
  // DeepSeek-V2/V3 MLA: the cache holds the compressed latent c_KV (kv_lora_rank) and the decoupled
  // RoPE key (qk_rope_head_dim) per token per layer, BF16 (DeepSeek-V2 paper arXiv:2405.04434
  // §2.1.2–2.1.4, Table 1: (d_c + d_h^R)·l elements; deepseek-ai/DeepSeek-V3 inference/model.py
  // kv_cache + pe_cache with attn_impl "absorb"). 512 + 64 channels → 1152 B.
  {RecordKind::kMlaBf16, "MLA latent + RoPE key (BF16)", 16, false, 0, 0, 1,
   "DeepSeek-V2 paper (arXiv:2405.04434 §2.1, Table 1); deepseek-ai/DeepSeek-V3 inference/model.py kv_cache+pe_cache"},
  // DeepSeek-V3.2 MLA record of FlashMLA's sparse decoding kernel: 512 float8_e4m3 latent channels,
  // one float32 scale per 128 of them (4 × 4 B), then the 64 RoPE channels in BF16 → 656 B
  // (deepseek-ai/FlashMLA README "FP8 KV cache ... 656 Bytes"; same layout in
  // Tencent/KsanaLLM csrc/utils/quant_type.h kFp8DsMla).
  {RecordKind::kMlaFp8, "MLA latent FP8 + FP32 scales + RoPE BF16", 8, true, 128, 4, 1,
   "deepseek-ai/FlashMLA README (V3.2 sparse decode FP8 KV cache, 656 B/token)"},
  // DeepSeek-V3.2 lightning-indexer key: index_head_dim float8_e4m3 channels (RoPE included, the
  // whole vector is quantised) + one float32 scale per 128 channels → 128 + 4 = 132 B
  // (deepseek-ai/DeepSeek-V3.2-Exp inference/model.py Indexer: k_cache float8_e4m3fn
  // [.., head_dim], k_scale_cache float32 [.., head_dim // block_size], block_size = 128).
  {RecordKind::kV32IndexKeyFp8, "indexer key FP8 + FP32 scale", 8, false, 128, 4, 1,
   "deepseek-ai/DeepSeek-V3.2-Exp inference/model.py Indexer k_cache/k_scale_cache"},
  // DeepSeek-V4 window row and compressed (CSA/HCA) entry share one layout: the head_dim −
  // qk_rope_head_dim = 448 non-RoPE channels in FP8 E4M3 with one UE8M0 scale per 64 channels
  // (V4 inference/model.py: act_quant(kv[..., :-rd], 64, scale_fmt) in Attention and Compressor;
  // "rope dims stay bf16"), the 64 RoPE channels in BF16, padded to 8 B: 448 + 7 + 128 + 1 = 584 B
  // (the serving ABI: sgl-project/sglang PR #38646 "FP8's 584 B" for the V4 sparse-MLA KV pool).
  {RecordKind::kV4KvFp8, "V4 KV FP8(448) + UE8M0/64 + RoPE BF16, pad 8", 8, true, 64, 1, 8,
   "V4 inference/model.py act_quant(kv[..., :-rd], 64); sglang PR #38646 (584 B/token)"},
  // DeepSeek-V4 indexer key (CSA layers): the indexer's own compressor rotates and FP4-quantises
  // its index_head_dim-channel output with one UE8M0 scale per 32 channels (V4 inference/model.py
  // Indexer: Compressor(..., rotate=True) → fp4_act_quant(kv, fp4_block_size = 32)) → 64 + 4 = 68 B.
  // With 584 B main entries this reproduces V4-Flash's 3,514.25 B/token (issue #2 acceptance).
  {RecordKind::kV4IndexKeyFp4, "V4 indexer key FP4 + UE8M0/32", 4, false, 32, 1, 1,
   "V4 inference/model.py Indexer compressor fp4_act_quant(kv, 32)"},
  // DeepSeek-V4.1 window row: 512 FP8 E4M3 channels (RoPE included) with one UE8M0 scale per 32
  // → 512 + 16 = 528 B (model.md §4 "V41" layout, SG-KV; N-LAY fake_quant_fp8(kv, 32)).
  {RecordKind::kV41WindowFp8, "V4.1 window row FP8 + UE8M0/32", 8, false, 32, 1, 1,
   "model.md §4 window KV (SGLang V41 page layout, 528 B/token)"},
  // DeepSeek-V4.1 main (compressed) entry: 512 channels NVFP4 (E2M1) with one E4M3 scale per 16
  // → 256 + 32 = 288 B (model.md §4 "V41_FP4", system.md §1).
  {RecordKind::kV41MainFp4, "V4.1 main entry NVFP4 + E4M3/16", 4, false, 16, 1, 1,
   "model.md §4 compressed KV (SGLang V41_FP4 page layout, 288 B/token); system.md §1"},
  // DeepSeek-V4.1 indexer key: 128 channels MXFP4 with one UE8M0 scale per 32 → 64 + 4 = 68 B
  // (model.md §4 indexer keys, system.md §1).
  {RecordKind::kV41IndexKeyFp4, "V4.1 indexer key MXFP4 + UE8M0/32", 4, false, 32, 1, 1,
   "model.md §4 indexer keys (MXFP4, 68 B for 128 channels); system.md §1"},
};
// clang-format on

const char* bits_name(int bits) {
  switch (bits) {
    case 16: return "BF16";
    case 8: return "FP8";
    case 4: return "FP4";
    default: return "?";
  }
}

}  // namespace

const RecordFormat& record_format(RecordKind kind) {
  for (const auto& f : kFormats)
    if (f.kind == kind) return f;
  return kFormats[0];  // unreachable: every RecordKind has a row (record_formats_test checks)
}

double record_bytes(const RecordFormat& f, int channels, int rope_channels) {
  const int quantised = f.rope_separate_bf16 ? channels - rope_channels : channels;
  double bytes = quantised * f.value_bits / 8.0;
  if (f.scale_block > 0) bytes += double((quantised + f.scale_block - 1) / f.scale_block) * f.scale_bytes;
  if (f.rope_separate_bf16) bytes += rope_channels * 2.0;
  if (f.pad_to > 1) bytes = std::ceil(bytes / f.pad_to) * f.pad_to;
  return bytes;
}

std::string describe_record(const RecordFormat& f, int channels, int rope_channels) {
  const int quantised = f.rope_separate_bf16 ? channels - rope_channels : channels;
  std::string s = fmt::format("{} {}", quantised, bits_name(f.value_bits));
  if (f.scale_block > 0)
    s += fmt::format(" + {}×{} B scale", (quantised + f.scale_block - 1) / f.scale_block, f.scale_bytes);
  if (f.rope_separate_bf16) s += fmt::format(" + {} BF16 RoPE", rope_channels);
  const double raw = quantised * f.value_bits / 8.0 +
                     (f.scale_block > 0 ? double((quantised + f.scale_block - 1) / f.scale_block) * f.scale_bytes : 0) +
                     (f.rope_separate_bf16 ? rope_channels * 2.0 : 0);
  const double total = record_bytes(f, channels, rope_channels);
  if (total > raw) s += fmt::format(" + {:g} pad", total - raw);
  return s + fmt::format(" = {:g} B", total);
}

}  // namespace dsv41
