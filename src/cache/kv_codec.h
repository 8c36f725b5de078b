// The three cache record codecs as the attention path uses them. Spec: model.md §4, §9.3–§9.4.
//
//   window  (every layer, D channels):   FP8 E4M3 codes [D] + UE8M0 scale per 32 channels [D/32]
//                                        = 528 B for D = 512
//   main    (compressed KV, D channels): E2M1 codes, two per byte, even channel in the low nibble
//                                        [D/2] + E4M3 scale per 16 channels [D/16]  = 288 B
//   index   (indexer keys, Di channels): E2M1 codes [Di/2] + UE8M0 scale per 32 [Di/32] = 68 B
//
// unpack(pack(x)) equals fake_quant(x) bit for bit: the cache stores exactly the values the
// reference's fake-quantised (bf16/fp32) cache holds. This file is the single seam between the
// attention code and the number formats: when the shared record codecs (cache/records.h) land,
// only kv_codec.cpp changes.
// Rounding (golden reference): window scale = 2^⌈log2(max(amax,1e-4)·(1/448))⌉, codes e4m3 RNE
// of clamp(x/scale, ±448); main scale = e4m3_RNE(max(amax, 6·2^-9)/6), codes e2m1 of
// clamp(x/scale, ±6); index scale = 2^⌈log2(max(amax, 6·2^-126)·(1/6))⌉. E2M1 ties go to the even
// grid index; values that round to zero decode as +0.
#pragma once

#include <cstdint>

namespace dsv41 {

enum class KvRecordKind { kWindow, kMain, kIndex };

// Bytes of one record of `dim` channels; 0 if dim does not divide into the kind's blocks.
int64_t kv_record_bytes(KvRecordKind kind, int64_t dim);
// Channels per scale block (32, 16, 32).
int kv_record_block(KvRecordKind kind);

void kv_pack(KvRecordKind kind, const float* x, int64_t dim, uint8_t* record);
void kv_unpack(KvRecordKind kind, const uint8_t* record, int64_t dim, float* out);
// In place: x ← unpack(pack(x)).
void kv_fake_quant(KvRecordKind kind, float* x, int64_t dim);

}  // namespace dsv41
