// Cache record formats of every DeepSeek generation the cost calculator knows, in ONE table.
// Spec: ../shared/spec/system.md §1 (global KV bytes per token), model.md §4 (V4.1 records).
//
// A record format says how one cached vector is stored: which channels are quantised, at how
// many bits, with one scale of `scale_bytes` per `scale_block` channels, whether the RoPE tail is
// kept apart in BF16, and the padding the published kernels use. The channel counts themselves
// (kv_lora_rank, head_dim, index_head_dim, qk_rope_head_dim, ...) come from the config; this
// table only holds what a config.json does not say: the storage encoding, with its source.
#pragma once

#include <string>

namespace dsv41 {

enum class RecordKind {
  kGqaKvBf16,        // DeepSeek LLM: one K or V head row, BF16
  kMlaBf16,          // V2/V3: MLA latent + RoPE key, BF16
  kMlaFp8,           // V3.2: FlashMLA "FP8 with scale" MLA record
  kV32IndexKeyFp8,   // V3.2: lightning-indexer key, FP8 + FP32 scale
  kV4KvFp8,          // V4: window row and compressed entry (same layout)
  kV4IndexKeyFp4,    // V4: indexer key of a CSA layer, FP4 (MXFP4)
  kV41WindowFp8,     // V4.1: sliding-window row
  kV41MainFp4,       // V4.1: compressed ("main") global KV entry, NVFP4
  kV41IndexKeyFp4,   // V4.1: indexer key, MXFP4
};

struct RecordFormat {
  RecordKind kind;
  const char* name;
  int value_bits;             // bits per quantised channel (16 = BF16 stored as is)
  bool rope_separate_bf16;    // RoPE tail kept apart in BF16 (not quantised, no scale)
  int scale_block;            // quantised channels per scale (0: no scales)
  int scale_bytes;            // bytes per scale
  int pad_to;                 // record padded to a multiple of this many bytes (1: none)
  const char* source;         // where the encoding is published
};

const RecordFormat& record_format(RecordKind kind);

// Bytes of one record holding `channels` channels of which the last `rope_channels` are the
// RoPE tail (only used when the format keeps RoPE apart). Exact, may be fractional only for
// sub-byte formats with odd channel counts (never in published configs).
double record_bytes(const RecordFormat& format, int channels, int rope_channels);

// "512 FP8 + 4×4 B scales + 64 BF16 RoPE = 656 B" style description for the tables.
std::string describe_record(const RecordFormat& format, int channels, int rope_channels);

}  // namespace dsv41
