// Internal seam between gemm.cpp (blocking, threading, dispatch) and gemm_avx512.cpp (the only
// file built with -mavx512*). Call these only when cpu_best_isa() ≥ kAvx512. Same contract and
// same bits as the AVX2 blocks (gemm_avx2.h): y[r, o] for r in [r0, r1), o in [o0, o1).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_fold.h"

namespace dsv41 {

void gemm_f32_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const float* w, int64_t o0,
                           int64_t o1, int64_t out, float* y);
void gemm_bf16w_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const uint16_t* w, int64_t o0,
                             int64_t o1, int64_t out, float* y);

// FP8 / FP4 weights dequantised in registers (gemm_quant_avx512.cpp): the same bits as the float
// block on the widened matrix (gemm_quant.h). fold: fold_range of the call's x (gemm_quant_fold.h).
void gemm_quant_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                         int64_t o1, int64_t out, float* y,
                             const FoldRange& fold);
// True when the CPU also has AVX512-VBMI and GFNI (Ice Lake, Zen 4 and later; read once).
bool cpu_has_avx512_vbmi_gfni();
// The same on such a CPU (gemm_quant_avx512vbmi.cpp): cheaper decoders, the same bits. The
// kAvx512 path of gemm_quant / gemm_many takes it wherever cpu_has_avx512_vbmi_gfni().
void gemm_quant_avx512vbmi_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w,
                                 int64_t o0, int64_t o1, int64_t out, float* y, const FoldRange& fold);

}  // namespace dsv41
