// Tensor-core (mma.sync bf16) paths for the device backend's many-row products: the routed +
// shared experts grouped by expert (up projection with SwiGLU, down projection) and the GEMMs of
// stored FP8 / FP4 or bf16 weights (docs/CUDA.md "Experts and GEMMs of many-row steps on tensor
// cores", "Tensor-core sums rounded to nearest"). Kernels in mma_gemm.cu; DeviceBackend::set_mma_gemm
// (on by default since session 20) turns them on or off.
//
// Why a grouped GEMM: the warp kernels (fast_kernels.cu) read an expert's whole weight once per
// (token, expert) pair, so a batch of 64 tokens streams ≈ 64 · 7 expert matrices a layer; grouped,
// each expert's rows are gathered and its weight is read once per 64-row tile.
//
// Same function, fp32 sums: weights are dequantised exactly (an E2M1 / E4M3 code times its UE8M0
// scale has ≤ 4 significant bits, a bf16 weight is itself) and every float32 activation is split
// into three bf16 parts hi + mid + lo (truncations of 8 significant bits each, exact for every
// normal float, as the CPU engine's AMX path: kernels/cpu/gemm_amx.h), so each product of the
// tensor core is exact and only the fp32 accumulation differs from the CPU engine's float32 sums
// (different order) and from the simple bodies' double sums: each 16-deep partial sum is truncated
// once by the tensor core and added to the running sum rounded to nearest (MmaSums; tested to
// (K/16 + 8) · 2^-24 · Σ|x·w|, mma_gemm_test.cu).
//
// The chains (run by CudaExec::run_chain) fall back to their simple launches (run_simple: the
// bodies of device_kernels_moe.h, one launch each) where the fast path declines: fast kernels off,
// HostExec, or a shape the tiles do not take (mma_expert_fits false, checked by the caller on the
// host since the expert tables live on the device).
// This header is CUDA-free (the backend's HostExec build includes it); the launches are declared in
// mma_gemm_launch.h.
#pragma once

#include <cstdint>

#include "backends/cuda/device_kernels.h"

namespace dsv41::dk {

// How the tiles add up the MMAs of a sum. kPer16 (the default): each 16-deep step's three
// activation parts go into a fresh accumulator (lo, mid, then hi: the tensor core's truncation of
// that small partial sum is all the error it adds), which is then added to the running sum by an
// fp32 add (round to nearest), as the CPU engine's float sums round. kChained (session 19's
// kernels, kept for the diagnostic A/B of docs/CUDA.md): every MMA adds into the running sum, so
// each of the 3 · K / 16 MMAs truncates the whole sum toward zero; on dsv41-mini that bias was
// enough to move logits by 0.24 against the CPU engine (MmaGemmCuda.DISABLED_MiniTilesDiagnostics).
enum class MmaSums : uint8_t { kPer16, kChained };

// Workspace of a grouped expert launch, from the caller (kernels never allocate). Slots: the
// routed (token, choice) pairs tj = t · k + j in [0, m · k), then the shared expert's rows
// m · k + t. Groups: expert e < E, and group E the shared expert.
//   rows:       [m · (k + 1)] int32, the slots grouped by expert (order within a group arbitrary)
//   offsets:    [E + 2] int32, group e's slots at rows[offsets[e] .. offsets[e + 1])
//   tile_start: [E + 2] int32, the first 64-row tile of group e (prefix sums of its tile counts)
struct ExpertGroups {
  int32_t* rows = nullptr;
  int32_t* offsets = nullptr;
  int32_t* tile_start = nullptr;
};

// The experts' up projections of m tokens (ExpertUpK's function for up and, when shared_up.table
// is set, shared_up) on tensor cores. up.experts / up.weights / up.x as ExpertUpK; E routed experts.
struct GroupedUpChain {
  ExpertUpK up;
  ExpertUpK shared_up;  // table null: no shared expert
  int64_t m;
  int E;
  ExpertGroups groups;
  MmaSums sums = MmaSums::kPer16;
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(m * up.k * up.inter, up);
    if (shared_up.table) ex.for_each(m * shared_up.inter, shared_up);
  }
};

// The experts' down projection of m tokens (ExpertDownK's function) on tensor cores: each
// (slot, column) sum in fp32 into `parts` [m · (k + 1), d], then y[t, c] = the routed parts added
// in ExpertDownK's order (choice 0 … k − 1, then the shared one), each already a float.
struct GroupedDownChain {
  ExpertDownK down;
  int64_t m;
  int E;
  ExpertGroups groups;
  float* parts;
  MmaSums sums = MmaSums::kPer16;
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(m * down.d, down);
  }
};

// A stored or bf16 GEMM (GemmK's function) of `rows` rows on tensor cores: 64-row × 128-output
// tiles, fp32 sums of the exact products (GemmK sums in double).
struct MmaGemmChain {
  GemmK gemm;
  int64_t rows;
  MmaSums sums = MmaSums::kPer16;
  template <class Exec>
  void run_simple(Exec& ex) const {
    ex.for_each(rows * gemm.out, gemm);
  }
};

}  // namespace dsv41::dk

namespace dsv41::fast {

// Whether the tensor-core tiles take weight w of `in` columns: stored FP8 / FP4 with scale blocks
// at least 32 columns wide, or bf16; `in` a multiple of 32; rows 16-byte aligned. (Host or device.)
DSV41_HD inline bool mma_weight_fits(const dk::DevWeight& w, int64_t in) {
  if (in % 32 != 0) return false;
  if (w.codes) return w.cols_log2 >= 5 && (reinterpret_cast<uintptr_t>(w.codes) & 15) == 0;
  return w.bf16 && (reinterpret_cast<uintptr_t>(w.bf16) & 15) == 0;
}
// A GemmK the dense tiles take: its weight fits, x rows 16-byte aligned, a stored weight's rows `in`
// wide (GemmK may view a weight of other rows as row-major `in`; the tiles read rows).
DSV41_HD inline bool mma_gemm_fits(const dk::GemmK& k) {
  if (!mma_weight_fits(k.w, k.in) || (k.w.codes && k.w.in != k.in)) return false;
  return (reinterpret_cast<uintptr_t>(k.x) & 15) == 0 && k.x_stride % 4 == 0;
}
// Whether the dense tiles are worth it: they fit, and the grid has at least kMmaMinDenseTiles
// blocks. Each block walks the whole K one 32-wide step at a time with one step of loads in
// flight, so a narrow grid is latency-bound: on the H200 (2026-12-03) 8 blocks of K 4096 / 8192
// (mini-flash's wo_a groups and wo_b at 64 rows) ran slower than the warp kernels, 40 blocks of K
// 8192 (V4.1-Flash's wo_b at 64 rows) 1.2× faster, 256 (wq_b) 5.5× faster.
constexpr int64_t kMmaMinDenseTiles = 32;
DSV41_HD inline bool mma_gemm_worth(const dk::GemmK& k, int64_t rows) {
  return mma_gemm_fits(k) && ((rows + 63) / 64) * ((k.out + 127) / 128) >= kMmaMinDenseTiles;
}
// All of an expert's weights (w1, w3 of d columns; w2 of inter columns).
DSV41_HD inline bool mma_expert_fits(const dk::ExpertW& e, int64_t d, int64_t inter) {
  return mma_weight_fits(e.w1, d) && mma_weight_fits(e.w3, d) && mma_weight_fits(e.w2, inter);
}

}  // namespace dsv41::fast
