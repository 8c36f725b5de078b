// AVX-512 unpacking of the window (E4M3) and main (E2M1) cache records, the two kinds attention
// unpacks on every decode step (the whole window ring, and the selected compressed entries).
// Bit for bit the AVX2 paths (kernels/cpu/unpack_avx2.h) and so the references: the same exact
// decodes, 16 or 32 channels per instruction instead of 8, and the same float32 `value · scale`
// multiply. Only call when cpu_best_isa() ≥ kAvx512 and cpu_has_f16c(); records.cpp does the
// choosing. Arguments as for the records.h codecs; channels whole blocks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsv41 {

void window_row_unpack_avx512(const uint8_t* record, size_t channels, float* out);  // E4M3 + UE8M0/32
void main_row_unpack_avx512(const uint8_t* record, size_t channels, float* out);    // E2M1 + E4M3/16

}  // namespace dsv41
