// Internal seam between gemm.cpp (blocking, threading, dispatch) and gemm_avx2.cpp (the only
// file built with -mavx2 -mfma). Call these only when the CPU reports AVX2 and FMA.
// Each computes the block y[r, o] for r in [r0, r1), o in [o0, o1) of y = x · Wᵀ
// (x: [rows, in] f32, w: [out, in] f32 or bf16 bits, y: [rows, out] f32).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_fold.h"

namespace dsv41 {

void gemm_f32_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const float* w, int64_t o0,
                         int64_t o1, int64_t out, float* y);
void gemm_bf16w_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const uint16_t* w, int64_t o0,
                           int64_t o1, int64_t out, float* y);

// FP8 / FP4 weights dequantised in registers (gemm_quant_avx2.cpp): the same bits as the float
// block on the widened matrix (gemm_quant.h). fold: fold_range of the call's x (gemm_quant_fold.h).
void gemm_quant_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                         int64_t o1, int64_t out, float* y,
                             const FoldRange& fold);

// Rows [o0, o1) of w widened to float32 at dst ([o1 - o0, w.in]), the values dequant.h gives: the
// prefill path, which widens a cache block once and runs the float block on it (gemm.cpp).
void gemm_quant_avx2_widen(const QuantWeights& w, int64_t o0, int64_t o1, float* dst);

}  // namespace dsv41
