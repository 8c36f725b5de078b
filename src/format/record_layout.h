// The byte layouts of the packed cache records and their sizes: what a record of each kind
// holds, how wide its scale blocks are, how many bytes a row of C channels takes. Pure facts of
// the formats (model.md §4), below everything that sizes or validates caches (the config's
// checks, the plan's cache sizing); the codecs that write and read these bytes are
// cache/records.h.
//
// ---- Record layouts (one token's row; `C` = channels; all byte offsets from the row start) --
//
// Window row (window-KV ring, every layer; FP8 E4M3 values, UE8M0 scale per 32 channels):
//   [0, C)            E4M3 code of channel c at byte c
//   [C, C + C/32)     UE8M0 scale of block b (channels 32b..32b+31) at byte C + b
//   C = 512 (V4.1 head_dim) -> 528 bytes.
//   Per-row layout chosen by dsv41: SGLang's FlashMLA "V41" page layout holds the same bytes
//   per token but stores all tokens' E4M3 data of a page first and then all their scales.
//
// Main row (compressed KV of kv-source layers; NVFP4 without a global scale, E4M3 scale per
// 16 channels):
//   [0, C/2)          E2M1 codes, byte i = code(2i) | code(2i+1) << 4 (even channel low nibble)
//   [C/2, C/2 + C/16) E4M3 scale of block b (channels 16b..16b+15) at byte C/2 + b
//   C = 512 -> 288 bytes (SGLang "V41_FP4" holds the same 256 + 32 bytes).
//
// Index row (indexer keys of kv-source layers, and indexer queries per head; MXFP4, UE8M0
// scale per 32 channels):
//   [0, C/2)          E2M1 codes, packed as in main rows
//   [C/2, C/2 + C/32) UE8M0 scale of block b (channels 32b..32b+31) at byte C/2 + b
//   C = 128 (V4.1 index_head_dim) -> 68 bytes.
//
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace dsv41 {

enum class RowKind { kWindow, kMain, kIndex };

// Version of the byte layouts below. Anything persisted or exchanged in these records (window
// snapshots, the SSD prefix store) carries it; bump it when any layout or rounding rule changes.
inline constexpr uint32_t kRecordFormatVersion = 1;

const char* row_kind_name(RowKind kind);  // "window", "main", "index"
size_t row_block_channels(RowKind kind);  // channels per scale: 32, 16, 32
// ok when channels is a positive multiple of the kind's block width; otherwise
// invalid_argument naming the kind, the count and the block width.
Status check_row_channels(RowKind kind, size_t channels);

// Record sizes in bytes (channels valid per check_row_channels).
size_t window_row_bytes(size_t channels);  // channels + channels/32
size_t main_row_bytes(size_t channels);    // channels/2 + channels/16
size_t index_row_bytes(size_t channels);   // channels/2 + channels/32
size_t row_bytes(RowKind kind, size_t channels);

}  // namespace dsv41
