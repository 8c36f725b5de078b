// Device kernel body of DSpark's target features (model/dspark.h): the mean of the hc streams
// entering a target layer, as CpuBackend::capture_features computes it (float sum over the
// streams in order, times 1/hc). See device_kernels_common.h for how kernel bodies run.
#pragma once

#include <cstdint>

#include "backends/cuda/device_kernels_common.h"

namespace dsv41::dk {

struct StreamMeanK {  // f[t, i] (row stride `width`) = Σ_j x[t, j, i] · (1/hc), for i < d
  const float* x;
  int hc;
  int64_t d, width;
  float* f;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t t = id / d, i = id % d;
    const float* xt = x + t * hc * d;
    float sum = 0;
    for (int j = 0; j < hc; ++j) sum += xt[j * d + i];
    f[t * width + i] = sum * (1.0f / static_cast<float>(hc));
  }
};

}  // namespace dsv41::dk
