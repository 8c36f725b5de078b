// Indexer scoring: the scalar definition and the dispatch (see index_score.h).
#include "kernels/cpu/index_score.h"

#include <algorithm>
#include <cmath>

namespace dsv41 {

// In index_score_avx512.cpp / index_score_avx2.cpp (built for those ISAs; called only when the
// CPU has them).
void index_score_tile_avx512(const float* q, const float* w, int64_t rows, int nh, int dh, const float* keys_t,
                             float scale, float* out, int64_t out_stride, int cols);
void index_score_tile_avx2(const float* q, const float* w, int64_t rows, int nh, int dh, const float* keys_t,
                           float scale, float* out, int64_t out_stride, int cols);

// The channels [0, 16·⌊dh / 16⌋) of transpose_key_tile; returns how many it did.
int transpose_key_tile_avx512(const float* keys, int n, int dh, float* keys_t);

namespace {

// q_h · key with the channels read at key[d · stride] (1: a key row; kIndexKeyTile: a tile column).
float block_exact_dot(const float* qh, const float* key, int64_t stride, int dh) {
  float s = 0.0f;
  for (int b0 = 0; b0 < dh; b0 += kIndexDotBlock) {
    float acc = 0.0f;
    for (int d = b0; d < std::min(dh, b0 + kIndexDotBlock); ++d) acc = std::fma(qh[d], key[d * stride], acc);
    s = b0 == 0 ? acc : s + acc;
  }
  return s;
}

float score(const float* q, const float* w, int nh, int dh, const float* key, int64_t stride, float scale) {
  float total = 0.0f;
  for (int h = 0; h < nh; ++h)
    total = std::fma(std::max(block_exact_dot(q + int64_t{h} * dh, key, stride, dh), 0.0f) * scale, w[h], total);
  return total;
}

}  // namespace

float index_score_reference(const float* q, const float* w, int nh, int dh, const float* key, float scale) {
  return score(q, w, nh, dh, key, 1, scale);
}

void transpose_key_tile(CpuIsa isa, const float* keys, int n, int dh, float* keys_t) {
  int d0 = 0;
  if (std::min(isa, cpu_best_isa()) >= CpuIsa::kAvx512) d0 = transpose_key_tile_avx512(keys, n, dh, keys_t);
  for (int d = d0; d < dh; ++d)
    for (int j = 0; j < kIndexKeyTile; ++j) keys_t[d * kIndexKeyTile + j] = j < n ? keys[int64_t{j} * dh + d] : 0.0f;
}

void index_score_tile(CpuIsa isa, const float* q, const float* w, int64_t rows, int nh, int dh, const float* keys_t,
                      float scale, float* out, int64_t out_stride, int cols) {
  switch (std::min(isa, cpu_best_isa())) {
    case CpuIsa::kAmx:  // never: cpu_best_isa() ≤ kAvx512
    case CpuIsa::kAvx512:
      return index_score_tile_avx512(q, w, rows, nh, dh, keys_t, scale, out, out_stride, cols);
    case CpuIsa::kAvx2:
      return index_score_tile_avx2(q, w, rows, nh, dh, keys_t, scale, out, out_stride, cols);
    case CpuIsa::kPortable:
      break;
  }
  const int64_t vec = int64_t{nh} * dh;
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < cols; ++j)
      out[r * out_stride + j] = score(q + r * vec, w + r * nh, nh, dh, keys_t + j, kIndexKeyTile, scale);
}

}  // namespace dsv41
