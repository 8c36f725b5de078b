// y = x · Wᵀ for 5–16 rows (batched decode) from FP8 E4M3 weights with UE8M0 block scales, on
// AVX-512 (issue 9 item 8: a batch-8 decode step of mini-flash is bound by these products).
// The one-call tile of gemm_quant_avx512.cpp scales x by each block's scale inside the tile,
// R multiplies per 2·⌈O/2⌉ fused multiply-adds (one per two FMAs at 8 rows), since a tile holds
// only O outputs. Here the rows of x are scaled once per output block row (the outputs that
// share one row of scales: 32 or 128 of them), into a per-thread buffer, and the tiles over those
// outputs run fused multiply-adds only.
// Same bits: x · 2^k is formed exactly as the tile forms it (gemm_quant_fold.h: only where that
// product is exact), the weights are the same value · 2^-8, and the sums run in gemm.h's lane
// order, so every y is the bit of gemm_quant_avx512_block (and of gemm_f32 on the widened matrix).
// A block row with a block that cannot fold (a scale too large, an x range outside the fold
// range, a partial last block) and matrices with NaN codes go to gemm_quant_avx512_block.
// Owns nothing; its scratch is a per-thread buffer that keeps its storage (no allocation once a
// thread has seen the widest x).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_fold.h"

namespace dsv41 {

// Rows from which gemm_quant / gemm_many send FP8 blocks here (fewer rows: the one-call tile,
// whose wider output groups already take one multiply per three FMAs or fewer).
constexpr int64_t kFp8RowsMinRows = 5;

// The block y[r, o], r in [r0, r1), o in [o0, o1), as gemm_quant_avx512_block computes it. Call
// only when cpu_best_isa() is kAvx512 and w.format is kFp8E4M3.
void gemm_fp8_rows_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w,
                                int64_t o0, int64_t o1, int64_t out, float* y, const FoldRange& fold);

}  // namespace dsv41
