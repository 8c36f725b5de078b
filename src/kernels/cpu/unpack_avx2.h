// AVX2/F16C unpacking of packed cache records (cache/records.h, model.md §4) to float rows.
// Bit for bit equal to the scalar references *_row_unpack_reference (tested in
// cache/records_test.cpp on random records holding every code, NaN codes and every scale code).
// Only call when cpu_has_avx2_fma() (kernels/cpu/cpu_exec.h) and cpu_has_f16c(); records.cpp
// does the choosing. Arguments as for the records.h codecs; channels whole blocks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsv41 {

// True when the CPU reports F16C (the window-row path converts E4M3 through half floats).
bool cpu_has_f16c();

void window_row_unpack_avx2(const uint8_t* record, size_t channels, float* out);  // E4M3 + UE8M0/32
void main_row_unpack_avx2(const uint8_t* record, size_t channels, float* out);    // E2M1 + E4M3/16
void index_row_unpack_avx2(const uint8_t* record, size_t channels, float* out);   // E2M1 + UE8M0/32

}  // namespace dsv41
