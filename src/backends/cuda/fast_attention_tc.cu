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
//   0. every slot of the row found once (KeyRow: float, FP8 window record, NVFP4 main record,
//      absent) into a table in shared memory — a tile's rows no longer wait on the top-k ids and
//      page tables inside the loop;
//   1. the tile's records copied global → shared by cp.async kStages tiles ahead (no registers held
//      across the MMAs, the copies in flight during the last tile's scores, softmax and values),
//      then decoded to bf16 rows in shared memory — exact: every cached value has at most 6
//      significant bits (model.md §4) and the segment's own window rows are fake-quantised FP8 values;
//   2. S = (q_hi + q_lo)·Kᵀ, each warp a row block × 64 channels, partial sums added in warp order;
//   3. online softmax per head row (the sink seeds the running max and the denominator);
//   4. O = O·α + (P_hi + P_lo)·V.
// Sums are fp32 (the tensor core's), so the results are not the simple bodies' bits: a query or a
// probability carries ≈ 16 significant bits (hi + lo), each product is exact, the sums round;
// FastAttentionCuda.TensorSinkAttentionMatchesSimple bounds the difference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

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

constexpr int kRecordStride = kD + kD / 32;  // bytes a staged row: the larger record (window, 528)
static_assert(kRecordStride % 16 == 0 && (kD / 2 + kD / 16) % 16 == 0, "records copy as 16-byte chunks");
constexpr int kStages = 2;                   // tiles of records in flight ahead of the decode

struct Smem {
  static constexpr int kStride = kD + 8;  // bf16 a row; +16 B keeps the ldmatrix rows conflict-free
  static constexpr int kPStride = kTile + 8;
  __nv_bfloat16 q_hi[kRows * kStride];  // then (the q fragments in registers) the partial scores
  __nv_bfloat16 q_lo[kRows * kStride];
  __nv_bfloat16 keys[kTile * kStride];
  __nv_bfloat16 p_hi[kRows * kPStride];
  __nv_bfloat16 p_lo[kRows * kPStride];
  alignas(16) uint8_t stage[kStages][kTile * kRecordStride];  // a tile's records as stored
  float m[kRows], l[kRows], alpha[kRows];
  dk::AttnGeom g;
};
static_assert(8 * kRows * attn::kPartStride * sizeof(float) <= 2 * kRows * Smem::kStride * sizeof(__nv_bfloat16),
              "partial scores fit over q");

// The row's slot table after Smem in dynamic shared memory: slot j's source and kind (SlotKind).
struct Slots {
  const void** src;
  int* kind;
};
__host__ __device__ constexpr int64_t slot_capacity(int64_t L) { return (L + kTile - 1) / kTile * kTile; }
__host__ __device__ constexpr int64_t smem_bytes(int64_t L) {
  return int64_t(sizeof(Smem)) + slot_capacity(L) * int64_t(sizeof(void*) + sizeof(int));
}

using attn::RawUnit;

// The unit's 16 values as bf16 in shared memory (record_value's values; absent rows as zeros), a
// record unit from its staged copy.
__device__ __forceinline__ void store_unit(const uint8_t* staged, int kind, const void* row, int c0,
                                           __nv_bfloat16* dst) {
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
  const bool window = kind == kWindowRecord;
  const RawUnit u = window ? attn::load_window_unit<kD, false>(staged, c0) : attn::load_main_unit<kD, false>(staged, c0);
  attn::store_record_unit(u, window, dst);
}

// Slot j of row i as (source, kind): AttnGeom::key, the row's form told once.
__device__ __forceinline__ void find_slot(const dk::AttnGeom& g, int64_t i, int64_t j, int64_t nkeys,
                                          const void*& src, int& kind) {
  const dk::KeyRow key = j < nkeys ? g.key(i, j) : dk::KeyRow{};
  src = key.f ? static_cast<const void*>(key.f) : static_cast<const void*>(key.rec);
  kind = !key ? kAbsent : key.f ? kFloatRow : key.kind == RowKind::kWindow ? kWindowRecord : kMainRecord;
}

// Tile k0's records (slots k0 … k0 + 63) global → stage, 16-byte chunks by cp.async (a record not
// 16-byte aligned, which the backend's pools never hold, copied by plain loads instead).
__device__ __forceinline__ void stage_tile(const Slots& slots, int64_t k0, uint8_t* stage, int tid) {
  constexpr int kChunks = kRecordStride / 16, kMainChunks = (kD / 2 + kD / 16) / 16;
  for (int x = tid; x < kTile * kChunks; x += kThreads) {
    const int r = x / kChunks, c = x % kChunks, kind = slots.kind[k0 + r];
    if (kind > kMainRecord || (kind == kMainRecord && c >= kMainChunks)) continue;
    const uint8_t* src = static_cast<const uint8_t*>(slots.src[k0 + r]) + 16 * c;
    uint8_t* dst = stage + r * kRecordStride + 16 * c;
    if ((reinterpret_cast<uintptr_t>(src) & 15) == 0) {
      cuda::tiles::cp_async16(dst, src, true);
    } else {
      for (int b = 0; b < 16; ++b) dst[b] = src[b];
    }
  }
  cuda::tiles::cp_async_commit();
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
  const int64_t tiles = (nkeys + kTile - 1) / kTile;
  uint8_t* const table = smem_raw + sizeof(Smem);
  const Slots slots{reinterpret_cast<const void**>(table),
                    reinterpret_cast<int*>(table + slot_capacity(g.L) * int64_t(sizeof(void*)))};
  for (int64_t j = tid; j < tiles * kTile; j += 2 * kThreads) {  // two slots a thread at once: their loads overlap
    const void* src[2];
    int kind[2];
    find_slot(g, i, j, nkeys, src[0], kind[0]);
    find_slot(g, i, j + kThreads, nkeys, src[1], kind[1]);
    slots.src[j] = src[0], slots.kind[j] = kind[0];
    if (j + kThreads < tiles * kTile) slots.src[j + kThreads] = src[1], slots.kind[j + kThreads] = kind[1];
  }
  __syncthreads();
  for (int k = 0; k < kStages; ++k) {  // (empty groups past the last tile keep the counts uniform)
    if (k < tiles) stage_tile(slots, k * kTile, sm.stage[k], tid);
    else cuda::tiles::cp_async_commit();
  }

  // Warp (mt, wi)'s q fragments stay in registers; the q arrays then hold the partial scores.
  attn::QFrags<kD> qf;
  attn::load_q_frags<kD>(qf, sm.q_hi, sm.q_lo, S, mt, wi, lane);
  float* const spart = reinterpret_cast<float*>(sm.q_hi);
  cuda::tiles::cp_async_wait<kStages - 1>();  // this thread's copies of tile 0
  __syncthreads();

  constexpr int NT = kD / 64;  // n8 tiles of this warp's 64 output channels
  float acc[NT][4];
  for (int n = 0; n < NT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  // A pass of the decode covers RP rows, one 16-channel unit a thread.
  constexpr int U = kD / 16, RP = kThreads / U, kPasses = kTile / RP;
  const int unit_row = tid / U, unit_c0 = (tid % U) * 16;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t k0 = t * kTile;
    uint8_t* const stage = sm.stage[t % kStages];
    // 1. Decode this tile from its staged records (every thread's copies landed before the barrier
    //    that ended the last tile); then the stage takes tile t + kStages.
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      const int r = j * RP + unit_row;
      store_unit(stage + r * kRecordStride, slots.kind[k0 + r], slots.src[k0 + r], unit_c0, &sm.keys[r * S + unit_c0]);
    }
    __syncthreads();
    if (t + kStages < tiles) stage_tile(slots, k0 + kStages * kTile, stage, tid);
    else cuda::tiles::cp_async_commit();
    // 2. S = Q·Kᵀ by channel slices.
    attn::partial_scores<kD>(qf, sm.keys, S, spart, mt, wi, lane);
    __syncthreads();
    // 3. Online softmax, P in two parts.
    const int* kinds = slots.kind + k0;
    const auto score = [&](int r, int k) { return attn::sliced_score(spart, r, k, kinds[k] == kAbsent, scaling); };
    attn::softmax_rows(score, sm.m, sm.l, sm.alpha, sm.p_hi, sm.p_lo, PS, warp, lane);
    __syncthreads();
    // 4. O = O·α + (P_hi + P_lo)·V over row block mt and this warp's 64 channels.
    attn::accumulate_values<NT, true>(acc, sm.p_hi, sm.p_lo, PS, sm.alpha, sm.keys, S, wi * (kD / 8), mt, lane);
    cuda::tiles::cp_async_wait<kStages - 1>();  // this thread's copies of tile t + 1
    __syncthreads();  // the next tile overwrites keys, the partial scores and p; its records landed
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
  int64_t most = 0;
  for (int j = 0; j < b.n; ++j) most = std::max(most, smem_bytes(b.jobs[j].g.L));
  int limit = 0, device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess || most > limit)
    return false;  // a row of more slots than the table holds: the split kernels
  const int bytes = int(most);
  if (cudaFuncSetAttribute(attn_tensor_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess)
    return false;
  if (rows == 0) return true;
  const dim3 grid(unsigned(rows), unsigned((b.jobs[0].g.H + kRows - 1) / kRows));
  launch_kernel(&attn_tensor_kernel, grid, kThreads, bytes, s, b);
  return true;
}

}  // namespace dsv41::fast
