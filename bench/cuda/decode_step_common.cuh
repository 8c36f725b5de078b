// Shared by the kernel-level decode-step benchmark's two kernel sets (decode_step_bench.cu: the
// standalone kernels of cuda_kernels.h; decode_step_engine.cu: the device backend's kernels, as
// the engine runs them): the real V4.1-Flash geometry, random valid records, timing, byte counts.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"

namespace dsv41::step_bench {

using dsv41::Status;
namespace cu = dsv41::cuda;

constexpr int kLayers = 40, kHeads = 64, kDim = 512, kWindow = 128, kTopk = 512;
constexpr int kIdxHeads = 32, kIdxDim = 128, kPoolBlocks = 2048, kPoolBlock = 8;
constexpr int kWinBytes = 528, kMainBytes = 288, kIdxBytes = 68;

inline void die(const char* what, const std::string& msg) {
  std::fprintf(stderr, "dsv41_cuda_bench: %s: %s\n", what, msg.c_str());
  std::exit(1);
}
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}
inline void check(const Status& s, const char* what) {
  if (!s.ok()) die(what, s.to_string());
}

// How far apart (in binades) an index record's four MXFP4 block scales may be: 1 by default, as a
// trained model's are (dsv41-mini's index keys after k_norm and RoPE: spans ≤ 1 for 99.8 %, ≤ 2
// for all; docs/CUDA.md "Fused index sums, tried"); 7, the uniform 2^-7 … 2^0 per block of
// sessions 15–36. The engine's integer indexer (per-block sums) does the same work at either, the
// standalone one took the same time at both (session 36, H100); a kernel whose work depends on the
// spread is to be measured at both.
// --index-scale-span N.
inline int index_scale_span = 1;

// Random but valid records: codes anywhere except NaN codes, scales in a narrow normal range,
// so the arithmetic is that of real data (never zeros, never NaN). Index records (kind 2): a
// row's scale bytes in [base, base + span], base per row in 120 … 127 − span.
static __global__ void fill_records(uint8_t* base, int64_t rows, int row_bytes, int code_bytes, int kind, uint64_t seed,
                                    int span) {
  const int64_t total = rows * row_bytes;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t x = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    const int off = static_cast<int>(i % row_bytes);
    uint8_t b = static_cast<uint8_t>(x);
    if (off >= code_bytes) {
      const uint64_t row = static_cast<uint64_t>(i / row_bytes) * 0x9E3779B97F4A7C15ull + seed;
      const int row_base = static_cast<int>((row >> 40) % static_cast<uint64_t>(8 - span));
      b = kind == 1 ? static_cast<uint8_t>(0x30 + (b & 0x0F))                      // E4M3 scale ≈ 0.5..1
                    : static_cast<uint8_t>(120 + row_base + b % (span + 1));       // UE8M0 2^-7..2^0
    } else if (kind == 0 && (b & 0x7F) == 0x7F) {
      b ^= 1;  // E4M3 NaN code → 448
    }
    base[i] = b;
  }
}

static __global__ void fill_floats(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t x = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    p[i] = (static_cast<float>(x & 0xFFFFFF) / 16777216.0f - 0.5f) * scale;
  }
}

inline void fill(uint8_t* p, int64_t rows, int row_bytes, int code_bytes, int kind, uint64_t seed) {
  fill_records<<<4096, 256>>>(p, rows, row_bytes, code_bytes, kind, seed, index_scale_span);
  check(cudaGetLastError(), "fill_records");
}

template <typename T>
T* dalloc(size_t n, const char* what) {
  void* p = nullptr;
  check(cudaMalloc(&p, std::max<size_t>(n * sizeof(T), 16)), what);
  return static_cast<T*>(p);
}

template <typename T>
T* upload(const std::vector<T>& h, const char* what) {
  T* d = dalloc<T>(h.size(), what);
  check(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  return d;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

template <typename F>
double time_ms(cudaStream_t s, int warm, int iters, F&& f) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  for (int i = 0; i < warm; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(a, s), "cudaEventRecord");
    f();
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float m = 0;
    check(cudaEventElapsedTime(&m, a, b), "cudaEventElapsedTime");
    ms.push_back(m);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(ms);
}

// Device copy bandwidth (GB/s, read + written) over a 2 GiB buffer.
inline double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = size_t{2} << 30;
  uint8_t* a = dalloc<uint8_t>(bytes, "copy src");
  uint8_t* b = dalloc<uint8_t>(bytes, "copy dst");
  fill(a, 1 << 20, 2048, 2048, 2, 1);
  const double ms = time_ms(s, 3, 20, [&] { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s), "copy"); });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

struct Result {
  const char* kernels;  // "standalone" (cuda_kernels.h) or "engine" (the device backend's)
  int batch;
  int64_t context;
  bool ran;
  std::string note;
  double step_ms, attn_window_ms, attn_sparse_ms, idx_r2_ms, idx_r1_ms, idx_pool_ms, cand_ms;
  double step_bytes, attn_bytes, idx_bytes;
  double select_ms = 0;  // engine: the top-k 512 of one ratio-1 layer's scores alone
  double scorer_ms = 0;  // engine: filter and refine's fast scores of one ratio-1 layer alone
  int64_t int_index_launches = 0, f64_index_launches = 0;  // engine, a step: which indexer kernel ran
  int64_t refine_launches = 0;                              // engine, a step: filter-and-refine chains
  double rescored_r2 = 0, rescored_r1 = 0;  // engine: entries scored again a row in a ratio-2 / ratio-1 layer
};

// Candidate pools of the Reindex layers for B sequences: the first `pool_blocks` blocks where
// there are no more, else that many distinct random blocks of the `blocks`, ascending.
inline std::vector<int32_t> random_pools(int B, int64_t blocks, int pool_blocks) {
  std::mt19937 rng(42);
  std::vector<int32_t> pool(size_t(B) * pool_blocks, -1);
  for (int b = 0; b < B; ++b) {
    std::vector<int32_t> pick;
    if (blocks <= pool_blocks) {
      for (int64_t i = 0; i < blocks; ++i) pick.push_back(static_cast<int32_t>(i));
    } else {
      std::uniform_int_distribution<int64_t> any(0, blocks - 1);
      std::vector<char> used(blocks, 0);
      while (static_cast<int>(pick.size()) < pool_blocks) {
        const int64_t x = any(rng);
        if (!used[x]) used[x] = 1, pick.push_back(static_cast<int32_t>(x));
      }
      std::sort(pick.begin(), pick.end());
    }
    std::copy(pick.begin(), pick.end(), pool.begin() + size_t(b) * pool_blocks);
  }
  return pool;
}

// The bytes a decode step must read at least once: window rows (128 per layer, or fewer at short
// contexts), the selected main rows, q and o, and every index row the indexers score.
inline void count_bytes(Result& r, int B, int64_t C) {
  const int64_t g2 = C / 2, g1 = C;
  const double nwin = static_cast<double>(std::min<int64_t>(C, kWindow));
  const double sel = static_cast<double>(std::min<int64_t>(kTopk, g2));
  const double pool_entries = static_cast<double>(std::min<int64_t>(int64_t{kPoolBlocks} * kPoolBlock, g1));
  r.attn_bytes = B * (kLayers * (nwin * kWinBytes + kHeads * kDim * 4.0 * 2) + (kLayers - 2) * sel * kMainBytes);
  r.idx_bytes = B * kIdxBytes * (3.0 * g2 + g1 + 4 * pool_entries);
  r.step_bytes = r.attn_bytes + r.idx_bytes;
}

// Whether B sequences of C tokens' records fit the device with 6 GB to spare; else a note.
inline bool records_fit(Result& r, int B, int64_t C) {
  const int64_t g2 = C / 2, g1 = C;
  const double need = static_cast<double>(B) *
                      (kLayers * kWindow * kWinBytes + 3.0 * g2 * (kMainBytes + kIdxBytes) + g1 * (kMainBytes + kIdxBytes));
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (need + 6e9 <= static_cast<double>(free_b)) return true;
  char buf[160];
  std::snprintf(buf, sizeof buf, "skipped: needs %.1f GB of records, %.1f GB free", need / 1e9, free_b / 1e9);
  r.note = buf;
  return false;
}

// The 40-layer plan of the step: which index source a layer scores (-1: none) and how.
inline bool full_index_layer(int l) { return l == 2 || l == 8 || l == 14 || l == 20; }
inline bool reindex_layer(int l) { return l == 24 || l == 28 || l == 32 || l == 36; }
inline bool candidate_layer(int l) { return l == 20; }  // writes block maxima; the Reindex pool from them
inline int index_source(int l) { return l < 8 ? 0 : l < 14 ? 1 : l < 20 ? 2 : 3; }  // also the attention's main rows


}  // namespace dsv41::step_bench
