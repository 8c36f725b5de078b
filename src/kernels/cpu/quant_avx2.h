// AVX2 loops of the cache-record quantisers (cache/records.h, model.md §4): the per-channel
// rounding of one block given its scale, and the block's amax. Bit for bit the scalar codecs of
// records.cpp (tested in cache/records_test.cpp against the *_reference codecs on random rows
// with every scale range, signed zeros, subnormal and saturating values, NaN and Inf).
// Only call when cpu_has_avx2_fma() (kernels/cpu/cpu_exec.h); records.cpp does the choosing.
// n: channels of the block, a multiple of 8.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dsv41 {

// max |x| over x[0, n) into *amax; false (amax untouched) if any element is NaN or ±Inf.
bool block_amax_avx2(const float* x, size_t n, float* amax);

// E4M3 (window rows), scale a finite power of two:
//   x[i] ← e4m3(clamp(x[i] / scale, ±448)) · scale          (fake quant, in place)
//   codes[i] = f32_to_e4m3(clamp(x[i] / scale, ±448))        (pack)
void e4m3_block_fake_quant_avx2(float* x, size_t n, float scale);
void e4m3_block_codes_avx2(const float* x, size_t n, float scale, uint8_t* codes);

// E2M1 (main and index rows), scale finite and > 0:
//   x[i] ← e2m1(clamp(x[i] / scale, ±6)) · scale             (fake quant, in place)
//   codes[i/2] = code(x[i]) | code(x[i+1]) << 4               (pack, low nibble first)
void e2m1_block_fake_quant_avx2(float* x, size_t n, float scale);
void e2m1_block_codes_avx2(const float* x, size_t n, float scale, uint8_t* codes);

}  // namespace dsv41
