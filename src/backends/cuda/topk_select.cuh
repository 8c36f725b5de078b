// Block-wide top-k selection with dsv41's tie rule (model/indexer.h): larger value first, equal
// values → lower position first; output ascending by position; −inf (and padding) never picked.
//
// Values are fp32 scores mapped to order-preserving 32-bit keys (ordered_key). A radix select
// finds the k-th largest key in four 8-bit passes over the list (histograms in shared memory),
// then one ordered compaction pass writes the keys above the threshold plus the first
// (k − above) keys equal to it, in list order. Lists are ascending by entry id, so the output is
// too. Used twice per indexer call: inside each chunk (list in shared memory) and to merge the
// chunks' candidates (list in global memory, L2-resident); generic pointers serve both.
#pragma once

#include <cstdint>
#include <type_traits>

namespace dsv41::cuda {

// Keys ≤ kIneligibleKey are never selected: −inf maps to it, padding uses 0.
constexpr uint32_t kIneligibleKey = 0x007FFFFFu;

// Keys per thread per step of the selection loops (see block_select_topk).
constexpr int kVec = 4;

// Monotone map float → uint32 (−0 and +0 map to the same key, as they compare equal).
__device__ __forceinline__ uint32_t ordered_key(float v) {
  uint32_t u = __float_as_uint(v);
  u = u == 0x80000000u ? 0u : u;
  // Negative: all bits flipped; otherwise the sign bit set (no branch).
  return u ^ (static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u);
}

__device__ __forceinline__ float key_to_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

template <int kThreads>
struct SelectShared {
  uint32_t hist[256];
  uint32_t warp_tot[2][kThreads / 32];
  uint32_t threshold;
  int remaining;  // how many to take at or below the current prefix
  int eligible;
};

// Packed (gt count << 16 | eq count) exclusive scan over the block; returns this thread's prefix
// and writes the block total to *total. Two barriers; `buf` alternates between calls.
template <int kThreads>
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t v, SelectShared<kThreads>& sm, int buf,
                                                         uint32_t* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t inc = v;
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t x = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += x;
  }
  if (lane == 31) sm.warp_tot[buf][warp] = inc;
  __syncthreads();
  uint32_t before = 0, all = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    const uint32_t x = sm.warp_tot[buf][w];
    before += w < warp ? x : 0;
    all += x;
  }
  *total = all;
  return before + inc - v;
}

// Moves the eligible keys of keys[0, n) (above kIneligibleKey and at or above `floor`) to
// keys[0, m) in list order, their ids to ids[0, m) (ids[i] when have_ids, else base + i), and
// returns m. n ≤ kThreads·kRounds. Warp w owns positions [w·32·kRounds, (w+1)·32·kRounds), read
// lane-interleaved (no bank conflicts) into registers before a barrier, so writing in place is
// safe. All threads of the block must call it.
template <int kThreads, int kRounds>
__device__ int block_compact_eligible(uint32_t* keys, int32_t* ids, bool have_ids, int32_t base, int n,
                                      uint32_t floor, SelectShared<kThreads>& sm) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const uint32_t lo = floor > kIneligibleKey ? floor : kIneligibleKey + 1;
  const int w0 = warp * 32 * kRounds;
  uint32_t kv[kRounds];
  int32_t iv[kRounds];
  unsigned cnt = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const int i = w0 + r * 32 + lane;
    kv[r] = i < n ? keys[i] : 0u;
    iv[r] = have_ids && i < n ? ids[i] : base + i;
    cnt += __popc(__ballot_sync(0xffffffffu, kv[r] >= lo));
  }
  if (lane == 0) sm.warp_tot[0][warp] = cnt;
  __syncthreads();
  int at = 0, total = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    const int c = static_cast<int>(sm.warp_tot[0][w]);
    at += w < warp ? c : 0;
    total += c;
  }
  const unsigned below = (1u << lane) - 1u;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const bool in = kv[r] >= lo;
    const unsigned bal = __ballot_sync(0xffffffffu, in);
    if (in) {
      const int j = at + __popc(bal & below);
      keys[j] = kv[r];
      ids[j] = iv[r];
    }
    at += __popc(bal);
  }
  __syncthreads();
  return total;
}

// Keys kv[0, kVec) of positions i4 … i4 + kVec − 1 of `keys` (0 past n): one 16-byte load where a
// key array allows it (no 4-way bank conflict in shared memory), else a key at a time (a key source
// that maps values as it reads them, such as fast_topk.cu's FloatKeys).
template <class Keys>
__device__ __forceinline__ void load_keys4(const Keys& keys, int i4, int n, uint32_t* kv) {
  if constexpr (std::is_pointer_v<Keys>) {
    if ((reinterpret_cast<uintptr_t>(keys) & 15) == 0 && i4 + kVec <= n) {
      const uint4 v = *reinterpret_cast<const uint4*>(keys + i4);
      kv[0] = v.x, kv[1] = v.y, kv[2] = v.z, kv[3] = v.w;
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) kv[j] = i4 + j < n ? keys[i4 + j] : 0u;
}

// Selects from keys[0, n) (ids[i], or base + i when ids is null) the top min(k, eligible) and
// writes them to out_keys/out_ids[0, k) in list order, padding with key 0 / id −1. Keys below
// `floor` count as ineligible (a caller's proven lower bound on the k-th key it finally keeps;
// 0 = none). Returns the k-th largest eligible key when at least k were eligible and more than
// k passed the floor (a valid floor for later selections over a superset), else 0. All threads
// of the block must call it (it contains barriers). Keys: a key array (shared or global memory),
// or any source whose [i] gives key i.
template <int kThreads, class Keys = const uint32_t*>
__device__ uint32_t block_select_topk(const Keys keys, const int32_t* ids, int64_t base, int n, int k,
                                      uint32_t* out_keys, int32_t* out_ids, SelectShared<kThreads>& sm,
                                      uint32_t floor = 0) {
  const int tid = threadIdx.x, lane = tid % 32;
  uint32_t prefix = 0, mask = 0;
  bool take_all = false;  // at most k keys pass the floor: no threshold search needed
  if (tid == 0) sm.threshold = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kThreads) sm.hist[i] = 0;
    __syncthreads();
    // kVec keys per thread per step, all loaded before any is counted: the list may be in
    // global memory (the merge), and a load placed after a shared atomic could not be hoisted
    // above it, so one key per step waited a full L2 round trip. The loop bound is uniform, so
    // every lane takes part in the match.
    for (int i0 = 0; i0 < n; i0 += kThreads * kVec) {
      uint32_t kv[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const int i = i0 + j * kThreads + tid;
        kv[j] = i < n ? keys[i] : 0u;
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const uint32_t key = kv[j];
        const bool in = key > kIneligibleKey && key >= floor && (key & mask) == prefix;
        // Below a good floor most keys are out: few lanes count, and the (slow) match is only
        // worth it when many lanes would hit the same bins.
        const unsigned live = __ballot_sync(0xffffffffu, in);
        if (live == 0) continue;
        const uint32_t digit = in ? (key >> shift) & 0xFF : 256u;
        if (__popc(live) <= 4) {
          if (in) atomicAdd(&sm.hist[digit], 1u);
          continue;
        }
        // Warp-aggregated increments: scores share their top bytes, so plain atomics would
        // serialise on a few bins.
        const unsigned peers = __match_any_sync(0xffffffffu, digit);
        if (in && lane == __ffs(peers) - 1) atomicAdd(&sm.hist[digit], static_cast<uint32_t>(__popc(peers)));
      }
    }
    __syncthreads();
    if (tid < 32) {
      uint32_t own = 0;
      for (int b = 0; b < 8; ++b) own += sm.hist[lane * 8 + b];
      uint32_t suffix = own;  // Σ over lanes ≥ this one
      for (int off = 1; off < 32; off <<= 1) {
        const uint32_t x = __shfl_down_sync(0xffffffffu, suffix, off);
        if (lane + off < 32) suffix += x;
      }
      if (shift == 24) {
        const uint32_t all = __shfl_sync(0xffffffffu, suffix, 0);
        if (lane == 0) {
          sm.eligible = static_cast<int>(all);
          sm.remaining = static_cast<int>(all) < k ? static_cast<int>(all) : k;
        }
      }
      __syncwarp();
      const int want = sm.remaining;
      const unsigned ok = __ballot_sync(0xffffffffu, want > 0 && suffix >= static_cast<uint32_t>(want));
      if (want > 0 && ok) {
        const int L = 31 - __clz(ok);
        if (lane == L) {
          uint32_t above = suffix - own;
          int digit = L * 8 + 7;
          for (; digit > L * 8; --digit) {
            if (above + sm.hist[digit] >= static_cast<uint32_t>(want)) break;
            above += sm.hist[digit];
          }
          sm.threshold |= static_cast<uint32_t>(digit) << shift;
          sm.remaining = want - static_cast<int>(above);
        }
      }
    }
    __syncthreads();
    if (shift == 24 && sm.eligible <= k) {  // block-uniform (read after the barrier)
      take_all = true;
      break;
    }
    mask |= 0xFFu << shift;
    prefix = sm.threshold & mask;
  }
  const bool none = sm.eligible == 0 || k == 0;
  // take_all: every key ≥ max(floor, smallest eligible key) goes, i.e. all eligible ones.
  const uint32_t thr = take_all ? (floor > kIneligibleKey ? floor : kIneligibleKey + 1) : sm.threshold;
  // Keys equal to thr to take, lowest positions first.
  const int need_eq = none ? 0 : (take_all ? n : sm.remaining);
  const uint32_t kth = !none && !take_all ? thr : 0u;
  __syncthreads();

  // Ordered compaction in rounds of kThreads·kVec consecutive positions, thread tid holding
  // positions tid·kVec .. tid·kVec + kVec − 1 of the round (a quarter of the rounds, barriers
  // and scans of one position per thread; counts per round ≤ 4096 fit the packed 16-bit halves).
  int gt_run = 0, eq_run = 0, buf = 0;
  static_assert(kVec == 4, "load_keys4");
  for (int r0 = 0; r0 < n; r0 += kThreads * kVec) {
    uint32_t kv[kVec];
    uint32_t cnt = 0;
    const int i4 = r0 + tid * kVec;
    load_keys4(keys, i4, n, kv);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = i4 + j;
      const bool gt = !none && i < n && kv[j] > thr;
      const bool eq = !none && i < n && kv[j] == thr;
      cnt += (gt ? 0x10000u : 0u) | (eq ? 1u : 0u);
    }
    uint32_t total;
    const uint32_t before = block_exclusive_scan<kThreads>(cnt, sm, buf, &total);
    int gt_before = gt_run + static_cast<int>(before >> 16), eq_before = eq_run + static_cast<int>(before & 0xFFFF);
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const int i = r0 + tid * kVec + j;
      const bool gt = !none && i < n && kv[j] > thr;
      const bool eq = !none && i < n && kv[j] == thr;
      if (gt || (eq && eq_before < need_eq)) {
        const int pos = gt_before + (eq_before < need_eq ? eq_before : need_eq);
        out_keys[pos] = kv[j];
        out_ids[pos] = ids ? ids[i] : static_cast<int32_t>(base + i);
      }
      gt_before += gt ? 1 : 0;
      eq_before += eq ? 1 : 0;
    }
    gt_run += static_cast<int>(total >> 16);
    eq_run += static_cast<int>(total & 0xFFFF);
    buf ^= 1;
  }
  const int taken = gt_run + (eq_run < need_eq ? eq_run : need_eq);
  for (int i = taken + tid; i < k; i += kThreads) {
    out_keys[i] = 0;
    out_ids[i] = -1;
  }
  __syncthreads();
  return kth;
}

}  // namespace dsv41::cuda
