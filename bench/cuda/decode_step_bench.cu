// Kernel-level decode-step benchmark of the CUDA backend at the real V4.1-Flash attention
// geometry and its 40-layer sharing plan (model.md §1.2, §3.4):
//   attention  every layer: 64 heads × 512, window 128 (FP8 528 B rows, one ring per layer),
//              + top-k 512 NVFP4 main rows (288 B) of the latest kv source in layers 2..39;
//   indexer    32 heads × 128 on MXFP4 keys (68 B), top-k 512, in the index sources:
//              2, 8, 14 (Full, ratio 2: C/2 entries), 20 (Full, ratio 1: C entries),
//              24, 28, 32, 36 (Reindex: the candidate pool, 2048 blocks × 8 = 16384 entries,
//              selected at layer 20 from its block maxima: top-2048 of C/8 blocks).
// Every sequence of the batch has its own context of C tokens (distinct memory), each decodes
// one token at position C−1. One step = the 48 launches above in layer order, captured in a
// CUDA graph; timed with CUDA events after warm-up, median of N replays. Per-kernel times are
// medians of single launches. Bytes per step count each record read once, against the
// device-to-device copy bandwidth measured in the same run (bytes read + written).
// Not in the step: the compressor, projections, inverse RoPE.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"

namespace {

using dsv41::Status;
namespace cu = dsv41::cuda;

constexpr int kLayers = 40, kHeads = 64, kDim = 512, kWindow = 128, kTopk = 512;
constexpr int kIdxHeads = 32, kIdxDim = 128, kPoolBlocks = 2048, kPoolBlock = 8;
constexpr int kWinBytes = 528, kMainBytes = 288, kIdxBytes = 68;

void die(const char* what, const std::string& msg) {
  std::fprintf(stderr, "dsv41_cuda_bench: %s: %s\n", what, msg.c_str());
  std::exit(1);
}
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}
void check(const Status& s, const char* what) {
  if (!s.ok()) die(what, s.to_string());
}

// Random but valid records: codes anywhere except NaN codes, scales in a narrow normal range,
// so the arithmetic is that of real data (never zeros, never NaN).
__global__ void fill_records(uint8_t* base, int64_t rows, int row_bytes, int code_bytes, int kind, uint64_t seed) {
  const int64_t total = rows * row_bytes;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t x = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    const int off = static_cast<int>(i % row_bytes);
    uint8_t b = static_cast<uint8_t>(x);
    if (off >= code_bytes) {
      b = kind == 1 ? static_cast<uint8_t>(0x30 + (b & 0x0F))   // E4M3 scale ≈ 0.5..1
                    : static_cast<uint8_t>(120 + (b & 0x07));   // UE8M0 2^-7..2^0
    } else if (kind == 0 && (b & 0x7F) == 0x7F) {
      b ^= 1;  // E4M3 NaN code → 448
    }
    base[i] = b;
  }
}

__global__ void fill_floats(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t x = (static_cast<uint64_t>(i) + seed) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    p[i] = (static_cast<float>(x & 0xFFFFFF) / 16777216.0f - 0.5f) * scale;
  }
}

void fill(uint8_t* p, int64_t rows, int row_bytes, int code_bytes, int kind, uint64_t seed) {
  fill_records<<<4096, 256>>>(p, rows, row_bytes, code_bytes, kind, seed);
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

double median(std::vector<double> v) {
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
double copy_bandwidth(cudaStream_t s) {
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
  int batch;
  int64_t context;
  bool ran;
  std::string note;
  double step_ms, attn_window_ms, attn_sparse_ms, idx_r2_ms, idx_r1_ms, idx_pool_ms, cand_ms;
  double step_bytes, attn_bytes, idx_bytes;
};

Result run_one(int B, int64_t C, int iters, cudaStream_t s) {
  Result r{};
  r.batch = B, r.context = C;
  const int64_t g2 = C / 2, g1 = C;  // entries of the ratio-2 and ratio-1 kv sources
  const double need = static_cast<double>(B) *
                      (kLayers * kWindow * kWinBytes + 3.0 * g2 * (kMainBytes + kIdxBytes) + g1 * (kMainBytes + kIdxBytes));
  size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  if (need + 6e9 > static_cast<double>(free_b)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "skipped: needs %.1f GB of records, %.1f GB free", need / 1e9, free_b / 1e9);
    r.note = buf;
    return r;
  }
  // ---- cache records (distinct per sequence) -----------------------------------------------
  uint8_t* rings = dalloc<uint8_t>(size_t(kLayers) * B * kWindow * kWinBytes, "rings");
  fill(rings, int64_t{kLayers} * B * kWindow, kWinBytes, kDim, 0, 11);
  uint8_t *mains[4], *idx[4];
  for (int k = 0; k < 4; ++k) {
    const int64_t G = k < 3 ? g2 : g1;
    mains[k] = dalloc<uint8_t>(size_t(B) * G * kMainBytes, "main rows");
    idx[k] = dalloc<uint8_t>(size_t(B) * G * kIdxBytes, "index rows");
    fill(mains[k], int64_t{B} * G, kMainBytes, kDim / 2, 1, 100 + k);
    fill(idx[k], int64_t{B} * G, kIdxBytes, kIdxDim / 2, 2, 200 + k);
  }
  // ---- per-token inputs ----------------------------------------------------------------------
  float* q = dalloc<float>(size_t(B) * kHeads * kDim, "q");
  fill_floats<<<1024, 256>>>(q, int64_t{B} * kHeads * kDim, 5, 4.0f);
  float* sink = dalloc<float>(kHeads, "sink");
  fill_floats<<<1, 64>>>(sink, kHeads, 6, 2.0f);
  uint8_t* iq = dalloc<uint8_t>(size_t(B) * kIdxHeads * kIdxBytes, "index q");
  fill(iq, int64_t{B} * kIdxHeads, kIdxBytes, kIdxDim / 2, 2, 7);
  float* iw = dalloc<float>(size_t(B) * kIdxHeads, "index weights");
  fill_floats<<<64, 256>>>(iw, int64_t{B} * kIdxHeads, 8, 0.5f);
  check(cudaGetLastError(), "fill_floats");
  std::vector<int64_t> pos(B, C - 1);
  int64_t* dpos = upload(pos, "positions");
  std::vector<int64_t> ent2(B, g2), ent1(B, g1);
  int64_t* dent2 = upload(ent2, "entries");
  int64_t* dent1 = upload(ent1, "entries");
  std::vector<const uint8_t*> ring_ptrs(size_t(kLayers) * B), main_ptrs(4 * size_t(B)), idx_ptrs(4 * size_t(B));
  for (int l = 0; l < kLayers; ++l)
    for (int b = 0; b < B; ++b) ring_ptrs[l * B + b] = rings + (size_t(l) * B + b) * kWindow * kWinBytes;
  for (int k = 0; k < 4; ++k)
    for (int b = 0; b < B; ++b) {
      const int64_t G = k < 3 ? g2 : g1;
      main_ptrs[k * B + b] = mains[k] + size_t(b) * G * kMainBytes;
      idx_ptrs[k * B + b] = idx[k] + size_t(b) * G * kIdxBytes;
    }
  const uint8_t** dring_ptrs = upload(ring_ptrs, "ring ptrs");
  const uint8_t** dmain_ptrs = upload(main_ptrs, "main ptrs");
  const uint8_t** didx_ptrs = upload(idx_ptrs, "idx ptrs");
  // Candidate pools of the Reindex layers: filled by layer 20's selection in every step; start
  // from 2048 random blocks so the per-kernel timings below have a pool of the right shape.
  std::mt19937 rng(42);
  const int64_t blocks = (g1 + kPoolBlock - 1) / kPoolBlock;
  std::vector<int32_t> pool(size_t(B) * kPoolBlocks, -1);
  for (int b = 0; b < B; ++b) {
    std::vector<int32_t> pick;
    if (blocks <= kPoolBlocks) {
      for (int64_t i = 0; i < blocks; ++i) pick.push_back(static_cast<int32_t>(i));
    } else {
      std::uniform_int_distribution<int64_t> any(0, blocks - 1);
      std::vector<char> used(blocks, 0);
      while (static_cast<int>(pick.size()) < kPoolBlocks) {
        const int64_t x = any(rng);
        if (!used[x]) used[x] = 1, pick.push_back(static_cast<int32_t>(x));
      }
      std::sort(pick.begin(), pick.end());
    }
    std::copy(pick.begin(), pick.end(), pool.begin() + size_t(b) * kPoolBlocks);
  }
  int32_t* dpool = upload(pool, "pool");
  int32_t* topk = dalloc<int32_t>(size_t(B) * kTopk, "topk");
  check(cudaMemset(topk, 0xFF, size_t(B) * kTopk * 4), "memset topk");
  float* out = dalloc<float>(size_t(B) * kHeads * kDim, "out");

  // Layer 20 also writes block maxima; the pool is their top 2048 (topk_rows).
  const int64_t nblocks = (g1 + kPoolBlock - 1) / kPoolBlock;
  float* block_max = dalloc<float>(size_t(B) * nblocks, "block maxima");
  const size_t ws2_bytes = cu::topk_rows_workspace_bytes(B, nblocks, kPoolBlocks);
  void* ws2 = dalloc<uint8_t>(ws2_bytes, "candidate workspace");
  auto select_pool = [&] {
    check(cu::topk_rows(block_max, B, nblocks, kPoolBlocks, dpool, ws2, ws2_bytes, s), "candidate blocks");
  };
  auto idx_params = [&](int k, bool pooled) {
    cu::IndexerParams p;
    p.tokens = B, p.heads = kIdxHeads, p.head_dim = kIdxDim, p.k = kTopk, p.ratio = k < 3 ? 2 : 1;
    p.q = iq, p.head_weights = iw, p.positions = dpos, p.entries = k < 3 ? dent2 : dent1;
    p.keys = didx_ptrs + size_t(k) * B, p.max_entries = k < 3 ? g2 : g1, p.topk = topk;
    if (pooled) p.pool_blocks = dpool, p.pool_size = kPoolBlocks, p.pool_block_size = kPoolBlock;
    if (k == 3 && !pooled) p.block_max = block_max, p.candidate_block = kPoolBlock;
    return p;
  };
  size_t ws_bytes = 0;
  for (int k = 0; k < 4; ++k) ws_bytes = std::max(ws_bytes, cu::indexer_workspace_bytes(idx_params(k, false)));
  ws_bytes = std::max(ws_bytes, cu::indexer_workspace_bytes(idx_params(3, true)));
  void* ws = dalloc<uint8_t>(ws_bytes, "workspace");
  auto attn_params = [&](int layer) {
    cu::SparseAttentionParams p;
    p.tokens = B, p.heads = kHeads, p.head_dim = kDim, p.window = kWindow;
    p.topk = layer >= 2 ? kTopk : 0;
    const int src = layer < 8 ? 0 : layer < 14 ? 1 : layer < 20 ? 2 : 3;
    p.q = q, p.sink = sink, p.positions = dpos, p.window_rings = dring_ptrs + size_t(layer) * B;
    p.main_rows = dmain_ptrs + size_t(src) * B, p.topk_ids = topk, p.out = out;
    return p;
  };
  auto step = [&] {
    for (int l = 0; l < kLayers; ++l) {
      const bool full = l == 2 || l == 8 || l == 14 || l == 20;
      const bool reindex = l == 24 || l == 28 || l == 32 || l == 36;
      if (full || reindex) {
        const int k = l == 2 ? 0 : l == 8 ? 1 : l == 14 ? 2 : 3;
        check(cu::indexer_topk(idx_params(k, reindex), ws, ws_bytes, s), "indexer_topk");
        if (l == 20) select_pool();
      }
      check(cu::sparse_attention_decode(attn_params(l), s), "sparse_attention_decode");
    }
  };
  check(cudaDeviceSynchronize(), "fill");
  step();  // first run outside capture: sets kernel attributes, checks every launch
  check(cudaStreamSynchronize(s), "first step");

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture");
  step();
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  r.step_ms = time_ms(s, 3, iters, [&] { check(cudaGraphLaunch(exec, s), "graph launch"); });
  r.attn_window_ms = time_ms(s, 2, iters, [&] { check(cu::sparse_attention_decode(attn_params(0), s), "attn"); });
  r.attn_sparse_ms = time_ms(s, 2, iters, [&] { check(cu::sparse_attention_decode(attn_params(21), s), "attn"); });
  r.idx_r2_ms = time_ms(s, 2, iters, [&] { check(cu::indexer_topk(idx_params(0, false), ws, ws_bytes, s), "idx"); });
  r.idx_r1_ms = time_ms(s, 2, iters, [&] { check(cu::indexer_topk(idx_params(3, false), ws, ws_bytes, s), "idx"); });
  r.cand_ms = time_ms(s, 2, iters, select_pool);
  r.idx_pool_ms = time_ms(s, 2, iters, [&] { check(cu::indexer_topk(idx_params(3, true), ws, ws_bytes, s), "idx"); });
  check(cudaDeviceSynchronize(), "timing");

  // Bytes each step must read at least once: window rows (128 per layer, or fewer at short
  // contexts), the selected main rows, q, and every index row the indexers score.
  const double nwin = static_cast<double>(std::min<int64_t>(C, kWindow));
  const double sel = static_cast<double>(std::min<int64_t>(kTopk, g2));
  const double pool_entries = static_cast<double>(std::min<int64_t>(int64_t{kPoolBlocks} * kPoolBlock, g1));
  r.attn_bytes = B * (kLayers * (nwin * kWinBytes + kHeads * kDim * 4.0 * 2) + (kLayers - 2) * sel * kMainBytes);
  r.idx_bytes = B * kIdxBytes * (3.0 * g2 + g1 + 4 * pool_entries);
  r.step_bytes = r.attn_bytes + r.idx_bytes;
  r.ran = true;

  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (void* p : std::initializer_list<void*>{rings, q, sink, iq, iw, dpos, dent2, dent1, dring_ptrs, dmain_ptrs,
                                               didx_ptrs, dpool, topk, out, ws, block_max, ws2})
    cudaFree(p);
  for (int k = 0; k < 4; ++k) cudaFree(mains[k]), cudaFree(idx[k]);
  check(cudaDeviceSynchronize(), "free");
  return r;
}

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {1, 64, 256}, contexts = {4096, 131072, 1048576};
  int iters = 20;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batches") && i + 1 < argc) batches = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--contexts") && i + 1 < argc) contexts = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: dsv41_cuda_bench [--batches 1,64,256] [--contexts 4096,...] [--iters N] [--json F]\n");
      return 2;
    }
  }
  const auto n = cu::device_count();
  if (!n.ok() || *n == 0) {
    std::fprintf(stderr, "dsv41_cuda_bench: no CUDA device (%s)\n", n.ok() ? "0 devices" : n.status().to_string().c_str());
    return 1;
  }
  const auto dev = cu::device_summary(0);
  std::printf("device: %s\n", dev.ok() ? dev->c_str() : "?");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  const double bw = copy_bandwidth(s);
  std::printf("device copy bandwidth (read + write): %.0f GB/s\n", bw);
  std::vector<Result> results;
  for (int64_t B : batches)
    for (int64_t C : contexts) {
      results.push_back(run_one(static_cast<int>(B), C, iters, s));
      const Result& r = results.back();
      if (!r.ran) {
        std::printf("batch %4d ctx %8lld: %s\n", r.batch, static_cast<long long>(r.context), r.note.c_str());
      } else {
        std::printf("batch %4d ctx %8lld: step %.3f ms (%.2f GB, floor %.3f ms) | attn win %.4f sparse %.4f | "
                    "idx r2 %.4f r1 %.4f cand %.4f pool %.4f ms\n",
                    r.batch, static_cast<long long>(r.context), r.step_ms, r.step_bytes / 1e9,
                    r.step_bytes / (bw * 1e9) * 1e3, r.attn_window_ms, r.attn_sparse_ms, r.idx_r2_ms, r.idx_r1_ms,
                    r.cand_ms, r.idx_pool_ms);
      }
      std::fflush(stdout);
    }
  std::printf("\n| batch | context | step ms | GB read | floor ms | step/floor | attn win ms | attn sparse ms | idx r2 ms "
              "| idx r1 ms | cand ms | idx pool ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    if (!r.ran) {
      std::printf("| %d | %lld | %s | | | | | | | | | |\n", r.batch, static_cast<long long>(r.context), r.note.c_str());
      continue;
    }
    const double floor_ms = r.step_bytes / (bw * 1e9) * 1e3;
    std::printf("| %d | %lld | %.3f | %.3f | %.3f | %.2f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", r.batch,
                static_cast<long long>(r.context), r.step_ms, r.step_bytes / 1e9, floor_ms, r.step_ms / floor_ms,
                r.attn_window_ms, r.attn_sparse_ms, r.idx_r2_ms, r.idx_r1_ms, r.cand_ms, r.idx_pool_ms);
  }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) die("open", json);
    std::fprintf(f, "{\"device\": \"%s\", \"copy_bandwidth_gbs\": %.1f, \"results\": [\n", dev.ok() ? dev->c_str() : "?", bw);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "  {\"batch\": %d, \"context\": %lld, \"ran\": %s, \"note\": \"%s\", \"step_ms\": %.5f, "
                   "\"step_bytes\": %.0f, \"attn_bytes\": %.0f, \"indexer_bytes\": %.0f, \"attn_window_ms\": %.5f, "
                   "\"attn_sparse_ms\": %.5f, \"idx_ratio2_ms\": %.5f, \"idx_ratio1_ms\": %.5f, \"candidate_ms\": %.5f, \"idx_pool_ms\": %.5f}%s\n",
                   r.batch, static_cast<long long>(r.context), r.ran ? "true" : "false", r.note.c_str(), r.step_ms,
                   r.step_bytes, r.attn_bytes, r.idx_bytes, r.attn_window_ms, r.attn_sparse_ms, r.idx_r2_ms,
                   r.idx_r1_ms, r.cand_ms, r.idx_pool_ms, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  cudaStreamDestroy(s);
  return 0;
}
