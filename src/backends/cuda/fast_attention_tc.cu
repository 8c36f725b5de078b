// The sink attention of many rows on bf16 tensor cores (fast_kernels.h launch_attn_tensor): the
// backend's decode batches and prefill chunks at head_dim 512 (mini-flash, the real geometry).
// The split kernels (fast_attention.cu) repeat the simple bodies' double sums in their order, and
// at batch 64 their values pass is instruction-bound: ≈ 2 ms a layer of a 280-ms synthetic step
// (docs/CUDA.md "Tensor-core attention, session 27"). This kernel is the kernel-level sparse
// attention (sparse_attention.cu, bench/cuda's decode step; the tile code both use lives in
// attention_tiles.cuh) taught the backend's geometry (dk::AttnGeom: window rows from the ring or
// the segment's own fake-quantised rows, selected rows from paged NVFP4 records, absent slots, a
// floor) and made more exact: the queries and the probabilities go in as two bf16 parts each.
//
// One CTA = one query row × 32 heads, 16 warps; keys in tiles of 64 slots:
//   1. the tile's rows (KeyRow: float, FP8 window record, NVFP4 main record, absent) found once
//      by 64 threads, their 16-channel units loaded a tile ahead, then decoded to bf16 rows in
//      shared memory — exact: every cached value has at most 6 significant bits (model.md §4)
//      and the segment's own window rows are fake-quantised FP8 values;
//   2. S = (q_hi + q_lo)·Kᵀ, each warp a row block × 64 channels, partial sums added in warp order;
//   3. online softmax per head row (the sink seeds the running max and the denominator);
//   4. O = O·α + (P_hi + P_lo)·V.
// Sums are fp32 (the tensor core's), so the results are not the simple bodies' bits: a query or a
// probability carries ≈ 16 significant bits (hi + lo), each product is exact, the sums round;
// FastAttentionCuda.TensorSinkAttentionMatchesSimple bounds the difference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/attention_tiles.cuh"

namespace dsv41::fast {
namespace {

namespace attn = cuda::attn_tiles;

constexpr int kThreads = 512;              // 16 warps, one CTA an SM
constexpr int kRows = attn::kHeads;       // heads a CTA (two m16 row blocks)
constexpr int kTile = attn::kKeys;        // key slots a tile
constexpr int kD = 512;                    // head_dim the kernel is built for

enum SlotKind : int { kWindowRecord = 0, kMainRecord = 1, kAbsent = 2, kFloatRow = 3 };

struct Smem {
  static constexpr int kStride = kD + 8;  // bf16 a row; +16 B keeps the ldmatrix rows conflict-free
  static constexpr int kPStride = kTile + 8;
  __nv_bfloat16 q_hi[kRows * kStride];  // then (the q fragments in registers) the partial scores
  __nv_bfloat16 q_lo[kRows * kStride];
  __nv_bfloat16 keys[kTile * kStride];
  __nv_bfloat16 p_hi[kRows * kPStride];
  __nv_bfloat16 p_lo[kRows * kPStride];
  float m[kRows], l[kRows], alpha[kRows];
  const void* src[2][kTile];  // a tile's rows, double-buffered: the next tile's found during this one
  int kind[2][kTile];
  dk::AttnGeom g;
};
static_assert(8 * kRows * attn::kPartStride * sizeof(float) <= 2 * kRows * Smem::kStride * sizeof(__nv_bfloat16),
              "partial scores fit over q");

using attn::RawUnit;

__device__ __forceinline__ RawUnit load_unit(const void* row, int kind, int c0) {
  const uint8_t* rec = static_cast<const uint8_t*>(row);
  if (kind == kWindowRecord) return attn::load_window_unit<kD>(rec, c0);
  if (kind == kMainRecord) return attn::load_main_unit<kD>(rec, c0);
  return RawUnit{{0, 0, 0, 0}, 0};
}

// The unit's 16 values as bf16 in shared memory (record_value's values; absent rows as zeros).
__device__ __forceinline__ void store_unit(const RawUnit& u, int kind, const void* row, int c0, __nv_bfloat16* dst) {
  if (kind == kAbsent) return attn::store_zero_unit(dst);
  if (kind == kFloatRow) {  // the segment's own window rows (fake-quantised: bf16 values)
    __nv_bfloat162* d2 = reinterpret_cast<__nv_bfloat162*>(dst);
    const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(row) + c0);
    for (int i = 0; i < 4; ++i) {
      const float4 v = __ldg(f + i);
      d2[2 * i] = __floats2bfloat162_rn(v.x, v.y);
      d2[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
    }
    return;
  }
  attn::store_record_unit(u, kind == kWindowRecord, dst);
}

// Slot j of row i as (source, kind): AttnGeom::key, the row's form told once a tile.
__device__ __forceinline__ void find_slot(const dk::AttnGeom& g, int64_t i, int64_t j, int64_t nkeys,
                                          const void*& src, int& kind) {
  const dk::KeyRow key = j < nkeys ? g.key(i, j) : dk::KeyRow{};
  src = key.f ? static_cast<const void*>(key.f) : static_cast<const void*>(key.rec);
  kind = !key ? kAbsent : key.f ? kFloatRow : key.kind == RowKind::kWindow ? kWindowRecord : kMainRecord;
}

__global__ void __launch_bounds__(kThreads, 1) attn_tensor_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  constexpr int S = Smem::kStride, PS = Smem::kPStride;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g8 = lane / 4, t4 = lane % 4;
  const int mt = warp / 8, wi = warp % 8;  // row block of the MMAs, warp within it
  // This block's job and row.
  int jn = 0;
  int64_t i = blockIdx.x;
  while (jn + 1 < b.n && i >= b.jobs[jn].g.T) i -= b.jobs[jn++].g.T;
  if (tid == 0) sm.g = b.jobs[jn].g;
  const float* const q = b.jobs[jn].q;
  float* const out = b.jobs[jn].o;
  __syncthreads();
  const dk::AttnGeom& g = sm.g;
  const int64_t H = g.H, h0 = int64_t(blockIdx.y) * kRows;
  // Logits in log2 units (× log2 e) so that the softmax takes exp2; the sink moves with them.
  constexpr float kLog2e = 1.4426950408889634f;
  const float scaling = b.scaling * kLog2e;

  // The head group's queries split hi + lo (rows past H zero).
  attn::stage_q_split<kD, kThreads>(q + (i * H + h0) * kD, H - h0, sm.q_hi, sm.q_lo, S, tid);
  if (tid < kRows) {
    sm.m[tid] = h0 + tid < H ? b.sink[h0 + tid] * kLog2e : 0.0f;
    sm.l[tid] = 1.0f;  // exp(sink − m) with m = sink
  }
  // Present slots lie in [0, nkeys): the window's nwin, then the top-k row's k.
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  const int64_t present = nwin + (g.topk ? g.k : 0), nkeys = present < g.L ? present : g.L;
  if (tid < kTile) find_slot(g, i, tid, nkeys, sm.src[0][tid], sm.kind[0][tid]);
  __syncthreads();

  // Warp (mt, wi)'s q fragments stay in registers; the q arrays then hold the partial scores.
  attn::QFrags<kD> qf;
  attn::load_q_frags<kD>(qf, sm.q_hi, sm.q_lo, S, mt, wi, lane);
  float* const spart = reinterpret_cast<float*>(sm.q_hi);
  __syncthreads();

  constexpr int NT = kD / 64;  // n8 tiles of this warp's 64 output channels
  float acc[NT][4];
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  // A pass of the decode covers RP rows, one 16-channel unit a thread.
  constexpr int U = kD / 16, RP = kThreads / U, kPasses = kTile / RP;
  const int unit_row = tid / U, unit_c0 = (tid % U) * 16;
  RawUnit raw[kPasses];
  auto load_tile = [&](int buf) {
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = j * RP + unit_row;
      raw[j] = load_unit(sm.src[buf][r], sm.kind[buf][r], unit_c0);
    }
  };
  if (nkeys > 0) load_tile(0);

  int buf = 0;
  for (int64_t k0 = 0; k0 < nkeys; k0 += kTile, buf ^= 1) {
    // 1. Decode this tile (loaded during the last one); find the next tile's rows.
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = j * RP + unit_row;
      store_unit(raw[j], sm.kind[buf][r], sm.src[buf][r], unit_c0, &sm.keys[r * S + unit_c0]);
    }
    if (tid < kTile && k0 + kTile < nkeys) find_slot(g, i, k0 + kTile + tid, nkeys, sm.src[buf ^ 1][tid], sm.kind[buf ^ 1][tid]);
    __syncthreads();
    // 2. S = Q·Kᵀ by channel slices.
    attn::partial_scores<kD>(qf, sm.keys, S, spart, mt, wi, lane);
    __syncthreads();
    // 3. Online softmax, P in two parts.
    const int* kinds = sm.kind[buf];
    const auto score = [&](int r, int k) { return attn::sliced_score(spart, r, k, kinds[k] == kAbsent, scaling); };
    attn::softmax_rows(score, sm.m, sm.l, sm.alpha, sm.p_hi, sm.p_lo, PS, warp, lane);
    __syncthreads();
    // The next tile's records, in flight during P·V and the next decode's barrier.
    if (k0 + kTile < nkeys) load_tile(buf ^ 1);
    // 4. O = O·α + (P_hi + P_lo)·V over row block mt and this warp's 64 channels.
    attn::accumulate_values<NT, true>(acc, sm.p_hi, sm.p_lo, PS, sm.alpha, sm.keys, S, wi * (kD / 8), mt, lane);
    __syncthreads();  // the next tile overwrites keys, the partial scores and p
  }

  // ---- out = O / l for the real heads -------------------------------------------------------------
  const int64_t hr = h0 + mt * 16 + g8;  // head of accumulator rows g8 (and g8 + 8)
  const float inv_lo = 1.0f / sm.l[mt * 16 + g8], inv_hi = 1.0f / sm.l[mt * 16 + g8 + 8];
  for (int n = 0; n < NT; ++n) {
    const int d = wi * (kD / 8) + n * 8 + 2 * t4;
    if (hr < H) *reinterpret_cast<float2*>(out + (i * H + hr) * kD + d) = make_float2(acc[n][0] * inv_lo, acc[n][1] * inv_lo);
    if (hr + 8 < H)
      *reinterpret_cast<float2*>(out + (i * H + hr + 8) * kD + d) = make_float2(acc[n][2] * inv_hi, acc[n][3] * inv_hi);
  }
}

// A job the kernel takes: head_dim 512, window rows as FP8 records or (fake-quantised) floats,
// selected rows as NVFP4 records (float main rows would be rounded to bf16: left to the split
// kernels).
bool tensor_fits(const dk::AttnGeom& g) {
  const bool ring_ok = g.ring.empty() || g.ring.f || g.ring.kind == RowKind::kWindow;
  const bool main_ok = g.main.empty() || (!g.main.f && g.main.kind == RowKind::kMain);
  return g.D == kD && g.H >= 1 && ring_ok && main_ok;
}

}  // namespace

bool launch_attn_tensor(const dk::AttnBatch& b, Stream s) {
  if (b.n < 1 || b.n > dk::AttnBatch::kMax) return false;
  int64_t rows = 0;
  for (int j = 0; j < b.n; ++j) {
    if (!tensor_fits(b.jobs[j].g) || b.jobs[j].g.H != b.jobs[0].g.H) return false;
    rows += b.jobs[j].g.T;
  }
  if (rows > 0x7fffffff) return false;
  const int bytes = int(sizeof(Smem));
  if (cudaFuncSetAttribute(attn_tensor_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess)
    return false;
  if (rows == 0) return true;
  const dim3 grid(unsigned(rows), unsigned((b.jobs[0].g.H + kRows - 1) / kRows));
  launch_kernel(&attn_tensor_kernel, grid, kThreads, bytes, s, b);
  return true;
}

}  // namespace dsv41::fast
