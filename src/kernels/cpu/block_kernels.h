// AVX2 inner loops of the model blocks' fast paths (mhc.cpp, engram.cpp, compressor.cpp), one
// token (or one compressor group) per call: the callers thread over tokens (cpu_exec.h).
// Defined in block_kernels_avx2.cpp, the only file of these built with -mavx2 -mfma; call them
// only when cpu_has_avx2_fma().
//
// Rounding. block_kernels_avx2.cpp is compiled with floating-point contraction off, so a multiply
// followed by an add stays two roundings, as in the scalar references (which are built without
// FMA). Kernels marked "bit-identical" perform, per output element, the same float operations in
// the same order as the scalar reference they replace, so they give the same bits. The row
// reductions accumulate in double like the references, but in 4 lanes: each term is the same
// double, only the order of the double additions differs (≈1e-16 relative), which after the
// cast to float almost always gives the same float, never more than 1 ulp away.
#pragma once

#include <cstdint>

namespace dsv41 {

// Σ x[i]² in double (every square is exact in double).   x [n]
double sum_squares_avx2(const float* x, int64_t n);

// y[i] = x[i] · s.   Bit-identical.   x, y [n] (may alias)
void scale_avx2(const float* x, float s, int64_t n, float* y);

// y[c] = Σ_j p[j] · x[j·d + c], summed from 0 with j ascending.   x [hc, d], p [hc] → y [d].
// Bit-identical to mhc_collapse_reference.
void mhc_collapse_avx2(const float* x, const float* p, int hc, int64_t d, float* y);

// out[i·d + c] = post[i] · a[c] + Σ_j comb[j·hc + i] · x[j·d + c].
// a [d], x [hc, d], post [hc], comb [hc, hc] → out [hc, d].   Bit-identical to mhc_expand_reference.
void mhc_expand_avx2(const float* a, const float* x, const float* post, const float* comb, int hc, int64_t d,
                     float* out);

// The three sums of the Engram gate in double: xx = Σ x², kk = Σ k², dot = Σ x · (qw · kw) · k
// (each term formed as in the reference: ((x · (qw · kw)) · k) in double).   all [d]
void engram_sums_avx2(const float* x, const float* k, const float* qw, const float* kw, int64_t d, double* xx,
                      double* kk, double* dot);

// y[i] += g · v[i].   Bit-identical.   y, v [n]
void add_scaled_avx2(float* y, float g, const float* v, int64_t n);

// Softmax-gated pooling of one compressor group, per channel c:
//   m = max_j b[j·D + c];  e_j = exp(b[j·D + c] − m);  den = Σ_j e_j;  out[c] = Σ_j a[j·D + c] · (e_j / den)
// a, b [r, D] → out [D]; scratch [r · 8] floats. Bit-identical to the scalar loop of
// compressor_step_reference (same std::exp, same operation order; exp is evaluated once per term
// instead of twice).
void softmax_pool_avx2(const float* a, const float* b, int r, int64_t D, float* scratch, float* out);

}  // namespace dsv41
