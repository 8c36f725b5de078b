// The tiled GEMM of fast_kernels.h (`launch_gemm_tiled`, docs/CUDA.md "Fast kernels for decode
// steps"): y = x · Wᵀ for the few rows of a decode step, reading the weight once at full width.
// A warp computes kOuts outputs for a tile of up to kRows rows; each lane loads 16 bytes of each of
// its kOuts weight rows per step (8 bf16, 4 floats, 16 FP8 or 32 FP4 codes), decodes them in
// registers to the widened matrix's bits and multiplies them with the x values of every row of the
// tile, so a weight byte is read once per tile and an x value once per kOuts outputs (4, or 2 for
// 8-row tiles; tiles of 2 … 8 rows whose x chunk fits shared memory widen x to double once per
// block there instead, "the staged path" below, 4 outputs a warp). Where a row is long against
// the outputs (wo_b, wo_a, the head), the warps of a block split `in` between them (split-K,
// partial sums added in a fixed order in shared memory); where that split takes all of a block's
// warps and the GEMM has blocks enough, a warp instead adds the parts of its outputs one after
// another over x staged for the whole block ("the serial split" below).
// Sums: every product x · w is formed exactly in double and summed in double, as the simple body
// does; only the order of the double additions differs, so a result equals the simple one up to a
// float rounding of nearly the same double. (Float partial sums were tried first: within
// 32 · 2^-24 · Σ|x·w| of the simple sums, but on the H200 dsv41-mini's rollback comparison against
// the CPU engine then failed its bound (5.5e-2, was 3.75e-3; most likely a different FP8 / MXFP4
// rounding flipping downstream), so the GEMM keeps the simple body's exact terms; docs/CUDA.md.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/fast_units.cuh"

namespace dsv41::fast {
namespace {

using namespace units;

constexpr int kThreads = 256, kWarps = kThreads / 32;
// Outputs per warp: 4, or 2 for tiles of 8 rows (so that the accumulators stay in registers).
__host__ __device__ constexpr int outs_for(int64_t tile_rows) { return tile_rows >= 8 ? 2 : 4; }
__host__ __device__ constexpr int tile_for(int64_t rows) { return rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1; }

// The staged path (tiles of 2 … 8 rows, fewer than kWarps warps per output group): the block's x
// values for the current step(s) are widened to double once, into shared memory, and every warp of
// the block reads them there; a warp then computes kStagedOuts outputs. (The register path widens
// each x value in every warp, once per 2 or 4 outputs: on the H200 those float → double
// conversions, a quarter of the DFMA rate, took most of an 8-row tile's time.) Same products, same
// order of sums as the register path, so the same bits.
constexpr int kStagedOuts = 4;
constexpr int kStageDoubles = 4096;  // 32 KB: kRows × split × 32 lanes × C values
__host__ __device__ constexpr bool stages(int64_t tile_rows, int split, int64_t chunk) {
  return tile_rows >= 2 && split < kWarps && tile_rows * split * 32 * chunk <= kStageDoubles;
}

// The serial split (tiles of 2 … 8 rows whose output groups take all kWarps warps, so the staged
// path's block would hold one output group and share no x): every warp of the block takes its own
// kStagedOuts outputs and forms the split's parts of them one after another — part p over steps
// p, p + split, … as warp p of the register path does — each over one step's x staged for the
// whole block, each part's warp sums added to a running sum in part order (the register path's
// order in shared memory): the same bits. A block then holds kWarps output groups instead of one,
// so it runs only where that still leaves kSerialBlocks blocks in the launch (wo_a's 8 groups at
// batch 8: 256; not wo_b alone: 32).
constexpr int64_t kSerialBlocks = 128;

enum class TiledPath { kRegister, kStaged, kSerial };

// One GEMM of a launch: its body, rows, warps per output group (split-K), path and blocks.
struct TiledJob {
  dk::GemmK k;
  int64_t rows;
  int split;
  TiledPath path;
  unsigned blocks;
};
struct TiledJobs {  // up to dk::Batched's kMax GEMMs of one weight kind in one launch
  int n = 0;
  TiledJob job[dk::Batched<dk::GemmK>::kMax];
};

// The staged path's x chunks: chunk (it, j) holds, for every row of the tile, warp wk < split of an
// output group and lane, the C values [j·C, j·C + C) of the lane's unit at step it · split + wk;
// as doubles at xs[((r · split + wk) · C + q) · 32 + lane] (lane-contiguous: no bank conflicts).
// A thread fetches up to kSlots (row, wk, lane) pieces into registers, then stores them widened.
template <int kMode, int kRows>
struct XStage {
  static constexpr int V = kUnit<kMode>, C = V < 8 ? V : 8, kSlots = kStageDoubles / (C * kThreads);
  float4 f[kSlots][C / 4];

  __device__ void fetch(const dk::GemmK& k, const float* x0, int nr, int split, int64_t it, int j) {
    const int64_t width = 32 * V;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = int(threadIdx.x) + i * kThreads, l = e % 32, ws = (e / 32) % split, r = e / (32 * split);
      const int64_t col = (it * split + ws) * width + int64_t(l) * V + j * C;
      const bool on = r < kRows && r < nr && col < k.in;
#pragma unroll
      for (int q = 0; q < C / 4; ++q)
        f[i][q] = on ? *reinterpret_cast<const float4*>(x0 + r * k.x_stride + col + 4 * q) : make_float4(0, 0, 0, 0);
    }
  }

  __device__ void store(double* xs, int split) const {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = int(threadIdx.x) + i * kThreads, l = e % 32, ws = (e / 32) % split, r = e / (32 * split);
      if (r >= kRows) continue;
      double* at = xs + (int64_t(r * split + ws) * C) * 32 + l;
#pragma unroll
      for (int q = 0; q < C / 4; ++q) {
        at[(4 * q) * 32] = f[i][q].x, at[(4 * q + 1) * 32] = f[i][q].y;
        at[(4 * q + 2) * 32] = f[i][q].z, at[(4 * q + 3) * 32] = f[i][q].w;
      }
    }
  }
};

// The warp sums of a lane's kN values (kN a power of two ≤ 32) with warp_sum's additions — at
// o = 16, 8, …, 1 each lane adds its partner's (lane ^ o) value to its own, and a sum of two
// doubles does not depend on their order — but each step sends only the half of the values the
// partner keeps: kN − 1 shuffles instead of 5 · kN. Value i ends in lanes [i · 32 / kN, (i + 1) · 32 / kN).
template <int kN>
__device__ inline double warp_sums(double (&v)[kN], int lane) {
#pragma unroll
  for (int level = 0; level < 5; ++level) {
    const int o = 16 >> level, half = kN >> (level + 1);  // values a lane keeps after this level
    if (half == 0) {
      v[0] += __shfl_xor_sync(kFull, v[0], o);
      continue;
    }
    const bool upper = (lane & o) != 0;  // keeps values [half, 2 · half), sends [0, half)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) {
      if (i >= half) continue;
      const double keep = upper ? v[i + half] : v[i], send = upper ? v[i] : v[i + half];
      v[i] = keep + __shfl_xor_sync(kFull, send, o);
    }
  }
  return v[0];
}

// acc[o][r] += x · w over C values of chunk j of the kOuts units u (xd(r, q): x of row r, value
// q): the simple body's terms (a product of two floats is exact in double).
template <int kMode, int kRows, int kOuts, class XD>
__device__ inline void add_terms(double (&acc)[kOuts][kRows], const uint4* u, const float* scale, int j, XD&& xd) {
  constexpr int V = kUnit<kMode>, C = V < 8 ? V : 8;
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
      const double x = xd(r, q);
#pragma unroll
      for (int o = 0; o < kOuts; ++o) acc[o][r] = fma(x, wd[o], acc[o][r]);
    }
  }
}

// The units and scales of outputs o0 … o0 + kOuts − 1 at column c (zeros past `out`).
template <int kMode, int kOuts>
__device__ inline void load_units(const dk::GemmK& k, int64_t o0, int64_t c, uint4* u, float* scale) {
#pragma unroll
  for (int o = 0; o < kOuts; ++o) {
    const bool on = o0 + o < k.out;
    u[o] = on ? load<kMode>(k.w, o0 + o, c, k.in) : make_uint4(0, 0, 0, 0);
    scale[o] = on ? unit_scale<kMode>(k.w, o0 + o, c) : 0.0f;
  }
}

// The warp sums of acc[o][r] (warp_sums): this lane's share is output o, row r's sum v; `first`
// marks the lowest of the lanes that hold it (the one that stores it).
struct LaneSum {
  double v;
  int o, r;
  bool first;
};
template <int kOuts, int kRows>
__device__ inline LaneSum lane_sum(const double (&acc)[kOuts][kRows], int lane) {
  constexpr int kN = kOuts * kRows, kLanes = 32 / kN;  // lanes that end with each value
  static_assert(kN <= 32 && kN * kLanes == 32, "warp_sums takes a power of two ≤ 32 values");
  double v[kN];
#pragma unroll
  for (int o = 0; o < kOuts; ++o)
#pragma unroll
    for (int r = 0; r < kRows; ++r) v[o * kRows + r] = acc[o][r];
  const double sum = warp_sums<kN>(v, lane);
  const int e = lane / kLanes;
  return {sum, e / kRows, e % kRows, lane % kLanes == 0};
}

// Block (bx, tile) of one GEMM: kWarps / split output groups of kOuts outputs, row tile `tile`;
// x from registers (widened per warp) or, kStaged, from the block's shared chunks (xs).
template <int kMode, int kRows, int kOuts, bool kStaged>
__device__ inline void gemm_tile(const dk::GemmK& k, int64_t rows, int split, int64_t bx, int64_t tile, double* xs) {
  constexpr int V = kUnit<kMode>, C = V < 8 ? V : 8;  // values per unit, per decode
  __shared__ double red[kWarps][kOuts * kRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int per_block = kWarps / split, wk = warp % split, wo = warp / split;
  const int64_t o0 = (bx * per_block + wo) * kOuts;
  const int64_t r0 = tile * kRows;
  const int nr = rows - r0 < kRows ? int(rows - r0) : kRows;
  const float* x0 = k.x + r0 * k.x_stride;
  double acc[kOuts][kRows];
#pragma unroll
  for (int o = 0; o < kOuts; ++o)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[o][r] = 0.0;
  const int64_t width = 32 * V, steps = (k.in + width - 1) / width;
  auto add = [&](const uint4* u, const float* scale, int j, auto&& xd) {
    add_terms<kMode, kRows, kOuts>(acc, u, scale, j, xd);
  };
  if constexpr (kStaged) {
    // Every warp runs every round (the block's barriers); a lane past `in` only skips its sums.
    XStage<kMode, kRows> stage;
    const int64_t rounds = (steps + split - 1) / split;
    stage.fetch(k, x0, nr, split, 0, 0);
    for (int64_t it = 0; it < rounds; ++it) {
      const int64_t c = (it * split + wk) * width + int64_t(lane) * V;
      const bool on = c < k.in;  // `in` is a multiple of V: a unit is wholly in or out
      uint4 u[kOuts];
      float scale[kOuts];
      if (on) load_units<kMode, kOuts>(k, o0, c, u, scale);
#pragma unroll
      for (int j = 0; j < V / C; ++j) {
        __syncthreads();  // the previous chunk's readers are done
        stage.store(xs, split);
        __syncthreads();
        if (j + 1 < V / C) {
          stage.fetch(k, x0, nr, split, it, j + 1);
        } else if (it + 1 < rounds) {
          stage.fetch(k, x0, nr, split, it + 1, 0);
        }
        const double* xw = xs + int64_t(wk) * C * 32 + lane;
        if (on) add(u, scale, j, [&](int r, int q) { return xw[(int64_t(r) * split * C + q) * 32]; });
      }
    }
  } else {
#pragma unroll 2
    for (int64_t s = wk; s < steps; s += split) {
      const int64_t c = s * width + int64_t(lane) * V;
      if (c >= k.in) continue;  // `in` is a multiple of V: a unit is wholly in or out
      uint4 u[kOuts];
      float scale[kOuts];
      load_units<kMode, kOuts>(k, o0, c, u, scale);
#pragma unroll
      for (int j = 0; j < V / C; ++j) {
        float xv[kRows][C];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int q = 0; q < C; q += 4) {
            float4 f = make_float4(0, 0, 0, 0);
            if (r < nr) f = *reinterpret_cast<const float4*>(x0 + r * k.x_stride + c + j * C + q);
            xv[r][q] = f.x, xv[r][q + 1] = f.y, xv[r][q + 2] = f.z, xv[r][q + 3] = f.w;
          }
        }
        add(u, scale, j, [&](int r, int q) { return double(xv[r][q]); });
      }
    }
  }
  // Warp sums, then (split-K) the warps of an output group added in warp order. (The staged path
  // sums with warp_sums, the register path value by value: the same additions, so the test that
  // compares the two paths' bits checks warp_sums too.)
  if constexpr (kStaged) {
    const LaneSum ls = lane_sum(acc, lane);
    if (split == 1) {
      if (ls.first && ls.r < nr && o0 + ls.o < k.out) k.y[(r0 + ls.r) * k.y_stride + o0 + ls.o] = float(ls.v);
    } else if (ls.first) {
      red[warp][ls.o * kRows + ls.r] = ls.v;
    }
  } else {
#pragma unroll
    for (int o = 0; o < kOuts; ++o)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const double v = warp_sum(acc[o][r]);
        if (split == 1) {
          if (lane == 0 && r < nr && o0 + o < k.out) k.y[(r0 + r) * k.y_stride + o0 + o] = float(v);
        } else if (lane == 0) {
          red[warp][o * kRows + r] = v;
        }
      }
  }
  if (split == 1) return;
  __syncthreads();
  const int t = threadIdx.x;
  if (t >= per_block * kOuts * kRows) return;
  const int g = t / (kOuts * kRows), e = t % (kOuts * kRows), o = e / kRows, r = e % kRows;
  const int64_t out = (bx * per_block + g) * kOuts + o;
  if (r >= nr || out >= k.out) return;
  double v = 0;
  for (int q = 0; q < split; ++q) v += red[g * split + q][e];
  k.y[(r0 + r) * k.y_stride + out] = float(v);
}

// The x chunk after chunk j of step s in the serial split's walk (part p: steps p, p + split, …;
// then part p + 1); false after the last.
struct SerialAt {
  int p;
  int64_t s;
  int j;
};
__device__ inline bool next_chunk(SerialAt& a, int chunks, int split, int64_t steps) {
  if (++a.j < chunks) return true;
  a.j = 0;
  if ((a.s += split) < steps) return true;
  a.s = ++a.p;
  return a.p < split;
}

// Block (bx, tile) of one GEMM on the serial split: kWarps output groups of kStagedOuts outputs,
// warp w the group bx · kWarps + w; x one chunk (C values of every lane's unit of one step, all
// rows of the tile) at a time in xs, widened once for the block.
template <int kMode, int kRows>
__device__ inline void gemm_tile_serial(const dk::GemmK& k, int64_t rows, int split, int64_t bx, int64_t tile,
                                        double* xs) {
  constexpr int V = kUnit<kMode>, C = V < 8 ? V : 8, kOuts = kStagedOuts;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t o0 = (bx * kWarps + warp) * kOuts, r0 = tile * kRows;
  const int nr = rows - r0 < kRows ? int(rows - r0) : kRows;
  const float* x0 = k.x + r0 * k.x_stride;
  const int64_t width = 32 * V, steps = (k.in + width - 1) / width;
  XStage<kMode, kRows> stage;
  SerialAt ahead{0, 0, 0};  // the chunk in the stage's registers
  stage.fetch(k, x0, nr, 1, 0, 0);
  double total = 0;  // this lane's share of the parts' warp sums, added in part order
  LaneSum share{};
  // Every warp walks every chunk (the block's barriers); a warp past `out` only skips its sums.
  for (int p = 0; p < split; ++p) {
    double acc[kOuts][kRows];
#pragma unroll
    for (int o = 0; o < kOuts; ++o)
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[o][r] = 0.0;
    for (int64_t s = p; s < steps; s += split) {
      const int64_t c = s * width + int64_t(lane) * V;
      const bool on = o0 < k.out && c < k.in;  // `in` is a multiple of V: a unit is wholly in or out
      uint4 u[kOuts];
      float scale[kOuts];
      if (on) load_units<kMode, kOuts>(k, o0, c, u, scale);
#pragma unroll
      for (int j = 0; j < V / C; ++j) {
        __syncthreads();  // the previous chunk's readers are done
        stage.store(xs, 1);
        __syncthreads();
        if (next_chunk(ahead, V / C, split, steps)) stage.fetch(k, x0, nr, 1, ahead.s, ahead.j);
        const double* xw = xs + lane;
        if (on) add_terms<kMode, kRows, kOuts>(acc, u, scale, j, [&](int r, int q) { return xw[(r * C + q) * 32]; });
      }
    }
    share = lane_sum(acc, lane);
    total += share.v;
  }
  if (share.first && share.r < nr && o0 + share.o < k.out)
    k.y[(r0 + share.r) * k.y_stride + o0 + share.o] = float(total);
}

// grid: (blocks of the largest job, jobs, row tiles of the most rows).
template <int kMode, int kRows>
__global__ void __launch_bounds__(kThreads) gemm_tiled_kernel(const TiledJobs jobs) {
  await_previous_kernel();
  __shared__ double xs[kStageDoubles];  // the staged and serial paths' x chunks
  const TiledJob& j = jobs.job[blockIdx.y];
  if (blockIdx.x >= j.blocks || int64_t(blockIdx.z) * kRows >= j.rows) return;  // whole blocks
  if constexpr (kRows >= 2) {
    if (j.path == TiledPath::kSerial) return gemm_tile_serial<kMode, kRows>(j.k, j.rows, j.split, blockIdx.x, blockIdx.z, xs);
    if (j.path == TiledPath::kStaged)
      return gemm_tile<kMode, kRows, kStagedOuts, true>(j.k, j.rows, j.split, blockIdx.x, blockIdx.z, xs);
  }
  gemm_tile<kMode, kRows, outs_for(kRows), false>(j.k, j.rows, j.split, blockIdx.x, blockIdx.z, xs);
}

// Split `in` over up to 8 warps while the GEMM has fewer than 4096 warps and every warp keeps at
// least one 16-byte step.
// (The tile, and so the outputs per warp, follow the most rows of the launch: `most`. The split
// counts the register path's output groups on both paths, so that both add in the same order.)
// `launches`: the GEMMs × row tiles the launch runs side by side (for the serial split's rule).
TiledJob plan(const dk::GemmK& k, int64_t rows, int64_t most, int kind, int64_t launches, bool may_stage = true) {
  const int64_t tile = tile_for(most), unit = kind == 1 ? 8 : kind == 2 ? 4 : kind == 3 ? 16 : 32;
  const int64_t width = 32 * unit, steps = (k.in + width - 1) / width;
  const int64_t register_groups = (k.out + outs_for(tile) - 1) / outs_for(tile);
  int split = 1;
  while (split < kWarps && 2 * split <= steps && register_groups * split < 4096) split *= 2;
  const int64_t staged_groups = (k.out + kStagedOuts - 1) / kStagedOuts;
  const int64_t serial_blocks = (staged_groups + kWarps - 1) / kWarps;
  if (may_stage && stages(tile, split, std::min<int64_t>(unit, 8)))
    return {k, rows, split, TiledPath::kStaged, unsigned((staged_groups * split + kWarps - 1) / kWarps)};
  if (may_stage && tile >= 2 && split == kWarps && serial_blocks * launches >= kSerialBlocks)
    return {k, rows, split, TiledPath::kSerial, unsigned(serial_blocks)};
  const int64_t groups = register_groups;
  return {k, rows, split, TiledPath::kRegister, unsigned((groups * split + kWarps - 1) / kWarps)};
}

template <int kMode>
void launch_jobs(const TiledJobs& jobs, Stream s) {
  int64_t most = 0;
  unsigned blocks = 0;
  for (int j = 0; j < jobs.n; ++j) {
    most = std::max(most, jobs.job[j].rows);
    blocks = std::max(blocks, jobs.job[j].blocks);
  }
  const int tile = tile_for(most);
  const dim3 grid(blocks, unsigned(jobs.n), unsigned((most + tile - 1) / tile));
  switch (tile) {
    case 8: launch_kernel(&gemm_tiled_kernel<kMode, 8>, grid, kThreads, 0, s, jobs); break;
    case 4: launch_kernel(&gemm_tiled_kernel<kMode, 4>, grid, kThreads, 0, s, jobs); break;
    case 2: launch_kernel(&gemm_tiled_kernel<kMode, 2>, grid, kThreads, 0, s, jobs); break;
    default: launch_kernel(&gemm_tiled_kernel<kMode, 1>, grid, kThreads, 0, s, jobs); break;
  }
}

void launch_kind(int kind, const TiledJobs& jobs, Stream s) {
  switch (kind) {
    case 1: return launch_jobs<1>(jobs, s);
    case 2: return launch_jobs<2>(jobs, s);
    case 3: return launch_jobs<3>(jobs, s);
    default: return launch_jobs<4>(jobs, s);
  }
}

bool fits(int64_t rows, const TiledJob& j) {
  return rows >= 1 && (rows + 7) / 8 <= 65535 && j.blocks <= 0x7fffffffu;
}

}  // namespace

int gemm_tiled_kind(const dk::GemmK& k) {
  if (k.out < 1 || !aligned(k.x, 16) || k.x_stride % 4 != 0) return 0;
  return unit_kind(k.w, k.in);
}

bool launch_gemm_tiled(int64_t rows, const dk::GemmK& k, Stream s, bool staged) {
  const int kind = gemm_tiled_kind(k);
  if (kind == 0) return false;
  TiledJobs jobs;
  jobs.job[jobs.n++] = plan(k, rows, rows, kind, (rows + tile_for(rows) - 1) / tile_for(rows), staged);
  if (!fits(rows, jobs.job[0])) return false;
  launch_kind(kind, jobs, s);
  return true;
}

// Several GEMMs (dk::Batched) in one launch where the tiled kernel takes them all in one weight
// kind; else each on its own (tiled or the warp kernel: then more than one launch).
bool launch(int64_t, const dk::Batched<dk::GemmK>& b, Stream s) {
  const int kind = b.n > 0 ? gemm_tiled_kind(b.body[0]) : 0;
  TiledJobs jobs;
  bool together = kind != 0;
  int64_t most = 0;
  for (int j = 0; j < b.n; ++j) most = std::max(most, b.count[j] / std::max<int64_t>(b.body[j].out, 1));
  for (int j = 0; j < b.n && together; ++j) {
    const dk::GemmK& k = b.body[j];
    const int64_t rows = b.count[j] / k.out;
    together = gemm_tiled_kind(k) == kind && b.count[j] % k.out == 0;
    if (together) jobs.job[jobs.n++] = plan(k, rows, most, kind, b.n * ((most + tile_for(most) - 1) / tile_for(most)));
    together = together && fits(rows, jobs.job[j]);
  }
  if (together) {
    launch_kind(kind, jobs, s);
    return true;
  }
  for (int j = 0; j < b.n; ++j)
    if (!launch(b.count[j], b.body[j], s)) return false;  // (the warp kernel takes every GemmK)
  return true;
}

}  // namespace dsv41::fast
