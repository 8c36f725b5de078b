// The two inner loops of attention and indexer scoring, over rows of a contiguous matrix:
//   dot_rows:           y[j] = Σ_d a[d] · rows[j·D + d]          (scores of one query vs n keys)
//   weighted_sum_rows:  out[d] += Σ_j p[j] · rows[j·D + d]       (probability-weighted values)
// The *_reference versions define the result (double accumulation); the fast versions use
// AVX2/FMA when the CPU has it (float accumulation in 8 lanes, so results agree to float rounding,
// not bit for bit) and fall back to the reference otherwise. Tested against each other at
// boundary sizes. No allocation; pointers are borrowed for the call.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

void dot_rows_reference(const float* a, const float* rows, int64_t n, int64_t D, float* y);
void weighted_sum_rows_reference(const float* p, const float* rows, int64_t n, int64_t D, float* out);

void dot_rows(const float* a, const float* rows, int64_t n, int64_t D, float* y);
void weighted_sum_rows(const float* p, const float* rows, int64_t n, int64_t D, float* out);

// Several query heads against the same rows (one token's heads over its keys): for h < heads,
//   dot_rows(q + h·q_stride, rows, n, D, y + h·y_stride)
//   weighted_sum_rows(p + h·p_stride, rows, n, D, out + h·out_stride)
// with the same bits as those calls. With isa ≥ kAvx512 on a CPU that has it and D a multiple
// of 16, AVX-512 loops that read each row once for all heads (attention_kernels_avx512.cpp);
// otherwise head by head through the calls above.
void dot_rows_heads(CpuIsa isa, const float* q, int64_t q_stride, int64_t heads, const float* rows, int64_t n,
                    int64_t D, float* y, int64_t y_stride);
void weighted_sum_rows_heads(CpuIsa isa, const float* p, int64_t p_stride, int64_t heads, const float* rows,
                             int64_t n, int64_t D, float* out, int64_t out_stride);

// The sink softmax of one head (model.md §3.5), in place over its logits lg[n]:
//   lg_j ← lg_j · scaling;  m = max(sink, lg_0 … lg_{n−1});
//   e_j = exp(lg_j − m) in float;  denom = exp(sink − m) + Σ_j e_j in double, in j order;
//   lg_j ← e_j / denom rounded once to float.
// The reference is that loop; sink_softmax gives its bits on every ISA: with isa ≥ kAvx2 (capped
// by the CPU) the scaling, the max and the division run on vector lanes — each exact per element,
// and a max does not depend on the order of its inputs but for the sign of a zero, which
// exp(x − m) does not see — while the exps and the double sum stay in j order.
void sink_softmax_reference(float* lg, int64_t n, float scaling, float sink);
void sink_softmax(CpuIsa isa, float* lg, int64_t n, float scaling, float sink);

// sink_softmax of `heads` heads at once, head h over lg + h·lstride [n] with sink sinks[h]: the
// same bits, head by head. With isa ≥ kAvx512 (capped by the CPU) the exps run on vector lanes
// (exps_shifted), the double sums of up to 8 heads run side by side, each still in j order (one
// head's sum is a chain of n dependent additions), and the division is a multiply by 1/denom
// with the division kept for lanes near a float rounding midpoint (attention_kernels_avx512.cpp);
// otherwise sink_softmax per head. The tile path spent a quarter of its time here: 64 heads × 640
// keys of std::exp calls a token and layer.
void sink_softmax_heads(CpuIsa isa, float* lg, int64_t lstride, int64_t heads, int64_t n, float scaling,
                        const float* sinks);

// lg_j ← std::exp(lg_j − m) (the difference in float) for j < n, with std::exp's bits on every
// ISA: with isa ≥ kAvx512 on vector lanes in double, rounded once, lanes that land within 2^-7
// ULP of a rounding midpoint (or x > 80, Inf, NaN) through std::exp itself
// (attention_kernels_avx512.cpp says why that gives its bits: glibc's expf is within 0.502 ULP).
void exps_shifted(CpuIsa isa, float* lg, int64_t n, float m);

// lg_j ← float(lg_j / denom), the quotient rounded to double and then to float (sink_softmax's
// last step), for lg_j ≥ 0 and denom > 0, with the same bits on every ISA: with isa ≥ kAvx512 a
// multiply by 1/denom, dividing only the lanes whose product lies near a float rounding midpoint.
void divide_by_denominator(CpuIsa isa, float* lg, int64_t n, double denom);

// Whether the fast versions run AVX2 code on this machine.
bool attention_kernels_use_avx2();

}  // namespace dsv41
