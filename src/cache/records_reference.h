// The scalar pack and fake-quant codecs of the cache records, beside the dispatching entry
// points of cache/records.h. Spec: model.md §4; the rounding is documented in records.h.
// The records.h *_row_pack and *_row_fake_quant entries run AVX2 loops when the CPU has AVX2 + FMA
// (kernels/cpu/quant_avx2.h: amax, divide, clamp, rounding, multiply lane by lane), these scalar
// loops otherwise; both give the same bits (tested in records_test.cpp on random rows of every
// scale range, signed zeros, subnormal, saturating and non-finite values). Arguments as there.
#pragma once

#include <cstddef>
#include <cstdint>

#include "format/record_layout.h"

namespace dsv41 {

void window_row_pack_reference(const float* x, size_t channels, uint8_t* record);
void main_row_pack_reference(const float* x, size_t channels, uint8_t* record);
void index_row_pack_reference(const float* x, size_t channels, uint8_t* record);
void window_row_fake_quant_reference(float* x, size_t channels);
void main_row_fake_quant_reference(float* x, size_t channels);
void index_row_fake_quant_reference(float* x, size_t channels);
void row_pack_reference(RowKind kind, const float* x, size_t channels, uint8_t* record);
void row_fake_quant_reference(RowKind kind, float* x, size_t channels);

}  // namespace dsv41
