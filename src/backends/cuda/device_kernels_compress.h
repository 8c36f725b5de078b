// Device kernel bodies of the batched compressor step (DeviceBackend::compress_segments): the
// gated pooling over a group whose first rows are the cache's pending projections (held on the
// device) and whose others are the batch's new ones, a strided row copy (RoPE rows of the groups,
// the new pending remainder); the new entries go into the device mirrors packed (dk::PackK,
// device_kernels_records.h). Each body is written to compute bit for bit what the per-segment
// path computes (PoolK over the concatenated rows; FakeQuantK in place). See
// device_kernels_common.h for how kernel bodies run.
#pragma once

#include <math.h>

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"
#include "backends/cuda/device_kernels_quant.h"

namespace dsv41::dk {

// PoolK over the rows [pending rows P of pa / pb ; new rows of na / nb] without gathering them:
// out[g, c] = Σ_j a[g·r+j, c] · softmax_j(b[g·r+j, c]), row j < P from the pending buffers.
struct SplitPoolK {
  const float* pa;  // [P, D] pending projections (kv), device copy
  const float* pb;  // [P, D] pending gates
  int64_t P;
  const float* na;  // [*, D] new projections (kv)
  const float* nb;  // [*, D] new gates
  int r;
  int64_t D;
  float* out;  // [groups, D]
  DSV41_HD float at(const float* p, const float* n, int64_t row, int64_t c) const {
    return row < P ? p[row * D + c] : n[(row - P) * D + c];
  }
  DSV41_HD void operator()(int64_t id) const {
    const int64_t g = id / D, c = id % D;
    float m = -INFINITY;
    for (int j = 0; j < r; ++j) m = fmaxf(m, at(pb, nb, g * r + j, c));
    float denom = 0.0f;
    for (int j = 0; j < r; ++j) denom += expf(at(pb, nb, g * r + j, c) - m);
    float acc = 0.0f;
    for (int j = 0; j < r; ++j)
      acc += at(pa, na, g * r + j, c) * (expf(at(pb, nb, g * r + j, c) - m) / denom);
    out[id] = acc;
  }
};

struct StridedRowsK {  // dst[i, c] = src[i · stride + c], c < width
  const float* src;
  int64_t stride, width;
  float* dst;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t i = id / width, c = id % width;
    dst[id] = src[i * stride + c];
  }
};

}  // namespace dsv41::dk
