// Dense matrix products y = x · Wᵀ for the CPU forward pass (system spec: CPU forward pass).
// Weights are row-major [out, in] (the checkpoint's layout), activations row-major [rows, in],
// output row-major [rows, out]. The scalar references (double accumulation) define the result;
// the fast paths are tested against them on random inputs at boundary sizes and agree to float
// rounding, not bit for bit.
//
// Summation order of the fast paths (what makes logits reproducible): every y[r, o] is computed
// by one thread as 8 float lanes, lane j accumulating x[r,i]·w[o,i] for i ≡ j (mod 8) in
// increasing i with fused multiply-add (the ragged tail zero-padded), then reduced as
// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). That order depends only on `in`: never on the thread
// count, the cache blocking, or how many rows are in the call, so a prompt run as one prefill
// call or token by token gives the same bits, with 1 thread or many.
// The AVX-512 path computes exactly this order too (two outputs per 16-lane register, gemm_avx512.cpp),
// so it gives the AVX2 path's bits: the ISA changes the speed, never the result.
// The portable fallback (CPUs without AVX2+FMA) uses the same lane structure without fusing, so
// its bits differ from the AVX2 path's; it is only for such machines.
// The exception is opt-in: `--isa amx` (CpuIsa::kAmx, never chosen by auto) sends products of ≥ 16
// rows with bf16 / FP8 / FP4 weights to AMX tiles (gemm_amx.h): the same values multiplied, another
// summation order, denormals flushed; it is not bit-identical to the paths above.
//
// Threading: gemm_f32 / gemm_bf16w split the work over ex.pool (kernels/cpu/cpu_exec.h) in blocks
// of outputs (and of rows for long prefills); one caller at a time per pool. Their inner loop is
// the best of CPUID's, capped by ex.isa (ex.gemm_isa(); ex.fast only selects the model blocks'
// paths), so a scalar-forced engine runs the same products as a fast one.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

// y[r, o] = Σ_i x[r, i] · w[o, i]   for r < rows, o < out.   x: [rows, in], w: [out, in], y: [rows, out]
void gemm_f32_reference(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);
void gemm_f32(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);
void gemm_f32_portable(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y);

// Same with bf16 weights (uint16 bit patterns, widened exactly to f32 on the fly): halves the
// weight traffic of memory-bound decode. w: [out, in] bf16.
void gemm_bf16w_reference(const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float* y);
void gemm_bf16w(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float* y);
void gemm_bf16w_portable(const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out, float* y);

// True when gemm_f32 / gemm_bf16w take a vector path (AVX2/FMA or AVX-512) on this CPU by default.
bool gemm_uses_avx2();

}  // namespace dsv41
