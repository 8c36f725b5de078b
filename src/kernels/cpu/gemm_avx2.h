// Internal seam between gemm.cpp (blocking, threading, dispatch) and gemm_avx2.cpp (the only
// file built with -mavx2 -mfma). Call these only when the CPU reports AVX2 and FMA.
// Each computes the block y[r, o] for r in [r0, r1), o in [o0, o1) of y = x · Wᵀ
// (x: [rows, in] f32, w: [out, in] f32 or bf16 bits, y: [rows, out] f32).
#pragma once

#include <cstdint>

namespace dsv41 {

void gemm_f32_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const float* w, int64_t o0,
                         int64_t o1, int64_t out, float* y);
void gemm_bf16w_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const uint16_t* w, int64_t o0,
                           int64_t o1, int64_t out, float* y);

}  // namespace dsv41
