// The last step of the mHC coefficient function for one token: gates and Sinkhorn normalisation
// of the raw projection (model.md §3.3). mhc_coefficients (mhc.h) runs it once per token and site,
// 20 rounds of 2·hc² divisions each: worth a vector form for the hc = 4 of every V4.1 config.
#pragma once

#include "model/mhc.h"

namespace dsv41 {

// m [(2+hc)·hc] raw projection → pre [hc], post [hc], comb [hc, hc]:
//   ℓ = base + m ⊙ s (s0 on the pre slots, s1 on post, s2 on comb); pre = σ + eps; post = 2σ;
//   comb = row softmax + eps, column-normalise, then (iters − 1) × (row, column).
// Reference: scalar, element by element.
void mhc_finish_reference(const MhcShape& shape, const MhcWeights& w, const float* m, float* pre, float* post,
                          float* comb);
// hc = 4: the normalisation rounds on SSE rows of the 4×4 matrix (the row sums on its transpose),
// each sum in the reference's order and each quotient the same IEEE division, so the same bits
// (tested); other hc: the reference.
void mhc_finish(const MhcShape& shape, const MhcWeights& w, const float* m, float* pre, float* post, float* comb);
// mhc_finish of `tokens` tokens: m [tokens, (2+hc)·hc], pre / post [tokens, hc], comb
// [tokens, hc, hc]. The same bits token by token; hc = 4 runs four tokens' rounds side by side
// (a decode batch's rows; one token's rounds are a chain of dependent divisions).
void mhc_finish_rows(const MhcShape& shape, const MhcWeights& w, const float* m, int64_t tokens, float* pre,
                     float* post, float* comb);

}  // namespace dsv41
