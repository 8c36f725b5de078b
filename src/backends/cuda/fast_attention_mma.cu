// The sink attention of a decode / verify step (dk::AttnBatch) with FP64 tensor-core MMAs
// (fast_kernels.h launch_attn_mma; docs/CUDA.md "Sink attention on FP64 MMAs, session 16").
// Measured slower than the split pair on the H200 (why is not known yet), so launch_chain does
// not take it (kMmaAttention in fast_kernels.cu); FastAttentionCuda.MmaSinkAttentionEqualsSimple
// keeps it tested.
//
// The model's attention is MQA: every head of a row reads the same key rows. So a block decodes
// each key row it needs ONCE into shared memory (as doubles) and serves 16 heads from it, and both
// products are matrix products on `mma.sync.m8n8k4.f64` (sm_80+; Hopper's DMMA):
//   logits:  a block per (row, 16 heads, 32 key slots):  L[h, s] = Σ_c q[h, c] · k[s, c]
//   values:  a block per (row, 16 heads, 32 channels):   softmax of the 16 heads' logit rows
//            (AttnSoftmaxK's operations), then O[h, c] = Σ_s p[h, s] · v[s, c] over 64-slot
//            tiles, the window and the selected slots in two accumulators as AttnValuesK.
// Every product is exact in double (a float query or probability times a decoded FP8 / FP4 value
// of ≤ 6 significant bits, or a float key: ≤ 48 bits), so against the simple bodies only the order
// of the double sums changes: results rounded to float are the simple kernels' except where the
// double sums round to a float tie differently (the tests compare bits on random inputs; none
// seen). The max, the exps, p = float(e / denom) and the output's 0 + float(win) + float(sel) are
// the simple bodies' operations.
#include "backends/cuda/fast_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>

namespace dsv41::fast {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kHeads = 16;       // heads per block: two 8-row MMA tiles
constexpr int kLogitSlots = 32;  // key slots per logits block: four 8-column tiles
constexpr int kValChans = 32;    // channels per values block: four 8-column tiles, a lane each
constexpr int kValSlots = 128;   // key slots staged per values tile
constexpr int kBatch = 8;        // 16-byte loads a thread keeps in flight while staging
constexpr size_t kSmemOptIn = 227 * 1024;

__host__ __device__ inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row stride (in doubles) of a shared MMA operand: ≡ 4 (mod 16), so that a half-warp's fragment
// loads (4 rows × 4 consecutive doubles) hit 16 different 8-byte bank pairs.
__host__ __device__ inline int operand_stride(int64_t cols) { return int(cdiv(cols, 16) * 16 + 4); }
constexpr int kValStride = kValChans + 4;  // the values tile's rows (kValChans % 16 == 0)

// D (8×8) += A (8×4, row-major) · B (4×8, column-major) in double. Fragments (PTX ISA, m8n8k4
// .f64): lane holds A[lane / 4][lane % 4], B[lane % 4][lane / 4] and D[lane / 4][2 (lane % 4) + e].
__device__ __forceinline__ void dmma(double (&d)[2], double a, double b) {
  asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
      : "+d"(d[0]), "+d"(d[1])
      : "d"(a), "d"(b));
}

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

__device__ inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// One key element as read from its row, before decoding: the code (or the float's bits) and the
// scale byte. Loading all of a thread's elements first and decoding after keeps their loads in
// flight together (a decode's shared-memory stores would otherwise order the next loads after it).
struct RawElem {
  uint32_t v;
  uint8_t s;
};

__device__ __forceinline__ RawElem load_raw(const dk::KeyRow& k, int64_t q) {
  if (k.f) return {__float_as_uint(k.f[q]), 0};
  if (k.kind == RowKind::kWindow) return {k.rec[q], k.rec[k.D + (q >> 5)]};
  const uint8_t b = k.rec[q >> 1];
  const uint8_t s = k.kind == RowKind::kMain ? k.rec[(k.D >> 1) + (q >> 4)] : k.rec[(k.D >> 1) + (q >> 5)];
  return {uint32_t((q & 1) ? (b >> 4) : (b & 0xF)), s};
}

// The record decode tables as doubles, so that a decoded key element is two table loads and one
// DMUL, already widened. The float decode (dk::record_value) multiplies the same two exact values
// in float: the product is exact there too (≤ 6 significant bits, ≥ 2^-136), except that it
// overflows to ±inf past FLT_MAX, which of() repeats; a NaN scale or code gives NaN in both.
struct DecodeTablesD {
  double e4m3[256], ue8m0[256], e2m1[16];
  __device__ void fill() {
    for (int c = threadIdx.x; c < 256; c += blockDim.x) {
      e4m3[c] = dk::e4m3_value(uint8_t(c));
      ue8m0[c] = dk::ue8m0_value(uint8_t(c));
      if (c < 16) e2m1[c] = dk::e2m1_value(uint8_t(c));
    }
  }
  // double(k[q]) from load_raw(k, q).
  __device__ __forceinline__ double of(const dk::KeyRow& k, RawElem r) const {
    if (k.f) return __uint_as_float(r.v);
    const double v = k.kind == RowKind::kWindow ? e4m3[r.v] * ue8m0[r.s]
                                                : e2m1[r.v] * (k.kind == RowKind::kMain ? e4m3[r.s] : ue8m0[r.s]);
    return fabs(v) > double(FLT_MAX) ? copysign(double(INFINITY), v) : v;
  }
};

// The logits block decodes its key rows two channels a lane (c = 2 lane + 64 t), the row's form
// tested once a row, instead of one element a lane through load_raw / of() (which test it for
// every element): session 17, docs/CUDA.md "Softmax once, values over the listed slots".
constexpr bool kPairDecode = true;
// The logits block's slot count chosen by the block count (attn_logit_slots: 8 or 16 slots a
// block where 32 would leave SMs idle, session 18, docs/CUDA.md "Slot-split values"); off: 32.
// On since the H200 call of session 18 (18:52 UTC): at batch 1 the 8-slot blocks take the
// logits of a ratio-1 layer from 12.9 to 9.6 µs (launch_attn_mma_logits' slots argument reaches
// the 8- and 16-slot kernels for the tests and the timing).
constexpr bool kLogitSlotsByRows = true;

__device__ __forceinline__ double finite_or_inf(double v) {  // of()'s float overflow
  return fabs(v) > double(FLT_MAX) ? copysign(double(INFINITY), v) : v;
}

// Row k's D values as doubles at dst (16-byte aligned): of()'s values for every element; false
// (nothing written) where the row is not a float row, a window or a main record, or is not
// aligned for the paired loads, or D % 64 ≠ 0 (then the element loop runs).
__device__ bool decode_row_pairs(const DecodeTablesD& tab, const dk::KeyRow& k, int D, double* dst) {
  const int lane = threadIdx.x & 31;
  const auto put = [&](int c, double a, double b) { *reinterpret_cast<double2*>(dst + c) = make_double2(a, b); };
  if (D % 64 != 0) return false;
  if (!k) {
    for (int c = 2 * lane; c < D; c += 64) put(c, 0.0, 0.0);
    return true;
  }
  if (k.f) {
    if (reinterpret_cast<uintptr_t>(k.f) & 7) return false;
#pragma unroll 4
    for (int c = 2 * lane; c < D; c += 64) {
      const float2 v = *reinterpret_cast<const float2*>(k.f + c);
      put(c, v.x, v.y);
    }
    return true;
  }
  if (k.kind == RowKind::kWindow) {  // E4M3 codes, a UE8M0 scale a 32
    if (reinterpret_cast<uintptr_t>(k.rec) & 1) return false;
#pragma unroll 4
    for (int c = 2 * lane; c < D; c += 64) {
      const uint32_t b = *reinterpret_cast<const uint16_t*>(k.rec + c);
      const double sc = tab.ue8m0[k.rec[D + (c >> 5)]];
      put(c, finite_or_inf(tab.e4m3[b & 0xFF] * sc), finite_or_inf(tab.e4m3[b >> 8] * sc));
    }
    return true;
  }
  if (k.kind == RowKind::kMain) {  // E2M1 codes (low nibble first), an E4M3 scale a 16
#pragma unroll 4
    for (int c = 2 * lane; c < D; c += 64) {
      const uint32_t b = k.rec[c >> 1];
      const double sc = tab.e4m3[k.rec[(D >> 1) + (c >> 4)]];
      put(c, finite_or_inf(tab.e2m1[b & 0xF] * sc), finite_or_inf(tab.e2m1[b >> 4] * sc));
    }
    return true;
  }
  return false;
}

template <int Slots = kLogitSlots>
__host__ __device__ inline int64_t logit_blocks(const dk::AttnGeom& g) {
  return g.T * cdiv(g.H, kHeads) * cdiv(g.L, Slots);
}
__host__ __device__ inline int64_t value_blocks(const dk::AttnGeom& g) {
  return g.T * cdiv(g.H, kHeads) * cdiv(g.D, kValChans);
}
// Bytes a staged record row takes in the logits block (the larger record kind, whole 16-byte units).
__host__ __device__ inline int raw_stride(int64_t D) {
  const int64_t window = dk::record_bytes(RowKind::kWindow, D), main = dk::record_bytes(RowKind::kMain, D);
  return int(cdiv(window > main ? window : main, 16) * 16);
}
// The logits block's queries [16][stride] and keys [Slots][stride] as doubles (channels padded to 4
// with zeros), then the tile's records as read [Slots][raw_stride], then (Slots < 32) the channel
// parts' sums [8 − 8 · Slots / 32 warps][32 lanes][2].
size_t logit_smem(int64_t D, int slots = kLogitSlots) {
  return size_t(kHeads + slots) * operand_stride(D) * sizeof(double) + size_t(slots) * raw_stride(D) +
         size_t(kWarps - kWarps * slots / kLogitSlots) * 32 * 2 * sizeof(double);
}
// The values block's logits, then probabilities [16][stride] over L padded to whole tiles, and each
// slot's top-k entry [L padded] (−2 a window slot, −1 absent).
__host__ __device__ inline int64_t padded_slots(int64_t L) { return cdiv(L, kValSlots) * kValSlots; }
size_t value_smem(int64_t L) {
  return size_t(kHeads) * operand_stride(padded_slots(L)) * sizeof(double) + size_t(padded_slots(L)) * sizeof(int32_t);
}

// Block b's job: the first whose blocks b does not pass (b becomes the index within it).
template <class Count>
__device__ int job_of(const dk::AttnBatch& b, int64_t& blk, Count count) {
  int j = 0;
  while (j + 1 < b.n && blk >= count(b.jobs[j].g)) blk -= count(b.jobs[j++].g);
  return j;
}

// n floats from src (16-byte aligned, n % 4 == 0) as doubles: element x to dst[x / w · S + x % w]
// (w % 4 == 0), kBatch 16-byte loads a thread in flight at once.
__device__ void stage_floats(const float* src, int n, int w, int S, double* dst) {
  const int n4 = n / 4;
  for (int base = 0; base < n4; base += kThreads * kBatch) {
    float4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int x = base + u * kThreads + int(threadIdx.x);
      if (x < n4) v[u] = reinterpret_cast<const float4*>(src)[x];
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int x = base + u * kThreads + int(threadIdx.x);
      if (x >= n4) continue;
      double2* d = reinterpret_cast<double2*>(dst + (4 * x / w) * S + 4 * x % w);
      d[0] = make_double2(v[u].x, v[u].y);
      d[1] = make_double2(v[u].z, v[u].w);
    }
  }
}

// The group's queries qd[a][c] = q[a, c] as doubles (0 past nh heads and D channels).
__device__ void stage_queries(const float* q, int nh, int D, int Dp, int S, double* qd) {
  const int tid = threadIdx.x;
  if (D % 4 == 0 && aligned16(q)) {
    stage_floats(q, nh * D, D, S, qd);
    for (int x = tid; x < (kHeads - nh) * Dp; x += kThreads) qd[(nh + x / Dp) * S + x % Dp] = 0.0;
    return;
  }
  for (int x = tid; x < kHeads * Dp; x += kThreads) {
    const int a = x / Dp, c = x % Dp;
    qd[a * S + c] = a < nh && c < D ? double(q[int64_t(a) * D + c]) : 0.0;
  }
}

// The tile's record rows copied into shared memory as they are (16-byte units, all of a thread's
// in flight at once; rows whose records are not whole aligned units, and float rows, stay where
// they are), then rows[s] pointed at the copies.
template <int Slots>
__device__ void stage_records(dk::KeyRow* rows, int64_t D, uint8_t* raw) {
  const int RB = raw_stride(D), units = RB / 16, total = Slots * units, tid = threadIdx.x;
  const auto copied = [&](const dk::KeyRow& r) {
    return r.rec && aligned16(r.rec) && dk::record_bytes(r.kind, D) % 16 == 0;
  };
  for (int base = 0; base < total; base += kThreads * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int x = base + u * kThreads + tid, s = x / units, k = x % units;
      if (x < total && copied(rows[s]) && 16 * k < dk::record_bytes(rows[s].kind, D))
        v[u] = reinterpret_cast<const uint4*>(rows[s].rec)[k];
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int x = base + u * kThreads + tid, s = x / units, k = x % units;
      if (x < total && copied(rows[s]) && 16 * k < dk::record_bytes(rows[s].kind, D))
        reinterpret_cast<uint4*>(raw + s * RB)[k] = v[u];
    }
  }
  __syncthreads();  // every thread has read rows[] for the copy
  if (tid < Slots && copied(rows[tid])) rows[tid].rec = raw + tid * RB;
}

// Logits of (row i, heads 16 hg …, slots s0 … s0 + Slots − 1): the queries widened and the tile's
// keys decoded once into shared memory; the 2 × Slots / 8 tiles of 8 heads × 8 slots go to the 8
// warps — warp w the tile of heads 8 (w % 2) … and slots 8 (w / 2 % (Slots / 8)) … over channel
// part w / (Slots / 4) of KS = 32 / Slots parts (whole 4-channel steps) — each over its channels in
// steps of 4 on two accumulators (even and odd steps) so that the dependent MMA chain is half as
// long; the parts' sums are added in part order by the part-0 warp. Slots = 32: one part (the
// session 16 kernel); 16 or 8: 2 or 4 parts, two or four times the blocks at batch 1 with a
// quarter or half of the work each (session 18) and, at 8, shared memory for two blocks an SM.
template <int Slots>
__global__ void __launch_bounds__(kThreads) mma_logits_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  static_assert(Slots == 8 || Slots == 16 || Slots == 32, "2 head tiles × Slots / 8 slot tiles × parts = 8 warps");
  constexpr int kTiles = Slots / 8, kParts = kWarps / (2 * kTiles);
  extern __shared__ __align__(16) double dyn_logits[];
  __shared__ DecodeTablesD tab;
  __shared__ dk::KeyRow rows[Slots];
  int64_t blk = blockIdx.x;
  const int j = job_of(b, blk, [](const dk::AttnGeom& g) { return logit_blocks<Slots>(g); });
  const dk::AttnGeom g = b.jobs[j].g;
  const int64_t tiles = cdiv(g.L, Slots), groups = cdiv(g.H, kHeads);
  const int64_t s0 = (blk % tiles) * Slots, hg = (blk / tiles) % groups, i = blk / tiles / groups;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* logits = b.jobs[j].logits + i * g.H * g.L;
  if (tid < Slots) rows[tid] = s0 + tid < g.L ? g.key(i, s0 + tid) : dk::KeyRow{};
  if (!__syncthreads_or(tid < Slots && bool(rows[tid]))) {  // no key in the tile: all −inf
    for (int x = tid; x < kHeads * Slots; x += kThreads) {
      const int64_t h = hg * kHeads + x / Slots, s = s0 + x % Slots;
      if (h < g.H && s < g.L) logits[h * g.L + s] = -INFINITY;
    }
    return;
  }
  const int S = operand_stride(g.D), Dp = int(cdiv(g.D, 4) * 4), D = int(g.D);
  double* qd = dyn_logits;        // [kHeads][S]: the group's queries, widened
  double* kd = qd + kHeads * S;   // [Slots][S]: the tile's keys, decoded once
  uint8_t* raw = reinterpret_cast<uint8_t*>(kd + Slots * S);  // [Slots][raw_stride]
  double* part_sums = reinterpret_cast<double*>(raw + Slots * raw_stride(g.D));  // [warps of parts ≥ 1][32][2]
  tab.fill();
  const int nh = g.H - hg * kHeads < kHeads ? int(g.H - hg * kHeads) : kHeads;
  stage_queries(b.jobs[j].q + (i * g.H + hg * kHeads) * g.D, nh, D, Dp, S, qd);
  stage_records<Slots>(rows, g.D, raw);
  __syncthreads();  // the copies, the tables and rows[]
  for (int s = warp; s < Slots; s += kWarps) {
    const dk::KeyRow key = rows[s];
    if (kPairDecode && decode_row_pairs(tab, key, D, kd + s * S)) continue;
#pragma unroll 4
    for (int c = lane; c < Dp; c += 32) kd[s * S + c] = key && c < D ? tab.of(key, load_raw(key, c)) : 0.0;
  }
  __syncthreads();
  const int ht = warp & 1, st = (warp >> 1) % kTiles, part = warp / (2 * kTiles);
  const double* qa = qd + (8 * ht + (lane >> 2)) * S + (lane & 3);
  const double* kb = kd + (8 * st + (lane >> 2)) * S + (lane & 3);
  const int steps = Dp / 4, c_begin = 4 * (steps * part / kParts), c_end = 4 * (steps * (part + 1) / kParts);
  double acc[2][2] = {{0, 0}, {0, 0}};
  int c = c_begin;
#pragma unroll 4
  for (; c + 8 <= c_end; c += 8) {
    dmma(acc[0], qa[c], kb[c]);
    dmma(acc[1], qa[c + 4], kb[c + 4]);
  }
  if (c < c_end) dmma(acc[0], qa[c], kb[c]);
  double sum[2] = {acc[0][0] + acc[1][0], acc[0][1] + acc[1][1]};
  if (kParts > 1) {
    if (part > 0) {
#pragma unroll
      for (int e = 0; e < 2; ++e) part_sums[((warp - 2 * kTiles) * 32 + lane) * 2 + e] = sum[e];
    }
    __syncthreads();
    if (part > 0) return;
#pragma unroll
    for (int p = 1; p < kParts; ++p)  // in part order
#pragma unroll
      for (int e = 0; e < 2; ++e) sum[e] += part_sums[((warp + (p - 1) * 2 * kTiles) * 32 + lane) * 2 + e];
  }
  const int64_t h = hg * kHeads + 8 * ht + (lane >> 2);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int sl = 8 * st + 2 * (lane & 3) + e;
    if (h < g.H && s0 + sl < g.L) logits[h * g.L + s0 + sl] = rows[sl] ? float(sum[e]) * b.scaling : -INFINITY;
  }
}

// Key row of slot s of row i from its entry (ent: −2 window, −1 absent, else the main row).
__device__ __forceinline__ dk::KeyRow slot_row(const dk::AttnGeom& g, int64_t i, int s, int32_t ent) {
  if (ent == -2) return g.key(i, s);  // a window slot: pointer arithmetic, no load
  return ent >= 0 ? g.main.row(ent) : dk::KeyRow{};
}

// Softmax (AttnSoftmaxK) of the group's heads from their logits in pd: warp w takes heads 2w and
// 2w + 1; pd[a][s] becomes float(expf(l − m) / denom) for a present slot, else 0 (also the
// padding up to whole tiles).
__device__ void group_softmax(const dk::AttnGeom& g, const float* sinks, int64_t hg, const int32_t* ent, double* pd,
                              int Sp) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, L = int(g.L), Lt = int(padded_slots(g.L));
  for (int a = 2 * warp; a < 2 * warp + 2; ++a) {
    double* p = pd + a * Sp;
    const int64_t h = hg * kHeads + a;
    if (h >= g.H) {
      for (int s = lane; s < Lt; s += 32) p[s] = 0.0;
      continue;
    }
    const float sink = sinks[h];
    float mx = -INFINITY;
    for (int s = lane; s < L; s += 32)
      if (ent[s] != -1) mx = fmaxf(mx, float(p[s]));
    const float m = fmaxf(sink, warp_max(mx));
    double den = 0;
    for (int s = lane; s < L; s += 32) {
      const float e = ent[s] != -1 ? expf(float(p[s]) - m) : 0.0f;
      p[s] = e;
      den += e;
    }
    const double denom = exp(double(sink - m)) + warp_sum(den);
    for (int s = lane; s < Lt; s += 32) p[s] = s < L && ent[s] != -1 ? double(float(p[s] / denom)) : 0.0;
  }
}

// Values of (row i, heads 16 hg …, channels c0 … c0 + 31): the group's logits and the slots'
// entries staged, the softmax, then the slots in tiles of 128 (tiles without a present slot
// skipped), each tile's 32 channels decoded once into vd; warp w accumulates the 8 × 8 tile of
// heads 8 (w % 2) … and channels c0 + 8 (w / 2) …, the window slots (s < nwin) into `win` and the
// selected ones into `sel` (a 4-slot step across nwin feeds both, each with the other's
// probabilities zeroed; an absent slot is p = 0 and v = 0).
__global__ void __launch_bounds__(kThreads) mma_values_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  extern __shared__ double dyn_values[];
  __shared__ DecodeTablesD tab;
  __shared__ double vd[kValSlots * kValStride];
  int64_t blk = blockIdx.x;
  const int j = job_of(b, blk, [](const dk::AttnGeom& g) { return value_blocks(g); });
  const dk::AttnGeom g = b.jobs[j].g;
  const int64_t chunks = cdiv(g.D, kValChans), groups = cdiv(g.H, kHeads);
  const int64_t c0 = (blk % chunks) * kValChans, hg = (blk / chunks) % groups, i = blk / chunks / groups;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, L = int(g.L);
  const int Sp = operand_stride(padded_slots(g.L));
  double* pd = dyn_values;                                          // [kHeads][Sp]
  int32_t* ent = reinterpret_cast<int32_t*>(pd + kHeads * Sp);    // [padded L]
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  tab.fill();
  for (int s = tid; s < L; s += kThreads) {
    const int64_t sel = s - nwin;
    ent[s] = s < nwin ? -2 : g.topk && sel < g.k ? g.topk[i * g.k + sel] : -1;
  }
  const int nh = g.H - hg * kHeads < kHeads ? int(g.H - hg * kHeads) : kHeads;
  const float* logits = b.jobs[j].logits + (i * g.H + hg * kHeads) * g.L;  // the group's rows, contiguous
  if (L % 4 == 0 && aligned16(logits)) {
    stage_floats(logits, nh * L, L, Sp, pd);
  } else {
    for (int x = tid; x < nh * L; x += kThreads) pd[(x / L) * Sp + x % L] = logits[x];
  }
  __syncthreads();
  group_softmax(g, b.sink, hg, ent, pd, Sp);
  const double* pa = pd + (8 * (warp & 1) + (lane >> 2)) * Sp + (lane & 3);
  const double* vb = vd + (lane & 3) * kValStride + 8 * (warp >> 1) + (lane >> 2);
  const int64_t c = c0 + lane;  // the channel this lane decodes
  double win[2] = {0, 0}, sel[2] = {0, 0};
  for (int s0 = 0; s0 < L; s0 += kValSlots) {
    if (!__syncthreads_or(tid < kValSlots && s0 + tid < L && ent[s0 + tid] != -1)) continue;
    constexpr int kPer = kValSlots / kWarps;  // slots a warp decodes: warp + 8u
    RawElem raw[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int s = s0 + warp + kWarps * u;
      const dk::KeyRow key = s < L ? slot_row(g, i, s, ent[s]) : dk::KeyRow{};
      raw[u] = key && c < g.D ? load_raw(key, c) : RawElem{0, 0};
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int s = s0 + warp + kWarps * u;
      const dk::KeyRow key = s < L ? slot_row(g, i, s, ent[s]) : dk::KeyRow{};
      vd[(warp + kWarps * u) * kValStride + lane] = key && c < g.D ? tab.of(key, raw[u]) : 0.0;
    }
    __syncthreads();
#pragma unroll 4
    for (int k = 0; k < kValSlots; k += 4) {
      const int64_t first = s0 + k;  // the step's slots first … first + 3 (warp-uniform branches)
      const double a = pa[s0 + k], v = vb[k * kValStride];
      if (first + 4 <= nwin) {
        dmma(win, a, v);
      } else if (first >= nwin) {
        dmma(sel, a, v);
      } else {
        const bool in_window = first + (lane & 3) < nwin;
        dmma(win, in_window ? a : 0.0, v);
        dmma(sel, in_window ? 0.0 : a, v);
      }
    }
  }
  const int64_t h = hg * kHeads + 8 * (warp & 1) + (lane >> 2);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int64_t cc = c0 + 8 * (warp >> 1) + 2 * (lane & 3) + e;
    if (h >= g.H || cc >= g.D) continue;
    float out = 0.0f;
    out += float(win[e]);
    out += float(sel[e]);
    b.jobs[j].o[(i * g.H + h) * g.D + cc] = out;
  }
}

template <class Kernel>
bool allow_smem(Kernel* kernel, size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)) == cudaSuccess;
}

}  // namespace

// The jobs' block counts, longest key list and widest row; false where the batch cannot launch.
static bool mma_blocks(const dk::AttnBatch& b, int64_t& lb, int64_t& vb, int64_t& L, int64_t& D) {
  lb = vb = L = D = 0;
  for (int j = 0; j < b.n; ++j) {
    const dk::AttnGeom& g = b.jobs[j].g;
    if (!b.jobs[j].logits) return false;
    lb += logit_blocks(g);
    vb += value_blocks(g);
    L = std::max(L, g.L);
    D = std::max(D, g.D);
  }
  return b.n >= 1 && b.n <= dk::AttnBatch::kMax && lb <= 0x7fffffff && vb <= 0x7fffffff;
}

// Static shared memory of each kernel (and a margin), beside its dynamic part.
constexpr size_t kLogitStatic = sizeof(DecodeTablesD) + kLogitSlots * sizeof(dk::KeyRow) + 256;
constexpr size_t kValueStatic = sizeof(DecodeTablesD) + kValSlots * kValStride * sizeof(double) + 256;

template <int Slots>
static bool launch_logits(const dk::AttnBatch& b, int64_t D, Stream s) {
  int64_t blocks = 0;
  for (int j = 0; j < b.n; ++j) blocks += logit_blocks<Slots>(b.jobs[j].g);
  const size_t ls = logit_smem(D, Slots);
  if (blocks > 0x7fffffff || ls + kLogitStatic > kSmemOptIn || !allow_smem(mma_logits_kernel<Slots>, ls)) return false;
  if (blocks > 0) launch_kernel(&mma_logits_kernel<Slots>, unsigned(blocks), kThreads, ls, s, b);
  return true;
}

int attn_logit_slots(const dk::AttnBatch& b) {
  int64_t blocks = 0;  // at 32 slots a block
  for (int j = 0; j < b.n; ++j) blocks += logit_blocks(b.jobs[j].g);
  // About one H200 wave (132 SMs) of 32-slot blocks or less: 8-slot blocks (4× the blocks, two an
  // SM); up to two waves: 16-slot blocks; more: 32 (fewer staged query copies).
  return blocks <= 160 ? 8 : blocks <= 320 ? 16 : 32;
}

bool launch_attn_mma_logits(const dk::AttnBatch& b, Stream s, int slots) {
  static_assert(kHeads == 2 * 8 && kLogitSlots == 4 * 8 && kWarps == 8, "warp ↔ tile map");
  int64_t lb, vb, L, D;
  if (!mma_blocks(b, lb, vb, L, D)) return false;
  switch (slots == 0 ? (kLogitSlotsByRows ? attn_logit_slots(b) : kLogitSlots) : slots) {
    case 8: return launch_logits<8>(b, D, s);
    case 16: return launch_logits<16>(b, D, s);
    case 32: return launch_logits<32>(b, D, s);
    default: return false;
  }
}

bool launch_attn_mma(const dk::AttnBatch& b, Stream s) {
  static_assert(kValChans == 32 && kHeads == 2 * 8 && kWarps == 8, "warp ↔ tile map");
  int64_t lb, vb, L, D;
  if (!mma_blocks(b, lb, vb, L, D)) return false;
  const size_t vs = value_smem(L);
  if (logit_smem(D) + kLogitStatic > kSmemOptIn || vs + kValueStatic > kSmemOptIn) return false;
  if (!allow_smem(mma_values_kernel, vs) || !launch_attn_mma_logits(b, s)) return false;
  if (vb > 0) launch_kernel(&mma_values_kernel, unsigned(vb), kThreads, vs, s, b);
  return true;
}

}  // namespace dsv41::fast
