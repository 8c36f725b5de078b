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

// Stored weights straight to double (kinds 3 and 4), for the GEMM and expert sums: the same
// values as double(decode(...)), without float → double conversions. Those run at a quarter of the
// DFMA rate on Hopper (16 a clock per SM, the e4m3 → half → float steps on the same unit): at one
// row they, not the weight bytes, bounded the tiled GEMM (docs/CUDA.md "Batch-1 GEMMs at the
// weight bandwidth"). An E4M3 code's low 7 bits placed at bits 17 … 23 of a double's high word
// (exponent field e, mantissa m, sign at bit 31) are the code's value × 2^-1016 for every code,
// subnormals (e = 0) included, because the double's own subnormals have the same 2^-1022 step
// below its smallest normal; one exact multiply by scale · 2^1016 then gives code × scale.
// Integer byte permutes (64 a clock) and that multiply (64) replace the conversions.

// The wide multiplier scale · 2^1016 of a UE8M0 scale (a float 2^(e − 127)), or false where it is
// not exact (e > 134: 2^1016 · scale would overflow; the subnormal code 0; NaN) — then the float
// decode runs. A scale of 0 (units past `out`) gives 0.
__device__ inline bool wide_scale(float scale, double& s) {
  const uint32_t f = __float_as_uint(scale), e = f >> 23;
  s = 0.0;
  if (f == 0) return true;
  if ((f & 0x807FFFFFu) != 0 || e > 134) return false;
  s = __hiloint2double(int((e + 1912) << 20), 0);  // 2^(e − 127 + 1016)
  return true;
}

// Whether one of the four E4M3 codes of p is a NaN (low 7 bits all ones): the float decode gives
// those NaN, the wide one would not.
__device__ inline bool has_e4m3_nan(uint32_t p) {
  return (((p & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0;
}

// The E4M3 codes of a word p (lowest byte first) as doubles × s / 2^1016 …, code q at a time
// (decoding all four at once would hold four doubles per output live): each code's sign to bit 31
// and its exponent and mantissa to bits 17 … 23 of the high word by one byte permute.
struct E4m3Word {
  uint32_t em, signs01, signs23;  // each code's low 7 bits one bit up; the signs beside zero bytes
  E4m3Word() = default;
  __device__ explicit E4m3Word(uint32_t p)
      : em((p << 1) & 0xFEFEFEFEu), signs01(p & 0x00008080u), signs23(p & 0x80800000u) {}
  __device__ double at(int q, double s) const {
    const uint32_t hi = q == 0   ? __byte_perm(em, signs01, 0x4066)
                        : q == 1 ? __byte_perm(em, signs01, 0x5166)
                        : q == 2 ? __byte_perm(em, signs23, 0x6244)
                                 : __byte_perm(em, signs23, 0x7344);
    return __hiloint2double(int(hi), 0) * s;
  }
};

// Whether values [8j, 8j + 8) of a stored unit (kinds 3, 4) decode wide: no NaN code among them.
template <int kMode>
__device__ inline bool wide_codes(const uint4& u, int j) {
  if constexpr (kMode == 3) {
    const uint32_t p[4] = {u.x, u.y, u.z, u.w};
    return !has_e4m3_nan(p[2 * j]) && !has_e4m3_nan(p[2 * j + 1]);
  }
  return true;  // E2M1 has no NaN
}

// Codes [8j + 4g, 8j + 4g + 4) of a stored unit (kinds 3, 4) as E4M3 (E2M1 widened exactly).
template <int kMode>
__device__ inline E4m3Word wide_word(const uint4& u, int j, int g) {
  const uint32_t p[4] = {u.x, u.y, u.z, u.w};
  if constexpr (kMode == 3) return E4m3Word(p[2 * j + g]);
  return E4m3Word(e2m1x4_as_e4m3(p[j] >> (16 * g)));
}

// acc[o][r] = fma(x(r, q), w[o][q], acc[o][r]) for the C values q of chunk j of the kOuts units
// u (x(r, q): row r's value q as a double), q in order for every accumulator: the simple body's
// exact terms (a product of two floats is exact in double). Stored kinds decode wide where the
// unit allows it (the same doubles either way, so the same sums) for 1 or 2 rows: there a
// conversion per weight costs more than its multiply by the scale; from 4 rows on, the DFMAs
// (one per row) bound the tile and the conversion (another unit) overlaps them, while the wide
// decode's multiply would add a DFMA-unit instruction per weight.
//
// Off (kWideDecode false): on the H200 (gemv16's call, 2026-12-03 13:05 UTC) the wide decode
// with the 1-row launch changes made the batch-1 GEMMs 9–12 % and the expert kernels 14–18 %
// slower, not faster: the conversions were not what bounded them (docs/CUDA.md "Batch-1 GEMMs at
// the weight bandwidth"). Kept, tested, for the next attempt.
constexpr bool kWideDecode = false;
template <int kMode, int kRows, int kOuts, class XD>
__device__ inline void fma_chunk(double (&acc)[kOuts][kRows], const uint4* u, const float* scale, int j, XD&& x) {
  constexpr int V = kUnit<kMode>, C = V < 8 ? V : 8;
  if constexpr (kWideDecode && kMode >= 3 && kRows <= 2) {
    double s[kOuts];
    bool wide = true;
#pragma unroll
    for (int o = 0; o < kOuts; ++o) wide = wide_scale(scale[o], s[o]) && wide_codes<kMode>(u[o], j) && wide;
    if (wide) {
#pragma unroll
      for (int g = 0; g < 2; ++g) {
        E4m3Word w[kOuts];
#pragma unroll
        for (int o = 0; o < kOuts; ++o) w[o] = wide_word<kMode>(u[o], j, g);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          double wq[kOuts];
#pragma unroll
          for (int o = 0; o < kOuts; ++o) wq[o] = w[o].at(q, s[o]);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const double xv = x(r, 4 * g + q);
#pragma unroll
            for (int o = 0; o < kOuts; ++o) acc[o][r] = fma(xv, wq[o], acc[o][r]);
          }
        }
      }
      return;
    }
  }
  float w[kOuts][C];
#pragma unroll
  for (int o = 0; o < kOuts; ++o) decode<kMode>(u[o], j, scale[o], w[o]);
#pragma unroll
  for (int q = 0; q < C; ++q) {
    double wd[kOuts];
#pragma unroll
    for (int o = 0; o < kOuts; ++o) wd[o] = double(w[o][q]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const double xv = x(r, q);
#pragma unroll
      for (int o = 0; o < kOuts; ++o) acc[o][r] = fma(xv, wd[o], acc[o][r]);
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
    double sums[kOuts][1];
#pragma unroll
    for (int o = 0; o < kOuts; ++o) sums[o][0] = acc[o];
    fma_chunk<kMode, 1, kOuts>(sums, u, sc, j, [&](int, int q) { return double(xv[q]); });
#pragma unroll
    for (int o = 0; o < kOuts; ++o) acc[o] = sums[o][0];
  }
}

}  // namespace dsv41::fast::units
