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

// The stored weight formats decoded exactly as base/numerics.cpp's tables (model/dequant.h's
// widening): E4M3 (0x7F / 0xFF NaN, subnormals m · 2^-9), E2M1 (code 8, −0, decodes as +0) and
// UE8M0 scales (2^(code − 127), code 0 the subnormal 2^-127; 0xFF NaN, refused at load).
DSV41_HD inline float bits_to_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}
DSV41_HD inline float e4m3_value(uint8_t code) {
  const uint32_t e = (code >> 3) & 0xFu, m = code & 0x7u;
  float mag;
  if (e == 0xFu && m == 0x7u) mag = bits_to_f32(0x7FC00000u);
  else if (e == 0) mag = float(m) * 0x1p-9f;
  else mag = bits_to_f32((e + 120u) << 23 | m << 20);
  return (code & 0x80) ? -mag : mag;
}
DSV41_HD inline float e2m1_value(uint8_t code) {
  const uint32_t i = code & 0x7u;
  if (i == 0) return 0.0f;
  const uint32_t mag = i == 1 ? 0x3F000000u : ((i >> 1) + 126u) << 23 | (i & 1u) << 22;  // 0.5, or 1.m · 2^(e−1)
  return bits_to_f32(mag | ((code & 0x8u) ? 0x80000000u : 0u));
}
DSV41_HD inline float ue8m0_value(uint8_t code) {
  if (code == 0xFF) return bits_to_f32(0x7FC00000u);
  return bits_to_f32(code == 0 ? 0x00400000u : uint32_t(code) << 23);
}

// A [out, in] row-major weight on the device: float32, bf16 bits, or the checkpoint's stored
// bytes (exactly one set). Stored (codes != null): FP8 E4M3 codes, one byte per weight, or FP4
// E2M1 (fp4), two per byte with the low nibble the even column, as QuantWeights lays them out
// (kernels/cpu/gemm_quant.h): row r's codes at codes + r · row_bytes(); the UE8M0 scale of (r, c)
// at scales[((phase + r) >> rows_log2) · scale_cols + (c >> cols_log2)]. An element is decoded to
// code value × scale, one float multiply: the bits of the widened matrix, so every kernel gives
// the same result on a stored weight as on its widening.
struct DevWeight {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t in = 0;          // stored: columns of a row
  int32_t scale_cols = 0;  // stored: ceil(in / block columns)
  int32_t phase = 0;       // stored: rows of the first scale row before row 0 (a row slice)
  uint8_t fp4 = 0, rows_log2 = 0, cols_log2 = 5;
  DSV41_HD bool stored() const { return codes != nullptr; }
  DSV41_HD int64_t row_bytes() const { return fp4 ? in / 2 : in; }
  DSV41_HD float scale(int64_t r, int64_t c) const {
    return ue8m0_value(scales[((phase + r) >> rows_log2) * scale_cols + (c >> cols_log2)]);
  }
  // Element (r, c) of a stored weight.
  DSV41_HD float stored_at(int64_t r, int64_t c) const {
    const float v = fp4 ? e2m1_value((c & 1) ? uint8_t(codes[r * (in / 2) + c / 2] >> 4)
                                             : uint8_t(codes[r * (in / 2) + c / 2] & 0x0F))
                        : e4m3_value(codes[r * in + c]);
    return v * scale(r, c);
  }
  // Element i of the row-major matrix.
  DSV41_HD float at(int64_t i) const {
    if (codes) return stored_at(i / in, i % in);
    return bf16 ? bf16_to_f32(bf16[i]) : f32[i];
  }
  // The view from element n on; for a stored weight n must be a whole number of rows.
  DevWeight offset(int64_t n) const {
    DevWeight w = *this;
    if (codes) {
      const int64_t r = n / in, first = phase + r;
      w.codes = codes + r * row_bytes();
      w.scales = scales + (first >> rows_log2) * scale_cols;
      w.phase = int32_t(first & ((int64_t{1} << rows_log2) - 1));
    } else if (bf16) {
      w.bf16 = bf16 + n;
    } else {
      w.f32 = f32 + n;
    }
    return w;
  }
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
  static Batched one(int64_t count, const K& body) {  // a batch of one body
    Batched b;
    b.n = 1;
    b.count[0] = count;
    b.body[0] = body;
    return b;
  }
  DSV41_HD void operator()(int64_t id) const {
    int j = 0;
    while (j + 1 < n && id >= count[j]) id -= count[j++];
    body[j](id);
  }
};

// Two launches whose bodies touch disjoint memory (neither reads what the other writes) as one:
// indices [0, na) run a, the rest run b from its index 0. Each index computes exactly what it
// would in its own launch, so the results are the two launches' bits. For bodies that have no fast
// kernel of their own (the pair runs as the simple one-thread-per-index kernel).
template <class A, class B>
struct Both {
  A a;
  int64_t na;
  B b;
  DSV41_HD void operator()(int64_t id) const {
    if (id < na)
      a(id);
    else
      b(id - na);
  }
};

}  // namespace dsv41::dk
