// The device backend's kernels (this file: the shared parts and the generic kernels; the others
// in device_kernels_{stream,attention,moe}.h), written once as per-element bodies (functors with
// a `DSV41_HD` call operator) that an executor runs for every index of a range: CudaExec launches
// one GPU thread per index (cuda_exec.cuh), HostExec loops over them on the CPU (host_exec.h).
// So the same arithmetic runs on the GPU and, in the CPU build, in the tests that compare the
// whole backend with the CPU engine on machines without a GPU.
// Simple and clearly correct first (one thread per output, sequential sums in the order of the
// CPU scalar references, double accumulation where they use it); fast kernels come later and are
// checked against these. Spec: model.md §3.1–§3.8.
// Owns nothing: every pointer is a device pointer (host pointers under HostExec) borrowed for the
// launch.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DSV41_HD __host__ __device__
#else
#define DSV41_HD
#endif

namespace dsv41::dk {

DSV41_HD inline float bf16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(uint32_t(h) << 16);
#else
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// A [out, in] row-major weight on the device, float32 or bf16 bits (exactly one set).
struct DevWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  DSV41_HD float at(int64_t i) const { return bf16 ? bf16_to_f32(bf16[i]) : f32[i]; }
  DevWeight offset(int64_t n) const { return bf16 ? DevWeight{nullptr, bf16 + n} : DevWeight{f32 + n, nullptr}; }
};

DSV41_HD inline float sigmoidf_(float v) { return 1.0f / (1.0f + expf(-v)); }
DSV41_HD inline bool is_nan(float v) { return v != v; }

// y[r, o] = Σ_i x[r, i] · W[o, i]  (double accumulation, as gemm_f32_reference). Strided rows.
struct GemmK {
  const float* x;
  int64_t x_stride;
  DevWeight w;
  int64_t in, out;
  float* y;
  int64_t y_stride;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t r = id / out, o = id % out;
    const float* xr = x + r * x_stride;
    double acc = 0;
    for (int64_t i = 0; i < in; ++i) acc += double(xr[i]) * double(w.at(o * in + i));
    y[r * y_stride + o] = float(acc);
  }
};

// RMSNorm of one row per index (rmsnorm_row's operations); y may alias x; weight may be null.
struct RmsNormK {
  const float* x;
  int64_t n;
  const float* weight;
  float eps;
  float* y;
  DSV41_HD void operator()(int64_t r) const {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
    const float mean_sq = float(ss / double(n));
    const float s = float(1.0 / sqrt(double(mean_sq + eps)));
    for (int64_t i = 0; i < n; ++i) {
      const float v = xr[i] * s;
      yr[i] = weight ? weight[i] * v : v;
    }
  }
};

// Rotation of the last rope_dim channels of each head: index = (row, head, pair). cos/sin rows
// [*, rope_dim/2] at table row (row0 + row); inverse = conjugate (rope_rotate).
struct RopeK {
  float* x;
  int64_t heads, dim;
  int rope_dim;
  const float* cos;
  const float* sin;
  int64_t row0;
  bool inverse;
  DSV41_HD void operator()(int64_t id) const {
    const int64_t half = rope_dim / 2;
    const int64_t p = id % half, rh = id / half;
    const int64_t r = rh / heads;
    float* tail = x + rh * dim + (dim - rope_dim);
    const float c = cos[(row0 + r) * half + p], s0 = sin[(row0 + r) * half + p];
    const float s = inverse ? -s0 : s0;
    const float even = tail[2 * p], odd = tail[2 * p + 1];
    tail[2 * p] = even * c - odd * s;
    tail[2 * p + 1] = even * s + odd * c;
  }
};

struct GatherRowsK {  // y[t, :] = table[ids[t], :]
  const float* table;
  const int32_t* ids;
  int64_t d;
  float* y;
  DSV41_HD void operator()(int64_t id) const { y[id] = table[int64_t(ids[id / d]) * d + id % d]; }
};

struct ScaleK {  // x[i] = divide ? x[i] / s : x[i] · s
  float* x;
  float s;
  bool divide;
  DSV41_HD void operator()(int64_t i) const { x[i] = divide ? x[i] / s : x[i] * s; }
};

template <typename T>
struct FillK {
  T* x;
  T v;
  DSV41_HD void operator()(int64_t i) const { x[i] = v; }
};

// Up to kMax launches of one body as one launch (so the per-segment steps of a batch of many
// sequences cost one launch each, not one per segment): index id runs over the bodies' ranges in
// order, body j getting its own indices [0, count[j]). Each body computes exactly what it would
// alone; the bodies must write disjoint memory (and not read what another writes).
template <class K>
struct Batched {
  static constexpr int kMax = 16;
  int n = 0;
  int64_t count[kMax] = {};
  K body[kMax];
  DSV41_HD void operator()(int64_t id) const {
    int j = 0;
    while (j + 1 < n && id >= count[j]) id -= count[j++];
    body[j](id);
  }
};

}  // namespace dsv41::dk
