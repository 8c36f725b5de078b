// RMSNorm in float32, the one normalisation every block uses (attn/ffn norms, q_norm, kv_norm,
// compressor norm, indexer k_norm, final norm). Spec: model.md §3 (RMSNorm definition), §9.5.
//
//   y_i = w_i · (x_i · r),   r = 1 / sqrt(mean(x²) + eps)
//
// The order (x·r first, then ·w) is the golden reference's; mean(x²) is accumulated in double and
// rounded once to float, so results agree with any fp32 summation order to float rounding. eps
// comes from the config (rms_norm_eps, 1e-20 for V4.1). Weight may be null (unweighted form).
// This file owns nothing; outputs may alias inputs (y == x is allowed).
#pragma once

#include <cstdint>

namespace dsv41 {

// One row: x[n] → y[n]. weight: [n] or nullptr.
void rmsnorm_row(const float* x, int64_t n, const float* weight, double eps, float* y);

// `rows` contiguous rows of n: x[rows, n] → y[rows, n].
void rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* weight, double eps, float* y);

}  // namespace dsv41
