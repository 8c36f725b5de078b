// Stored FP8 / FP4 weight units summed against x in double without float-to-double conversions,
// for the batch-1 expert kernels (fast_kernels.cu; docs/CUDA.md "Batch-1 experts without
// conversions"). Same sums, same bits as units::dot_units; device code only (nvcc).
//
// Why: units::dot_units widens every weight code to float (E4M3 → half → float, × scale) and then
// to double, and x to double, for one exact DFMA. Hopper converts to and from 64-bit types at 16
// a clock per SM, a quarter of the DFMA rate; an FP4 row streams 33 weights a clock per SM at the
// copy rate, so the conversions alone held the batch-1 experts to ≈ 40 % of it.
//
// How: a code's magnitude bits placed in a double's high word *are* a double — E2M1 bits e1 e0 m
// at bits 19…21 give value · 2^-1022, E4M3 bits e3…e0 m2…m0 at bits 17…23 value · 2^-1016, the
// code's subnormals landing on the double's (same step below the smallest normal), zero on zero,
// the sign at bit 31 — built with one byte permute a weight. The scale and the placement's power
// of two leave the products: x enters as x · 2^512, and the lane's running sum of a row is held
// as sum · 2^-(kOff + E) while the unit of UE8M0 scale code E is added, then multiplied back.
// Every step is exact or is the same rounding scaled by a power of two:
//  - products x · w are multiples of 2^-285 (x ≥ 2^-149 or 0, w ≥ 2^-136 or 0), so a running
//    sum is 0 or ≥ 2^-285 in magnitude and ≤ in · 2^256; held scaled it stays within
//    [2^-912, 2^-100]: normal doubles, where round-to-nearest commutes with powers of two, and so
//    fma(x · 2^512, w · 2^-1022, s · 2^-(kOff+E)) = 2^-(kOff+E) · fma(x, w · 2^(E−127), s) bit for
//    bit (infinities, NaN and signed zeros alike);
//  - units whose scale makes some weight not a finite float (UE8M0 above kMaxScale: the float
//    decode gives ±inf there, or NaN for 0xFF) and FP8 units holding a NaN code take
//    units::dot_units itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "backends/cuda/fast_units.cuh"

namespace dsv41::fast::exact {

// The power of x's offset (x · 2^kXShift is a normal double for every finite float x).
constexpr int kXShift = 512;

// Per stored kind (units::kUnit: 3 FP8, 4 FP4): the placement's power (value · 2^-kPlaced), the
// largest UE8M0 code whose weights are all finite floats (6 · 2^125 and 448 · 2^119), the columns
// one 32-bit word of the unit holds, and the running sum's offset kOff = kPlaced − kXShift − 127.
template <int kMode>
struct Placed {
  static constexpr int kPlaced = kMode == 4 ? 1022 : 1016;
  static constexpr uint32_t kMaxScale = kMode == 4 ? 252 : 246;
  static constexpr int kCols = kMode == 4 ? 8 : 4;
  static constexpr int kOff = kPlaced - kXShift - 127;
};

// The double whose high word is hi and low word 0.
__host__ __device__ inline double high_word_double(uint32_t hi) {
#ifdef __CUDA_ARCH__
  return __hiloint2double(int(hi), 0);
#else
  const uint64_t bits = uint64_t(hi) << 32;
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
#endif
}

// 2^e for e in [-1022, 1023].
__host__ __device__ inline double pow2(int e) { return high_word_double(uint32_t(e + 1023) << 20); }

// The byte permute with PTX's sign-replicating selectors (selector bit 3), which __byte_perm
// does not promise; on the host its definition (for the host tests of the decode).
__host__ __device__ inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
#else
  const uint64_t pool = uint64_t(b) << 32 | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = (sel >> (4 * i)) & 0xFu, byte = uint32_t(pool >> (8 * (s & 7u))) & 0xFFu;
    d |= ((s & 8u) ? ((byte & 0x80u) ? 0xFFu : 0u) : byte) << (8 * i);
  }
  return d;
#endif
}

// The high words of the doubles of one word of a unit's codes (Placed<kMode>::kCols columns, the
// lowest first). FP4: the even nibbles' magnitudes at bits 3…5 of their byte and signs at bit 7,
// then the odd nibbles'; a permute puts a magnitude byte at bits 16…23 and its sign byte at
// 24…31, bits 0…15 copying the sign of a magnitude byte (always 0). FP8: the codes' 7 low bits at
// bits 1…7 of their byte, the signs masked so that each sign word has a zero byte to fill
// bits 0…15 from.
template <int kMode>
__host__ __device__ inline void high_words(uint32_t p, uint32_t* hw) {
  if constexpr (kMode == 4) {
    const uint32_t mag_even = (p << 3) & 0x38383838u, sign_even = (p << 4) & 0x80808080u;
    const uint32_t mag_odd = (p >> 1) & 0x38383838u, sign_odd = p & 0x80808080u;
#ifdef __CUDA_ARCH__  // (the host compiler, which also sees this function, has no such pragma)
#pragma unroll
#endif
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t sel = 0x88u | k << 8 | (4u + k) << 12;
      hw[2 * k] = prmt(mag_even, sign_even, sel);
      hw[2 * k + 1] = prmt(mag_odd, sign_odd, sel);
    }
  } else {
    const uint32_t mag = (p << 1) & 0xFEFEFEFEu;
    const uint32_t sign_02 = p & 0x00800080u, sign_13 = p & 0x80008000u;  // zero bytes 5, 7 / 4, 6
    hw[0] = prmt(mag, sign_02, 0x4055u);
    hw[1] = prmt(mag, sign_13, 0x5144u);
    hw[2] = prmt(mag, sign_02, 0x6255u);
    hw[3] = prmt(mag, sign_13, 0x7344u);
  }
}

// Whether a unit may take the placed decode: its scale code at most kMaxScale and (FP8) no NaN
// code (0x7F / 0xFF: with the sign bit set and 1 added, such a byte alone wraps to below 0x80).
template <int kMode>
__host__ __device__ inline bool placed_ok(const uint4& u, uint32_t scale_code) {
  if (scale_code > Placed<kMode>::kMaxScale) return false;
  if constexpr (kMode == 3) {
    const uint32_t all = ((u.x | 0x80808080u) + 0x01010101u) & ((u.y | 0x80808080u) + 0x01010101u) &
                         ((u.z | 0x80808080u) + 0x01010101u) & ((u.w | 0x80808080u) + 0x01010101u);
    return (all & 0x80808080u) == 0x80808080u;
  }
  return true;
}

// Row r of weight m of a lane's row set (a row ≥ `out` reads nothing and sums 0).
struct RowSet {
  const dk::DevWeight* w[2];
  int64_t r0, out;
};

template <int kMode>
__device__ inline uint32_t scale_code(const dk::DevWeight& w, int64_t r, int64_t c) {
  return w.scales[((w.phase + r) >> w.rows_log2) * w.scale_cols + (c >> w.cols_log2)];
}

// acc[m · kOuts + o] += this lane's share of Σ_c x[c] · W_m[r0 + o, c] over rows of n columns,
// for m < kMats: the units at columns lane · V + 32 · V · step, each added as units::dot_units
// adds it (kOuts = 1 there per row: the same double operations in the same order, so the same
// bits). kAhead: the next step's units and scale codes are loaded before this step's sums.
// x: n floats, 16-byte aligned; every weight of kind kMode (units::unit_kind).
template <int kMode, int kMats, int kOuts, bool kAhead>
__device__ inline void lane_rows(const RowSet& rs, int64_t n, const float* x, int lane, double* acc) {
  constexpr int V = units::kUnit<kMode>, R = kMats * kOuts, C = Placed<kMode>::kCols;
  constexpr int kOff = Placed<kMode>::kOff;
  bool on[R];
#pragma unroll
  for (int i = 0; i < R; ++i) on[i] = rs.r0 + i % kOuts < rs.out;
  uint4 u[R];
  uint32_t e[R];
  const auto load_step = [&](int64_t c, uint4* uu, uint32_t* ee) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const dk::DevWeight& w = *rs.w[i / kOuts];
      const int64_t r = rs.r0 + i % kOuts;
      uu[i] = on[i] ? units::load<kMode>(w, r, c, n) : make_uint4(0, 0, 0, 0);
      ee[i] = on[i] ? scale_code<kMode>(w, r, c) : 0u;
    }
  };
  int64_t c = int64_t(lane) * V;
  if (kAhead && c < n) load_step(c, u, e);
  for (; c < n; c += 32 * V) {
    uint4 un[R];
    uint32_t en[R];
    if constexpr (kAhead) {
      if (c + 32 * V < n) load_step(c + 32 * V, un, en);
    } else {
      load_step(c, u, e);
    }
    bool placed[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      placed[i] = on[i] && placed_ok<kMode>(u[i], e[i]);
      if (placed[i]) {
        acc[i] = __dmul_rn(acc[i], pow2(-(kOff + int(e[i]))));
      } else if (on[i]) {  // the float decode of before, on this unit alone
        const dk::DevWeight& w = *rs.w[i / kOuts];
        const int64_t r = rs.r0 + i % kOuts;
        units::dot_units<kMode, 1>(w, r, r + 1, c, n, x + c, &acc[i]);
      }
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // the unit's four words, C columns each
      double xd[C];
#pragma unroll
      for (int j = 0; j < C; j += 4) {
        const float4 f = *reinterpret_cast<const float4*>(x + c + q * C + j);
        xd[j] = __dmul_rn(double(f.x), pow2(kXShift)), xd[j + 1] = __dmul_rn(double(f.y), pow2(kXShift));
        xd[j + 2] = __dmul_rn(double(f.z), pow2(kXShift)), xd[j + 3] = __dmul_rn(double(f.w), pow2(kXShift));
      }
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (!placed[i]) continue;
        const uint32_t word = q == 0 ? u[i].x : q == 1 ? u[i].y : q == 2 ? u[i].z : u[i].w;
        uint32_t hw[C];
        high_words<kMode>(word, hw);
#pragma unroll
        for (int j = 0; j < C; ++j) acc[i] = fma(xd[j], high_word_double(hw[j]), acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (placed[i]) acc[i] = __dmul_rn(acc[i], pow2(kOff + int(e[i])));
    if constexpr (kAhead) {
#pragma unroll
      for (int i = 0; i < R; ++i) u[i] = un[i], e[i] = en[i];
    }
  }
}

}  // namespace dsv41::fast::exact
