// The fast kernels of fast_kernels.h (see there).
#include "backends/cuda/fast_kernels.h"

#include "backends/cuda/exact_units.cuh"
#include "backends/cuda/expert_stream.cuh"
#include "backends/cuda/fast_units.cuh"

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace dsv41::fast {

constexpr unsigned kFull = 0xffffffffu;

static __device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

static __device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// Sum over the block (blockDim a multiple of 32), the result in every thread. sh: 32 doubles.
static __device__ inline double block_sum(double v, double* sh) {
  v = warp_sum(v);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();  // sh may still be read by a previous call
  if (l == 0) sh[w] = v;
  __syncthreads();
  return warp_sum(l < int(blockDim.x >> 5) ? sh[l] : 0.0);
}

static __device__ inline float block_max(float v, float* sh) {
  v = warp_max(v);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  return warp_max(l < int(blockDim.x >> 5) ? sh[l] : -INFINITY);
}

namespace cg = cooperative_groups;

// Sum over a thread-block cluster, the result in every thread of every block: each block's
// block_sum, then the blocks' sums added in rank order (so every block gets the same bits). Every
// thread of every block must call it; it waits for the cluster twice (the second time so that no
// block leaves while another still reads its sum).
static __device__ double cluster_sum(cg::cluster_group& cluster, double v, double* sh) {
  __shared__ double block_total;
  v = block_sum(v, sh);
  if (threadIdx.x == 0) block_total = v;
  cluster.sync();
  double total = 0;
  for (unsigned b = 0; b < cluster.num_blocks(); ++b) total += *cluster.map_shared_rank(&block_total, b);
  cluster.sync();
  return total;
}

static unsigned blocks_for(int64_t n, int64_t per_block) { return unsigned((n + per_block - 1) / per_block); }

// The latency-bound chains at few tokens (docs/CUDA.md "Chains at batch 1"): true runs them with
// the loads of a block issued up front (L1 prefetches, loads batched before the stores and sums
// that wait on them) and the mHC mix split into slices of ≥ 64 elements; false runs them as before
// (slices of ≥ 512, one load round trip per loop step). Prefetches and batched loads leave every
// sum's order as it was (the same bits); the smaller slices change the mix's sum order (within
// MhcCoefficientsMatchSimple's bound; the fused and separate chains still split alike).
constexpr bool kBatchedChains = true;
constexpr int kChainBatch = 8;  // loads a thread has in flight in the batched loops
// The L1 prefetches of the fused expand (its token's streams, `a`, the slice's mix weights) and of
// the router (its gate rows and input): on the H200 both chains measured 10–15 % slower with them
// (docs/CUDA.md "Chains at batch 1"), so they are off; the other chains keep theirs. Hints only:
// either setting gives the same bits.
constexpr bool kPrefetchExpand = false, kPrefetchRouter = false;

// Asks for the 128-byte lines of [p, p + bytes) in this SM's L1 (and L2), the block's threads
// taking every blockDim.x-th line: a hint with no result to wait for, so the loads that follow
// find the lines on chip instead of each paying a memory round trip in turn.
static __device__ inline void prefetch_l1(const void* p, int64_t bytes) {
  if (!kBatchedChains || !p || bytes <= 0) return;
  // Every line holds a byte of [p, p + bytes), so none lies outside the allocation's pages.
  const size_t g = __cvta_generic_to_global(p), begin = g & ~size_t(127), end = g + size_t(bytes);
  for (size_t a = begin + size_t(threadIdx.x) * 128; a < end; a += size_t(blockDim.x) * 128)
    asm volatile("prefetch.global.L1 [%0];" ::"l"(a));
}

// The stored bytes of `rows` rows of `in` columns of w (the codes of a stored weight; its scales
// are few and stay unfetched); nothing where they are more than `most` bytes.
static __device__ inline void prefetch_weight_rows(const dk::DevWeight& w, int64_t rows, int64_t in, int64_t most) {
  const void* p = w.codes ? static_cast<const void*>(w.codes) : w.bf16 ? static_cast<const void*>(w.bf16) : w.f32;
  const int64_t bytes = w.codes ? (w.fp4 ? rows * in / 2 : rows * in) : rows * in * (w.bf16 ? 2 : 4);
  if (bytes <= most) prefetch_l1(p, bytes);
}
// Session 17's batch-1 chain changes (docs/CUDA.md "Small decode launches, session 17"); each
// false restores main's kernel (88ec7e1). All leave every float operation and sum order as it was
// (the same bits):
//  - kLaneBlocks: RopeQuantK and WindowStoreK beside a RoPE or a scale (dk::Both) a warp per
//    quantiser / scale block, lane l taking element l, instead of one thread walking the block;
//  - kStagedExpand: the fused expand of ExpandCoeffChain reads its token's streams, `a`, comb and
//    post from a shared copy loaded at once, instead of four dependent loads a value;
//  - kRouterAhead: the router's gate rows read kChainBatch loads ahead of the sums;
//  - kStagedCollapse: the collapse + norm chain loads its row's streams, pre and norm weight into
//    shared memory at once and runs both bodies on the copies;
//  - kStagedDownExpand: the down + expand chain loads the expand's operands while its warps sum
//    the experts, and forms the hc outputs of a column in hc threads;
//  - kStagedNorm: the RMSNorm kernels' rows (and the staged collapse chain's) with each thread's
//    elements and weights loaded at once.
// Measured on the H200 (docs/CUDA.md "Small decode launches, session 17"): kLaneBlocks,
// kStagedExpand, kStagedDownExpand and kStagedNorm faster; kRouterAhead and kStagedCollapse not
// (within ±4 % of main's kernels), so off: the router and the collapse + norm chain run main's code.
// kSplitCollapseNorm (session 22): the collapse + norm chain of few wide rows (d ≥ 2,048) over a
// cluster of blocks per row (collapse_norm_split_kernel); false: one block per row as before.
constexpr bool kSplitCollapseNorm = true;
constexpr bool kLaneBlocks = true, kStagedExpand = true, kRouterAhead = false;
constexpr bool kStagedCollapse = false, kStagedDownExpand = true, kStagedNorm = true;
// The most dynamic shared memory the staged kernels take (else their old kernels run): room for
// their static shared memory within the 48 KB a block gets without opting in.
constexpr size_t kStagedSmem = 40u * 1024u;

// ---- Weight loads -----------------------------------------------------------------------------
// Kinds of row access: 0 one value per lane (any layout, DevWeight::at), 1 eight bf16 (16 B),
// 2 four floats (16 B), 3 eight FP8 E4M3 codes (8 B), 4 eight FP4 E2M1 codes (4 B). The stored
// kinds decode in registers to code value × UE8M0 scale, one float multiply: the bits of
// DevWeight::stored_at (the widened matrix), by way of half floats: an E4M3 code's 7 magnitude bits
// placed at bit 7 of a half are the value × 2^-8 (normal and subnormal alike), an E2M1 code's 3 at
// bit 9 the value × 2^-14; the exact power-of-two rescale comes before the scale multiply, so a
// huge scale cannot overflow an intermediate. E4M3 NaN codes (0x7F / 0xFF) give NaN; E2M1 −0
// gives +0 (as the host tables).
template <int kMode>
struct WeightLoad {
  static constexpr int kWidth = kMode == 0 ? 1 : kMode == 2 ? 4 : 8;
};

static __device__ inline float e4m3_fast(uint32_t code) {
  const uint32_t mag = code & 0x7Fu;
  const float h = __half2float(__ushort_as_half(static_cast<unsigned short>((code & 0x80u) << 8 | mag << 7)));
  return mag == 0x7Fu ? __uint_as_float(0x7FC00000u) : h * 256.0f;
}

static __device__ inline float e2m1_fast(uint32_t code) {
  const uint32_t mag = code & 0x7u;
  const uint32_t sign = mag ? (code & 0x8u) << 12 : 0u;
  return __half2float(__ushort_as_half(static_cast<unsigned short>(sign | mag << 9))) * 16384.0f;
}

// kWidth values of row r, columns [c, c + kWidth), of a weight whose rows are `in` long.
template <int kMode>
static __device__ inline void load_weights(const dk::DevWeight& w, int64_t r, int64_t c, int64_t in, float* v) {
  if constexpr (kMode == 1) {
    const uint4 u = *reinterpret_cast<const uint4*>(w.bf16 + r * in + c);
    const uint32_t p[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = __uint_as_float(p[j] << 16);
      v[2 * j + 1] = __uint_as_float(p[j] & 0xffff0000u);
    }
  } else if constexpr (kMode == 2) {
    const float4 f = *reinterpret_cast<const float4*>(w.f32 + r * in + c);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else if constexpr (kMode == 3) {
    const uint2 u = *reinterpret_cast<const uint2*>(w.codes + r * in + c);
    const float s = w.scale(r, c);  // eight columns of one scale block (block columns ≥ 8)
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = e4m3_fast(((j < 4 ? u.x : u.y) >> (8 * (j & 3))) & 0xFFu) * s;
  } else if constexpr (kMode == 4) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(w.codes + r * (in / 2) + c / 2);
    const float s = w.scale(r, c);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = e2m1_fast((u >> (4 * j)) & 0xFu) * s;  // low nibble = even column
  } else {
    v[0] = w.at(r * in + c);
  }
}

// The widest kind whose loads rows of `in` columns of w allow (alignment of every row start).
static __host__ __device__ inline int load_kind(const dk::DevWeight& w, int64_t in) {
  const auto aligned = [](const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; };
  if (w.codes) {
    if (in % 8 != 0 || w.cols_log2 < 3) return 0;
    if (!w.fp4 && aligned(w.codes, 8)) return 3;
    if (w.fp4 && aligned(w.codes, 4)) return 4;
    return 0;
  }
  if (w.bf16) return in % 8 == 0 && aligned(w.bf16, 16) ? 1 : 0;
  return in % 4 == 0 && aligned(w.f32, 16) ? 2 : 0;
}

template <int kMode>
static __device__ inline double lane_dot_kind(const dk::DevWeight& w, int64_t r, int64_t n, const float* x, int lane) {
  constexpr int V = WeightLoad<kMode>::kWidth;
  double acc = 0;
  for (int64_t c = int64_t(lane) * V; c < n; c += 32 * V) {
    float v[V];
    load_weights<kMode>(w, r, c, n, v);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += double(v[j]) * x[c + j];
  }
  return acc;
}

// This lane's share of Σ_c W[r, c] · x[c] over a row of n columns (the warp's lanes together
// cover the row; the kind is warp-uniform: every lane reads the same weight).
static __device__ inline double lane_dot(const dk::DevWeight& w, int64_t r, int64_t n, const float* x, int lane) {
  switch (load_kind(w, n)) {
    case 1: return lane_dot_kind<1>(w, r, n, x, lane);
    case 2: return lane_dot_kind<2>(w, r, n, x, lane);
    case 3: return lane_dot_kind<3>(w, r, n, x, lane);
    case 4: return lane_dot_kind<4>(w, r, n, x, lane);
    default: return lane_dot_kind<0>(w, r, n, x, lane);
  }
}

// lane_dot_kind's sum with kChainBatch steps' weight loads issued before their products are
// added (in the same order: the same bits). In lane_dot_kind each step's loads wait for the sum
// of the step before (the loop is not unrolled), so a 1,024-wide row took 8 memory round trips.
// (lo, hi: only columns [lo, hi) of the row, lo a multiple of 32 · 8 — router_split_kernel's
// share of it; by default the whole row.)
template <int kMode>
static __device__ inline double lane_dot_ahead_kind(const dk::DevWeight& w, int64_t r, int64_t n, const float* x,
                                                    int lane, int64_t lo = 0, int64_t hi = -1) {
  constexpr int V = WeightLoad<kMode>::kWidth, kStep = 32 * V;
  const int64_t end = hi < 0 ? n : hi;
  double acc = 0;
  int64_t c = lo + int64_t(lane) * V;
  for (; c + (kChainBatch - 1) * kStep < end; c += kChainBatch * kStep) {
    float v[kChainBatch][V], xv[kChainBatch][V];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) {
      load_weights<kMode>(w, r, c + u * kStep, n, v[u]);
#pragma unroll
      for (int j = 0; j < V; ++j) xv[u][j] = x[c + u * kStep + j];
    }
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u)
#pragma unroll
      for (int j = 0; j < V; ++j) acc += double(v[u][j]) * xv[u][j];
  }
  for (; c < end; c += kStep) {
    float v[V];
    load_weights<kMode>(w, r, c, n, v);
#pragma unroll
    for (int j = 0; j < V; ++j) acc += double(v[j]) * x[c + j];
  }
  return acc;
}

static __device__ inline double lane_dot_ahead(const dk::DevWeight& w, int64_t r, int64_t n, const float* x, int lane,
                                               int64_t lo = 0, int64_t hi = -1) {
  switch (load_kind(w, n)) {
    case 1: return lane_dot_ahead_kind<1>(w, r, n, x, lane, lo, hi);
    case 2: return lane_dot_ahead_kind<2>(w, r, n, x, lane, lo, hi);
    case 3: return lane_dot_ahead_kind<3>(w, r, n, x, lane, lo, hi);
    case 4: return lane_dot_ahead_kind<4>(w, r, n, x, lane, lo, hi);
    default: return lane_dot_ahead_kind<0>(w, r, n, x, lane, lo, hi);
  }
}

// ---- GEMM: one warp per output column o, a tile of up to kGemmRows rows per warp -----------------
constexpr int kGemmRows = 8;
constexpr int kWarpsPerBlock = 8;

template <int kMode>
static __global__ void __launch_bounds__(kWarpsPerBlock * 32) gemm_kernel(const dk::GemmK k, int64_t rows) {
  await_previous_kernel();
  constexpr int V = WeightLoad<kMode>::kWidth;
  const int lane = threadIdx.x & 31;
  const int64_t o = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (o >= k.out) return;  // whole warps leave together
  const int64_t r0 = int64_t(blockIdx.y) * kGemmRows;
  const int nr = int(rows - r0 < kGemmRows ? rows - r0 : kGemmRows);
  const float* x0 = k.x + r0 * k.x_stride;
  double acc[kGemmRows];
#pragma unroll
  for (int r = 0; r < kGemmRows; ++r) acc[r] = 0.0;
  for (int64_t i = int64_t(lane) * V; i < k.in; i += 32 * V) {
    float w[V];
    load_weights<kMode>(k.w, o, i, k.in, w);
#pragma unroll
    for (int r = 0; r < kGemmRows; ++r) {
      if (r < nr) {
        const float* xr = x0 + r * k.x_stride + i;
#pragma unroll
        for (int v = 0; v < V; ++v) acc[r] += double(xr[v]) * double(w[v]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kGemmRows; ++r) {
    const double s = warp_sum(acc[r]);
    if (lane == 0 && r < nr) k.y[(r0 + r) * k.y_stride + o] = float(s);
  }
}

bool launch(int64_t n, const dk::GemmK& k, Stream s) {
  if (k.out <= 0 || n % k.out != 0) return false;
  const int64_t rows = n / k.out;
  if (launch_gemm_tiled(rows, k, s)) return true;
  if ((rows + kGemmRows - 1) / kGemmRows > 65535) return false;
  const dim3 grid(blocks_for(k.out, kWarpsPerBlock), blocks_for(rows, kGemmRows));
  const dim3 block(kWarpsPerBlock * 32);
  switch (load_kind(k.w, k.in)) {
    case 1: launch_kernel(&gemm_kernel<1>, grid, block, 0, s, k, rows); break;
    case 2: launch_kernel(&gemm_kernel<2>, grid, block, 0, s, k, rows); break;
    case 3: launch_kernel(&gemm_kernel<3>, grid, block, 0, s, k, rows); break;
    case 4: launch_kernel(&gemm_kernel<4>, grid, block, 0, s, k, rows); break;
    default: launch_kernel(&gemm_kernel<0>, grid, block, 0, s, k, rows); break;
  }
  return true;
}

// ---- RMSNorm: one block per row ------------------------------------------------------------------
// kStagedNorm: rows of up to kNormAhead · blockDim.x elements with each thread's elements and
// weights loaded at once into registers, then the loops below on them: the same operations in the
// same order. The loops below wait a round trip per element (the sum's loop is not unrolled; the
// stores may alias the next loads): ≈ 6 µs a launch at mini-flash batch 1 (ncu, session 17).
constexpr int kNormAhead = 8;

static __device__ inline void rmsnorm_row_ahead(const dk::RmsNormK& k, int64_t r, double* sh) {
  const float* xr = k.x + r * k.n;
  float* yr = k.y + r * k.n;
  const int64_t step = blockDim.x;
  float xv[kNormAhead], wv[kNormAhead];
#pragma unroll
  for (int u = 0; u < kNormAhead; ++u) {
    const int64_t i = threadIdx.x + u * step;
    xv[u] = i < k.n ? xr[i] : 0.0f;
    wv[u] = i < k.n && k.weight ? k.weight[i] : 0.0f;
  }
  double ss = 0;
#pragma unroll
  for (int u = 0; u < kNormAhead; ++u)
    if (threadIdx.x + u * step < k.n) ss += double(xv[u]) * xv[u];
  ss = block_sum(ss, sh);
  const float mean_sq = float(ss / double(k.n));
  const float s = float(1.0 / sqrt(double(mean_sq + k.eps)));
#pragma unroll
  for (int u = 0; u < kNormAhead; ++u) {
    const int64_t i = threadIdx.x + u * step;
    if (i >= k.n) continue;
    const float v = xv[u] * s;
    yr[i] = k.weight ? wv[u] * v : v;
  }
}

// Row r of k; each thread writes the elements it read (y may alias x). (Main's loops: the unstaged
// collapse + norm chain runs them.)
static __device__ inline void rmsnorm_row(const dk::RmsNormK& k, int64_t r) {
  __shared__ double sh[32];
  const float* xr = k.x + r * k.n;
  float* yr = k.y + r * k.n;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < k.n; i += blockDim.x) ss += double(xr[i]) * xr[i];
  ss = block_sum(ss, sh);
  const float mean_sq = float(ss / double(k.n));
  const float s = float(1.0 / sqrt(double(mean_sq + k.eps)));
  for (int64_t i = threadIdx.x; i < k.n; i += blockDim.x) {
    const float v = xr[i] * s;
    yr[i] = k.weight ? k.weight[i] * v : v;
  }
}

// The row by rmsnorm_row_ahead where kStagedNorm and it fits (the RMSNorm kernels and the staged
// collapse + norm chain), else rmsnorm_row.
static __device__ inline void rmsnorm_row_fast(const dk::RmsNormK& k, int64_t r) {
  __shared__ double sh[32];
  if (kStagedNorm && k.n <= kNormAhead * int64_t(blockDim.x))
    rmsnorm_row_ahead(k, r, sh);
  else
    rmsnorm_row(k, r);
}

static __global__ void __launch_bounds__(256) rmsnorm_kernel(const dk::RmsNormK k) {
  await_previous_kernel();
  rmsnorm_row_fast(k, blockIdx.x);
}

bool launch(int64_t n, const dk::RmsNormK& k, Stream s) {
  if (n > 0x7fffffff) return false;
  launch_kernel(&rmsnorm_kernel, unsigned(n), 256, 0, s, k);
  return true;
}

// Block b: the row of the first body whose rows it does not pass (as dk::Batched runs them).
static __global__ void __launch_bounds__(256) rmsnorm_batch_kernel(const dk::Batched<dk::RmsNormK> b) {
  await_previous_kernel();
  int64_t r = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && r >= b.count[j]) r -= b.count[j++];
  rmsnorm_row_fast(b.body[j], r);
}

bool launch(int64_t n, const dk::Batched<dk::RmsNormK>& b, Stream s) {
  if (n > 0x7fffffff) return false;
  launch_kernel(&rmsnorm_batch_kernel, unsigned(n), 256, 0, s, b);
  return true;
}

// ---- mHC collapse + RMSNorm: one block per row -----------------------------------------------------
static __global__ void __launch_bounds__(256) collapse_norm_kernel(const dk::CollapseNormChain c) {
  await_previous_kernel();
  const dk::MhcCollapseK& k = c.collapse;
  const int64_t i = blockIdx.x;
  if (kBatchedChains) {  // the row's hc streams and the norm weight, asked for at once
    const int64_t t = k.rows ? k.rows[i] : i;
    prefetch_l1(k.x + t * k.hc * k.d, k.hc * k.d * int64_t(sizeof(float)));
    prefetch_l1(c.norm.weight, c.norm.weight ? k.d * int64_t(sizeof(float)) : 0);
  }
  // Each thread collapses (MhcCollapseK's own sum) the elements it then normalises: rmsnorm_row
  // walks a row with the same stride, so no barrier is needed between the two.
  for (int64_t e = threadIdx.x; e < k.d; e += blockDim.x) k(i * k.d + e);
  rmsnorm_row(c.norm, i);
}

// kStagedCollapse: the kernel above costs 5.8 µs a launch at mini-flash batch 1 (ncu, session 17)
// for 16 KB: each thread's collapse sums and stores, the norm's loads and its stores wait on one
// another (they may alias). Here the block loads the row's hc streams, pre and the norm weight into
// shared memory at once, runs MhcCollapseK's body on those copies (token 0 of them) into a shared
// row, and rmsnorm_row from that row into the output: both bodies' operations on the same floats.
// Needs norm.y == collapse.y (the collapsed row is never stored, only its norm).
static size_t staged_collapse_smem(const dk::CollapseNormChain& c) {
  return size_t(c.collapse.hc + 2) * size_t(c.collapse.d) * sizeof(float) + size_t(c.collapse.hc) * sizeof(float);
}

static __global__ void __launch_bounds__(256) collapse_norm_staged_kernel(const dk::CollapseNormChain c) {
  await_previous_kernel();
  extern __shared__ float sm[];  // streams [hc, d], collapsed row [d], norm weight [d], pre [hc]
  const dk::MhcCollapseK& k = c.collapse;
  const int64_t i = blockIdx.x, d = k.d, flat = k.hc * d, t = k.rows ? k.rows[i] : i;
  const int tid = threadIdx.x;
  float *xs = sm, *row = sm + flat, *weight = row + d, *pre = weight + d;
  const float* xt = k.x + t * flat;
  int64_t e = tid;
  for (; e + (kChainBatch - 1) * 256 < flat; e += kChainBatch * 256) {
    float v[kChainBatch];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) v[u] = xt[e + u * 256];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) xs[e + u * 256] = v[u];
  }
  for (; e < flat; e += 256) xs[e] = xt[e];
  if (c.norm.weight)
    for (int64_t q = tid; q < d; q += 256) weight[q] = c.norm.weight[q];
  if (tid < k.hc) pre[tid] = k.pre[t * k.hc + tid];
  __syncthreads();
  dk::MhcCollapseK view = k;  // token 0 of the copies
  view.x = xs;
  view.pre = pre;
  view.rows = nullptr;
  view.y = row;
  // Each thread collapses the elements it then normalises (rmsnorm_row's stride): no barrier.
  for (int64_t q = tid; q < d; q += 256) view(q);
  dk::RmsNormK norm = c.norm;
  norm.x = row;
  norm.weight = c.norm.weight ? weight : nullptr;
  norm.y = c.norm.y + i * d;
  rmsnorm_row_fast(norm, 0);
}

// Wide rows, few of them (session 22): one block per row reads the row's hc streams (80 KB at the
// synthetic model's d 5,120) through one SM, one dependent round trip after another (the collapse
// stores, the norm reads back): ≈ 20 µs a launch there, 80 launches a step at batch 1. Here a
// cluster of kSplitNormBlocks blocks takes a row: block b collapses columns [b·w, b·w + w) into
// registers (MhcCollapseK::value: the collapse's bits), sums their squares (double), and the
// blocks read each other's sums through distributed shared memory and add them in block order
// (every block the same total); then each scales its own columns as RmsNormK does. The norm's
// sum in another order than rmsnorm_row's (within CollapseNormMatchesSimple's bound).
constexpr int kSplitNormBlocks = 8;  // a portable cluster size
constexpr int kSplitNormThreads = 256, kSplitNormCols = 4;  // columns a thread holds
constexpr int64_t kSplitNormMinD = 2048, kSplitNormMaxRows = 16;

static __global__ void __cluster_dims__(kSplitNormBlocks, 1, 1) __launch_bounds__(kSplitNormThreads)
    collapse_norm_split_kernel(const dk::CollapseNormChain c) {
  await_previous_kernel();
  __shared__ double sh[32];
  cg::cluster_group cluster = cg::this_cluster();
  const dk::MhcCollapseK& k = c.collapse;
  const dk::RmsNormK& norm = c.norm;
  const int rank = int(cluster.block_rank());
  const int64_t i = blockIdx.x / kSplitNormBlocks, d = k.d;
  const int64_t width = (d + kSplitNormBlocks - 1) / kSplitNormBlocks, lo = rank * width;
  const int64_t hi = lo + width < d ? lo + width : d;
  float v[kSplitNormCols];
  double ss = 0;
#pragma unroll
  for (int u = 0; u < kSplitNormCols; ++u) {
    const int64_t col = lo + threadIdx.x + u * kSplitNormThreads;
    v[u] = col < hi ? k.value(i * d + col) : 0.0f;
  }
#pragma unroll
  for (int u = 0; u < kSplitNormCols; ++u)
    if (lo + threadIdx.x + u * kSplitNormThreads < hi) ss += double(v[u]) * v[u];
  const double total = cluster_sum(cluster, ss, sh);
  const float mean_sq = float(total / double(d));
  const float scale = float(1.0 / sqrt(double(mean_sq + norm.eps)));
#pragma unroll
  for (int u = 0; u < kSplitNormCols; ++u) {
    const int64_t col = lo + threadIdx.x + u * kSplitNormThreads;
    if (col >= hi) continue;
    if (norm.y != k.y) k.y[i * d + col] = v[u];
    const float x = v[u] * scale;
    norm.y[i * d + col] = norm.weight ? norm.weight[col] * x : x;
  }
}

static bool split_collapse_norm(const dk::CollapseNormChain& c) {
  const int64_t d = c.collapse.d;
  return kSplitCollapseNorm && c.n <= kSplitNormMaxRows && d >= kSplitNormMinD &&
         d <= int64_t(kSplitNormBlocks) * kSplitNormThreads * kSplitNormCols;
}

bool launch_chain(const dk::CollapseNormChain& c, Stream s) {
  if (c.n > 0x7fffffff || c.norm.x != c.collapse.y || c.norm.n != c.collapse.d) return false;
  if (c.n <= 0) return true;
  if (split_collapse_norm(c)) {
    launch_kernel(&collapse_norm_split_kernel, unsigned(c.n * kSplitNormBlocks), kSplitNormThreads, 0, s, c);
    return true;
  }
  const size_t smem = staged_collapse_smem(c);
  if (kStagedCollapse && c.norm.y == c.collapse.y && smem <= kStagedSmem)
    launch_kernel(&collapse_norm_staged_kernel, unsigned(c.n), 256, smem, s, c);
  else
    launch_kernel(&collapse_norm_kernel, unsigned(c.n), 256, 0, s, c);
  return true;
}

// ---- Experts: a warp per kOuts adjacent outputs, 16-byte weight units --------------------------
// Where a weight's rows take 16-byte units (units::unit_kind; the kind is read from the expert
// table on the device, so it is chosen per warp) the warp reads kExpertOuts rows at once, each lane
// one unit of each; else each output's row through lane_dot as before. Exact products summed in
// double, as the simple bodies (only the order of the sums differs).
constexpr int kExpertOuts = 4;

struct ExpertSums {
  double v[kExpertOuts];
};

template <int kMode>
static __device__ inline ExpertSums lane_units(const dk::DevWeight& w, int64_t r0, int64_t out, int64_t n,
                                               const float* x, int lane) {
  constexpr int V = units::kUnit<kMode>;
  double acc[kExpertOuts] = {};
  for (int64_t c = int64_t(lane) * V; c < n; c += 32 * V) units::dot_units<kMode, kExpertOuts>(w, r0, out, c, n, x + c, acc);
  ExpertSums s;
#pragma unroll
  for (int o = 0; o < kExpertOuts; ++o) s.v[o] = acc[o];
  return s;
}

// This lane's shares of Σ_c W[r0 + o, c] · x[c] for o < kExpertOuts (rows ≥ out give 0).
static __device__ inline ExpertSums lane_dots(const dk::DevWeight& w, int64_t r0, int64_t out, int64_t n,
                                              const float* x, int lane) {
  switch (units::aligned(x, 16) ? units::unit_kind(w, n) : 0) {
    case 1: return lane_units<1>(w, r0, out, n, x, lane);
    case 2: return lane_units<2>(w, r0, out, n, x, lane);
    case 3: return lane_units<3>(w, r0, out, n, x, lane);
    case 4: return lane_units<4>(w, r0, out, n, x, lane);
    default: {
      ExpertSums s;
#pragma unroll
      for (int o = 0; o < kExpertOuts; ++o) s.v[o] = r0 + o < out ? lane_dot(w, r0 + o, n, x, lane) : 0.0;
      return s;
    }
  }
}

// The stored experts' sums (docs/CUDA.md "Batch-1 experts without conversions"): kFloatUnits
// decodes each code to float and converts it and x to double (units::dot_units); kPlaced* sum the
// same products in the same order with the codes placed in doubles by byte permutes
// (exact_units.cuh: the same bits, no 64-bit conversion a weight), kPlacedAhead with the next
// step's units loaded before this step's sums. ExpertDecode (fast_kernels.h) names them.
// Measured on the H200 (23:20 UTC, synthetic shapes, DISABLED_SyntheticExpertBandwidth): placed
// 99 against 103 µs for the up projection at 1 token, 532 against 680 µs at 8, the down + expand
// chain the same (71 / 72 µs); placed-ahead slower (125 µs up), and on mini-flash (as the default)
// slower too (up 0.20 against 0.18 ms a step). The conversions are not what holds the batch-1
// experts to ≈ 0.2 of the copy rate, so the default stays the float decode (main's kernels) until
// placed is measured on mini-flash; every path gives the same bits.
// kStreamUnits (session 20, expert_stream.cuh): the placed decode on units each lane copies into
// its own shared-memory ring 3 steps ahead (cp.async: no registers held by the loads in flight),
// in kernels limited to 128 registers (two blocks of 8 warps an SM); kStreamShort the same with 2.
// Measured on the H200 (session 20, 04:36 UTC, BENCHMARKS.md "Batch-1 experts streamed"): at the
// synthetic shapes stream-2 / stream take the up launch 164 → 112 / 119 µs and down + expand
// 120 → 90 µs at 1 token (−32 % / −26 %; that call's GPU ran everything ≈ 1.5× slower than
// session 19's), 8 tokens −43 % / −31 %; at mini-flash's d 1,024 the up launch is slower (19.0 →
// 22–24 µs) and mini-flash end to end slower (batch 1 up 0.18 → 0.23 ms a step). The stream
// paths' bits were not yet compared on the GPU then (the call's test run stopped at an illegal
// address of the single-body launch, fixed above it since).
// Session 22: the stream paths' bits were compared on the GPU since (FastExpertsCuda.*, 5 of 5 bit
// for bit at session 20's merged call), so the default is a rule by the sums' length (kExpertPath
// below it, the single-body launch always): stream-2 where a warp's rows are at least
// kStreamMinDot long (the synthetic model's up 5,120 and down 2,304: −33 % / −27 % a launch),
// the float decode below (mini-flash's up 1,024, where stream was slower).
constexpr int kFloatUnits = 0, kPlaced = 1, kPlacedAhead = 2, kStreamUnits = 3, kStreamShort = 4;
constexpr int kExpertPath = kFloatUnits;
constexpr int64_t kStreamMinDot = 2048;

__host__ __device__ constexpr bool is_stream(int path) { return path == kStreamUnits || path == kStreamShort; }
__host__ __device__ constexpr int stream_stages(int path) { return path == kStreamShort ? 2 : 3; }

// dot: the length of the rows the launch's warps sum (the shortest where they differ).
static int expert_path(ExpertDecode d, int64_t dot) {
  switch (d) {
    case ExpertDecode::kFloat: return kFloatUnits;
    case ExpertDecode::kPlaced: return kPlaced;
    case ExpertDecode::kPlacedAhead: return kPlacedAhead;
    case ExpertDecode::kStream: return kStreamUnits;
    case ExpertDecode::kStreamShort: return kStreamShort;
    default: return dot >= kStreamMinDot ? kStreamShort : kExpertPath;
  }
}

// acc[m · kExpertOuts + o] (zeros on entry) = this lane's shares of rows rs.r0 + o of the kMats
// weights by the placed decode; false (nothing read) where it does not take them (not FP8 / FP4
// units of one kind, x not 16-byte aligned, or kPath kFloatUnits).
template <int kPath, int kMats>
static __device__ inline bool placed_sums(const exact::RowSet& rs, int64_t n, const float* x, int lane, double* acc) {
  if (kPath == kFloatUnits || is_stream(kPath) || !units::aligned(x, 16)) return false;
  const int kind = units::unit_kind(*rs.w[0], n);
  if (kMats == 2 && units::unit_kind(*rs.w[1], n) != kind) return false;
  constexpr bool kAhead = kPath == kPlacedAhead;
  if (kind == 4) {
    exact::lane_rows<4, kMats, kExpertOuts, kAhead>(rs, n, x, lane, acc);
    return true;
  }
  if (kind == 3) {
    exact::lane_rows<3, kMats, kExpertOuts, kAhead>(rs, n, x, lane, acc);
    return true;
  }
  return false;
}

// Warp `id` of an ExpertUpK launch: kExpertOuts adjacent outputs of one (token, expert).
// The warp's sums by kPath: kStreamUnits through `ring` (this warp's stream::kRingUnits), the
// others as placed_sums; false where they do not take the rows (then lane_dots).
template <int kPath, int kMats>
static __device__ inline bool decode_sums(const exact::RowSet& rs, int64_t n, const float* x, int lane, uint4* ring,
                                          double* acc) {
  if constexpr (is_stream(kPath))
    return stream::stream_sums<kMats, kExpertOuts, stream_stages(kPath)>(rs, n, x, lane, ring, acc);
  else
    return placed_sums<kPath, kMats>(rs, n, x, lane, acc);
}

template <int kPath>
static __device__ inline void expert_up_warp(const dk::ExpertUpK& k, int64_t id, int lane, uint4* ring) {
  const int64_t per = (k.inter + kExpertOuts - 1) / kExpertOuts;
  const int64_t tj = id / per, o0 = (id % per) * kExpertOuts, t = tj / k.k;
  const dk::ExpertW& e = k.table[k.experts ? k.experts[tj] : 0];
  const float* xt = k.x + t * k.d;
  ExpertSums ga, ua;
  double acc[2 * kExpertOuts] = {};
  if (decode_sums<kPath, 2>(exact::RowSet{{&e.w1, &e.w3}, o0, k.inter}, k.d, xt, lane, ring, acc)) {
#pragma unroll
    for (int o = 0; o < kExpertOuts; ++o) ga.v[o] = acc[o], ua.v[o] = acc[kExpertOuts + o];
  } else {
    ga = lane_dots(e.w1, o0, k.inter, k.d, xt, lane);
    ua = lane_dots(e.w3, o0, k.inter, k.d, xt, lane);
  }
  const float wt = k.experts ? k.weights[tj] : 1.0f;
#pragma unroll
  for (int o = 0; o < kExpertOuts; ++o) {
    float g = float(warp_sum(ga.v[o])), u = float(warp_sum(ua.v[o]));
    if (lane != 0 || o0 + o >= k.inter) continue;
    if (k.lim > 0) {
      u = fminf(fmaxf(u, -k.lim), k.lim);
      g = fminf(g, k.lim);
    }
    k.h[tj * k.inter + o0 + o] = wt * ((g / (1.0f + expf(-g))) * u);
  }
}

static int64_t expert_up_warps(int64_t n, const dk::ExpertUpK& k) {
  return n / k.inter * ((k.inter + kExpertOuts - 1) / kExpertOuts);
}

// The single-body launch has no ring (no dynamic shared memory): a stream default reads the
// float decode here. (moe20's GPU call ran the stream path with a null ring here: an illegal
// address in DeviceKernelsCuda.StoredWeightGemmAndExperts.)
constexpr int kSingleUpPath = is_stream(kExpertPath) ? kFloatUnits : kExpertPath;

static __global__ void __launch_bounds__(kWarpsPerBlock * 32) expert_up_kernel(const dk::ExpertUpK k, int64_t warps) {
  await_previous_kernel();
  const int64_t id = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (id < warps) expert_up_warp<kSingleUpPath>(k, id, threadIdx.x & 31, nullptr);
}

bool launch(int64_t n, const dk::ExpertUpK& k, Stream s) {
  if (k.inter < 1) return false;
  const int64_t warps = expert_up_warps(n, k);
  launch_kernel(&expert_up_kernel, blocks_for(warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, k, warps);
  return true;
}

// Several ExpertUpK (the routed experts and the shared one) in one launch: the warps of body j
// after those of the bodies before it, each warp as in its own launch.
struct UpWarps {
  int64_t warps[dk::Batched<dk::ExpertUpK>::kMax];
};

// Dynamic shared memory of the stream kernels: each warp's ring of `rows` rows.
constexpr size_t stream_smem(int path, int rows) {
  return size_t(kWarpsPerBlock) * size_t(stream_stages(path)) * 32 * size_t(rows) * sizeof(uint4);
}

// Beyond the default 48 KiB of shared memory a kernel needs the opt-in, set per launch (the backend
// keeps no process state).
template <class Kernel>
static bool allow_smem(Kernel* kernel, size_t dynamic_bytes, size_t static_bytes) {
  if (dynamic_bytes + static_bytes <= 48u * 1024u) return true;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dynamic_bytes)) == cudaSuccess;
}

template <int kPath>
static __global__ void __launch_bounds__(kWarpsPerBlock * 32, is_stream(kPath) ? 2 : 1) expert_up_batch_kernel(
    const dk::Batched<dk::ExpertUpK> b, const UpWarps w, int64_t total) {
  await_previous_kernel();
  extern __shared__ uint4 stream_ring[];
  int64_t id = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (id >= total) return;
  int j = 0;
  while (j + 1 < b.n && id >= w.warps[j]) id -= w.warps[j++];
  uint4* ring = stream_ring + (threadIdx.x >> 5) * stream::kRingUnits<2 * kExpertOuts, stream_stages(kPath)>;
  expert_up_warp<kPath>(b.body[j], id, threadIdx.x & 31, is_stream(kPath) ? ring : nullptr);
}

template <int kPath>
static bool launch_up_stream(const dk::Batched<dk::ExpertUpK>& b, const UpWarps& w, int64_t total, Stream s) {
  const size_t smem = stream_smem(kPath, 2 * kExpertOuts);
  if (!allow_smem(expert_up_batch_kernel<kPath>, smem, 0)) return false;
  launch_kernel(&expert_up_batch_kernel<kPath>, blocks_for(total, kWarpsPerBlock), kWarpsPerBlock * 32, smem, s, b, w, total);
  return true;
}

static bool launch_up_stream(const dk::Batched<dk::ExpertUpK>& b, const UpWarps& w, int64_t total, bool short_ring,
                             Stream s) {
  return short_ring ? launch_up_stream<kStreamShort>(b, w, total, s) : launch_up_stream<kStreamUnits>(b, w, total, s);
}

bool launch(int64_t, const dk::Batched<dk::ExpertUpK>& b, Stream s) {
  return launch_experts_up(b, ExpertDecode::kDefault, s);
}

bool launch_experts_up(const dk::Batched<dk::ExpertUpK>& b, ExpertDecode decode, Stream s) {
  UpWarps w{};
  int64_t total = 0, dot = INT64_MAX;
  for (int j = 0; j < b.n; ++j) {
    if (b.body[j].inter < 1 || b.count[j] % b.body[j].inter != 0) return false;
    w.warps[j] = expert_up_warps(b.count[j], b.body[j]);
    total += w.warps[j];
    dot = std::min(dot, b.body[j].d);
  }
  if (b.n < 1 || blocks_for(total, kWarpsPerBlock) > 0x7fffffffu) return false;
  if (total <= 0) return true;
  const unsigned blocks = blocks_for(total, kWarpsPerBlock);
  const int path = expert_path(decode, dot);
  switch (path) {
    case kFloatUnits: launch_kernel(&expert_up_batch_kernel<kFloatUnits>, blocks, kWarpsPerBlock * 32, 0, s, b, w, total); break;
    case kPlaced: launch_kernel(&expert_up_batch_kernel<kPlaced>, blocks, kWarpsPerBlock * 32, 0, s, b, w, total); break;
    case kPlacedAhead: launch_kernel(&expert_up_batch_kernel<kPlacedAhead>, blocks, kWarpsPerBlock * 32, 0, s, b, w, total); break;
    default: return launch_up_stream(b, w, total, path == kStreamShort, s);
  }
  return true;
}

static __global__ void __launch_bounds__(kWarpsPerBlock * 32) expert_down_kernel(const dk::ExpertDownK k, int64_t warps) {
  await_previous_kernel();
  const int lane = threadIdx.x & 31;
  const int64_t id = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (id >= warps) return;
  const int64_t per = (k.d + kExpertOuts - 1) / kExpertOuts;
  const int64_t t = id / per, c0 = (id % per) * kExpertOuts;
  float acc[kExpertOuts] = {};  // each expert's sum rounded to float before it is added (ExpertDownK)
  const auto add = [&](const dk::DevWeight& w2, int64_t inter, const float* h) {
    const ExpertSums s = lane_dots(w2, c0, k.d, inter, h, lane);
#pragma unroll
    for (int o = 0; o < kExpertOuts; ++o) acc[o] += float(warp_sum(s.v[o]));
  };
  for (int j = 0; j < k.k; ++j) add(k.table[k.experts[t * k.k + j]].w2, k.inter, k.h + (t * k.k + j) * k.inter);
  if (k.shared) add(k.shared->w2, k.shared_inter, k.hs + t * k.shared_inter);
  if (lane != 0) return;
#pragma unroll
  for (int o = 0; o < kExpertOuts; ++o)
    if (c0 + o < k.d) k.y[t * k.d + c0 + o] = acc[o];
}

bool launch(int64_t n, const dk::ExpertDownK& k, Stream s) {
  if (k.d < 1) return false;
  const int64_t warps = n / k.d * ((k.d + kExpertOuts - 1) / kExpertOuts);
  launch_kernel(&expert_down_kernel, blocks_for(warps, kWarpsPerBlock), kWarpsPerBlock * 32, 0, s, k, warps);
  return true;
}

// ---- Experts' down projection + mHC expand: a block per (token, kExpertOuts columns) ------------
// Warp w sums the columns' rows of experts w, w + 8, … (the shared expert last) as the warp kernel
// above does for each expert — the same lane shares, the same warp sum, rounded to float — into
// shared memory; then thread o of warp 0 adds them in ExpertDownK's order (routed 0 … k−1, then
// the shared), writes column c0 + o and runs MhcExpandK's body for that column's hc outputs.
// The same bits as the two launches; up to kDownParts experts (else the two launches).
constexpr int kDownParts = 64;
constexpr int kMaxHcDown = 8;  // the staged expand's most streams (hc · kExpertOuts ≤ the block's threads)

// kStagedDownExpand: the thread of a column formed its hc expand outputs one after another, each
// MhcExpandK::value's hc dependent loads waiting for the store before (11.5 µs a launch at
// mini-flash batch 1, ncu, session 17). Staged, the block loads the expand's operands of its
// columns (x, comb, post) into shared memory before the experts' sums, and thread (i, o) of the
// first hc · kExpertOuts forms output i of column c0 + o with MhcExpandK::value on a view of them
// (the same function of the same floats); `a` is the column's sum, which each of those threads
// adds in ExpertDownK's order itself.
struct ExpandOperands {
  float x[kMaxHcDown][kExpertOuts], a[kMaxHcDown][kExpertOuts], comb[kMaxHcDown * kMaxHcDown], post[kMaxHcDown];
};

static __device__ void stage_expand_operands(const dk::MhcExpandK& e, int64_t t, int64_t c0, ExpandOperands& sh) {
  const int hc = e.hc;
  for (int q = threadIdx.x; q < hc * kExpertOuts; q += blockDim.x) {
    const int j = q / kExpertOuts, o = q % kExpertOuts;
    sh.x[j][o] = c0 + o < e.d ? e.x[(t * hc + j) * e.d + c0 + o] : 0.0f;
  }
  for (int q = threadIdx.x; q < hc * hc; q += blockDim.x) sh.comb[q] = e.comb[t * hc * hc + q];
  if (int(threadIdx.x) < hc) sh.post[threadIdx.x] = e.post[t * hc + threadIdx.x];
}

template <int kPath>
static __global__ void __launch_bounds__(kWarpsPerBlock * 32, is_stream(kPath) ? 2 : 1) down_expand_kernel(
    const dk::DownExpandChain c) {
  await_previous_kernel();
  __shared__ float part[kDownParts][kExpertOuts];
  __shared__ ExpandOperands ops;
  extern __shared__ uint4 stream_ring[];
  const dk::ExpertDownK& k = c.down;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t per = (k.d + kExpertOuts - 1) / kExpertOuts;
  const int64_t t = blockIdx.x / per, c0 = (blockIdx.x % per) * kExpertOuts;
  const int parts = k.k + (k.shared ? 1 : 0);
  const bool staged = kStagedDownExpand && c.expand.hc <= kMaxHcDown;
  if (staged) stage_expand_operands(c.expand, t, c0, ops);
  for (int j = warp; j < parts; j += kWarpsPerBlock) {
    const bool routed = j < k.k;
    const dk::DevWeight& w2 = routed ? k.table[k.experts[t * k.k + j]].w2 : k.shared->w2;
    const int64_t inter = routed ? k.inter : k.shared_inter;
    const float* h = routed ? k.h + (t * k.k + j) * k.inter : k.hs + t * k.shared_inter;
    ExpertSums s{};
    uint4* ring = stream_ring + warp * stream::kRingUnits<kExpertOuts, stream_stages(kPath)>;
    if (!decode_sums<kPath, 1>(exact::RowSet{{&w2, &w2}, c0, k.d}, inter, h, lane, ring, s.v))
      s = lane_dots(w2, c0, k.d, inter, h, lane);
#pragma unroll
    for (int o = 0; o < kExpertOuts; ++o) {
      const float v = float(warp_sum(s.v[o]));
      if (lane == 0) part[j][o] = v;
    }
  }
  __syncthreads();
  if (staged) {
    const dk::MhcExpandK& e = c.expand;
    const int o = threadIdx.x % kExpertOuts, i = threadIdx.x / kExpertOuts;
    if (i >= e.hc || c0 + o >= k.d) return;
    float acc = 0.0f;
    for (int j = 0; j < parts; ++j) acc += part[j][o];
    if (i == 0) k.y[t * k.d + c0 + o] = acc;
    ops.a[i][o] = acc;  // this thread's own row of `a`
    dk::MhcExpandK view = e;  // token 0, columns c0 … c0 + 3 of the copies
    view.x = &ops.x[0][0];
    view.a = ops.a[i];
    view.comb = ops.comb;
    view.post = ops.post;
    view.d = kExpertOuts;
    e.out[(t * e.hc + i) * e.d + c0 + o] = view.value(i * kExpertOuts + o);
    return;
  }
  if (threadIdx.x >= kExpertOuts || c0 + threadIdx.x >= k.d) return;
  const int64_t col = c0 + threadIdx.x;
  float acc = 0.0f;
  for (int j = 0; j < parts; ++j) acc += part[j][threadIdx.x];
  k.y[t * k.d + col] = acc;
  const dk::MhcExpandK& e = c.expand;
  for (int i = 0; i < e.hc; ++i) e((t * e.hc + i) * e.d + col);
}

bool launch_chain(const dk::DownExpandChain& c, Stream s) { return launch_down_expand(c, ExpertDecode::kDefault, s); }

template <int kPath>
static bool launch_down_stream(const dk::DownExpandChain& c, unsigned grid, Stream s) {
  const size_t smem = stream_smem(kPath, kExpertOuts);
  const size_t static_smem = sizeof(float) * kDownParts * kExpertOuts + sizeof(ExpandOperands);
  if (!allow_smem(down_expand_kernel<kPath>, smem, static_smem)) return false;
  launch_kernel(&down_expand_kernel<kPath>, grid, kWarpsPerBlock * 32, smem, s, c);
  return true;
}

bool launch_down_expand(const dk::DownExpandChain& c, ExpertDecode decode, Stream s) {
  const dk::ExpertDownK& k = c.down;
  if (k.d < 1 || k.k + 1 > kDownParts || c.expand.a != k.y || c.expand.d != k.d) return false;
  const int64_t blocks = c.m * ((k.d + kExpertOuts - 1) / kExpertOuts);
  if (blocks > 0x7fffffff) return false;
  if (blocks <= 0) return true;
  const unsigned grid = unsigned(blocks);
  switch (expert_path(decode, k.shared ? std::min(k.inter, k.shared_inter) : k.inter)) {
    case kFloatUnits: launch_kernel(&down_expand_kernel<kFloatUnits>, grid, kWarpsPerBlock * 32, 0, s, c); break;
    case kPlaced: launch_kernel(&down_expand_kernel<kPlaced>, grid, kWarpsPerBlock * 32, 0, s, c); break;
    case kPlacedAhead: launch_kernel(&down_expand_kernel<kPlacedAhead>, grid, kWarpsPerBlock * 32, 0, s, c); break;
    case kStreamShort: return launch_down_stream<kStreamShort>(c, grid, s);
    default: return launch_down_stream<kStreamUnits>(c, grid, s);
  }
  return true;
}

// ---- Router: one block per token (logits, temperature, RouteK) ------------------------------------
// The E logits one warp each (lane_dot: double sums, as GemmK's warp kernel), divided by the
// temperature by ScaleK's body, then thread 0 runs RouteK's body (its code, unchanged) on copies
// in shared memory — its loops re-read scores and choices many times, which from global memory
// made the simple launch cost ≈ 25 µs — and the block writes scores, experts and weights back.
constexpr int kRouterThreads = kWarpsPerBlock * 32;  // also the most experts it takes
constexpr int kRouterWarpQ = kRouterThreads / 32;     // experts a lane holds in the warp selection
constexpr int64_t kRouterPrefetch = 128 << 10;

// RouteK's selection order: a candidate comes before another when it is not NaN and the other is,
// or has the larger value, or (equal values, or both NaN) the lower index; -1 is no candidate. The
// serial scan of RouteK (ties keep the first seen, NaN last) picks the first in this order.
static __device__ bool route_before(int ai, float av, int bi, float bv) {
  if (ai < 0) return false;
  if (bi < 0) return true;
  const bool an = dk::is_nan(av), bn = dk::is_nan(bv);
  if (an != bn) return bn;
  if (!an && av != bv) return av > bv;
  return ai < bi;
}

// RouteK's body for E ≤ 32 · Q experts (sqrt-softplus or sigmoid scoring) by one warp: lane i
// scores experts i, i + 32, … with RouteK's float operations, each of the k picks is the lane's
// first open candidate in RouteK's selection order, then a warp reduction in that order (a total
// order, so any grouping finds the one the serial scan keeps), then lane 0 forms the weights as
// RouteK does. Same results as the one-thread body, which took ≈ 25 µs of dependent steps on
// mini-flash (16 experts, top 6) and takes its E · k steps for the 256 experts of V4.1-Flash.
template <int Q>
static __device__ void route_warp(const dk::RouteK& r, int64_t t, float* s, int32_t* ex, float* wt, int lane) {
  const float* bias = (r.is_image && r.is_image[t] && r.bias_vl) ? r.bias_vl : r.bias;
  unsigned open = 0;  // bit q: expert lane + 32 q not yet taken
  float key[Q];
#pragma unroll
  for (int q = 0; q < Q; ++q) {
    const int e = lane + 32 * q;
    key[q] = 0;
    if (e >= r.E) continue;
    const float x = s[e];
    const float v = r.scoring == dk::Scoring::kSqrtSoftplus ? sqrtf(x > 20.0f ? x : log1pf(expf(x)))
                                                            : 1.0f / (1.0f + expf(-x));
    s[e] = v;
    key[q] = v + (bias ? bias[e] : 0.0f);
    open |= 1u << q;
  }
  for (int j = 0; j < r.k; ++j) {
    int bi = -1;
    float bv = 0;
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      if ((open >> q & 1u) && route_before(lane + 32 * q, key[q], bi, bv)) {
        bi = lane + 32 * q;
        bv = key[q];
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const int oi = __shfl_xor_sync(kFull, bi, off);
      const float ov = __shfl_xor_sync(kFull, bv, off);
      if (route_before(oi, ov, bi, bv)) {
        bi = oi;
        bv = ov;
      }
    }
    if (bi >= 0 && (bi & 31) == lane) open &= ~(1u << (bi >> 5));
    if (lane == 0) ex[j] = bi;
  }
  __syncwarp();
  if (lane != 0) return;
  float sum = 0;
  for (int j = 0; j < r.k; ++j) {
    wt[j] = s[ex[j]];
    sum += wt[j];
  }
  if (r.norm && r.k > 1)
    for (int j = 0; j < r.k; ++j) wt[j] /= (sum + 1e-20f);
  for (int j = 0; j < r.k; ++j) wt[j] *= r.scaling;
}

// kRouterWide: a warp per gate row up to 32 warps (the synthetic model's 32 experts × 5,120: each
// warp one row of 40 steps, its loads kChainBatch steps ahead) instead of the 8 warps taking 4 rows
// each with a round trip a step (≈ 54 µs a launch there, 160 dependent loads a warp). The same
// lane shares and warp sums per row (the same bits).
constexpr bool kRouterWide = true;

static unsigned router_threads(int E) {
  return kRouterWide ? 32u * unsigned(std::clamp(E, kWarpsPerBlock, 32)) : unsigned(kRouterThreads);
}

// The temperature, RouteK's selection and the stores of token t from its E logits s (shared
// memory), by a block of at least E threads (all of them call it).
static __device__ void router_finish(const dk::RouterChain& c, int64_t t, float* s, int32_t* ex, float* wt) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, E = c.route.E, k = c.route.k;
  const dk::GemmK& g = c.gate;
  dk::ScaleK scale = c.scale;
  scale.x = s;
  if (int(threadIdx.x) < E) scale(threadIdx.x);
  __syncthreads();
  // (The warp selection for up to 256 experts; before, up to 32 and one thread above that.)
  if (c.route.scoring != dk::Scoring::kSoftmax && E <= 32) {
    if (warp == 0) route_warp<1>(c.route, t, s, ex, wt, lane);
  } else if (kBatchedChains && c.route.scoring != dk::Scoring::kSoftmax && E <= 32 * kRouterWarpQ) {
    if (warp == 0) route_warp<kRouterWarpQ>(c.route, t, s, ex, wt, lane);
  } else if (threadIdx.x == 0) {
    dk::RouteK r = c.route;
    r.s = s;
    r.experts = ex;
    r.weights = wt;
    r.is_image = c.route.is_image ? c.route.is_image + t : nullptr;
    r(0);
  }
  __syncthreads();
  if (int(threadIdx.x) < E) g.y[t * E + threadIdx.x] = s[threadIdx.x];
  if (int(threadIdx.x) < k) {
    c.route.experts[t * k + threadIdx.x] = ex[threadIdx.x];
    c.route.weights[t * k + threadIdx.x] = wt[threadIdx.x];
  }
}

static __global__ void __launch_bounds__(1024) router_kernel(const dk::RouterChain c) {
  await_previous_kernel();
  __shared__ float s[kRouterThreads], wt[kRouterThreads];
  __shared__ int32_t ex[kRouterThreads];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, E = c.route.E;
  const dk::GemmK& g = c.gate;
  // The E gate rows (up to kRouterPrefetch bytes: more would push each other out of L1) and the
  // token's input, asked for at once.
  if (kBatchedChains && kPrefetchRouter) {
    prefetch_weight_rows(g.w, E, g.in, kRouterPrefetch);
    prefetch_l1(g.x + t * g.x_stride, g.in * int64_t(sizeof(float)));
  }
  for (int o = warp; o < E; o += int(blockDim.x >> 5)) {
    const float* xt = g.x + t * g.x_stride;
    const double lane_sum = kRouterAhead || kRouterWide ? lane_dot_ahead(g.w, o, g.in, xt, lane) : lane_dot(g.w, o, g.in, xt, lane);
    const double sum = warp_sum(lane_sum);
    if (lane == 0) s[o] = float(sum);
  }
  __syncthreads();
  router_finish(c, t, s, ex, wt);
}

// Wide gate rows at few tokens (session 22): one block per token read the synthetic model's 32 ×
// 5,120 float gate (640 KB) through one SM, ≈ 28 µs a launch (40 a step at batch 1). Here a
// cluster of kSplitRouterBlocks blocks takes a token: block b forms every row's lane shares over
// columns [b·w, b·w + w) (lane_dot_ahead's, w a multiple of 256), the warp sums them, and block 0
// adds the blocks' sums in block order (doubles: the logit's float the one-block kernel's but for
// a sum in another order) and runs router_finish.
constexpr bool kSplitRouter = true;
constexpr int kSplitRouterBlocks = 8;  // a portable cluster size
constexpr int64_t kSplitRouterMinIn = 2048, kSplitRouterMaxTokens = 16;

static __global__ void __cluster_dims__(kSplitRouterBlocks, 1, 1) __launch_bounds__(1024)
    router_split_kernel(const dk::RouterChain c) {
  await_previous_kernel();
  __shared__ float s[kRouterThreads], wt[kRouterThreads];
  __shared__ int32_t ex[kRouterThreads];
  __shared__ double part[32];  // this block's share of each row's sum (E ≤ 32)
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int64_t t = blockIdx.x / kSplitRouterBlocks;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, E = c.route.E;
  const dk::GemmK& g = c.gate;
  const int64_t width = (g.in + kSplitRouterBlocks * 256 - 1) / (kSplitRouterBlocks * 256) * 256;
  const int64_t lo = rank * width, hi = lo + width < g.in ? lo + width : g.in;
  const float* xt = g.x + t * g.x_stride;
  for (int o = warp; o < E; o += int(blockDim.x >> 5)) {
    const double sum = warp_sum(lo < hi ? lane_dot_ahead(g.w, o, g.in, xt, lane, lo, hi) : 0.0);
    if (lane == 0) part[o] = sum;
  }
  cluster.sync();  // every block's shares are written
  if (rank == 0 && int(threadIdx.x) < E) {
    double sum = 0;
    for (int b = 0; b < kSplitRouterBlocks; ++b) sum += cluster.map_shared_rank(part, b)[threadIdx.x];
    s[threadIdx.x] = float(sum);
  }
  cluster.sync();  // block 0 has read every block's shares (the others may leave)
  if (rank == 0) router_finish(c, t, s, ex, wt);
}

static bool split_router(const dk::RouterChain& c) {
  return kSplitRouter && c.gate.in >= kSplitRouterMinIn && c.route.E <= 32 && c.m <= kSplitRouterMaxTokens;
}

bool launch_chain(const dk::RouterChain& c, Stream s) {
  const dk::GemmK& g = c.gate;
  if (c.m > 0x7fffffff || g.out > kRouterThreads || c.route.E != g.out || c.route.k > c.route.E ||
      g.y_stride != g.out || c.scale.x != g.y || c.route.s != g.y)
    return false;
  if (c.m <= 0) return true;
  if (split_router(c))
    launch_kernel(&router_split_kernel, unsigned(c.m * kSplitRouterBlocks), router_threads(c.route.E), 0, s, c);
  else
    launch_kernel(&router_kernel, unsigned(c.m), router_threads(c.route.E), 0, s, c);
  return true;
}

// ---- Engram gate: one block per (token, stream) --------------------------------------------------
// EngramGateK's three double sums over d spread over the block (only their order changes), then
// thread 0 forms the gate with the body's operations.
static __global__ void __launch_bounds__(256) engram_gate_kernel(const dk::EngramGateK k) {
  await_previous_kernel();
  __shared__ double sh[32];
  const int64_t ti = blockIdx.x, t = ti / k.hc, i = ti % k.hc;
  const float* xi = k.x + ti * k.d;
  const float* ki = k.kv + t * (k.hc + 1) * k.d + i * k.d;
  double xx = 0, kk = 0, dot = 0;
  for (int64_t c = threadIdx.x; c < k.d; c += blockDim.x) {
    xx += double(xi[c]) * xi[c];
    kk += double(ki[c]) * ki[c];
    dot += double(xi[c]) * (double(k.qw[i * k.d + c]) * k.kw[i * k.d + c]) * ki[c];
  }
  xx = block_sum(xx, sh);
  kk = block_sum(kk, sh);
  dot = block_sum(dot, sh);
  if (threadIdx.x != 0) return;
  const double d = double(k.d);
  const double rstd = (1.0 / sqrt(double(float(xx / d)) + double(k.eps))) * (1.0 / sqrt(double(float(kk / d)) + double(k.eps)));
  const double g = dot * rstd / sqrt(d);
  const double mag = sqrt(fmax(fabs(g), 1e-6));
  k.gate[ti] = float(1.0 / (1.0 + exp(-copysign(mag, g))));
}

bool launch(int64_t n, const dk::EngramGateK& k, Stream s) {
  if (n > 0x7fffffff) return false;
  launch_kernel(&engram_gate_kernel, unsigned(n), 256, 0, s, k);
  return true;
}

// ---- mHC coefficients: one block per token (rsqrt, mix, gates, Sinkhorn) -------------------------
constexpr int kMaxHc = 8;

static __global__ void __launch_bounds__(256) mhc_coeff_kernel(const dk::MhcCoeffChain c) {
  await_previous_kernel();
  __shared__ double sh[32];
  __shared__ float m[(2 + kMaxHc) * kMaxHc];
  __shared__ float cb[kMaxHc * kMaxHc];
  const int64_t t = blockIdx.x, flat = c.rsqrt.flat, mix = c.mix.mix;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const float* f = c.rsqrt.x + t * flat;
  // r_t (MhcRsqrtK)
  double ss = 0;
  for (int64_t i = tid; i < flat; i += blockDim.x) ss += double(f[i]) * f[i];
  ss = block_sum(ss, sh);
  const float rt = float(1.0 / sqrt(double(float(ss / double(flat))) + double(c.rsqrt.eps)));
  if (tid == 0) c.rsqrt.r[t] = rt;
  // m[o] (MhcMixK): one warp per output; unrolled so that the loads of a lane overlap.
  for (int64_t o = warp; o < mix; o += warps) {
    const float* wo = c.mix.fn + o * flat;
    double acc = 0;
#pragma unroll 8
    for (int64_t i = lane; i < flat; i += 32) acc += double(f[i] * rt) * wo[i];
    acc = warp_sum(acc);
    if (lane == 0) m[o] = float(acc);
  }
  __syncthreads();
  // Gates and Sinkhorn (MhcFinishK's float operations in its order) in warp 0 alone (warp
  // barriers only): lane l holds elements l and l + 32 of the hc × hc matrix.
  if (warp != 0) return;
  const dk::MhcFinishK& k = c.finish;
  const int hc = k.hc, n = hc * hc;
  const float eps = k.eps;
  if (lane < hc) {
    k.pre[t * hc + lane] = dk::sigmoidf_(m[lane] * k.scale[0] + k.base[lane]) + eps;
    k.post[t * hc + lane] = 2.0f * dk::sigmoidf_(m[hc + lane] * k.scale[1] + k.base[hc + lane]);
  }
  const float* mc = m + 2 * hc;
  const float* bc = k.base + 2 * hc;
  const int e0 = lane, e1 = lane + 32;
  const bool on0 = e0 < n, on1 = e1 < n;
  // Each step computes a value per element from cb, then (after a warp barrier) stores it.
  float v0 = 0, v1 = 0;
  const auto store = [&](auto op) {
    if (on0) cb[e0] = op(cb[e0], v0);
    if (on1) cb[e1] = op(cb[e1], v1);
    __syncwarp();
  };
  const auto row_sum = [&](int e) {
    float sr = 0;
    for (int q = 0; q < hc; ++q) sr += cb[(e / hc) * hc + q];
    return sr;
  };
  const auto col_sum = [&](int e) {
    float sc = 0;
    for (int q = 0; q < hc; ++q) sc += cb[q * hc + e % hc];
    return sc;
  };
  const auto row_exp = [&](int e) {
    float mx = -INFINITY;
    for (int q = 0; q < hc; ++q) mx = fmaxf(mx, cb[(e / hc) * hc + q]);
    return expf(cb[e] - mx);
  };
  const auto put = [](float, float v) { return v; };
  const auto divide = [eps](float x, float s) { return x / (s + eps); };
  if (on0) cb[e0] = mc[e0] * k.scale[2] + bc[e0];
  if (on1) cb[e1] = mc[e1] * k.scale[2] + bc[e1];
  __syncwarp();
  if (on0) v0 = row_exp(e0);
  if (on1) v1 = row_exp(e1);
  __syncwarp();
  store(put);
  if (on0) v0 = cb[e0] / row_sum(e0) + eps;
  if (on1) v1 = cb[e1] / row_sum(e1) + eps;
  __syncwarp();
  store(put);
  for (int it = 0; it < k.iters; ++it) {
    if (it > 0) {  // rows, then columns (the first round is columns only)
      if (on0) v0 = row_sum(e0);
      if (on1) v1 = row_sum(e1);
      __syncwarp();
      store(divide);
    }
    if (on0) v0 = col_sum(e0);
    if (on1) v1 = col_sum(e1);
    __syncwarp();
    store(divide);
  }
  for (int e = lane; e < n; e += 32) k.comb[t * n + e] = cb[e];
}

// ---- mHC coefficients for hc = 4 (24 mix outputs): one block of 512 per token ------------------
// Every thread takes flat / 512 elements of the token's streams and keeps all 24 mix outputs'
// partial sums (doubles, each product as MhcMixK forms it), so the 24 weight rows stream through
// the block at once instead of three outputs a warp in turn; the block adds the partials in a
// fixed order. Gates and Sinkhorn in warp 0 with the 4 × 4 matrix in registers (lane 4j + i holds
// element (j, i)); every row / column sum gathers its four values by shuffles and adds them in
// MhcFinishK's order, so the float operations are the simple kernel's.
constexpr int kMhcThreads = 512, kMhcMix = 24;

// Gates and Sinkhorn of token t from its 24 mix outputs m, in warp 0 (all 32 lanes).
static __device__ void mhc4_finish(const dk::MhcFinishK& k, int64_t t, const float* m, int lane) {
  const float eps = k.eps;
  if (lane < 4) {
    k.pre[t * 4 + lane] = dk::sigmoidf_(m[lane] * k.scale[0] + k.base[lane]) + eps;
    k.post[t * 4 + lane] = 2.0f * dk::sigmoidf_(m[4 + lane] * k.scale[1] + k.base[4 + lane]);
  }
  // Lanes 16 … 31 mirror lanes 0 … 15 (shuffles need the whole warp); only 0 … 15 store.
  const int e = lane & 15, j = e >> 2, i = e & 3;
  float v = m[8 + e] * k.scale[2] + k.base[8 + e];
  const auto row_sum = [&](float x) {  // Σ_q cb[j][q], q ascending
    float s = 0;
    for (int q = 0; q < 4; ++q) s += __shfl_sync(kFull, x, 4 * j + q);
    return s;
  };
  const auto col_sum = [&](float x) {  // Σ_q cb[q][i], q ascending
    float s = 0;
    for (int q = 0; q < 4; ++q) s += __shfl_sync(kFull, x, 4 * q + i);
    return s;
  };
  float mx = -INFINITY;
  for (int q = 0; q < 4; ++q) mx = fmaxf(mx, __shfl_sync(kFull, v, 4 * j + q));
  v = expf(v - mx);
  v = v / row_sum(v) + eps;
  for (int it = 0; it < k.iters; ++it) {
    if (it > 0) v = v / (row_sum(v) + eps);
    v = v / (col_sum(v) + eps);
  }
  if (lane < 16) k.comb[t * 16 + e] = v;
}

// r_t of a token (MhcRsqrtK's value) from its streams f, formed by the whole block in a fixed
// order: every block that forms it gets the same bits.
static __device__ float mhc_rsqrt_of(const dk::MhcCoeffChain& c, const float* f, double* sh) {
  const int64_t flat = c.rsqrt.flat, step = blockDim.x;
  double ss = 0;
  int64_t i = threadIdx.x;
  if (kBatchedChains) {  // kChainBatch loads in flight, then their squares added in the same order
    for (; i + (kChainBatch - 1) * step < flat; i += kChainBatch * step) {
      float v[kChainBatch];
#pragma unroll
      for (int u = 0; u < kChainBatch; ++u) v[u] = f[i + u * step];
#pragma unroll
      for (int u = 0; u < kChainBatch; ++u) ss += double(v[u]) * v[u];
    }
  }
  for (; i < flat; i += step) ss += double(f[i]) * f[i];
  ss = block_sum(ss, sh);
  return float(1.0 / sqrt(double(float(ss / double(flat))) + double(c.rsqrt.eps)));
}

static __global__ void __launch_bounds__(kMhcThreads) mhc4_coeff_kernel(const dk::MhcCoeffChain c) {
  await_previous_kernel();
  __shared__ double sh[32];
  __shared__ double part[kMhcThreads / 32][kMhcMix];
  __shared__ float m[kMhcMix];
  const int64_t t = blockIdx.x, flat = c.rsqrt.flat;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* f = c.rsqrt.x + t * flat;
  double ss = 0;
  for (int64_t i = tid; i < flat; i += kMhcThreads) ss += double(f[i]) * f[i];
  ss = block_sum(ss, sh);
  const float rt = float(1.0 / sqrt(double(float(ss / double(flat))) + double(c.rsqrt.eps)));
  if (tid == 0) c.rsqrt.r[t] = rt;
  double acc[kMhcMix];
#pragma unroll
  for (int o = 0; o < kMhcMix; ++o) acc[o] = 0;
#pragma unroll 2
  for (int64_t i = tid; i < flat; i += kMhcThreads) {
    const double v = double(f[i] * rt);
#pragma unroll
    for (int o = 0; o < kMhcMix; ++o) acc[o] += v * double(__ldg(c.mix.fn + o * flat + i));
  }
#pragma unroll
  for (int o = 0; o < kMhcMix; ++o) {
    const double s = warp_sum(acc[o]);
    if (lane == 0) part[warp][o] = s;
  }
  __syncthreads();
  if (tid < kMhcMix) {
    double s = 0;
    for (int w = 0; w < kMhcThreads / 32; ++w) s += part[w][tid];
    m[tid] = float(s);
  }
  __syncthreads();
  if (warp == 0) mhc4_finish(c.finish, t, m, lane);
}

// ---- mHC coefficients for hc = 4 over few tokens: the mix split over blocks --------------------
// One block of 512 per token reads the token's 24 weight rows (24 · hc · d floats, 1.5 MB on
// mini-flash) through one SM: at batch 1 that took 34 µs. Here block (s, t) forms r_t itself (the
// same bits in every block), then the 24 partial sums of slice s of the token's streams into
// `partials` [t][s][24] (doubles, added in a fixed order); a second kernel adds the slices in order
// and runs the gates and Sinkhorn. Same products as MhcMixK, sums in another fixed order.
constexpr int kMhcSliceThreads = 256, kMhcMaxSlices = 64;
static_assert(kMhcMaxSlices * kMhcMix == dk::MhcCoeffChain::kMhcPartials);

static int64_t mhc_slices(const dk::MhcCoeffChain& c) {
  // About 128 blocks in all (the H200 has 132 SMs), at least kMhcMinSlice elements a slice: 64 (a
  // quarter of the block's threads; every block forms r_t over the whole token anyway, so smaller
  // slices only shorten the part that streams weights), or 512 as before (2 a thread; at
  // mini-flash's flat 4,096 that was 8 blocks at batch 1).
  constexpr int64_t kMhcMinSlice = kBatchedChains ? 64 : 512;
  const int64_t by_work = c.rsqrt.flat / kMhcMinSlice, by_grid = 128 / std::max<int64_t>(c.n, 1);
  return std::min<int64_t>(kMhcMaxSlices, std::min(by_work, by_grid));
}

// Slice s of S of a token's flat streams: [lo, hi).
struct MhcSlice {
  int64_t lo, hi;
};
static __device__ inline MhcSlice mhc_slice_range(int64_t flat, int64_t s, int64_t S) {
  const int64_t len = (flat + S - 1) / S, lo = s * len;
  return {lo, lo + len < flat ? lo + len : flat};
}

// Asks for slice [lo, hi) of the 24 mix weight rows before the block forms r_t, so that the mix
// finds them on chip (they come from memory once a step; r_t takes a few barriers first).
static __device__ inline void prefetch_mix_slice(const dk::MhcCoeffChain& c, MhcSlice sl) {
  if (!kBatchedChains || sl.hi <= sl.lo) return;
  for (int o = 0; o < kMhcMix; ++o)
    prefetch_l1(c.mix.fn + o * c.rsqrt.flat + sl.lo, (sl.hi - sl.lo) * int64_t(sizeof(float)));
}

// Block (s, t)'s part of the split mix: r_t from the token's streams f (the whole block, the same
// bits in every block), then the 24 partial sums of slice s into c.partials.
static __device__ void mhc4_slice_mix(const dk::MhcCoeffChain& c, const float* f, int64_t s, int64_t S, int64_t t,
                                       float rt);

static __device__ void mhc4_slice(const dk::MhcCoeffChain& c, const float* f, int64_t s, int64_t S, int64_t t) {
  __shared__ double sh[32];
  mhc4_slice_mix(c, f, s, S, t, mhc_rsqrt_of(c, f, sh));
}

// The mix part of block (s, t): r_t given (the same in every block of the token).
static __device__ void mhc4_slice_mix(const dk::MhcCoeffChain& c, const float* f, int64_t s, int64_t S, int64_t t,
                                       float rt) {
  __shared__ double part[kMhcSliceThreads / 32][kMhcMix];
  const int64_t flat = c.rsqrt.flat;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0 && s == 0) c.rsqrt.r[t] = rt;
  const MhcSlice sl = mhc_slice_range(flat, s, S);
  const int64_t lo = sl.lo, hi = sl.hi;
  double acc[kMhcMix];
#pragma unroll
  for (int o = 0; o < kMhcMix; ++o) acc[o] = 0;
#pragma unroll 2
  for (int64_t i = lo + tid; i < hi; i += kMhcSliceThreads) {
    const double v = double(f[i] * rt);
#pragma unroll
    for (int o = 0; o < kMhcMix; ++o) acc[o] += v * double(__ldg(c.mix.fn + o * flat + i));
  }
#pragma unroll
  for (int o = 0; o < kMhcMix; ++o) {
    const double w = warp_sum(acc[o]);
    if (lane == 0) part[warp][o] = w;
  }
  __syncthreads();
  if (tid < kMhcMix) {
    double w = 0;
    for (int q = 0; q < kMhcSliceThreads / 32; ++q) w += part[q][tid];
    c.partials[(t * S + s) * kMhcMix + tid] = w;
  }
}

// Wide tokens (session 22; flat above the fused chain's 10,240, the synthetic model's 20,480):
// every block of mhc4_slice_kernel forms r_t over the whole token, 80 loads a thread, 10 round
// trips. Here the slices run in clusters of kMhcClusterBlocks: block q of a cluster sums the
// squares of part q of the token, the cluster's blocks add the parts in order through distributed
// shared memory (every cluster the same bits: the same parts, the same order), then each block
// runs its slice's mix. r_t's sum in another order than mhc_rsqrt_of's (within
// MhcCoefficientsMatchSimple's bound).
constexpr bool kMhcClusterRsqrt = true;
constexpr int kMhcClusterBlocks = 8;  // a portable cluster size
constexpr int64_t kMhcClusterMinFlat = 10241;

static __global__ void __cluster_dims__(kMhcClusterBlocks, 1, 1) __launch_bounds__(kMhcSliceThreads)
    mhc4_slice_cluster_kernel(const dk::MhcCoeffChain c) {
  await_previous_kernel();
  __shared__ double sh[32];
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int64_t flat = c.rsqrt.flat, t = blockIdx.y;
  const float* f = c.rsqrt.x + t * flat;
  prefetch_mix_slice(c, mhc_slice_range(flat, blockIdx.x, gridDim.x));
  const MhcSlice part = mhc_slice_range(flat, rank, kMhcClusterBlocks);
  double ss = 0;
  int64_t i = part.lo + threadIdx.x;
  for (; i + (kChainBatch - 1) * kMhcSliceThreads < part.hi; i += kChainBatch * kMhcSliceThreads) {
    float v[kChainBatch];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) v[u] = f[i + u * kMhcSliceThreads];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) ss += double(v[u]) * v[u];
  }
  for (; i < part.hi; i += kMhcSliceThreads) ss += double(f[i]) * f[i];
  const double total = cluster_sum(cluster, ss, sh);
  const float rt = float(1.0 / sqrt(double(float(total / double(flat))) + double(c.rsqrt.eps)));
  mhc4_slice_mix(c, f, blockIdx.x, gridDim.x, t, rt);
}

static __global__ void __launch_bounds__(kMhcSliceThreads) mhc4_slice_kernel(const dk::MhcCoeffChain c) {
  await_previous_kernel();
  const int64_t flat = c.rsqrt.flat;
  const float* f = c.rsqrt.x + int64_t(blockIdx.y) * flat;
  if (kBatchedChains) {
    prefetch_l1(f, flat * int64_t(sizeof(float)));
    prefetch_mix_slice(c, mhc_slice_range(flat, blockIdx.x, gridDim.x));
  }
  mhc4_slice(c, f, blockIdx.x, gridDim.x, blockIdx.y);
}

// kStagedExpand: the expand for hc = 4 with every operand on chip. MhcExpandK::value walks the 4
// source streams one dependent load after another (its loop's bound is a runtime hc), so forming
// 16 values a thread from memory took ≈ 11 µs of the kernel's 18.5 µs at mini-flash batch 1 (ncu,
// session 17). Here the block first loads token t's streams x [4, d] into `streams`, `a` [d] into
// the d floats after them, comb [4, 4] and post [4] (all loads at once), then thread c forms the
// 4 values of its columns c, c + 256, … with MhcExpandK::value on a view of those copies (token 0
// of it: the same function of the same floats, so the expand launch's bits), and only then
// overwrites its own columns of `streams` with them — each column is read and written by one
// thread alone, so no barrier is needed in between.
constexpr int kStagedHc = 4;

// (The launch sizes the block's shared memory by the same test.)
static __host__ __device__ bool staged_expand_fits(const dk::ExpandCoeffChain& e) {
  return e.expand.hc == kStagedHc && size_t(e.coeff.rsqrt.flat + e.expand.d) * sizeof(float) <= kStagedSmem;
}

static __device__ void expand_staged(const dk::ExpandCoeffChain& e, float* streams, MhcSlice sl, int64_t t) {
  __shared__ float comb[kStagedHc * kStagedHc], post[kStagedHc];
  const dk::MhcExpandK& ek = e.expand;
  const int64_t d = ek.d, flat = kStagedHc * d;
  float* a = streams + flat;
  const int tid = threadIdx.x;
  const float* xt = ek.x + t * flat;
  int64_t i = tid;
  for (; i + (kChainBatch - 1) * kMhcSliceThreads < flat; i += kChainBatch * kMhcSliceThreads) {
    float v[kChainBatch];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) v[u] = xt[i + u * kMhcSliceThreads];
#pragma unroll
    for (int u = 0; u < kChainBatch; ++u) streams[i + u * kMhcSliceThreads] = v[u];
  }
  for (; i < flat; i += kMhcSliceThreads) streams[i] = xt[i];
  for (int64_t c = tid; c < d; c += kMhcSliceThreads) a[c] = ek.a[t * d + c];
  if (tid < kStagedHc * kStagedHc) comb[tid] = ek.comb[t * kStagedHc * kStagedHc + tid];
  if (tid < kStagedHc) post[tid] = ek.post[t * kStagedHc + tid];
  __syncthreads();
  dk::MhcExpandK view = ek;  // token 0 of the shared copies
  view.x = streams;
  view.a = a;
  view.comb = comb;
  view.post = post;
  for (int64_t c = tid; c < d; c += kMhcSliceThreads) {
    float v[kStagedHc];
#pragma unroll
    for (int s = 0; s < kStagedHc; ++s) v[s] = view.value(s * d + c);
#pragma unroll
    for (int s = 0; s < kStagedHc; ++s) {
      const int64_t j = s * d + c;
      streams[j] = v[s];
      if (j >= sl.lo && j < sl.hi) ek.out[t * flat + j] = v[s];
    }
  }
  __syncthreads();
}

// The same with the mHC expand in front (dk::ExpandCoeffChain): block (s, t) forms token t's
// expanded streams into shared memory (MhcExpandK's value: the expand launch's bits), writes slice
// s of them to expand.out, and runs the split mix on the shared copy (the same values the unfused
// kernel reads back from memory).
static __global__ void __launch_bounds__(kMhcSliceThreads) mhc4_expand_slice_kernel(const dk::ExpandCoeffChain e) {
  await_previous_kernel();
  extern __shared__ float streams[];  // [flat]
  const dk::MhcCoeffChain& c = e.coeff;
  const int64_t s = blockIdx.x, S = gridDim.x, t = blockIdx.y, flat = c.rsqrt.flat;
  const MhcSlice sl = mhc_slice_range(flat, s, S);
  const int64_t lo = sl.lo, hi = sl.hi;
  if (kStagedExpand && staged_expand_fits(e)) {
    expand_staged(e, streams, sl, t);
    mhc4_slice(c, streams, s, S, t);
    return;
  }
  int64_t i = threadIdx.x;
  if (kBatchedChains) {
    // (With kPrefetchExpand: the token's streams x [hc, d] and a [d], read by every thread several
    // times each, and this slice's weights, asked for at once.) Then kChainBatch expanded values a
    // thread formed before any is stored (a store may alias the next value's inputs for all the
    // compiler knows, so forming and storing one at a time waited a round trip per value). Values
    // and stores as below, so the same bits.
    const dk::MhcExpandK& ek = e.expand;
    if (kPrefetchExpand) {
      prefetch_l1(ek.x + t * flat, flat * int64_t(sizeof(float)));
      prefetch_l1(ek.a + t * ek.d, ek.d * int64_t(sizeof(float)));
      prefetch_mix_slice(c, sl);
    }
    for (; i + (kChainBatch - 1) * kMhcSliceThreads < flat; i += kChainBatch * kMhcSliceThreads) {
      float v[kChainBatch];
#pragma unroll
      for (int u = 0; u < kChainBatch; ++u) v[u] = ek.value(t * flat + i + u * kMhcSliceThreads);
#pragma unroll
      for (int u = 0; u < kChainBatch; ++u) {
        const int64_t j = i + u * kMhcSliceThreads;
        streams[j] = v[u];
        if (j >= lo && j < hi) ek.out[t * flat + j] = v[u];
      }
    }
  }
  for (; i < flat; i += kMhcSliceThreads) {
    const float v = e.expand.value(t * flat + i);
    streams[i] = v;
    if (i >= lo && i < hi) e.expand.out[t * flat + i] = v;
  }
  __syncthreads();
  mhc4_slice(c, streams, s, S, t);
}

// The gather (session 22): one lane adding a token's S slices of an output in turn waited S /
// kChainBatch round trips (8 at S = 64); now warp o of kMhcMix adds output o's slices, lane l
// taking slices l, l + 32 (all loads at once), then the warp sum: one round trip. A fixed order
// (the same bits in every run, and for the fused and separate chains alike), another than before.
constexpr int kMhcGatherThreads = 32 * kMhcMix;
static_assert(kMhcMaxSlices <= 64, "mhc4_gather_kernel: two slices a lane");

static __global__ void __launch_bounds__(kMhcGatherThreads) mhc4_gather_kernel(const dk::MhcCoeffChain c, int S) {
  await_previous_kernel();
  __shared__ float m[kMhcMix];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x & 31, o = threadIdx.x >> 5;
  const double* p = c.partials + t * S * kMhcMix + o;
  const double a = lane < S ? p[lane * kMhcMix] : 0.0, b = lane + 32 < S ? p[(lane + 32) * kMhcMix] : 0.0;
  const double w = warp_sum(a + b);
  if (lane == 0) m[o] = float(w);
  __syncthreads();
  if (o == 0) mhc4_finish(c.finish, t, m, lane);
}

// Expand + coefficients where the split mix runs and the token's streams fit in shared memory
// (flat ≤ 10,240 floats: mini-flash's 4,096); else false (the two launches).
bool launch_chain(const dk::ExpandCoeffChain& e, Stream s) {
  const dk::MhcCoeffChain& c = e.coeff;
  constexpr int64_t kMaxFlat = 10240;
  if (c.finish.hc != 4 || c.mix.mix != kMhcMix || !c.partials || c.n < 1 || c.n > c.partial_tokens) return false;
  if (e.expand.out != c.rsqrt.x || e.expand.hc * e.expand.d != c.rsqrt.flat || c.rsqrt.flat > kMaxFlat) return false;
  const int64_t S = mhc_slices(c);
  if (S < 2) return false;
  const bool staged = kStagedExpand && staged_expand_fits(e);
  const size_t smem = size_t(c.rsqrt.flat + (staged ? e.expand.d : 0)) * sizeof(float);
  launch_kernel(&mhc4_expand_slice_kernel, dim3(unsigned(S), unsigned(c.n)), kMhcSliceThreads, smem, s, e);
  launch_kernel(&mhc4_gather_kernel, unsigned(c.n), kMhcGatherThreads, 0, s, c, int(S));
  return true;
}

bool launch_chain(const dk::MhcCoeffChain& c, Stream s) {
  if (c.finish.hc == 4 && c.mix.mix == kMhcMix && c.n <= 0x7fffffff) {
    const int64_t S = c.partials ? mhc_slices(c) : 0;
    if (S >= 2 && c.n <= c.partial_tokens) {
      if (kMhcClusterRsqrt && c.rsqrt.flat >= kMhcClusterMinFlat && S % kMhcClusterBlocks == 0)
        launch_kernel(&mhc4_slice_cluster_kernel, dim3(unsigned(S), unsigned(c.n)), kMhcSliceThreads, 0, s, c);
      else
        launch_kernel(&mhc4_slice_kernel, dim3(unsigned(S), unsigned(c.n)), kMhcSliceThreads, 0, s, c);
      launch_kernel(&mhc4_gather_kernel, unsigned(c.n), kMhcGatherThreads, 0, s, c, int(S));
      return true;
    }
    if (c.n > 0) launch_kernel(&mhc4_coeff_kernel, unsigned(c.n), kMhcThreads, 0, s, c);
    return true;
  }
  if (c.finish.hc < 1 || c.finish.hc > kMaxHc || c.mix.mix != (2 + c.finish.hc) * c.finish.hc || c.n > 0x7fffffff)
    return false;
  if (c.n > 0) launch_kernel(&mhc_coeff_kernel, unsigned(c.n), 256, 0, s, c);
  return true;
}

// ---- Sink attention: one block per (row, head) ---------------------------------------------------
constexpr int kAttnThreads = 256;

constexpr int kKeysPerPass = 4;   // key slots a warp's logits pass loads together
constexpr int kChanPerLane = 4;   // value channels per lane in one chunk of 128
constexpr int kChanChunk = 32 * kChanPerLane;

// The record decode tables of a block (E4M3, UE8M0, E2M1: the values of dk::e4m3_value,
// ue8m0_value, e2m1_value), so that a key element read from a packed record costs a byte load, a
// table load and the multiply instead of the decode arithmetic.
struct DecodeTables {
  float e4m3[256], ue8m0[256], e2m1[16];
  __device__ void fill() {
    for (int c = threadIdx.x; c < 256; c += blockDim.x) {
      e4m3[c] = dk::e4m3_value(uint8_t(c));
      ue8m0[c] = dk::ue8m0_value(uint8_t(c));
      if (c < 16) e2m1[c] = dk::e2m1_value(uint8_t(c));
    }
  }
  // Channel q of key row k: dk::record_value's result (code value × scale, NaN for a NaN scale).
  __device__ __forceinline__ float at(const dk::KeyRow& k, int64_t q) const {
    if (k.f) return k.f[q];
    if (k.kind == RowKind::kWindow) {
      const float s = ue8m0[k.rec[k.D + (q >> 5)]];
      return dk::is_nan(s) ? dk::q_nan() : e4m3[k.rec[q]] * s;
    }
    const uint8_t b = k.rec[q >> 1];
    const float s = k.kind == RowKind::kMain ? e4m3[k.rec[(k.D >> 1) + (q >> 4)]] : ue8m0[k.rec[(k.D >> 1) + (q >> 5)]];
    return dk::is_nan(s) ? dk::q_nan() : e2m1[(q & 1) ? (b >> 4) : (b & 0xF)] * s;
  }
};

// Block ih = (row, head) of one segment's attention: geometry g, queries q, sink, outputs o.
static __device__ __forceinline__ void attn_block(const dk::AttnGeom& g, const float* q, float scaling,
                                                  const float* sinks, float* o, int64_t ih) {
  __shared__ double part[kAttnThreads / 32][2][kChanChunk];  // per-warp window / selected sums
  __shared__ double shd[32];
  __shared__ float shf[32];
  __shared__ DecodeTables tab;
  extern __shared__ float p[];  // [L] logits, then probabilities
  tab.fill();
  __syncthreads();
  const int64_t i = ih / g.H, h = ih % g.H;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  // Logits (AttnLogitsK): one warp per key slot, kKeysPerPass slots a pass so that their loads
  // overlap; each slot's sum in the same order as with one slot a pass.
  const float* qh = q + ih * g.D;
  for (int64_t j0 = warp; j0 < g.L; j0 += int64_t(kKeysPerPass) * warps) {
    dk::KeyRow key[kKeysPerPass];  // a window row: FP8 record or float; a selected one: NVFP4 record
    double acc[kKeysPerPass];
#pragma unroll
    for (int u = 0; u < kKeysPerPass; ++u) {
      const int64_t j = j0 + int64_t(u) * warps;
      key[u] = j < g.L ? g.key(i, j) : dk::KeyRow{};
      acc[u] = 0;
    }
    for (int64_t q = lane; q < g.D; q += 32) {
      const double qv = qh[q];
#pragma unroll
      for (int u = 0; u < kKeysPerPass; ++u)
        if (key[u]) acc[u] += qv * tab.at(key[u], q);
    }
#pragma unroll
    for (int u = 0; u < kKeysPerPass; ++u) {
      const int64_t j = j0 + int64_t(u) * warps;
      const double a = warp_sum(acc[u]);
      if (lane == 0 && j < g.L) p[j] = key[u] ? float(a) * scaling : -INFINITY;
    }
  }
  __syncthreads();
  // Softmax (AttnSoftmaxK): the sink joins max and denominator.
  const float sink = sinks[h];
  float mx = -INFINITY;
  for (int64_t j = tid; j < g.L; j += blockDim.x)
    if (g.key(i, j)) mx = fmaxf(mx, p[j]);
  const float m = fmaxf(sink, block_max(mx, shf));
  double den = 0;
  for (int64_t j = tid; j < g.L; j += blockDim.x)
    if (g.key(i, j)) {
      p[j] = expf(p[j] - m);
      den += p[j];
    }
  const double denom = exp(double(sink - m)) + block_sum(den, shd);
  for (int64_t j = tid; j < g.L; j += blockDim.x) p[j] = g.key(i, j) ? float(p[j] / denom) : 0.0f;
  __syncthreads();
  // Values (AttnValuesK): warps over key slots, lanes over channels (chunks of 128), the window
  // and selected sums apart; the warps' partial sums then added per channel in warp order.
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  for (int64_t q0 = 0; q0 < g.D; q0 += kChanChunk) {
    double win[kChanPerLane], sel[kChanPerLane];
#pragma unroll
    for (int s = 0; s < kChanPerLane; ++s) win[s] = sel[s] = 0;
    // A warp's slots in ascending order: the window ones (always present), then the selected.
    const auto add = [&](int64_t j, double(&acc)[kChanPerLane]) {
      const dk::KeyRow key = g.key(i, j);
      if (!key) return;  // the same for the whole warp
      const double pj = p[j];
#pragma unroll
      for (int s = 0; s < kChanPerLane; ++s) {
        const int64_t q = q0 + lane + 32 * s;
        if (q < g.D) acc[s] += pj * tab.at(key, q);
      }
    };
    int64_t j = warp;
#pragma unroll 4
    for (; j < nwin && j < g.L; j += warps) add(j, win);
#pragma unroll 4
    for (; j < g.L; j += warps) add(j, sel);
#pragma unroll
    for (int s = 0; s < kChanPerLane; ++s) {
      part[warp][0][lane + 32 * s] = win[s];
      part[warp][1][lane + 32 * s] = sel[s];
    }
    __syncthreads();
    for (int q = tid; q < kChanChunk && q0 + q < g.D; q += blockDim.x) {
      double w = 0, s = 0;
      for (int wp = 0; wp < warps; ++wp) {
        w += part[wp][0][q];
        s += part[wp][1][q];
      }
      float out = 0.0f;
      out += float(w);
      out += float(s);
      o[ih * g.D + q0 + q] = out;
    }
    __syncthreads();
  }
}

static __global__ void __launch_bounds__(kAttnThreads) attn_kernel(const dk::AttnChain c) {
  await_previous_kernel();
  attn_block(c.logits.g, c.logits.q, c.logits.scaling, c.softmax.sink, c.values.o, blockIdx.x);
}

// Every segment's (row, head) blocks in turn: block b belongs to the first job whose T·H blocks
// it does not pass.
static __global__ void __launch_bounds__(kAttnThreads) attn_batch_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  int64_t ih = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && ih >= b.jobs[j].g.T * b.jobs[j].g.H) {
    ih -= b.jobs[j].g.T * b.jobs[j].g.H;
    ++j;
  }
  const dk::AttnBatch::Job job = b.jobs[j];  // a copy: registers, not the parameter block
  attn_block(job.g, job.q, b.scaling, b.sink, job.o, ih);
}

// The sink attention's kernels: the FP64-MMA pair (fast_attention_mma.cu) when on, the mixed
// pair (below), the split pair (fast_attention.cu), then the block per (row, head) above. The
// MMA pair is off: it measured slower on the H200 (mini-flash AttnBatch 0.745 → 0.88 ms a step
// at batch 1, 1.98 → 2.74 ms at batch 8; docs/CUDA.md "Sink attention on FP64 MMAs, session
// 16"); its test calls it directly.
constexpr bool kMmaAttention = false;
// The mixed pair: the MMA logits kernel (the faster half of the MMA pair) and the split pair's
// softmax + values (the faster half of that pair): mini-flash AttnBatch 0.73 → 0.60 ms a step at
// batch 1, 1.97 → 1.87 at batch 8 (docs/CUDA.md "The mixed attention pair"). Both halves are bit-equal to the simple bodies' results but at rare
// rounding ties, so the pair is too. Where the values cannot launch after the logits did, the
// split pair cannot either, and the block per (row, head) runs (it needs no logits).
constexpr bool kMmaLogits = true;
// After the MMA logits: the softmax once per (row, head) then the values from the probabilities
// (fast_attention.cu launch_attn_probs_values) instead of the split pair's values kernel, which
// redoes its heads' softmax in every channel block (docs/CUDA.md "Softmax once, values over the
// listed slots, session 17"). The same bits as the simple bodies (tested on the H200 by direct
// calls). Off: measured slower at batch 1 (session 17 merged call: mini-flash AttnBatch 0.525 →
// 0.737 ms a step; batch 8 1.654 → 1.508).
constexpr bool kProbsValues = false;
// After the MMA logits: the softmax and the values in one kernel whose blocks split their slots
// over 1, 2 or 4 parts chosen by the row count (fast_attention.cu launch_attn_slot_values;
// docs/CUDA.md "Slot-split values, session 18"): batch 1 runs 4 × 256 threads a (row, 8 heads,
// 32 channels) block instead of 256 walking every slot. With more than one part the double sums
// are re-associated (equal to the simple bodies' floats but at rare rounding ties, as the MMA
// logits). On since the H200 call of session 18 (18:52 UTC, tests passed, alternated twice with
// main): AttnBatch 0.56 -> 0.39 ms a batch-1 step, 1.69 -> 1.37 ms at batch 8.
constexpr bool kSlotValues = true;

static bool launch_attn_values(const dk::AttnBatch& b, Stream s) {
  return (kSlotValues && launch_attn_slot_values(b, s)) || (kProbsValues && launch_attn_probs_values(b, s)) ||
         launch_attn_split_values(b, s);
}

static bool launch_attn_fast(const dk::AttnBatch& b, Stream s) {
  if (b.tensor && launch_attn_tensor(b, s)) return true;
  if (kMmaAttention && launch_attn_mma(b, s)) return true;
  if (kMmaLogits && launch_attn_mma_logits(b, s) && launch_attn_values(b, s)) return true;
  return launch_attn_split(b, s);
}

// Static shared memory: 16 KiB of partial sums + 384 B + 2,112 B of decode tables; the logits row
// must fit beside it (48 KiB in all).
constexpr int64_t kAttnMaxLogitBytes = 28 * 1024;

bool launch_chain(const dk::AttnChain& c, Stream s) {
  const dk::AttnGeom& g = c.logits.g;
  dk::AttnBatch one;
  one.sink = c.softmax.sink;
  one.scaling = c.logits.scaling;
  one.jobs[one.n++] = {g, c.logits.q, c.logits.logits, c.values.o};
  if (launch_attn_fast(one, s)) return true;
  const int64_t blocks = g.T * g.H;
  if (g.L * int64_t(sizeof(float)) > kAttnMaxLogitBytes || blocks > 0x7fffffff) return false;
  if (blocks > 0) launch_kernel(&attn_kernel, unsigned(blocks), kAttnThreads, size_t(g.L * sizeof(float)), s, c);
  return true;
}

bool launch_chain(const dk::AttnBatch& b, Stream s) {
  if (launch_attn_fast(b, s)) return true;
  int64_t blocks = 0, L = 0;
  for (int j = 0; j < b.n; ++j) {
    blocks += b.jobs[j].g.T * b.jobs[j].g.H;
    L = std::max(L, b.jobs[j].g.L);
  }
  if (b.n < 1 || b.n > dk::AttnBatch::kMax || L * int64_t(sizeof(float)) > kAttnMaxLogitBytes || blocks > 0x7fffffff)
    return false;
  if (blocks > 0) launch_kernel(&attn_batch_kernel, unsigned(blocks), kAttnThreads, size_t(L * sizeof(float)), s, b);
  return true;
}

// ---- DSpark drafter's block attention: one block per (block row, head) ------------------------
// DraftAttnLogitsK / SoftmaxK / ValuesK fused: the warps walk the key slots in parallel (a warp
// per slot for the logits, lanes over the channels; a warp per slot for the values, lanes over
// the channels, the warps' partial sums added in warp order), the probabilities in shared memory.
// The sums are the simple bodies' in another fixed order (deterministic; within a float rounding).
// kStaged (DraftAttnChain::keys_in_shared): the logits pass also writes every present slot's
// decoded key row to shared memory (ks [L, D] after the probabilities, `present` after them), and
// the values pass reads it there: the same floats in the same order, so the same bits, without a
// second walk of each slot's ring entry and record (dependent global loads, serial per warp).
template <bool kStaged>
static __global__ void __launch_bounds__(kAttnThreads) draft_attn_kernel(const dk::DraftAttnChain c) {
  await_previous_kernel();
  __shared__ double part[kAttnThreads / 32][kChanChunk];
  __shared__ double shd[32];
  __shared__ float shf[32];
  __shared__ DecodeTables tab;
  extern __shared__ float p[];  // [L] logits, then probabilities; kStaged: then ks [L, D], present [L]
  tab.fill();
  __syncthreads();
  const dk::DraftAttnGeom& g = c.logits.g;
  float* ks = p + g.L;
  unsigned char* present = reinterpret_cast<unsigned char*>(ks + g.L * g.D);
  const int64_t rh = blockIdx.x, request = rh / g.H / g.B, h = rh % g.H;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = blockDim.x >> 5;
  const float* qh = c.logits.q + rh * g.D;
  for (int64_t j0 = warp; j0 < g.L; j0 += int64_t(kKeysPerPass) * warps) {
    dk::KeyRow key[kKeysPerPass];
    double acc[kKeysPerPass];
#pragma unroll
    for (int u = 0; u < kKeysPerPass; ++u) {
      const int64_t j = j0 + int64_t(u) * warps;
      key[u] = j < g.L ? g.key(request, j) : dk::KeyRow{};
      acc[u] = 0;
    }
    for (int64_t q = lane; q < g.D; q += 32) {
      const double qv = qh[q];
#pragma unroll
      for (int u = 0; u < kKeysPerPass; ++u)
        if (key[u]) {
          const float kv = tab.at(key[u], q);
          acc[u] += qv * kv;
          if constexpr (kStaged) ks[(j0 + int64_t(u) * warps) * g.D + q] = kv;
        }
    }
#pragma unroll
    for (int u = 0; u < kKeysPerPass; ++u) {
      const int64_t j = j0 + int64_t(u) * warps;
      const double a = warp_sum(acc[u]);
      if (lane == 0 && j < g.L) p[j] = key[u] ? float(a) * c.logits.scaling : -INFINITY;
      if constexpr (kStaged)
        if (lane == 0 && j < g.L) present[j] = key[u] ? 1 : 0;
    }
  }
  __syncthreads();
  // Softmax: an absent slot's −inf leaves the max alone and becomes 0 (as DraftAttnSoftmaxK).
  const float sink = c.softmax.sink[h];
  float mx = -INFINITY;
  for (int64_t j = tid; j < g.L; j += blockDim.x) mx = fmaxf(mx, p[j]);
  const float m = fmaxf(sink, block_max(mx, shf));
  double den = 0;
  for (int64_t j = tid; j < g.L; j += blockDim.x) {
    p[j] = expf(p[j] - m);
    den += p[j];
  }
  const double denom = exp(double(sink - m)) + block_sum(den, shd);
  for (int64_t j = tid; j < g.L; j += blockDim.x) p[j] = float(p[j] / denom);
  __syncthreads();
  float* o = c.values.o + rh * g.D;
  for (int64_t q0 = 0; q0 < g.D; q0 += kChanChunk) {
    double acc[kChanPerLane];
#pragma unroll
    for (int s = 0; s < kChanPerLane; ++s) acc[s] = 0;
    for (int64_t j = warp; j < g.L; j += warps) {
      if constexpr (kStaged) {
        if (!present[j]) continue;  // the same for the whole warp
        const double pj = p[j];
        const float* kj = ks + j * g.D;
#pragma unroll
        for (int s = 0; s < kChanPerLane; ++s) {
          const int64_t q = q0 + lane + 32 * s;
          if (q < g.D) acc[s] += pj * kj[q];
        }
      } else {
        const dk::KeyRow key = g.key(request, j);
        if (!key) continue;  // the same for the whole warp
        const double pj = p[j];
#pragma unroll
        for (int s = 0; s < kChanPerLane; ++s) {
          const int64_t q = q0 + lane + 32 * s;
          if (q < g.D) acc[s] += pj * tab.at(key, q);
        }
      }
    }
#pragma unroll
    for (int s = 0; s < kChanPerLane; ++s) part[warp][lane + 32 * s] = acc[s];
    __syncthreads();
    for (int q = tid; q < kChanChunk && q0 + q < g.D; q += blockDim.x) {
      double sum = 0;
      for (int wp = 0; wp < warps; ++wp) sum += part[wp][q];
      o[q0 + q] = float(sum);
    }
    __syncthreads();
  }
}

// The staged kernel's dynamic shared memory is kept within the default 48 KB a block (no
// cudaFuncSetAttribute) beside the static ≈ 10.5 KB: dsv41-mini's L = 69, D = 128 take 35.7 KB.
constexpr int64_t kDraftStagedBytes = 36 * 1024;

bool launch_chain(const dk::DraftAttnChain& c, Stream s) {
  const dk::DraftAttnGeom& g = c.logits.g;
  const int64_t blocks = c.rows * g.H;
  if (g.L * int64_t(sizeof(float)) > kAttnMaxLogitBytes || blocks > 0x7fffffff) return false;
  if (blocks == 0) return true;
  const int64_t staged = g.L * int64_t(sizeof(float)) * (1 + g.D) + g.L;
  if (c.keys_in_shared && staged <= kDraftStagedBytes) {
    launch_kernel(&draft_attn_kernel<true>, unsigned(blocks), kAttnThreads, size_t(staged), s, c);
  } else {
    launch_kernel(&draft_attn_kernel<false>, unsigned(blocks), kAttnThreads, size_t(g.L * sizeof(float)), s, c);
  }
  return true;
}

// ---- DSpark draft slot (greedy): Markov bias over many blocks, then argmax per request --------
// DraftMarkovK as a plain kernel (one thread per (request, vocabulary entry): the simple body, so
// the same bits), then DraftPickK as one block of 1,024 threads per request: each thread keeps the
// best of its strided entries, the block reduces (larger first, NaN never, ties to the lower id:
// argmax_logits's rule, exact). One block per request for both (the first version) walked the
// vocabulary's 16-float Markov rows 32 deep per thread: 58 µs a slot on an H200.
constexpr int kBiasThreads = 256;
constexpr int kPickThreads = 1024;

struct Best {
  float v;
  int32_t id;  // −1: none yet
};

static __device__ __forceinline__ Best better(Best a, Best b) {
  if (b.id < 0) return a;
  if (a.id < 0 || b.v > a.v || (b.v == a.v && b.id < a.id)) return b;
  return a;
}

static __device__ __forceinline__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(kFull, b.v, o), __shfl_xor_sync(kFull, b.id, o)};
    b = better(b, other);
  }
  return b;
}

static __global__ void __launch_bounds__(kBiasThreads) draft_bias_kernel(const dk::DraftMarkovK k, int64_t n) {
  await_previous_kernel();
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id < n) k(id);
}

static __global__ void __launch_bounds__(kPickThreads) draft_pick_kernel(const dk::DraftPickK k) {
  await_previous_kernel();
  __shared__ Best sh[kPickThreads / 32];
  const dk::DraftSlot& s = k.s;
  const int64_t i = blockIdx.x;
  if (!s.wanted(i)) return;  // the same for the whole block
  const float* row = s.row(i);
  Best best{0.0f, -1};
  for (int64_t v = threadIdx.x; v < s.V; v += blockDim.x) {
    const float x = row[v];
    if (!dk::is_nan(x) && (best.id < 0 || x > best.v)) best = {x, int32_t(v)};
  }
  best = warp_best(best);
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  if (l == 0) sh[w] = best;
  __syncthreads();
  if (w == 0) {
    best = l < int(blockDim.x >> 5) ? sh[l] : Best{0.0f, -1};
    best = warp_best(best);
    if (l == 0) s.ids[i * s.B + s.j] = best.id;
  }
}

bool launch_chain(const dk::DraftSlotChain& c, Stream s) {
  const int64_t n = c.n * c.bias.s.V;
  if (c.n > 0x7fffffff || n / kBiasThreads >= 0x7fffffff) return false;
  if (c.n == 0) return true;
  launch_kernel(&draft_bias_kernel, blocks_for(n, kBiasThreads), kBiasThreads, 0, s, c.bias, n);
  launch_kernel(&draft_pick_kernel, unsigned(c.n), kPickThreads, 0, s, c.pick);
  return true;
}

// Every slot of a greedy draft in one kernel: a cluster of kSlotBlocks blocks per request. Each
// thread biases its strided vocabulary entries (DraftMarkovK's operations: the same floats) and
// keeps the best of them (larger first, NaN never, ties to the lower id); the block reduces to
// one candidate, the cluster's blocks read each other's candidates through distributed shared
// memory and reduce them (an exact total order: the pick does not depend on the order), so every
// block knows the pick, which the next slot's bias follows. Slots a request does not want end its
// loop (the same for the whole cluster). One launch and two cluster barriers a slot, against two
// launches a slot (≈ 7 µs each in a replayed draft on the H200, session 17).
constexpr int kSlotBlocks = 8;      // a portable cluster size
constexpr int kSlotThreads = 1024;  // 8 · 1,024 threads: dsv41-mini's 8,192 entries one a thread

static __global__ void __cluster_dims__(kSlotBlocks, 1, 1) __launch_bounds__(kSlotThreads)
    draft_slots_kernel(const dk::DraftSlotsChain c) {
  await_previous_kernel();
  __shared__ Best warp_part[kSlotThreads / 32];
  __shared__ Best block_part[2];  // this block's candidate for slot j at j % 2 (read by the cluster)
  __shared__ int32_t picked;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  const int64_t i = blockIdx.x / kSlotBlocks;  // the request
  dk::DraftSlot s = c.slot;
  const int64_t stride = int64_t(kSlotBlocks) * blockDim.x;
  int32_t prev = s.anchors[i];
  for (int j = 0; j < int(s.B); ++j) {
    s.j = j;
    if (!s.wanted(i)) break;  // the same for the whole cluster: no barrier skipped by some blocks
    float* row = s.row(i);
    const float* e = prev >= 0 ? s.embed + int64_t(prev) * s.r : nullptr;
    Best best{0.0f, -1};
    for (int64_t v = int64_t(rank) * blockDim.x + threadIdx.x; v < s.V; v += stride) {
      float x = row[v];
      if (e) {  // DraftMarkovK: row(i)[v] += Σ_u head[v, u]·embed[prev, u], float, in u order
        const float* hv = s.head + v * s.r;
        float acc = 0;
        for (int64_t u = 0; u < s.r; ++u) acc = dk::mul_add_rn(hv[u], e[u], acc);
        x += acc;
        row[v] = x;
      }
      if (!dk::is_nan(x) && (best.id < 0 || x > best.v)) best = {x, int32_t(v)};
    }
    best = warp_best(best);
    if (l == 0) warp_part[w] = best;
    __syncthreads();
    if (w == 0) {
      best = warp_best(l < int(blockDim.x >> 5) ? warp_part[l] : Best{0.0f, -1});
      if (l == 0) block_part[j & 1] = best;
    }
    cluster.sync();  // every block's candidate of slot j is written
    if (w == 0) {
      best = l < kSlotBlocks ? *cluster.map_shared_rank(&block_part[j & 1], l) : Best{0.0f, -1};
      best = warp_best(best);
      if (l == 0) picked = best.id;
    }
    __syncthreads();
    prev = picked;
    if (rank == 0 && threadIdx.x == 0) s.ids[i * s.B + j] = prev;
    // block_part[j & 1] is written again at slot j + 2, after slot j + 1's cluster barrier, which
    // every block reaches only after reading slot j's candidates; `picked` after slot j + 1's
    // first block barrier, after every thread here has read it.
  }
  cluster.sync();  // no block leaves while another may still read its candidate
}

bool launch_chain(const dk::DraftSlotsChain& c, Stream s) {
  const dk::DraftSlot& slot = c.slot;
  if (c.n == 0) return true;
  if (c.n > 0x7fffffff / kSlotBlocks || slot.B > 0x7fffffff) return false;
  launch_kernel(&draft_slots_kernel, unsigned(c.n * kSlotBlocks), kSlotThreads, 0, s, c);
  return true;
}

// ---- RoPE + fake quantiser and window stores beside a RoPE or a scale: a warp per block ----------
// (kLaneBlocks.) The simple bodies of RopeQuantK and WindowStoreK give one thread a whole
// quantiser / scale block: it rotates the block's pairs, then finds the block's amax and writes
// its 16–32 values (or codes), each load waiting for the store before it (they may alias) — at
// mini-flash batch 1 13.8 µs (kv RoPE + FP8), 18.6 µs (index queries + MXFP4, one block of
// threads) and 9.9 µs (inverse RoPE + window store) a launch on the H200 (ncu, session 17) for a
// few KB each. Here lane l of a warp takes element l of its block: the rotation of its pair with
// RopeK's operations (its partner's value by a shuffle), the block's finiteness and amax by warp
// reductions (a maximum of magnitudes: any order gives the same float), then its element with
// FakeQuantK's / PackK's operations. The RoPE and scale halves keep one thread an index (their
// bodies); the pair's halves run in disjoint warps of one launch, as dk::Both runs them.

// The block's finiteness and largest magnitude over lanes < n (the others pass v = 0).
struct BlockMax {
  bool finite;
  float amax;
};
static __device__ inline BlockMax block_amax(float v, bool on) {
  const bool finite = __all_sync(kFull, !on || dk::q_finite(v));
  float amax = on ? dk::q_fabs(v) : 0.0f;
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, o));
  return {finite, amax};
}

// Index id of a RopeQuantK (its quantiser block), lane l element l of it (the whole warp).
static __device__ void rope_quant_lanes(const dk::RopeQuantK& k, int64_t id, int lane) {
  const dk::RopeK& r = k.rope;
  const RowKind kind = k.quant.kind;
  const int n = dk::FakeQuantK::block(kind);
  const int64_t half = r.rope_dim / 2, tail = r.dim - r.rope_dim;
  const int64_t rh = id * n / r.dim, c = id * n % r.dim + lane;  // c even ⇔ lane even (fits())
  const bool on = lane < n;
  float* xb = k.quant.x + id * n;
  float v = on ? xb[lane] : 0.0f;
  const float partner = __shfl_xor_sync(kFull, v, 1);
  if (on && c >= tail) {  // RopeK's body for pair (c − tail) / 2 of row-head rh
    const int64_t p = (c - tail) / 2, row = rh / r.heads;
    const float cs = r.cos[(r.row0 + row) * half + p], s0 = r.sin[(r.row0 + row) * half + p];
    const float s = r.inverse ? -s0 : s0;
    const float even = (lane & 1) ? partner : v, odd = (lane & 1) ? v : partner;
    if (lane & 1)
      v = even * s + odd * cs;
    else
      v = even * cs - odd * s;
  }
  const BlockMax m = block_amax(v, on);
  if (!on) return;
  if (!m.finite) {
    xb[lane] = dk::q_nan();
    return;
  }
  if (kind == RowKind::kWindow) {  // FakeQuantK's operations
    const float s = dk::q_pow2(dk::q_ceil_pow2_exponent(dk::q_max(m.amax, 1e-4f) * (1.0f / 448.0f)));
    xb[lane] = dk::q_e4m3_to_f32(dk::q_f32_to_e4m3(dk::q_clamp_sym(v / s, 448.0f))) * s;
  } else {
    const float s = kind == RowKind::kMain
                        ? dk::q_e4m3_to_f32(dk::q_f32_to_e4m3(dk::q_max(m.amax, 6.0f * 0x1p-9f) / 6.0f))
                        : dk::q_pow2(dk::q_ceil_pow2_exponent(dk::q_max(m.amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f)));
    xb[lane] = dk::q_e2m1_round(dk::q_clamp_sym(v / s, 6.0f)) * s;
  }
}

// Index id of a WindowStoreK (scale block b of a row), lane l its channel b · 32 + l: the staging
// copy, then PackK's window record (E4M3 code, lane 0 the UE8M0 scale byte).
static __device__ void window_store_lanes(const dk::WindowStoreK& k, int64_t id, int lane) {
  const int64_t per_row = dk::WindowStoreK::blocks(k.D), b = id % per_row;
  int64_t r = id / per_row;
  int j = 0;
  while (j + 1 < k.n && r >= k.jobs[j].count) r -= k.jobs[j++].count;
  const dk::WindowStoreK::Job& J = k.jobs[j];
  const int64_t c = b * 32 + lane;
  const float v = J.src[r * k.D + c];
  J.stage[r * k.D + c] = v;
  uint8_t* rec = J.ring + ((J.first + r) % J.slots) * dk::record_bytes(RowKind::kWindow, k.D);
  const BlockMax m = block_amax(v, true);
  if (!m.finite) {
    rec[c] = 0;
    if (lane == 0) rec[k.D + b] = 0xFF;
    return;
  }
  const int e = dk::q_ceil_pow2_exponent(dk::q_max(m.amax, 1e-4f) * (1.0f / 448.0f));
  rec[c] = dk::q_f32_to_e4m3(dk::q_clamp_sym(v / dk::q_pow2(e), 448.0f));
  if (lane == 0) rec[k.D + b] = static_cast<uint8_t>(e + 127);
}

// Threads an index of each body: 32 (a warp) for the two above, 1 for the rest (their bodies).
template <class K>
struct IndexLanes {
  static constexpr int kLanes = 1;
  static __device__ void run(const K& k, int64_t id, int) { k(id); }
};
template <>
struct IndexLanes<dk::RopeQuantK> {
  static constexpr int kLanes = 32;
  static __device__ void run(const dk::RopeQuantK& k, int64_t id, int lane) { rope_quant_lanes(k, id, lane); }
};
template <>
struct IndexLanes<dk::WindowStoreK> {
  static constexpr int kLanes = 32;
  static __device__ void run(const dk::WindowStoreK& k, int64_t id, int lane) { window_store_lanes(k, id, lane); }
};

// Threads [0, a_threads) run f.a (a multiple of 32, so each half is whole warps), the rest f.b.
template <class A, class B>
static __global__ void __launch_bounds__(256) both_lanes_kernel(const dk::Both<A, B> f, int64_t a_threads, int64_t nb) {
  await_previous_kernel();
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < a_threads) {
    constexpr int L = IndexLanes<A>::kLanes;
    if (g / L < f.na) IndexLanes<A>::run(f.a, g / L, int(g % L));  // whole warps where L = 32
    return;
  }
  constexpr int L = IndexLanes<B>::kLanes;
  const int64_t h = g - a_threads;
  if (h / L < nb) IndexLanes<B>::run(f.b, h / L, int(h % L));
}

template <class A, class B>
static bool launch_both_lanes(int64_t n, const dk::Both<A, B>& f, Stream s) {
  if (!kLaneBlocks || n < f.na) return false;
  const int64_t nb = n - f.na;
  const int64_t a_threads = (f.na * IndexLanes<A>::kLanes + 31) / 32 * 32;
  const int64_t total = a_threads + nb * IndexLanes<B>::kLanes;
  if (total <= 0) return true;
  if (blocks_for(total, 256) > 0x7fffffffu) return false;
  launch_kernel(&both_lanes_kernel<A, B>, blocks_for(total, 256), 256, 0, s, f, a_threads, nb);
  return true;
}

static bool lanes_fit(const dk::RopeQuantK& k) { return k.fits() && dk::FakeQuantK::block(k.quant.kind) <= 32; }

bool launch(int64_t n, const dk::Both<dk::RopeK, dk::RopeQuantK>& f, Stream s) {
  return lanes_fit(f.b) && launch_both_lanes(n, f, s);
}
bool launch(int64_t n, const dk::Both<dk::RopeQuantK, dk::ScaleK>& f, Stream s) {
  return lanes_fit(f.a) && launch_both_lanes(n, f, s);
}
bool launch(int64_t n, const dk::Both<dk::RopeK, dk::WindowStoreK>& f, Stream s) {
  return f.b.D % 32 == 0 && launch_both_lanes(n, f, s);
}

}  // namespace dsv41::fast
