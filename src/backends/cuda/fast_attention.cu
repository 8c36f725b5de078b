// Fast kernels of the decode step's attention-side bodies (fast_kernels.h): the indexer scores
// (dk::IndexScoreK) and the sink attention split over many blocks (dk::AttnBatch / AttnChain).
// Both repeat their simple bodies' arithmetic in the simple bodies' order — every sum a thread
// forms runs over the same values in the same sequence — so the results are the simple kernels'
// bits; what changes is who does the work: a key row is decoded once per block into shared memory
// and then used by every head, instead of once per (row, head) or per (entry, head).
#include "backends/cuda/fast_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace dsv41::fast {

namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr size_t kSmemLimit = 48 * 1024;  // dynamic + static shared memory without an opt-in

__host__ __device__ inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// ---- Indexer scores: a block per (row, tile of 32 entries) ----------------------------------
// The tile's keys decoded once into shared memory as doubles (KeyRow's values, widened); warp w
// takes heads w, w + 8, …, its head's query staged as doubles beside them, lane e entry e of the
// tile: IndexScoreK's per-head double sum over c = 0 … dh−1 in order (the same operands, so no
// per-product conversions), its ReLU and scale; then thread e adds the heads' terms in head
// order as IndexScoreK does.
constexpr int kIdxTile = 32;
constexpr size_t kSmemOptIn = 227 * 1024;  // the most dynamic shared memory a block may opt in to

size_t index_smem(const dk::IndexScoreK& k) {
  return size_t(kIdxTile * (k.dh + 1) + kWarps * k.dh) * sizeof(double) + size_t(kIdxTile * (k.nh + 1)) * sizeof(float);
}

__host__ __device__ inline int64_t index_blocks(int64_t count, const dk::IndexScoreK& k) {
  return count / k.G * cdiv(k.G, kIdxTile);
}

__device__ void index_tile(const dk::IndexScoreK& k, int64_t blk) {
  extern __shared__ double dyn_idx[];
  const int dh = int(k.dh), nh = int(k.nh);
  double* key = dyn_idx;                                     // [kIdxTile][dh + 1] (padded)
  double* qs = key + kIdxTile * (dh + 1) + (threadIdx.x >> 5) * dh;  // this warp's head: [dh]
  float* relu = reinterpret_cast<float*>(dyn_idx + kIdxTile * (dh + 1) + kWarps * dh);  // [kIdxTile][nh + 1]
  __shared__ bool visible[kIdxTile];
  const int64_t tiles = cdiv(k.G, kIdxTile), r = blk / tiles, g0 = (blk % tiles) * kIdxTile;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid < kIdxTile) {
    const int64_t g = g0 + tid, t = k.start + r;
    bool in = g < k.G && g < (t + 1) / k.ratio;
    if (in && k.kept) {  // IndexScoreK's pool test
      in = false;
      for (int j = 0; j < k.nb && k.kept[r * k.nb + j] >= 0; ++j) in = in || k.kept[r * k.nb + j] == g / k.bs;
    }
    visible[tid] = in;
  }
  for (int x = tid; x < kIdxTile * dh; x += kThreads) {
    const int e = x / dh, c = x % dh;
    if (g0 + e < k.G) key[e * (dh + 1) + c] = double(k.keys.row(g0 + e)[c]);
  }
  __syncthreads();
  const double* ke = key + lane * (dh + 1);
  for (int h = warp; h < nh; h += kWarps) {
    const float* qh = k.q + (r * k.nh + h) * k.dh;
    __syncwarp();  // the previous head's query is read
    for (int c = lane; c < dh; c += 32) qs[c] = double(qh[c]);
    __syncwarp();
    if (!visible[lane]) continue;
    double acc = 0;
#pragma unroll 8
    for (int c = 0; c < dh; ++c) acc += ke[c] * qs[c];
    relu[lane * (nh + 1) + h] = fmaxf(float(acc), 0.0f) * k.scale;
  }
  __syncthreads();
  if (tid >= kIdxTile || g0 + tid >= k.G) return;
  float score = -INFINITY;
  if (visible[tid]) {
    float total = 0.0f;
    for (int h = 0; h < nh; ++h) total += relu[tid * (nh + 1) + h] * k.hw[r * k.nh + h];
    score = total;
  }
  k.scores[r * k.G + g0 + tid] = score;
}

// Block b: the tile of the first body whose blocks it does not pass.
__global__ void __launch_bounds__(kThreads) index_batch_kernel(const dk::Batched<dk::IndexScoreK> b) {
  await_previous_kernel();
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= index_blocks(b.count[j], b.body[j])) {
    blk -= index_blocks(b.count[j], b.body[j]);
    ++j;
  }
  index_tile(b.body[j], blk);
}

bool index_fits(int64_t n, const dk::IndexScoreK& k) {
  return k.G > 0 && k.nh > 0 && k.dh > 0 && n % k.G == 0 && index_smem(k) + kIdxTile <= kSmemOptIn;
}

// Dynamic shared memory beyond the default 48 KiB needs the kernel's opt-in (set per launch:
// the backend keeps no process state).
template <class Kernel>
bool allow_smem(Kernel* kernel, size_t bytes) {
  if (bytes + 64 <= kSmemLimit) return true;  // 64: the kernels' few static bytes
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)) == cudaSuccess;
}

// ---- Sink attention in two launches ------------------------------------------------------------
// Logits: a block per (row, 16 heads, 16 key slots); the queries and the 16 key rows staged as
// doubles in chunks of 64 channels (each decoded and widened once per block), thread (head, slot)
// forms AttnLogitsK's double sum over c = 0 … D−1 in order.
// Values: a block per (row, 8 heads, 32 channels); warp w runs AttnSoftmaxK for its head (max by
// a warp reduction — exact —, the denominator summed by lane 0 in slot order), then lane c forms
// AttnValuesK's window and selected sums slot by slot from shared tiles of 32 decoded rows and
// their probabilities, widened once per block. An absent slot enters the sums as 0 · 0 (the simple
// body skips it): adding +0 changes nothing but the sign of a zero sum, which the output's
// 0.0f + win + sel does not keep.
constexpr int kLogitHeads = 16, kLogitSlots = 16, kLogitChunk = 64;
constexpr int kValHeads = kWarps, kValChans = 32, kValSlots = 64;

__host__ __device__ inline int64_t logit_blocks(const dk::AttnGeom& g) {
  return g.T * cdiv(g.H, kLogitHeads) * cdiv(g.L, kLogitSlots);
}
__host__ __device__ inline int64_t value_blocks(const dk::AttnGeom& g) {
  return g.T * cdiv(g.H, kValHeads) * cdiv(g.D, kValChans);
}
size_t value_smem(int64_t L) { return size_t(L); }
constexpr size_t kValueStatic = kValSlots * (kValChans + 1) * sizeof(double) + kValHeads * kValSlots * sizeof(double) +
                                kValSlots * sizeof(dk::KeyRow) + kValHeads * (32 * sizeof(float) + 12) + 64;

__global__ void __launch_bounds__(kThreads) attn_logits_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  __shared__ double qd[kLogitHeads][kLogitChunk + 1];
  __shared__ double kd[kLogitSlots][kLogitChunk + 1];
  __shared__ dk::KeyRow rows[kLogitSlots];
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= logit_blocks(b.jobs[j].g)) blk -= logit_blocks(b.jobs[j++].g);
  const dk::AttnGeom g = b.jobs[j].g;
  const int64_t tiles = cdiv(g.L, kLogitSlots), groups = cdiv(g.H, kLogitHeads);
  const int64_t s0 = (blk % tiles) * kLogitSlots, hg = (blk / tiles) % groups, i = blk / tiles / groups;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, D = int(g.D);
  if (tid < kLogitSlots) rows[tid] = s0 + tid < g.L ? g.key(i, s0 + tid) : dk::KeyRow{};
  const bool any = __syncthreads_or(tid < kLogitSlots && bool(rows[tid]));
  const int s = lane & 15, hl = warp * 2 + (lane >> 4);
  const int64_t h = hg * kLogitHeads + hl, slot = s0 + s;
  const bool mine = h < g.H && slot < g.L;
  float* out = b.jobs[j].logits + (i * g.H + h) * g.L + slot;
  if (!any) {
    if (mine) *out = -INFINITY;
    return;
  }
  const float* q = b.jobs[j].q + (i * g.H + hg * kLogitHeads) * g.D;  // the group's first head
  double acc = 0;
  for (int c0 = 0; c0 < D; c0 += kLogitChunk) {
    const int n = min(kLogitChunk, D - c0);
    for (int x = tid; x < kLogitHeads * kLogitChunk; x += kThreads) {
      const int a = x / kLogitChunk, c = x % kLogitChunk;  // a: a head of the group, a slot of the tile
      if (c >= n) continue;
      qd[a][c] = hg * kLogitHeads + a < g.H ? double(q[int64_t(a) * D + c0 + c]) : 0.0;
      kd[a][c] = rows[a] ? double(rows[a][c0 + c]) : 0.0;
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < n; ++c) acc += qd[hl][c] * kd[s][c];
    __syncthreads();
  }
  if (mine) *out = rows[s] ? float(acc) * b.scaling : -INFINITY;
}

__global__ void __launch_bounds__(kThreads) attn_values_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  extern __shared__ uint8_t present[];  // [L]
  __shared__ double vd[kValSlots][kValChans + 1];
  __shared__ double pd[kValHeads][kValSlots];
  __shared__ dk::KeyRow rows[kValSlots];
  __shared__ float eb[kValHeads][32];
  __shared__ float mh[kValHeads];
  __shared__ double dh[kValHeads];
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= value_blocks(b.jobs[j].g)) blk -= value_blocks(b.jobs[j++].g);
  const dk::AttnGeom g = b.jobs[j].g;
  const int64_t chunks = cdiv(g.D, kValChans), groups = cdiv(g.H, kValHeads);
  const int64_t c0 = (blk % chunks) * kValChans, hg = (blk / chunks) % groups, i = blk / chunks / groups;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int L = int(g.L);
  const float* logits = b.jobs[j].logits + (i * g.H + hg * kValHeads) * g.L;  // the group's first head
  for (int s = tid; s < L; s += kThreads) present[s] = g.key(i, s) ? 1 : 0;
  __syncthreads();
  const int64_t h = hg * kValHeads + warp;
  const bool head = h < g.H;
  if (head) {  // AttnSoftmaxK's max and denominator for (i, h); e = expf(l − m) where present
    const float* l = logits + int64_t(warp) * g.L;
    const float sink = b.sink[h];
    float mx = -INFINITY;
    for (int s = lane; s < L; s += 32)
      if (present[s]) mx = fmaxf(mx, l[s]);
    const float m = fmaxf(sink, warp_max(mx));
    double denom = exp(double(sink - m));
    for (int s0 = 0; s0 < L; s0 += 32) {  // 32 exps at a time, added by lane 0 in slot order
      eb[warp][lane] = s0 + lane < L && present[s0 + lane] ? expf(l[s0 + lane] - m) : 0.0f;
      __syncwarp();
      if (lane == 0) {
        const int n = min(32, L - s0);
        for (int q = 0; q < n; ++q) denom += eb[warp][q];  // +0 for an absent slot: no change
      }
      __syncwarp();
    }
    if (lane == 0) {
      mh[warp] = m;
      dh[warp] = denom;
    }
  }
  // AttnValuesK for (i, h, c0 + lane): slots in ascending order, window and selected apart.
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  const int64_t c = c0 + lane;
  double win = 0, sel = 0;
  for (int s0 = 0; s0 < L; s0 += kValSlots) {
    const bool any = __syncthreads_or(tid < kValSlots && s0 + tid < L && present[s0 + tid]);
    if (!any) continue;
    if (tid < kValSlots) rows[tid] = s0 + tid < L && present[s0 + tid] ? g.key(i, s0 + tid) : dk::KeyRow{};
    // The tile's probabilities, AttnSoftmaxK's float(expf(l − m) / denom) (the same exps the
    // denominator added).
    for (int x = tid; x < kValHeads * kValSlots; x += kThreads) {
      const int hh = x / kValSlots, s = s0 + x % kValSlots;
      pd[hh][x % kValSlots] = hg * kValHeads + hh < g.H && s < L && present[s]
                                  ? double(float(expf(logits[int64_t(hh) * g.L + s] - mh[hh]) / dh[hh]))
                                  : 0.0;
    }
    __syncthreads();
    for (int x = tid; x < kValSlots * kValChans; x += kThreads) {
      const int s = x / kValChans, cc = x % kValChans;
      vd[s][cc] = rows[s] && c0 + cc < g.D ? double(rows[s][c0 + cc]) : 0.0;
    }
    __syncthreads();
    if (head && c < g.D) {
      const int n = min(kValSlots, L - s0);
      const int nw = nwin - s0 < 0 ? 0 : nwin - s0 > n ? n : int(nwin - s0);
#pragma unroll 4
      for (int s = 0; s < nw; ++s) win += pd[warp][s] * vd[s][lane];
#pragma unroll 4
      for (int s = nw; s < n; ++s) sel += pd[warp][s] * vd[s][lane];
    }
    __syncthreads();  // the tile is read before the next one is staged
  }
  if (!head || c >= g.D) return;
  float out = 0.0f;
  out += float(win);
  out += float(sel);
  b.jobs[j].o[(i * g.H + h) * g.D + c] = out;
}


// ---- Softmax once per (row, head), then the values from the probabilities ---------------------
// Probabilities: a warp per (row, head) runs AttnSoftmaxK in place over the logits: its L slots
// in registers (kProbPer a lane, slot 32k + lane), the max by a warp reduction (exact), the
// denominator one double chain in slot order as AttnSoftmaxK adds it (every lane forms the same
// chain from shuffled exps; an absent slot adds +0, a group of 32 absent slots is skipped), then
// p = float(e / denom). Values: a block per (row, 8 heads, 32 channels) lists the present slots
// in order once (key rows and slot ids in shared memory), then stages tiles of kPvTile listed
// rows — each value decoded once per block for its 8 heads, each probability loaded once — and
// lane c of warp w forms AttnValuesK's window and selected double sums over the listed slots in
// order: the simple bodies' operations in their order, so their bits.
constexpr int kProbPer = 32;  // slots a lane holds: L ≤ 1,024
constexpr int kPvHeads = kWarps, kPvChans = 32, kPvTile = 128;

__host__ __device__ inline int64_t prob_blocks(const dk::AttnGeom& g) { return cdiv(g.T * g.H, kWarps); }
__host__ __device__ inline int64_t pv_blocks(const dk::AttnGeom& g) {
  return g.T * cdiv(g.H, kPvHeads) * cdiv(g.D, kPvChans);
}
size_t pv_smem(int64_t L) { return size_t(L) * (sizeof(dk::KeyRow) + sizeof(int)); }
constexpr size_t kPvStatic = kPvTile * (kPvChans + 1) * sizeof(float) + kPvHeads * kPvTile * sizeof(float) + 64;

__global__ void __launch_bounds__(kThreads) attn_probs_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= prob_blocks(b.jobs[j].g)) blk -= prob_blocks(b.jobs[j++].g);
  const dk::AttnGeom g = b.jobs[j].g;
  const int lane = threadIdx.x & 31, L = int(g.L);
  const int64_t ih = blk * kWarps + (threadIdx.x >> 5);
  if (ih >= g.T * g.H) return;
  const int64_t i = ih / g.H;
  float* l = b.jobs[j].logits + ih * g.L;
  const float sink = b.sink[ih % g.H];
  float e[kProbPer];
  unsigned present = 0;
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kProbPer; ++k) {
    const int s = k * 32 + lane;
    e[k] = 0.0f;
    if (s < L && g.key(i, s)) {
      present |= 1u << k;
      e[k] = l[s];
      mx = fmaxf(mx, e[k]);
    }
  }
  const float m = fmaxf(sink, warp_max(mx));
#pragma unroll
  for (int k = 0; k < kProbPer; ++k) e[k] = present >> k & 1 ? expf(e[k] - m) : 0.0f;
  double denom = exp(double(sink - m));
#pragma unroll
  for (int k = 0; k < kProbPer; ++k) {
    if (!__any_sync(kFull, present >> k & 1)) continue;
#pragma unroll
    for (int q = 0; q < 32; ++q) denom += __shfl_sync(kFull, e[k], q);  // slot 32k + q
  }
#pragma unroll
  for (int k = 0; k < kProbPer; ++k) {
    const int s = k * 32 + lane;
    if (s < L) l[s] = present >> k & 1 ? float(e[k] / denom) : 0.0f;
  }
}

// The present slots of row i in order: rows[x], slot[x] for x < the returned count (block-
// uniform); *nwin_listed = how many of them are window slots (they come first). Every slot's row
// is looked up first (kListPer a thread, their top-k loads in flight together), then listed in
// passes of kThreads slots (a ballot a warp, the warps' counts added in order).
constexpr int kListPer = kProbPer * 32 / kThreads;  // L ≤ 1,024
__device__ int list_present(const dk::AttnGeom& g, int64_t i, dk::KeyRow* rows, int* slot, int* nwin_listed) {
  __shared__ int counts[kWarps];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  dk::KeyRow r[kListPer];
#pragma unroll
  for (int k = 0; k < kListPer; ++k) {
    const int s = k * kThreads + tid;
    r[k] = s < g.L ? g.key(i, s) : dk::KeyRow{};
  }
  int n = 0, nw = 0;
#pragma unroll
  for (int k = 0; k < kListPer; ++k) {
    if (k * kThreads >= g.L) break;
    const int s = k * kThreads + tid;
    const unsigned ballot = __ballot_sync(kFull, bool(r[k]));
    if (lane == 0) counts[warp] = __popc(ballot);
    nw += __syncthreads_count(bool(r[k]) && s < nwin);
    int before = n, total = n;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? counts[w] : 0;
      total += counts[w];
    }
    if (r[k]) {
      const int x = before + __popc(ballot & ((1u << lane) - 1u));
      rows[x] = r[k];
      slot[x] = s;
    }
    __syncthreads();  // counts are read before the next pass writes them; the list is complete
    n = total;
  }
  *nwin_listed = nw;
  return n;
}

// One tile of the values block in registers: listed rows x0 + warp + 8k at channel c0 + lane, and
// the probabilities of (head tid / kPvTile + …, listed row x0 + tid % kPvTile); loaded while the
// previous tile's sums run, then stored to shared memory.
struct PvTile {
  static constexpr int kRows = kPvTile / kWarps, kProbs = kPvHeads * kPvTile / kThreads;
  float v[kRows], p[kProbs];
  __device__ void load(const dk::KeyRow* rows, const int* slot, int x0, int m, int64_t c, int64_t D, const float* probs,
                       int64_t L, int heads) {
    const int tid = threadIdx.x, warp = tid >> 5;
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int u = warp + k * kWarps;
      v[k] = u < m && c < D ? rows[x0 + u][c] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kProbs; ++k) {
      const int x = tid + k * kThreads, hh = x / kPvTile, u = x % kPvTile;
      p[k] = u < m && hh < heads ? probs[int64_t(hh) * L + slot[x0 + u]] : 0.0f;
    }
  }
  __device__ void store(float (*vd)[kPvChans + 1], float (*pd)[kPvTile]) const {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int k = 0; k < kRows; ++k) vd[warp + k * kWarps][lane] = v[k];
#pragma unroll
    for (int k = 0; k < kProbs; ++k) {
      const int x = tid + k * kThreads;
      pd[x / kPvTile][x % kPvTile] = p[k];
    }
  }
};

__global__ void __launch_bounds__(kThreads, 3) attn_pv_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  extern __shared__ __align__(16) uint8_t pv_dyn[];
  __shared__ float vd[kPvTile][kPvChans + 1];
  __shared__ float pd[kPvHeads][kPvTile];
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= pv_blocks(b.jobs[j].g)) blk -= pv_blocks(b.jobs[j++].g);
  const dk::AttnGeom g = b.jobs[j].g;
  dk::KeyRow* rows = reinterpret_cast<dk::KeyRow*>(pv_dyn);  // [L]
  int* slot = reinterpret_cast<int*>(rows + g.L);            // [L]
  const int64_t chunks = cdiv(g.D, kPvChans), groups = cdiv(g.H, kPvHeads);
  const int64_t c0 = (blk % chunks) * kPvChans, hg = (blk / chunks) % groups, i = blk / chunks / groups;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int nwin = 0;
  const int n = list_present(g, i, rows, slot, &nwin);
  const float* p = b.jobs[j].logits + (i * g.H + hg * kPvHeads) * g.L;  // the group's first head
  const int heads = int(min(int64_t(kPvHeads), g.H - hg * kPvHeads));
  const int64_t c = c0 + lane;
  const bool mine = warp < heads && c < g.D;
  double win = 0, sel = 0;
  PvTile next;
  next.load(rows, slot, 0, min(kPvTile, n), c, g.D, p, g.L, heads);
  for (int x0 = 0; x0 < n; x0 += kPvTile) {
    const int m = min(kPvTile, n - x0);
    next.store(vd, pd);
    __syncthreads();
    if (x0 + kPvTile < n) next.load(rows, slot, x0 + kPvTile, min(kPvTile, n - x0 - kPvTile), c, g.D, p, g.L, heads);
    if (mine) {
      const int nw = min(max(nwin - x0, 0), m);
#pragma unroll 4
      for (int u = 0; u < nw; ++u) win += double(pd[warp][u]) * double(vd[u][lane]);
#pragma unroll 4
      for (int u = nw; u < m; ++u) sel += double(pd[warp][u]) * double(vd[u][lane]);
    }
    __syncthreads();  // the tile is read before the next one is stored
  }
  if (!mine) return;
  float out = 0.0f;
  out += float(win);
  out += float(sel);
  b.jobs[j].o[(i * g.H + hg * kPvHeads + warp) * g.D + c] = out;
}

// ---- Softmax and values in one block, the slots split over parts of the block ---------------
// A block per (row, 8 heads, 32 channels) of Q × 256 threads (Q = 1, 2, 4 "parts"): every slot's
// key row looked up once into shared memory; warps 0 … 7 run AttnSoftmaxK for the 8 heads from
// the logits (the max by a warp reduction, the denominator one double chain in slot order, as
// attn_probs_kernel) into shared probabilities; then part q sums the slots of its range of
// [0, last present slot] (contiguous, whole tiles of kSvTile) — lane c of warp h the window and
// the selected double sums of (head h, channel c) slot by slot, an absent slot as +0 (p = 0,
// v = 0) — and part 0 adds the parts' sums in part order. With Q = 1 that is AttnValuesK's order
// (the simple bits); with Q > 1 the double sums are re-associated at Q − 1 points, so a float
// result can differ only where the two double sums round to different sides of a float tie
// (products of a float probability and a ≤ 6-bit decoded value are exact in double, so most sums
// are exact anyway). Q is chosen by the block count (few rows: more parts, so that one row's
// 128 blocks keep 32 warps an SM busy instead of 8). Why: at mini-flash batch 1 the split
// values kernel ran one 8-warp block an SM, each redoing a serial softmax per 32-slot step and
// walking all L slots in 64-slot steps of two global round trips (ncu 31 µs a layer).
constexpr int kSvHeads = kWarps, kSvChans = 32, kSvTile = 64, kSvMaxL = 1024;

__host__ __device__ inline int64_t sv_blocks(const dk::AttnGeom& g) {
  return g.T * cdiv(g.H, kSvHeads) * cdiv(g.D, kSvChans);
}
// Dynamic shared memory: the parts' partial sums [Q − 1][256][2] doubles, the key rows [L], the
// probabilities [8][L padded to 32] and the value tiles [Q][kSvTile][kSvChans + 1].
__host__ __device__ inline int64_t sv_padded(int64_t L) { return cdiv(L, 32) * 32; }
size_t sv_smem(int64_t L, int parts) {
  return size_t(parts - 1) * kThreads * 2 * sizeof(double) + size_t(L) * sizeof(dk::KeyRow) +
         size_t(kSvHeads * sv_padded(L)) * sizeof(float) + size_t(parts) * kSvTile * (kSvChans + 1) * sizeof(float);
}

// AttnSoftmaxK for one (row, head) by a warp: p[s] = float(expf(l[s] − m) / denom) where slot s
// has a key row, else 0, for s < L padded to 32 (p 16-byte aligned, not aliasing l). The logits
// are read once (coalesced) into p, the exps formed in place, then every lane adds the exps of
// each slot group holding a present slot in slot order from shared memory (broadcast float4
// loads issued ahead of the dependent double adds; an absent slot adds +0): AttnSoftmaxK's
// denominator chain, the same bits.
__device__ void warp_head_probs(const float* l, const dk::KeyRow* rows, int L, float sink, float* p) {
  const int lane = threadIdx.x & 31, Lp = int(sv_padded(L));
  float mx = -INFINITY;
  unsigned groups = 0;  // bit k: slot group k (slots 32k …) holds a present slot
#pragma unroll 4
  for (int s = lane; s < Lp; s += 32) {
    const bool in = s < L && bool(rows[s]);
    const float x = in ? l[s] : 0.0f;
    if (in) mx = fmaxf(mx, x);
    p[s] = x;
    groups |= (__ballot_sync(kFull, in) != 0 ? 1u : 0u) << (s >> 5);
  }
  const float m = fmaxf(sink, warp_max(mx));
  for (int s = lane; s < Lp; s += 32) p[s] = s < L && rows[s] ? expf(p[s] - m) : 0.0f;
  __syncwarp();
  double denom = exp(double(sink - m));
  for (int k = 0; k < Lp / 32; ++k) {
    if (!(groups >> k & 1)) continue;
    const float4* v = reinterpret_cast<const float4*>(p + 32 * k);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float4 x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = v[4 * half + u];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        denom += x[u].x;
        denom += x[u].y;
        denom += x[u].z;
        denom += x[u].w;
      }
    }
  }
  __syncwarp();  // every lane has read the exps before they are overwritten
  for (int s = lane; s < Lp; s += 32) p[s] = s < L && rows[s] ? float(double(p[s]) / denom) : 0.0f;
}

// The values of kSvTile slots at channel c of one part: slots base + warp + 8k (0 past `end`, an
// absent row or D), loaded into registers while the previous tile's sums run.
struct SvTile {
  static constexpr int kRows = kSvTile / kWarps;
  float v[kRows];
  __device__ void load(const dk::KeyRow* rows, int base, int end, int64_t c, int64_t D) {
    const int warp = (threadIdx.x & 255) >> 5;
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int s = base + warp + k * kWarps;
      v[k] = s < end && c < D && rows[s] ? rows[s][c] : 0.0f;
    }
  }
  __device__ void store(float (*vd)[kSvChans + 1]) const {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x & 255) >> 5;
#pragma unroll
    for (int k = 0; k < kRows; ++k) vd[warp + k * kWarps][lane] = v[k];
  }
};

template <int Q>
__global__ void __launch_bounds__(kThreads * Q) attn_slot_values_kernel(const dk::AttnBatch b) {
  await_previous_kernel();
  extern __shared__ __align__(16) uint8_t sv_dyn[];
  __shared__ int last_present;
  int64_t blk = blockIdx.x;
  int j = 0;
  while (j + 1 < b.n && blk >= sv_blocks(b.jobs[j].g)) blk -= sv_blocks(b.jobs[j++].g);
  const dk::AttnGeom g = b.jobs[j].g;
  const int L = int(g.L), Lp = int(sv_padded(g.L));
  double* parts = reinterpret_cast<double*>(sv_dyn);                      // [Q − 1][kThreads][2]
  dk::KeyRow* rows = reinterpret_cast<dk::KeyRow*>(parts + (Q - 1) * kThreads * 2);  // [L]
  float* probs = reinterpret_cast<float*>(rows + L);                      // [kSvHeads][Lp]
  auto* tiles = reinterpret_cast<float (*)[kSvChans + 1]>(probs + kSvHeads * Lp);  // [Q][kSvTile]
  const int64_t chunks = cdiv(g.D, kSvChans), groups = cdiv(g.H, kSvHeads);
  const int64_t c0 = (blk % chunks) * kSvChans, hg = (blk / chunks) % groups, i = blk / chunks / groups;
  const int tid = threadIdx.x, q = tid / kThreads, t = tid % kThreads, lane = tid & 31, warp = t >> 5;
  if (tid == 0) last_present = 0;
  __syncthreads();
  int last = 0;  // this thread's slots: one past the last present one
  for (int s = tid; s < L; s += kThreads * Q) {
    rows[s] = g.key(i, s);
    if (rows[s]) last = s + 1;
  }
  last = __reduce_max_sync(kFull, last);
  if (lane == 0 && last > 0) atomicMax(&last_present, last);
  __syncthreads();
  // Part q's slots [lo, hi): whole tiles, the same count for every part.
  const int per = int(cdiv(cdiv(last_present, Q), kSvTile) * kSvTile), ntiles = per / kSvTile;
  const int lo = q * per, hi = min(lo + per, last_present);
  const int64_t c = c0 + lane, h = hg * kSvHeads + warp;
  SvTile next;
  if (ntiles > 0) next.load(rows, lo, hi, c, g.D);
  if (q == 0) {  // the 8 heads' probabilities (zeros past H)
    float* p = probs + warp * Lp;
    if (h < g.H) {
      warp_head_probs(b.jobs[j].logits + (i * g.H + h) * g.L, rows, L, b.sink[h], p);
    } else {
      for (int s = lane; s < Lp; s += 32) p[s] = 0.0f;
    }
  }
  const bool mine = h < g.H && c < g.D;
  const int64_t nwin = g.start + i - g.lo(i) + 1;
  const float* pw = probs + warp * Lp;
  float (*vd)[kSvChans + 1] = tiles + q * kSvTile;
  double win = 0, sel = 0;
  for (int k = 0; k < ntiles; ++k) {
    const int base = lo + k * kSvTile;
    __syncthreads();  // the probabilities (first tile) / the previous tile read
    next.store(vd);
    __syncthreads();
    if (k + 1 < ntiles) next.load(rows, base + kSvTile, hi, c, g.D);
    if (mine) {
      const int n = max(min(hi - base, kSvTile), 0);
      const int nw = int(min(max(nwin - base, int64_t(0)), int64_t(n)));
#pragma unroll 4
      for (int u = 0; u < nw; ++u) win += double(pw[base + u]) * double(vd[u][lane]);
#pragma unroll 4
      for (int u = nw; u < n; ++u) sel += double(pw[base + u]) * double(vd[u][lane]);
    }
  }
  if (Q > 1) {
    if (q > 0) {
      parts[((q - 1) * kThreads + t) * 2] = win;
      parts[((q - 1) * kThreads + t) * 2 + 1] = sel;
    }
    __syncthreads();
    if (q > 0) return;
#pragma unroll
    for (int r = 1; r < Q; ++r) {  // in part order
      win += parts[((r - 1) * kThreads + t) * 2];
      sel += parts[((r - 1) * kThreads + t) * 2 + 1];
    }
  }
  if (!mine) return;
  float out = 0.0f;
  out += float(win);
  out += float(sel);
  b.jobs[j].o[(i * g.H + h) * g.D + c] = out;
}

}  // namespace

bool launch_index_f64(const dk::Batched<dk::IndexScoreK>& b, Stream s) {
  int64_t blocks = 0;
  size_t smem = 0;
  for (int j = 0; j < b.n; ++j) {
    if (!index_fits(b.count[j], b.body[j])) return false;
    blocks += index_blocks(b.count[j], b.body[j]);
    smem = std::max(smem, index_smem(b.body[j]));
  }
  if (b.n < 1 || blocks > 0x7fffffff || !allow_smem(index_batch_kernel, smem)) return false;
  if (blocks > 0) launch_kernel(&index_batch_kernel, unsigned(blocks), kThreads, smem, s, b);
  return true;
}

bool launch(int64_t n, const dk::IndexScoreK& k, Stream s) {
  return launch_index_f64(dk::Batched<dk::IndexScoreK>::one(n, k), s);
}

bool launch(int64_t, const dk::Batched<dk::IndexScoreK>& b, Stream s) { return launch_index_f64(b, s); }

// The jobs' block counts and longest key list; false where the batch cannot launch at all.
static bool split_blocks(const dk::AttnBatch& b, int64_t& lb, int64_t& vb, int64_t& L) {
  lb = vb = L = 0;
  for (int j = 0; j < b.n; ++j) {
    const dk::AttnGeom& g = b.jobs[j].g;
    if (!b.jobs[j].logits) return false;
    lb += logit_blocks(g);
    vb += value_blocks(g);
    L = std::max(L, g.L);
  }
  return b.n >= 1 && b.n <= dk::AttnBatch::kMax && lb <= 0x7fffffff && vb <= 0x7fffffff;
}

bool launch_attn_split_values(const dk::AttnBatch& b, Stream s) {
  int64_t lb, vb, L;
  if (!split_blocks(b, lb, vb, L) || value_smem(L) + kValueStatic > kSmemLimit) return false;
  if (vb > 0) launch_kernel(&attn_values_kernel, unsigned(vb), kThreads, value_smem(L), s, b);
  return true;
}

bool launch_attn_probs_values(const dk::AttnBatch& b, Stream s) {
  int64_t lb, vb, L, pb = 0, qb = 0;
  if (!split_blocks(b, lb, vb, L) || L > int64_t(kProbPer) * 32) return false;
  for (int j = 0; j < b.n; ++j) {
    pb += prob_blocks(b.jobs[j].g);
    qb += pv_blocks(b.jobs[j].g);
  }
  if (pb > 0x7fffffff || qb > 0x7fffffff || pv_smem(L) + kPvStatic > kSmemOptIn ||
      !allow_smem(attn_pv_kernel, pv_smem(L) + kPvStatic))  // the static part counted: a large L needs the opt-in
    return false;
  if (pb > 0) launch_kernel(&attn_probs_kernel, unsigned(pb), kThreads, 0, s, b);
  if (qb > 0) launch_kernel(&attn_pv_kernel, unsigned(qb), kThreads, pv_smem(L), s, b);
  return true;
}

template <int Q>
static bool launch_slot_values(const dk::AttnBatch& b, int64_t blocks, size_t smem, Stream s) {
  if (!allow_smem(attn_slot_values_kernel<Q>, smem + 64)) return false;  // 64: the static bytes
  if (blocks > 0) launch_kernel(&attn_slot_values_kernel<Q>, unsigned(blocks), kThreads * Q, smem, s, b);
  return true;
}

int attn_slot_parts(const dk::AttnBatch& b) {
  int64_t blocks = 0;
  for (int j = 0; j < b.n; ++j) blocks += sv_blocks(b.jobs[j].g);
  // Up to two rows of mini-flash (128 blocks a row) run 4 parts, up to four 2, more rows 1: about
  // 2 × 132 SMs' worth of blocks (one 1,024-thread or four 256-thread blocks an SM hold 32 warps).
  return blocks <= 256 ? 4 : blocks <= 512 ? 2 : 1;
}

bool launch_attn_slot_values(const dk::AttnBatch& b, Stream s, int parts) {
  int64_t lb, vb, L, blocks = 0;
  if (!split_blocks(b, lb, vb, L) || L > kSvMaxL) return false;
  for (int j = 0; j < b.n; ++j) blocks += sv_blocks(b.jobs[j].g);
  if (parts == 0) parts = attn_slot_parts(b);
  const size_t smem = sv_smem(L, parts == 4 || parts == 2 ? parts : 1);
  if (blocks > 0x7fffffff || smem + 64 > kSmemOptIn) return false;
  switch (parts) {
    case 1: return launch_slot_values<1>(b, blocks, smem, s);
    case 2: return launch_slot_values<2>(b, blocks, smem, s);
    case 4: return launch_slot_values<4>(b, blocks, smem, s);
    default: return false;
  }
}

bool launch_attn_split(const dk::AttnBatch& b, Stream s) {
  int64_t lb, vb, L;
  if (!split_blocks(b, lb, vb, L) || value_smem(L) + kValueStatic > kSmemLimit) return false;
  if (lb > 0) launch_kernel(&attn_logits_kernel, unsigned(lb), kThreads, 0, s, b);
  return launch_attn_split_values(b, s);
}

}  // namespace dsv41::fast
