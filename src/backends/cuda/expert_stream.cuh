// Batch-1 expert rows streamed through shared memory (docs/CUDA.md "Batch-1 experts streamed,
// session 20"): the placed decode of exact_units.cuh on units that each lane copies into its own
// ring of shared memory kStages steps ahead. Same sums, same bits as units::dot_units; device
// code only (nvcc).
//
// Why: ncu (session 20) showed the batch-1 expert launches at 25 % occupancy (100–128 registers)
// with each warp's loads waiting for the step before: ≈ 24 % of the DRAM rate. The float decode is
// moreover held by its float → double conversions (16 a clock per SM: ≈ 55 µs for the synthetic
// up launch alone). Here the weight units go global → shared by cp.async, which needs no register
// while in flight, so a lane keeps kStages steps of its rows' units (kStages · 8 · 16 bytes for
// the up launch's 8 rows) on the way while it sums the step that has landed; the sums are the
// placed decode's (no conversion a weight). Each lane reads back only what it copied itself, so
// its own cp.async.wait_group is all the synchronisation there is.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/exact_units.cuh"
#include "backends/cuda/fast_units.cuh"

namespace dsv41::fast::stream {

// 16 bytes global → shared, asynchronously (L2 only). The "memory" clobbers keep the compiler
// from moving this lane's reads of a slot past the copy that refills it or before the wait for it.
__device__ __forceinline__ void copy16(uint4* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The ring's units for one warp: kStages steps of R rows, a unit per lane.
template <int R, int kStages>
constexpr int kRingUnits = kStages * R * 32;

// units::dot_units<kMode, 1> on a unit already read (u, its scale code): the same operations in
// the same order, for the units the placed decode does not take.
template <int kMode>
__device__ inline void float_unit(const uint4& u, uint32_t code, const float* x, double& acc) {
  constexpr int V = units::kUnit<kMode>, C = 8;
  const float sc = dk::ue8m0_value(uint8_t(code));
#pragma unroll
  for (int j = 0; j < V / C; ++j) {
    float xv[C], wv[C];
#pragma unroll
    for (int q = 0; q < C; q += 4) {
      const float4 f = *reinterpret_cast<const float4*>(x + j * C + q);
      xv[q] = f.x, xv[q + 1] = f.y, xv[q + 2] = f.z, xv[q + 3] = f.w;
    }
    units::decode<kMode>(u, j, sc, wv);
#pragma unroll
    for (int q = 0; q < C; ++q) acc = fma(double(xv[q]), double(wv[q]), acc);
  }
}

// acc[m · kOuts + o] += this lane's share of Σ_c x[c] · W_m[r0 + o, c] (rows ≥ out: nothing), as
// exact::lane_rows adds it (the units at columns lane · V + 32 · V · s in order of s, each by the
// placed decode or, where that does not take it, the float decode), with the units of steps
// s + 1 … s + kStages − 1 in flight while step s is summed. ring: this warp's kRingUnits<R, kStages>
// units of shared memory (slot, row, lane). The warp's lanes run the same steps (lanes past the
// row's units idle through them). x: n floats, 16-byte aligned; every weight of kind kMode.
template <int kMode, int kMats, int kOuts, int kStages>
__device__ inline void stream_rows(const exact::RowSet& rs, int64_t n, const float* x, int lane, uint4* ring,
                                   double* acc) {
  constexpr int V = units::kUnit<kMode>, R = kMats * kOuts, C = exact::Placed<kMode>::kCols;
  constexpr int kOff = exact::Placed<kMode>::kOff;
  dk::DevWeight w[kMats];
#pragma unroll
  for (int m = 0; m < kMats; ++m) w[m] = *rs.w[m];
  bool on[R];
#pragma unroll
  for (int i = 0; i < R; ++i) on[i] = rs.r0 + i % kOuts < rs.out;
  const int64_t units = n / V;
  const int steps = int((units + 31) / 32);
  // Step s's units into ring slot `slot` (one commit group, empty past the row's end) and their
  // scale codes into codes.
  const auto issue = [&](int s, int slot, uint32_t* codes) {
    const int64_t u = lane + 32 * int64_t(s);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      codes[i] = 0;
      if (u >= units || !on[i]) continue;
      const dk::DevWeight& wm = w[i / kOuts];
      const int64_t r = rs.r0 + i % kOuts;
      copy16(ring + (slot * R + i) * 32 + lane, wm.codes + r * (kMode == 4 ? n / 2 : n) + u * 16);  // units::load's unit
      codes[i] = __ldg(wm.scales + ((wm.phase + r) >> wm.rows_log2) * wm.scale_cols + ((u * V) >> wm.cols_log2));
    }
    commit();
  };
  // Step s, landed in `slot`, added as exact::lane_rows adds it.
  const auto sum_step = [&](int slot, int64_t c, const uint32_t* codes) {
    const uint4* sl = ring + slot * R * 32 + lane;
    const float* xc = x + c;
    bool placed[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      placed[i] = on[i] && exact::placed_ok<kMode>(sl[i * 32], codes[i]);
      if (placed[i])
        acc[i] = __dmul_rn(acc[i], exact::pow2(-(kOff + int(codes[i]))));
      else if (on[i])
        float_unit<kMode>(sl[i * 32], codes[i], xc, acc[i]);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // the unit's four words, C columns each
      double xd[C];
#pragma unroll
      for (int j = 0; j < C; j += 4) {
        const float4 f = *reinterpret_cast<const float4*>(xc + q * C + j);
        xd[j] = __dmul_rn(double(f.x), exact::pow2(exact::kXShift));
        xd[j + 1] = __dmul_rn(double(f.y), exact::pow2(exact::kXShift));
        xd[j + 2] = __dmul_rn(double(f.z), exact::pow2(exact::kXShift));
        xd[j + 3] = __dmul_rn(double(f.w), exact::pow2(exact::kXShift));
      }
#pragma unroll
      for (int i = 0; i < R; ++i) {
        if (!placed[i]) continue;
        const uint32_t word = reinterpret_cast<const uint32_t*>(sl + i * 32)[q];
        uint32_t hw[C];
        exact::high_words<kMode>(word, hw);
#pragma unroll
        for (int j = 0; j < C; ++j) acc[i] = fma(xd[j], exact::high_word_double(hw[j]), acc[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (placed[i]) acc[i] = __dmul_rn(acc[i], exact::pow2(kOff + int(codes[i])));
  };
  uint32_t ahead[kStages][R];  // scale codes of the steps in flight, the oldest first
#pragma unroll
  for (int st = 0; st < kStages; ++st) issue(st, st, ahead[st]);
  for (int s = 0; s < steps; ++s) {
    wait<kStages - 1>();  // this lane's copies of step s have landed
    const int slot = s % kStages;
    const int64_t u = lane + 32 * int64_t(s);
    if (u < units) sum_step(slot, u * V, ahead[0]);
#pragma unroll
    for (int st = 0; st + 1 < kStages; ++st)
#pragma unroll
      for (int i = 0; i < R; ++i) ahead[st][i] = ahead[st + 1][i];
    issue(s + kStages, slot, ahead[kStages - 1]);  // refills the slot just read
  }
  wait<0>();  // the ring is free for the warp's next rows
}

// stream_rows for the kind rows of n columns take (FP4 or FP8 units, the same for every weight of
// the set, x 16-byte aligned); false (nothing read) otherwise.
template <int kMats, int kOuts, int kStages>
__device__ inline bool stream_sums(const exact::RowSet& rs, int64_t n, const float* x, int lane, uint4* ring,
                                   double* acc) {
  if (!units::aligned(x, 16)) return false;
  const int kind = units::unit_kind(*rs.w[0], n);
  if (kMats == 2 && units::unit_kind(*rs.w[1], n) != kind) return false;
  if (kind == 4) {
    stream_rows<4, kMats, kOuts, kStages>(rs, n, x, lane, ring, acc);
    return true;
  }
  if (kind == 3) {
    stream_rows<3, kMats, kOuts, kStages>(rs, n, x, lane, ring, acc);
    return true;
  }
  return false;
}

}  // namespace dsv41::fast::stream
