// Grouped expert GEMMs and dense GEMMs on bf16 tensor cores (mma_gemm.h; docs/CUDA.md "Experts
// and GEMMs of many-row steps on tensor cores"). An expert chain is three launches (a dense GEMM
// the tile kernel alone):
//   1. group_rows_kernel (one block): the slots counted per expert, prefix sums, slots scattered
//      into their group (the order inside a group does not matter: rows are independent);
//   2. the tile kernel: a block per (64-row tile of one group, column tile); grid.y bounds the
//      tiles (Σ ceil(rows_e / 64) ≤ slots / 64 + groups), blocks past the last tile return;
//   3. (down only) the parts of each token added in ExpertDownK's order.
//
// Tile: 64 rows × 128 B-rows × 32 k a step, 8 warps as 2 (m) × 4 (n), a warp 32 × 32 = 2 × 4
// m16n8k16 MMAs per 16 k and activation part. The up projection's 128 B-rows are 64 rows of w1
// then the same 64 rows of w3, and warp n takes outputs 16n … 16n + 15 of both, so that a thread
// holds g and u of the same (row, output) for the SwiGLU. Operands go global → registers (the
// next step's loads in flight during this step's MMAs) → decoded / split → shared memory, two
// buffers, one barrier a step; rows padded to 40 bf16 so that ldmatrix's 8 rows hit distinct banks.
// Sums (dk::MmaSums): each 16-deep step's three MMAs into a fresh accumulator, added to the running
// one rounded to nearest (kPer16), or all into the running one (kChained, session 19's).
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/mma.cuh"
#include "backends/cuda/mma_gemm_launch.h"
#include "backends/cuda/smem_tiles.cuh"

namespace dsv41::fast {
namespace {

constexpr int kBm = 64, kBn = 128, kBk = 32, kThreads = 256, kParts = 3, kLds = kBk + 8;
constexpr int kMaxGroups = 1024;  // group_rows_kernel's shared counters (E + 1 groups)

struct TileSmem {
  uint16_t a[2][kParts][kBm][kLds];  // activation parts hi, mid, lo
  uint16_t b[2][kBn][kLds];          // dequantised weight rows
  const float* arow[kBm];            // the tile's activation rows (null past the group)
  int32_t slot[kBm];
};

// ---- 1. Slots grouped by expert ----------------------------------------------------------------
__global__ void __launch_bounds__(1024) group_rows_kernel(const int32_t* experts, int64_t mk, int64_t m,
                                                          bool shared, int E, dk::ExpertGroups g) {
  await_previous_kernel();
  __shared__ int count[kMaxGroups], cursor[kMaxGroups];
  const int tid = threadIdx.x;
  for (int e = tid; e <= E; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int64_t i = tid; i < mk; i += blockDim.x) {
    const int e = experts[i];
    if (unsigned(e) < unsigned(E)) atomicAdd(&count[e], 1);  // an invalid choice has no slot
  }
  __syncthreads();
  if (tid == 0) {
    count[E] = shared ? int(m) : 0;
    int off = 0, tiles = 0;
    for (int e = 0; e <= E; ++e) {
      g.offsets[e] = off;
      g.tile_start[e] = tiles;
      cursor[e] = off;
      off += count[e];
      tiles += (count[e] + kBm - 1) / kBm;
    }
    g.offsets[E + 1] = off;
    g.tile_start[E + 1] = tiles;
  }
  __syncthreads();
  for (int64_t i = tid; i < mk; i += blockDim.x) {
    const int e = experts[i];
    if (unsigned(e) < unsigned(E)) g.rows[atomicAdd(&cursor[e], 1)] = int32_t(i);
  }
  if (shared)
    for (int64_t t = tid; t < m; t += blockDim.x) g.rows[cursor[E] + t] = int32_t(mk + t);
}

// The group of tile `tile` (the last e ≤ E with tile_start[e] ≤ tile), or −1 past the last tile.
__device__ int group_of_tile(const int32_t* tile_start, int E, int tile) {
  if (tile >= tile_start[E + 1]) return -1;
  int lo = 0, hi = E;  // tile_start[lo] ≤ tile < tile_start[hi + 1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_start[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// ---- Operand staging ---------------------------------------------------------------------------
// A float32 as three bf16 parts (hi + mid + lo = x exactly for a normal float): hi and mid are
// truncations (the top 8 significant bits, then the next 8), lo the remaining ≤ 8 bits. An Inf or
// NaN is its hi part alone.
__device__ __forceinline__ void split3(float x, uint16_t (&p)[kParts]) {
  const uint32_t xb = __float_as_uint(x);
  const float hi = __uint_as_float(xb & 0xFFFF0000u);
  const float r = x - hi;
  const uint32_t rb = __float_as_uint(r);
  const float mid = __uint_as_float(rb & 0xFFFF0000u);
  const bool finite = isfinite(x);
  p[0] = uint16_t(xb >> 16);
  p[1] = finite ? uint16_t(rb >> 16) : uint16_t(0);
  p[2] = finite ? uint16_t(__float_as_uint(r - mid) >> 16) : uint16_t(0);
}

// An exact float (≤ 8 significant bits) as bf16 bits.
__device__ __forceinline__ uint32_t bf16_bits(float v) { return __float_as_uint(v) >> 16; }

// The 16 weights of one thread's share of a 32-wide k step: raw bytes (FP4: 8, FP8: 16, bf16: 32).
struct BRegs {
  uint4 raw[2];
  float scale;
  bool valid;
};

// K: the row length (a bf16 weight carries none; a stored one's is w.in).
__device__ __forceinline__ void load_b(const dk::DevWeight& w, int64_t K, int64_t row, bool valid, int64_t c0, BRegs& r) {
  r.valid = valid;
  if (!valid) return;
  if (w.codes) {
    const uint8_t* p = w.codes + row * w.row_bytes() + (w.fp4 ? c0 / 2 : c0);
    if (w.fp4) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
      r.raw[0] = make_uint4(v.x, v.y, 0, 0);
    } else {
      r.raw[0] = __ldg(reinterpret_cast<const uint4*>(p));
    }
    r.scale = w.scale(row, c0);
  } else {
    const uint4* p = reinterpret_cast<const uint4*>(w.bf16 + row * K + c0);
    r.raw[0] = __ldg(p);
    r.raw[1] = __ldg(p + 1);
  }
}

// The 16 weights as bf16 pairs (value × scale, exact), the lower column in the low half.
__device__ __forceinline__ void decode_b(const dk::DevWeight& w, const BRegs& r, uint32_t (&out)[8]) {
  if (!r.valid) {
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = 0;
    return;
  }
  if (!w.codes) {
    out[0] = r.raw[0].x, out[1] = r.raw[0].y, out[2] = r.raw[0].z, out[3] = r.raw[0].w;
    out[4] = r.raw[1].x, out[5] = r.raw[1].y, out[6] = r.raw[1].z, out[7] = r.raw[1].w;
    return;
  }
  const uint32_t words[4] = {r.raw[0].x, r.raw[0].y, r.raw[0].z, r.raw[0].w};
  if (w.fp4) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // byte i: columns 2i (low nibble), 2i + 1
      const uint8_t byte = uint8_t(words[i / 4] >> (8 * (i % 4)));
      out[i] = bf16_bits(dk::e2m1_value(byte & 0x0F) * r.scale) |
               bf16_bits(dk::e2m1_value(byte >> 4) * r.scale) << 16;
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {  // codes 2i, 2i + 1
    const uint8_t lo = uint8_t(words[i / 2] >> (16 * (i % 2))), hi = uint8_t(words[i / 2] >> (16 * (i % 2) + 8));
    out[i] = bf16_bits(dk::e4m3_value(lo) * r.scale) | bf16_bits(dk::e4m3_value(hi) * r.scale) << 16;
  }
}

// ---- 2. The tile loop --------------------------------------------------------------------------
// acc[mi][ni]: the warp's m16n8 fragments. w1 (kDual only): B-rows 64 … 127 from w1's row
// n0 + r − 64, B-rows 0 … 63 from w0's; else B-row r from w0's row n0 + r. K a multiple of 32.
// kChained: dk::MmaSums::kChained (every MMA into acc), else kPer16 (mma_gemm.h).
// rows: the tile's rows that hold activations (the rest are zeros whose sums nobody reads): a
// 16-row fragment past them runs no MMA (warp-uniform; an expert group of a decode batch fills
// 6–12 of its tile's 64 rows), which leaves every read sum's operations as they were.
template <bool kDual, bool kChained>
__device__ void tile_products(TileSmem& sm, const dk::DevWeight& w0, const dk::DevWeight& w1, int64_t K,
                              int64_t n0, int64_t N, int64_t rows, float (&acc)[2][4][4]) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wm = warp / 4, wn = warp % 4;
  const bool live[2] = {wm * 32 < rows, wm * 32 + 16 < rows};
  // This thread's loads: activation rows ar, ar + 32 (4 floats at ac), B-row br (16 at bc).
  const int ar = tid / 8, ac = (tid % 8) * 4, br = tid / 2, bc = (tid % 2) * 16;
  const bool second = kDual && br >= kBn / 2;
  const dk::DevWeight w = second ? w1 : w0;  // a copy: a reference to either would live on the stack
  const int64_t brow = n0 + (kDual ? br % (kBn / 2) : br);
  const bool bvalid = brow < N;
  float4 av[2];
  BRegs bv;
  const auto load = [&](int kt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float* row = sm.arow[ar + 32 * h];
      av[h] = row ? *reinterpret_cast<const float4*>(row + int64_t(kt) * kBk + ac) : make_float4(0, 0, 0, 0);
    }
    load_b(w, K, brow, bvalid, int64_t(kt) * kBk + bc, bv);
  };
  const auto stage = [&](int buf) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint16_t p[4][kParts];
      split3(av[h].x, p[0]);
      split3(av[h].y, p[1]);
      split3(av[h].z, p[2]);
      split3(av[h].w, p[3]);
#pragma unroll
      for (int q = 0; q < kParts; ++q)
        *reinterpret_cast<uint2*>(&sm.a[buf][q][ar + 32 * h][ac]) =
            make_uint2(p[0][q] | uint32_t(p[1][q]) << 16, p[2][q] | uint32_t(p[3][q]) << 16);
    }
    uint32_t b[8];
    decode_b(w, bv, b);
    *reinterpret_cast<uint4*>(&sm.b[buf][br][bc]) = make_uint4(b[0], b[1], b[2], b[3]);
    *reinterpret_cast<uint4*>(&sm.b[buf][br][bc + 8]) = make_uint4(b[4], b[5], b[6], b[7]);
  };
  const int steps = int(K / kBk);
  load(0);
  stage(0);
  __syncthreads();
  for (int kt = 0; kt < steps; ++kt) {
    const int buf = kt % 2;
    if (kt + 1 < steps) load(kt + 1);
#pragma unroll
    for (int kk = 0; kk < kBk && live[0]; kk += 16) {  // a warp of no live rows only loads and stages
      uint32_t a[kParts][2][4], b[4][2];
#pragma unroll
      for (int q = 0; q < kParts; ++q)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
          if (live[mi]) cuda::tiles::ldmatrix_x4(a[q][mi], &sm.a[buf][q][wm * 32 + mi * 16 + lane % 16][kk + (lane / 16) * 8]);
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int base = kDual ? nj * (kBn / 2) + wn * 16 : wn * 32 + nj * 16;
        uint32_t r[4];
        cuda::tiles::ldmatrix_x4(r, &sm.b[buf][base + lane % 8 + (lane / 16) * 8][kk + ((lane / 8) % 2) * 8]);
        b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
      }
      // Per (16 rows, 8 columns): the three parts' MMAs, smallest first, into a fresh partial sum
      // then added to acc (kPer16), or straight into acc (kChained; mma_gemm.h's MmaSums).
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        if (!live[mi]) continue;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          float(&sum)[4] = kChained ? acc[mi][ni] : part;
#pragma unroll
          for (int q = kParts - 1; q >= 0; --q)
            cuda::mma_bf16_16816(sum, a[q][mi][0], a[q][mi][1], a[q][mi][2], a[q][mi][3], b[ni][0], b[ni][1]);
          if constexpr (!kChained)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mi][ni][i] += part[i];  // rounded to nearest
        }
      }
    }
    if (kt + 1 < steps) stage(1 - buf);
    __syncthreads();
  }
}

// The block's tile: its group, first slot and row count (false: past the last tile).
struct TilePlace {
  int group;
  int64_t first, rows;
};
__device__ bool place_tile(const dk::ExpertGroups& g, int E, TilePlace& p) {
  p.group = group_of_tile(g.tile_start, E, int(blockIdx.y));
  if (p.group < 0) return false;
  p.first = g.offsets[p.group] + int64_t(int(blockIdx.y) - g.tile_start[p.group]) * kBm;
  p.rows = min(int64_t(kBm), int64_t(g.offsets[p.group + 1]) - p.first);
  return true;
}

// Up: x rows gathered per slot, B = w1 / w3 rows n0 … n0 + 63, SwiGLU into h (ExpertUpK's float
// operations on the fp32 sums).
template <bool kChained>
__global__ void __launch_bounds__(kThreads, 2) grouped_up_kernel(const dk::GroupedUpChain c) {
  await_previous_kernel();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  TileSmem& sm = *reinterpret_cast<TileSmem*>(smem_raw);
  TilePlace p;
  if (!place_tile(c.groups, c.E, p)) return;
  const bool routed = p.group < c.E;
  const dk::ExpertUpK& k = routed ? c.up : c.shared_up;
  const dk::ExpertW& ew = k.table[routed ? p.group : 0];
  const int64_t n0 = int64_t(blockIdx.x) * (kBn / 2), mk = c.m * c.up.k;
  if (n0 >= k.inter) return;
  for (int r = threadIdx.x; r < kBm; r += blockDim.x) {
    const int32_t slot = r < p.rows ? c.groups.rows[p.first + r] : 0;
    const int64_t t = slot < mk ? slot / c.up.k : slot - mk;
    sm.slot[r] = slot;
    sm.arow[r] = r < p.rows ? c.up.x + t * c.up.d : nullptr;
  }
  __syncthreads();
  float acc[2][4][4] = {};
  const dk::DevWeight w1 = ew.w1, w3 = ew.w3;
  tile_products<true, kChained>(sm, w1, w3, c.up.d, n0, k.inter, p.rows, acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * 32 + mi * 16 + lane / 4 + half * 8;
      if (r >= p.rows) continue;
      const int64_t slot = sm.slot[r];
      const float wt = routed ? k.weights[slot] : 1.0f;
      float* h = routed ? k.h + slot * k.inter : k.h + (slot - mk) * k.inter;
#pragma unroll
      for (int ni = 0; ni < 2; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t o = n0 + wn * 16 + ni * 8 + (lane % 4) * 2 + e;
          if (o >= k.inter) continue;
          float g = acc[mi][ni][half * 2 + e], u = acc[mi][ni + 2][half * 2 + e];
          if (k.lim > 0) {
            u = fminf(fmaxf(u, -k.lim), k.lim);
            g = fminf(g, k.lim);
          }
          h[o] = wt * ((g / (1.0f + expf(-g))) * u);
        }
    }
}

// Down: h rows per slot, B = w2 rows n0 … n0 + 127, each (slot, column) sum into parts.
template <bool kChained>
__global__ void __launch_bounds__(kThreads, 2) grouped_down_kernel(const dk::GroupedDownChain c) {
  await_previous_kernel();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  TileSmem& sm = *reinterpret_cast<TileSmem*>(smem_raw);
  TilePlace p;
  if (!place_tile(c.groups, c.E, p)) return;
  const dk::ExpertDownK& k = c.down;
  const bool routed = p.group < c.E;
  const dk::DevWeight w2 = routed ? k.table[p.group].w2 : k.shared->w2;
  const int64_t K = routed ? k.inter : k.shared_inter, n0 = int64_t(blockIdx.x) * kBn, mk = c.m * k.k;
  if (n0 >= k.d) return;
  for (int r = threadIdx.x; r < kBm; r += blockDim.x) {
    const int32_t slot = r < p.rows ? c.groups.rows[p.first + r] : 0;
    sm.slot[r] = slot;
    sm.arow[r] = r >= p.rows ? nullptr : slot < mk ? k.h + int64_t(slot) * k.inter : k.hs + (slot - mk) * k.shared_inter;
  }
  __syncthreads();
  float acc[2][4][4] = {};
  tile_products<false, kChained>(sm, w2, w2, K, n0, k.d, p.rows, acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm * 32 + mi * 16 + lane / 4 + half * 8;
      if (r >= p.rows) continue;
      float* out = c.parts + int64_t(sm.slot[r]) * k.d;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t col = n0 + wn * 32 + ni * 8 + (lane % 4) * 2 + e;
          if (col < k.d) out[col] = acc[mi][ni][half * 2 + e];
        }
    }
}

// Dense: x rows r0 … r0 + 63 (strided), B = W rows n0 … n0 + 127, y strided.
template <bool kChained>
__global__ void __launch_bounds__(kThreads, 2) dense_kernel(const dk::MmaGemmChain c) {
  await_previous_kernel();
  extern __shared__ __align__(16) uint8_t smem_raw[];
  TileSmem& sm = *reinterpret_cast<TileSmem*>(smem_raw);
  const dk::GemmK& k = c.gemm;
  const int64_t r0 = int64_t(blockIdx.y) * kBm, n0 = int64_t(blockIdx.x) * kBn;
  for (int r = threadIdx.x; r < kBm; r += blockDim.x) sm.arow[r] = r0 + r < c.rows ? k.x + (r0 + r) * k.x_stride : nullptr;
  __syncthreads();
  float acc[2][4][4] = {};
  const dk::DevWeight w = k.w;
  tile_products<false, kChained>(sm, w, w, k.in, n0, k.out, c.rows - r0, acc);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 4, wn = warp % 4;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = r0 + wm * 32 + mi * 16 + lane / 4 + half * 8;
      if (r >= c.rows) continue;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t col = n0 + wn * 32 + ni * 8 + (lane % 4) * 2 + e;
          if (col < k.out) k.y[r * k.y_stride + col] = acc[mi][ni][half * 2 + e];
        }
    }
}

// 3. y[t, c] = parts of choices 0 … k − 1, then the shared part, added in that order from 0.
__global__ void sum_parts_kernel(const dk::GroupedDownChain c) {
  await_previous_kernel();
  const dk::ExpertDownK& k = c.down;
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= c.m * k.d) return;
  const int64_t t = id / k.d, col = id % k.d, mk = c.m * k.k;
  float acc = 0.0f;
  for (int j = 0; j < k.k; ++j) acc += c.parts[(t * k.k + j) * k.d + col];
  if (k.shared) acc += c.parts[(mk + t) * k.d + col];
  k.y[id] = acc;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Groups the slots and returns the bound on the tiles (grid.y); 0 where the shape is not taken.
int64_t group_slots(const int32_t* experts, int64_t m, int k, bool shared, int E, const dk::ExpertGroups& g,
                    Stream s) {
  const int64_t slots = m * k + (shared ? m : 0);
  if (E < 1 || E + 1 > kMaxGroups || slots >= (int64_t{1} << 31)) return 0;
  const int64_t tiles = slots / kBm + E + 1;
  if (tiles > 65535) return 0;
  launch_kernel(&group_rows_kernel, 1, 1024, 0, s, experts, m * k, m, shared, E, g);
  return tiles;
}

template <class Kernel, class Chain>
void launch_tiles(Kernel kernel, const Chain& c, int64_t col_tiles, int64_t tiles, Stream s) {
  constexpr int bytes = int(sizeof(TileSmem));
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  launch_kernel(kernel, dim3(unsigned(col_tiles), unsigned(tiles)), kThreads, bytes, s, c);
}

}  // namespace

bool launch_chain(const dk::GroupedUpChain& c, Stream s) {
  const dk::ExpertUpK& u = c.up;
  const bool shared = c.shared_up.table != nullptr;
  if (u.experts == nullptr || u.d % kBk != 0 || !aligned16(u.x)) return false;
  if (shared && (c.shared_up.x != u.x || c.shared_up.d != u.d)) return false;
  if (c.m <= 0) return true;
  const int64_t tiles = group_slots(u.experts, c.m, u.k, shared, c.E, c.groups, s);
  if (tiles == 0) return false;
  const int64_t outs = shared && c.shared_up.inter > u.inter ? c.shared_up.inter : u.inter;
  const int64_t col_tiles = (outs + kBn / 2 - 1) / (kBn / 2);
  if (c.sums == dk::MmaSums::kChained) launch_tiles(grouped_up_kernel<true>, c, col_tiles, tiles, s);
  else launch_tiles(grouped_up_kernel<false>, c, col_tiles, tiles, s);
  return true;
}

bool launch_chain(const dk::GroupedDownChain& c, Stream s) {
  const dk::ExpertDownK& k = c.down;
  const bool shared = k.shared != nullptr;
  if (k.inter % kBk != 0 || (shared && k.shared_inter % kBk != 0) || !aligned16(k.h) || (shared && !aligned16(k.hs)))
    return false;
  if (c.m <= 0) return true;
  const int64_t tiles = group_slots(k.experts, c.m, k.k, shared, c.E, c.groups, s);
  if (tiles == 0) return false;
  const int64_t col_tiles = (k.d + kBn - 1) / kBn;
  if (c.sums == dk::MmaSums::kChained) launch_tiles(grouped_down_kernel<true>, c, col_tiles, tiles, s);
  else launch_tiles(grouped_down_kernel<false>, c, col_tiles, tiles, s);
  const int64_t n = c.m * k.d;
  launch_kernel(&sum_parts_kernel, unsigned((n + 255) / 256), 256, 0, s, c);
  return true;
}

bool launch_chain(const dk::MmaGemmChain& c, Stream s) {
  if (!mma_gemm_fits(c.gemm)) return false;  // (whether worth it is the caller's choice: mma_gemm_worth)
  const int64_t row_tiles = (c.rows + kBm - 1) / kBm, col_tiles = (c.gemm.out + kBn - 1) / kBn;
  if (row_tiles > 65535 || col_tiles > 0x7fffffff) return false;
  if (c.rows <= 0 || c.gemm.out <= 0) return true;
  if (c.sums == dk::MmaSums::kChained) launch_tiles(dense_kernel<true>, c, col_tiles, row_tiles, s);
  else launch_tiles(dense_kernel<false>, c, col_tiles, row_tiles, s);
  return true;
}

}  // namespace dsv41::fast
