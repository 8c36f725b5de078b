// mHC gates and Sinkhorn normalisation of one token (see mhc_sinkhorn.h). Spec: model.md §3.3.
#include "model/mhc_sinkhorn.h"

#include <xmmintrin.h>

#include <algorithm>
#include <cmath>

namespace dsv41 {
namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// Gates and the row softmax (+ eps) of comb: shared by both forms.
void gates_and_softmax(const MhcShape& shape, const MhcWeights& w, const float* m, float* pre, float* post,
                       float* comb) {
  const int hc = shape.hc;
  const float eps = shape.hc_eps;
  for (int i = 0; i < hc; ++i) {
    pre[i] = sigmoid(m[i] * w.scale[0] + w.base[i]) + eps;
    post[i] = 2.0f * sigmoid(m[hc + i] * w.scale[1] + w.base[hc + i]);
  }
  const float* mc = m + 2 * hc;
  const float* bc = w.base + 2 * hc;
  for (int j = 0; j < hc; ++j) {  // row j = input stream: softmax over its hc columns
    float* row = comb + j * hc;
    float mx = -INFINITY;
    for (int i = 0; i < hc; ++i) {
      row[i] = mc[j * hc + i] * w.scale[2] + bc[j * hc + i];
      mx = std::max(mx, row[i]);
    }
    float sum = 0;
    for (int i = 0; i < hc; ++i) {
      row[i] = std::exp(row[i] - mx);
      sum += row[i];
    }
    for (int i = 0; i < hc; ++i) row[i] = row[i] / sum + eps;
  }
}

}  // namespace

void mhc_finish_reference(const MhcShape& shape, const MhcWeights& w, const float* m, float* pre, float* post,
                          float* comb) {
  gates_and_softmax(shape, w, m, pre, post, comb);
  const int hc = shape.hc;
  const float eps = shape.hc_eps;
  auto normalise_columns = [&] {
    for (int i = 0; i < hc; ++i) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += comb[j * hc + i];
      for (int j = 0; j < hc; ++j) comb[j * hc + i] /= (s + eps);
    }
  };
  auto normalise_rows = [&] {
    for (int j = 0; j < hc; ++j) {
      float s = 0;
      for (int i = 0; i < hc; ++i) s += comb[j * hc + i];
      for (int i = 0; i < hc; ++i) comb[j * hc + i] /= (s + eps);
    }
  };
  normalise_columns();
  for (int it = 1; it < shape.sinkhorn_iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
}

void mhc_finish(const MhcShape& shape, const MhcWeights& w, const float* m, float* pre, float* post, float* comb) {
  if (shape.hc != 4) return mhc_finish_reference(shape, w, m, pre, post, comb);
  gates_and_softmax(shape, w, m, pre, post, comb);
  const __m128 eps = _mm_set1_ps(shape.hc_eps);
  // Column pass on rows r0..r3: lane i of ((r0 + r1) + r2) + r3 is column i's sum in the
  // reference's order (its s = 0 start adds exactly); every element divided by its column's
  // sum + eps. The row pass is the same on the transpose (transposes move bits exactly).
  auto columns = [&](__m128& r0, __m128& r1, __m128& r2, __m128& r3) {
    const __m128 d = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(r0, r1), r2), r3), eps);
    r0 = _mm_div_ps(r0, d);
    r1 = _mm_div_ps(r1, d);
    r2 = _mm_div_ps(r2, d);
    r3 = _mm_div_ps(r3, d);
  };
  __m128 r0 = _mm_loadu_ps(comb), r1 = _mm_loadu_ps(comb + 4), r2 = _mm_loadu_ps(comb + 8),
         r3 = _mm_loadu_ps(comb + 12);
  columns(r0, r1, r2, r3);
  for (int it = 1; it < shape.sinkhorn_iters; ++it) {
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    columns(r0, r1, r2, r3);  // the rows of comb
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    columns(r0, r1, r2, r3);
  }
  _mm_storeu_ps(comb, r0);
  _mm_storeu_ps(comb + 4, r1);
  _mm_storeu_ps(comb + 8, r2);
  _mm_storeu_ps(comb + 12, r3);
}

}  // namespace dsv41
