// Kernel-level decode-step benchmark of the CUDA backend at the real V4.1-Flash attention
// geometry and its 40-layer sharing plan (model.md §1.2, §3.4):
//   attention  every layer: 64 heads × 512, window 128 (FP8 528 B rows, one ring per layer),
//              + top-k 512 NVFP4 main rows (288 B) of the latest kv source in layers 2..39;
//   indexer    32 heads × 128 on MXFP4 keys (68 B), top-k 512, in the index sources:
//              2, 8, 14 (Full, ratio 2: C/2 entries), 20 (Full, ratio 1: C entries),
//              24, 28, 32, 36 (Reindex: the candidate pool, 2048 blocks × 8 = 16384 entries,
//              selected at layer 20 from its block maxima: top-2048 of C/8 blocks).
// Every sequence of the batch has its own context of C tokens (distinct memory), each decodes
// one token at position C−1. Two kernel sets (--kernels): "standalone", the fused kernels of
// cuda_kernels.h below (one step = the 48 launches above in layer order), and "engine" /
// "engine-late", the device backend's kernels as a decode step runs them (decode_step_engine.cu:
// scores, then top-k selections, then the attention; kernels placed early or launched in turn).
// Each step is captured in a CUDA graph; timed with CUDA events after warm-up, median of N
// replays. Per-kernel times are medians of single launches. Bytes per step count each record read once, against the
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

#include "backends/cuda/cuda_exec.cuh"
#include "bench/cuda/decode_step_common.cuh"
#include "bench/cuda/decode_step_engine.h"

namespace {

using namespace dsv41::step_bench;

Result run_one(int B, int64_t C, int iters, cudaStream_t s) {
  Result r{};
  r.kernels = "standalone";
  r.batch = B, r.context = C;
  const int64_t g2 = C / 2, g1 = C;  // entries of the ratio-2 and ratio-1 kv sources
  if (!records_fit(r, B, C)) return r;
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
  const int64_t blocks = (g1 + kPoolBlock - 1) / kPoolBlock;
  const std::vector<int32_t> pool = random_pools(B, blocks, kPoolBlocks);
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
    const int src = index_source(layer);
    p.q = q, p.sink = sink, p.positions = dpos, p.window_rings = dring_ptrs + size_t(layer) * B;
    p.main_rows = dmain_ptrs + size_t(src) * B, p.topk_ids = topk, p.out = out;
    return p;
  };
  auto step = [&] {
    for (int l = 0; l < kLayers; ++l) {
      const bool reindex = reindex_layer(l);
      if (full_index_layer(l) || reindex) {
        const int k = l == 2 ? 0 : l == 8 ? 1 : l == 14 ? 2 : 3;
        check(cu::indexer_topk(idx_params(k, reindex), ws, ws_bytes, s), "indexer_topk");
        if (candidate_layer(l)) select_pool();
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

  count_bytes(r, B, C);
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

std::vector<std::string> parse_names(const char* s) {
  std::vector<std::string> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == 0) {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
      if (*p == 0) break;
    } else {
      cur += *p;
    }
  }
  return v;
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

using namespace dsv41::step_bench;

int main(int argc, char** argv) {
  std::vector<int64_t> batches = {1, 64, 256}, contexts = {4096, 131072, 1048576};
  int iters = 20;
  const char* json = nullptr;
  std::vector<std::string> kernels = {"engine", "standalone"};
  int topk_hints = dsv41::CudaExec::kTopkHints ? 1 : 0;
  int index_warpgroup = dsv41::CudaExec::kIndexWarpgroup ? 1 : 0;
  int index_chain = dsv41::dk::IndexSelectChain::kMax;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batches") && i + 1 < argc) batches = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--contexts") && i + 1 < argc) contexts = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--kernels") && i + 1 < argc) kernels = parse_names(argv[++i]);
    else if (!std::strcmp(argv[i], "--index-scale-span") && i + 1 < argc) index_scale_span = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--topk-hints") && i + 1 < argc) topk_hints = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--index-warpgroup") && i + 1 < argc) index_warpgroup = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--index-chain") && i + 1 < argc) index_chain = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: dsv41_cuda_bench [--batches 1,64,256] [--contexts 4096,...] [--iters N] [--json F] "
                           "[--kernels engine,engine-late,engine-exact,standalone] [--index-scale-span 0..7] [--topk-hints 0|1] [--index-warpgroup 0|1] [--index-chain 1..64]\n"
                           "  engine: the device backend's kernels as a decode step runs them (engine-late: each kernel "
                           "launched once the one before has ended; engine-exact: every indexer score exact before the "
                           "selections, no filter and refine); standalone: the fused kernels of cuda_kernels.h\n"
                           "  --topk-hints: the engine's top-k with pools and floors (1) or without (0); default: the "
                           "backend's (CudaExec::kTopkHints)\n"
                           "  --index-warpgroup: filter and refine's fast scores on warpgroup MMAs (1) or each warp's "
                           "(0); default: the backend's (CudaExec::kIndexWarpgroup)\n"
                           "  --index-chain: sequences a filter-and-refine chain takes (default and most: the "
                           "backend's, IndexSelectChain::kMax)\n");
      return 2;
    }
  }
  if (index_chain < 1 || index_chain > dsv41::dk::IndexSelectChain::kMax) {
    std::fprintf(stderr, "dsv41_cuda_bench: --index-chain takes 1 … %d\n", dsv41::dk::IndexSelectChain::kMax);
    return 2;
  }
  if (index_scale_span < 0 || index_scale_span > 7) {
    std::fprintf(stderr, "dsv41_cuda_bench: --index-scale-span takes 0 … 7 (binades between an index record's block scales)\n");
    return 2;
  }
  for (const std::string& k : kernels)
    if (k != "engine" && k != "engine-late" && k != "engine-exact" && k != "standalone") {
      std::fprintf(stderr, "dsv41_cuda_bench: --kernels takes engine, engine-late, engine-exact and standalone (not '%s')\n",
                   k.c_str());
      return 2;
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
  std::printf("index records' block scales within %d binade(s) of each other (--index-scale-span)\n", index_scale_span);
  std::printf("engine top-k hints (pools, floors): %s (--topk-hints)\n", topk_hints ? "on" : "off");
  std::printf("engine fast scores on %s MMAs (--index-warpgroup)\n", index_warpgroup ? "warpgroup" : "warp");
  std::printf("engine filter-and-refine chains of %d sequences (--index-chain)\n", index_chain);
  std::vector<Result> results;
  const auto report = [&](const Result& r) {
    if (!r.ran) {
      std::printf("%-10s batch %4d ctx %8lld: %s\n", r.kernels, r.batch, static_cast<long long>(r.context), r.note.c_str());
    } else {
      std::printf("%-10s batch %4d ctx %8lld: step %.3f ms (%.2f GB, floor %.3f ms) | attn win %.4f sparse %.4f | "
                  "idx r2 %.4f r1 %.4f cand %.4f pool %.4f select %.4f scorer %.4f ms | index launches int %lld f64 %lld refine %lld "
                  "| scored again a row: r2 %.0f r1 %.0f\n",
                  r.kernels, r.batch, static_cast<long long>(r.context), r.step_ms, r.step_bytes / 1e9,
                  r.step_bytes / (bw * 1e9) * 1e3, r.attn_window_ms, r.attn_sparse_ms, r.idx_r2_ms, r.idx_r1_ms,
                  r.cand_ms, r.idx_pool_ms, r.select_ms, r.scorer_ms, static_cast<long long>(r.int_index_launches),
                  static_cast<long long>(r.f64_index_launches), static_cast<long long>(r.refine_launches), r.rescored_r2,
                  r.rescored_r1);
    }
    std::fflush(stdout);
  };
  for (int64_t B : batches)
    for (int64_t C : contexts) {
      for (const std::string& k : kernels) {
        results.push_back(k == "standalone" ? run_one(static_cast<int>(B), C, iters, s)
                                            : run_engine(static_cast<int>(B), C, iters, s,
                                                         {k != "engine-late", k != "engine-exact", topk_hints != 0,
                                                          index_warpgroup != 0, index_chain}));
        report(results.back());
      }
    }
  std::printf("\n| kernels | batch | context | step ms | GB read | floor ms | step/floor | attn win ms | attn sparse ms "
              "| idx r2 ms | idx r1 ms | cand ms | idx pool ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    if (!r.ran) {
      std::printf("| %s | %d | %lld | %s | | | | | | | | | |\n", r.kernels, r.batch, static_cast<long long>(r.context),
                  r.note.c_str());
      continue;
    }
    const double floor_ms = r.step_bytes / (bw * 1e9) * 1e3;
    std::printf("| %s | %d | %lld | %.3f | %.3f | %.3f | %.2f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", r.kernels,
                r.batch, static_cast<long long>(r.context), r.step_ms, r.step_bytes / 1e9, floor_ms, r.step_ms / floor_ms,
                r.attn_window_ms, r.attn_sparse_ms, r.idx_r2_ms, r.idx_r1_ms, r.cand_ms, r.idx_pool_ms);
  }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) die("open", json);
    std::fprintf(f, "{\"device\": \"%s\", \"copy_bandwidth_gbs\": %.1f, \"engine_topk_hints\": %s, "
                    "\"engine_index_warpgroup\": %s, \"engine_index_chain\": %d, \"results\": [\n",
                 dev.ok() ? dev->c_str() : "?", bw, topk_hints ? "true" : "false", index_warpgroup ? "true" : "false",
                 index_chain);
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "  {\"kernels\": \"%s\", \"batch\": %d, \"context\": %lld, \"ran\": %s, \"note\": \"%s\", "
                   "\"step_ms\": %.5f, \"step_bytes\": %.0f, \"attn_bytes\": %.0f, \"indexer_bytes\": %.0f, "
                   "\"attn_window_ms\": %.5f, \"attn_sparse_ms\": %.5f, \"idx_ratio2_ms\": %.5f, \"idx_ratio1_ms\": %.5f, "
                   "\"candidate_ms\": %.5f, \"idx_pool_ms\": %.5f, \"select_ms\": %.5f, \"scorer_ms\": %.5f, \"int_index_launches\": %lld, "
                   "\"f64_index_launches\": %lld, \"refine_launches\": %lld, \"rescored_r2\": %.1f, \"rescored_r1\": %.1f}%s\n",
                   r.kernels, r.batch, static_cast<long long>(r.context), r.ran ? "true" : "false", r.note.c_str(),
                   r.step_ms, r.step_bytes, r.attn_bytes, r.idx_bytes, r.attn_window_ms, r.attn_sparse_ms, r.idx_r2_ms,
                   r.idx_r1_ms, r.cand_ms, r.idx_pool_ms, r.select_ms, r.scorer_ms,
                   static_cast<long long>(r.int_index_launches), static_cast<long long>(r.f64_index_launches), static_cast<long long>(r.refine_launches),
                   r.rescored_r2, r.rescored_r1, i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  cudaStreamDestroy(s);
  return 0;
}
