// Scaling the activations instead of the weights in gemm_quant's FP8 tiles (gemm_quant_avx2.cpp,
// gemm_quant_avx512.cpp), exactly. A weight is w = v · s with s = 2^(e-127) a UE8M0 block scale,
// and the kernels hold v · 2^-8 (a half widened exactly). When all of a tile's outputs share one
// block scale, x · 2^k with 2^k = 256 · s can be formed once per 32 columns instead of v · 256 · s
// once per weight: if x · 2^k is exact, the FMA's exact product (x · 2^k) · (v · 2^-8) is x · w
// itself, so the sums and their order, hence the bits, are those of the widened matrix.
// x · 2^k is exact unless it overflows or, for k < 0, falls below the normal range; FoldRange is
// the k for which no x of a call does either.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

struct FoldRange {
  int lo = 1, hi = 0;  // empty: never fold
  bool contains(int k) const { return k >= lo && k <= hi; }
};

// Over the n floats of x (the rows of one call; computed once per gemm_quant call, gemm.cpp).
// Empty when some x is infinite; NaN x ignored (a NaN product is NaN either way). AVX2 code
// (gemm_quant_avx2.cpp): call it on the vector paths only.
FoldRange fold_range(const float* x, int64_t n);

// fold_range for a product of `rows` rows of x against a matrix stored as `f`, on `isa`, where a
// tile there scales x (FP8 tiles on every vector ISA, AVX2 FP4 tiles of ≤ 2 rows); empty (and
// not computed) elsewhere. Baseline code (gemm.cpp): the one rule for gemm.cpp and gemm_many.cpp.
FoldRange product_fold_range(const float* x, int64_t rows, int64_t in, QuantFormat f, CpuIsa isa);

}  // namespace dsv41
