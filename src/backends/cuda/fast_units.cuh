// Weight rows read 16 bytes a lane at a time, for the tiled GEMM (fast_gemm.cu) and the expert
// kernels (fast_experts.cu): a *unit* is 8 bf16, 4 float32, 16 FP8 E4M3 or 32 FP4 E2M1 codes,
// decoded in registers to the widened matrix's bits (code value × UE8M0 scale, one multiply, as
// dk::DevWeight::stored_at). Device code only (nvcc).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "backends/cuda/device_kernels.h"

namespace dsv41::fast::units {

constexpr unsigned kFull = 0xffffffffu;

// Kinds: 1 bf16, 2 float32, 3 FP8, 4 FP4 (0: no unit fits); values per unit.
template <int kMode>
constexpr int kUnit = kMode == 1 ? 8 : kMode == 2 ? 4 : kMode == 3 ? 16 : 32;

__host__ __device__ inline bool aligned(const void* p, uintptr_t a) {
  return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

// The kind rows of `in` columns of w are read in, or 0 where 16-byte units do not fit them (every
// row start 16-byte aligned, `in` a multiple of the unit, a unit inside one scale block).
__host__ __device__ inline int unit_kind(const dk::DevWeight& w, int64_t in) {
  if (w.codes) {
    if (!aligned(w.codes, 16)) return 0;
    if (!w.fp4) return in % 16 == 0 && w.cols_log2 >= 4 ? 3 : 0;
    return in % 32 == 0 && w.cols_log2 >= 5 ? 4 : 0;
  }
  if (w.bf16) return in % 8 == 0 && aligned(w.bf16, 16) ? 1 : 0;
  return w.f32 && in % 4 == 0 && aligned(w.f32, 16) ? 2 : 0;
}

__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Two E4M3 codes (low byte first) as two floats: the hardware conversion to half is exact for
// every code (NaN codes give NaN), and so is half → float.
__device__ inline float2 e4m3x2(uint32_t two) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(static_cast<unsigned short>(two)));
  __half2 v;
  static_assert(sizeof v == sizeof h);
  memcpy(&v, &h, sizeof h);
  return __half22float2(v);
}

// Four E2M1 codes (nibbles, the lowest first) as four E4M3 bytes of the same values: magnitudes
// 0, 0.5, 1, 1.5, 2, 3, 4, 6 by a byte permute from a table, the sign to bit 7 (−0 becomes E4M3
// −0; its products add as +0 to sums that start at +0, as the host's +0).
__device__ inline uint32_t e2m1x4_as_e4m3(uint32_t nibbles) {
  const uint32_t mag = __byte_perm(0x3C383000u, 0x4C484440u, nibbles & 0x7777u);
  const uint32_t sign = __byte_perm(0u, 0x80u, (nibbles >> 1) & 0x4444u);
  return mag | sign;
}

// Values [8j, 8j + 8) of a unit (float32: its 4), times the unit's scale (stored kinds).
template <int kMode>
__device__ inline void decode(const uint4& u, int j, float scale, float* v) {
  const uint32_t p[4] = {u.x, u.y, u.z, u.w};
  if constexpr (kMode == 1) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      v[2 * q] = __uint_as_float(p[q] << 16);
      v[2 * q + 1] = __uint_as_float(p[q] & 0xffff0000u);
    }
  } else if constexpr (kMode == 2) {
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = __uint_as_float(p[q]);
  } else {
    uint32_t b[2];  // eight E4M3 codes
    if constexpr (kMode == 3) {
      b[0] = p[2 * j], b[1] = p[2 * j + 1];
    } else {
      b[0] = e2m1x4_as_e4m3(p[j]), b[1] = e2m1x4_as_e4m3(p[j] >> 16);
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float2 lo = e4m3x2(b[q]), hi = e4m3x2(b[q] >> 16);
      v[4 * q] = lo.x * scale, v[4 * q + 1] = lo.y * scale;
      v[4 * q + 2] = hi.x * scale, v[4 * q + 3] = hi.y * scale;
    }
  }
}

// The unit of row r at column c (a multiple of the unit's values) of a weight with rows of `in`.
template <int kMode>
__device__ inline uint4 load(const dk::DevWeight& w, int64_t r, int64_t c, int64_t in) {
  const void* at = kMode == 1   ? static_cast<const void*>(w.bf16 + r * in + c)
                   : kMode == 2 ? static_cast<const void*>(w.f32 + r * in + c)
                   : kMode == 3 ? static_cast<const void*>(w.codes + r * in + c)
                                : static_cast<const void*>(w.codes + r * (in / 2) + c / 2);
  return __ldg(static_cast<const uint4*>(at));
}

template <int kMode>
__device__ inline float unit_scale(const dk::DevWeight& w, int64_t r, int64_t c) {
  if constexpr (kMode >= 3) return w.scale(r, c);
  return 1.0f;
}

// Σ over one unit of x[c + i] · w(r, c + i) for kOuts weight rows r0 … r0 + kOuts − 1 (rows ≥ out:
// 0), added to acc: each product exact in double (two floats), summed in double. x: this lane's
// unit of one row of activations (16-byte aligned).
template <int kMode, int kOuts>
__device__ inline void dot_units(const dk::DevWeight& w, int64_t r0, int64_t out, int64_t c, int64_t in,
                                 const float* x, double* acc) {
  constexpr int V = kUnit<kMode>, C = V < 8 ? V : 8;
  uint4 u[kOuts];
  float sc[kOuts];
#pragma unroll
  for (int o = 0; o < kOuts; ++o) {
    const bool on = r0 + o < out;
    u[o] = on ? load<kMode>(w, r0 + o, c, in) : make_uint4(0, 0, 0, 0);
    sc[o] = on ? unit_scale<kMode>(w, r0 + o, c) : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < V / C; ++j) {
    float xv[C];
#pragma unroll
    for (int q = 0; q < C; q += 4) {
      const float4 f = *reinterpret_cast<const float4*>(x + j * C + q);
      xv[q] = f.x, xv[q + 1] = f.y, xv[q + 2] = f.z, xv[q + 3] = f.w;
    }
#pragma unroll
    for (int o = 0; o < kOuts; ++o) {
      float wv[C];
      decode<kMode>(u[o], j, sc[o], wv);
#pragma unroll
      for (int q = 0; q < C; ++q) acc[o] = fma(double(xv[q]), double(wv[q]), acc[o]);
    }
  }
}

}  // namespace dsv41::fast::units
