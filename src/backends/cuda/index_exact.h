// The arithmetic behind the indexer scores on integer tensor cores (index_scores_int.cu), apart
// from the MMAs so that the CPU tests check it too (device_kernels_test.cpp).
//
// IndexScoreK forms, per (entry, head), acc = Σ_c double(k_c)·q_c over the dh channels in order,
// in double. A query block of 32 channels that the backend fake-quantised to MXFP4 holds n·2^u
// with integers |n| < 16, u = ⌊log2 max|q|⌋ − 3; a key block of an MXFP4 record holds nk·2^(s−128)
// with nk = 2·E2M1 ∈ {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12} and s its UE8M0 byte. So block b's products
// sum to an int32 S_b (|S_b| ≤ 32·15·12) times 2^E_b, E_b = u_b + s_b − 128. Every product of the
// simple chain is exact in double; every partial sum is a multiple of 2^min E below 2^(15 + max E),
// so while max E − min E ≤ kIndexExactSpan (over the blocks whose products can be nonzero) all of
// them are exact too: the chain's double is the exact value, and so is Σ_b S_b·2^E_b formed in any
// order. Outside that (a wider span, a key scale byte ≥ 253 — 12·2^125 overflows the float the
// record decodes to — or 0xFF, NaN; a query block that is not of that form) the caller takes the
// simple chain.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cuda/device_kernels_common.h"

namespace dsv41::dk {

constexpr int kIndexExactSpan = 38;
// Filter and refine's fused form (index_refine.h): a head's (or key's) nonzero blocks within this
// many binades of each other, so that shifting each block's integers to the least exponent keeps
// them within int8.
constexpr int kIndexFusedSpan = 3;
// A query block's unit exponent, or one of these marks (real units lie within ±160).
constexpr int kIndexZeroBlock = 1 << 16, kIndexNotExact = 1 << 17;

DSV41_HD inline double index_pow2(int e) {  // 2^e for e within double's normal range
  uint64_t bits = static_cast<uint64_t>(e + 1023) << 52;
  double d;
#if defined(__CUDA_ARCH__)
  d = __longlong_as_double(static_cast<long long>(bits));
#else
  std::memcpy(&d, &bits, sizeof d);
#endif
  return d;
}

// Query block q[0..31] as integers n[c] (q_c = n_c·2^unit): the unit, kIndexZeroBlock (all zero)
// or kIndexNotExact (NaN / ±inf, or a value off the grid of the block's MXFP4 unit).
DSV41_HD inline int index_query_block(const float* q, int8_t* n) {
  float amax = 0.0f;
  bool finite = true;
  for (int c = 0; c < 32; ++c) {
    finite = finite && std::isfinite(q[c]);
    amax = fmaxf(amax, fabsf(q[c]));
  }
  if (!finite) return kIndexNotExact;
  if (amax == 0.0f) {
    for (int c = 0; c < 32; ++c) n[c] = 0;
    return kIndexZeroBlock;
  }
  const int unit = ilogbf(amax) - 3;
  const double inv = index_pow2(-unit);
  bool exact = true;
  for (int c = 0; c < 32; ++c) {
    const double v = double(q[c]) * inv;  // |v| < 16: amax < 2^(unit + 4)
    exact = exact && v == std::rint(v);
    n[c] = static_cast<int8_t>(exact ? int(v) : 0);
  }
  return exact ? unit : kIndexNotExact;
}

// 2·E2M1 of a code nibble as an integer (the record's value is that times 2^(s − 128)).
DSV41_HD inline int index_key_value(uint8_t code) {
  constexpr int kMag[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  const int m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

// The span over a head's (or an entry's) block exponents, counting only blocks whose products can
// be nonzero; a value past kIndexExactSpan where the blocks are not all exact. Query: units from
// index_query_block; key: scale bytes (exact up to 252), `nonzero` bit b set when block b has a
// nonzero code.
DSV41_HD inline int index_query_span(const int* units, int blocks) {
  int lo = 1 << 20, hi = -(1 << 20);
  for (int b = 0; b < blocks; ++b) {
    if (units[b] == kIndexNotExact) return 1 << 20;
    if (units[b] == kIndexZeroBlock) continue;
    lo = units[b] < lo ? units[b] : lo;
    hi = units[b] > hi ? units[b] : hi;
  }
  return hi >= lo ? hi - lo : 0;
}
DSV41_HD inline int index_key_span(const uint8_t* scales, uint32_t nonzero, int blocks) {
  int lo = 1 << 20, hi = -(1 << 20);
  for (int b = 0; b < blocks; ++b) {
    if (scales[b] > 252) return 1 << 20;
    if (!(nonzero >> b & 1u)) continue;
    lo = scales[b] < lo ? scales[b] : lo;
    hi = scales[b] > hi ? scales[b] : hi;
  }
  return hi >= lo ? hi - lo : 0;
}

// Σ_b sums[b]·2^(unit_b + scale_b − 128), in block order (exact where the spans allow; a zero
// query block's unit may be anything finite, e.g. 0).
DSV41_HD inline double index_exact_dot(const int* sums, const int* units, const uint8_t* scales, int blocks) {
  double acc = 0;
  for (int b = 0; b < blocks; ++b) acc += double(sums[b]) * index_pow2(units[b] + int(scales[b]) - 128);
  return acc;
}

}  // namespace dsv41::dk
