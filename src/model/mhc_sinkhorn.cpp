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

namespace {

// The hc = 4 normalisation rounds of K tokens' matrices side by side: each token's matrix goes
// through mhc_finish's chain of sums and divisions unchanged (so its bits), but K independent
// chains overlap in the pipelines instead of each token waiting on its own division latency.
template <int K>
void sinkhorn4(const MhcShape& shape, float* const* comb) {
  const __m128 eps = _mm_set1_ps(shape.hc_eps);
  // Column pass on rows r0..r3: lane i of ((r0 + r1) + r2) + r3 is column i's sum in the
  // reference's order (its s = 0 start adds exactly); every element divided by its column's
  // sum + eps. The row pass is the same on the transpose (transposes move bits exactly).
  auto columns = [&](__m128* r) {
    const __m128 d = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(r[0], r[1]), r[2]), r[3]), eps);
    for (int i = 0; i < 4; ++i) r[i] = _mm_div_ps(r[i], d);
  };
  auto transpose = [](__m128* r) { _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]); };
  __m128 r[K][4];
  for (int k = 0; k < K; ++k) {
    for (int i = 0; i < 4; ++i) r[k][i] = _mm_loadu_ps(comb[k] + 4 * i);
    columns(r[k]);
  }
  for (int it = 1; it < shape.sinkhorn_iters; ++it) {
    for (int k = 0; k < K; ++k) {
      transpose(r[k]);
      columns(r[k]);  // the rows of comb
      transpose(r[k]);
      columns(r[k]);
    }
  }
  for (int k = 0; k < K; ++k)
    for (int i = 0; i < 4; ++i) _mm_storeu_ps(comb[k] + 4 * i, r[k][i]);
}

}  // namespace

void mhc_finish(const MhcShape& shape, const MhcWeights& w, const float* m, float* pre, float* post, float* comb) {
  if (shape.hc != 4) return mhc_finish_reference(shape, w, m, pre, post, comb);
  gates_and_softmax(shape, w, m, pre, post, comb);
  float* const one[1] = {comb};
  sinkhorn4<1>(shape, one);
}

void mhc_finish_rows(const MhcShape& shape, const MhcWeights& w, const float* m, int64_t tokens, float* pre,
                     float* post, float* comb) {
  const int hc = shape.hc;
  const int64_t mix = shape.mix_width();
  if (hc != 4) {
    for (int64_t t = 0; t < tokens; ++t)
      mhc_finish_reference(shape, w, m + t * mix, pre + t * hc, post + t * hc, comb + t * hc * hc);
    return;
  }
  constexpr int kTokens = 4;  // 16 matrix rows in flight: the 16 SSE registers, a few spilled
  int64_t t = 0;
  for (; t + kTokens <= tokens; t += kTokens) {
    float* combs[kTokens];
    for (int k = 0; k < kTokens; ++k) {
      const int64_t u = t + k;
      gates_and_softmax(shape, w, m + u * mix, pre + u * hc, post + u * hc, comb + u * hc * hc);
      combs[k] = comb + u * hc * hc;
    }
    sinkhorn4<kTokens>(shape, combs);
  }
  for (; t < tokens; ++t) mhc_finish(shape, w, m + t * mix, pre + t * hc, post + t * hc, comb + t * hc * hc);
}

}  // namespace dsv41
