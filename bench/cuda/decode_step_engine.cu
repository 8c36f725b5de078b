// The kernel-level decode step (decode_step_bench.cu) on the kernels the device backend runs in a
// real decode step, launched as DeviceBackend::index_batch and attend_run launch them
// (device_backend_impl.h): per index layer the scores of every sequence as dk::IndexScoreK bodies
// (on integer tensor cores where fast::launch_index_int takes them, else the double tiles), the
// block maxima of the candidate source (dk::BlockMaxK), the top-k selections as dk::TopkBatch
// units (the radix selection of fast_topk.cu); per layer the sink attention of every sequence as
// one dk::AttnBatch (on bf16 tensor cores from 2 rows on, as the backend sets it); each kernel
// placed before the one it follows has ended, as CudaExec launches them (or, "engine-late", once
// it has). The standalone
// kernels of cuda_kernels.h (run_one) fuse scoring and selection; these write the scores as a
// float row per sequence and select from it, as the engine does. The layers without a pool run as
// dk::IndexSelectChain units, by filter and refine where index_refine.cu takes them under
// CudaExec's rule (chains of at least kIndexRefineMinScores scores), as the backend runs them; with
// "engine-exact", every score exact first (the integer kernel, then the selections).
// Not in the step, as in run_one: the projections, the queries' RoPE and fake quantisation, the
// compressor, inverse RoPE and the window stores.
#include "bench/cuda/decode_step_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_exec.cuh"
#include "backends/cuda/fast_kernels.h"

namespace dsv41::step_bench {
namespace {

constexpr int kThreads = 256;

// A body without a fast kernel, one thread per index (as CudaExec runs it).
template <class F>
void simple(int64_t n, const F& f, fast::Stream s) {
  if (n <= 0) return;
  fast::launch_kernel(&dsv41_for_each_kernel<F>, unsigned((n + kThreads - 1) / kThreads), kThreads, 0, s, n, f);
  check(cudaGetLastError(), "simple kernel");
}

// The device buffers of one (B, C) step.
struct Buffers {
  uint8_t* rings = nullptr;               // [layers, B, window] FP8 window records
  uint8_t *mains[4] = {}, *idx[4] = {};   // per kv source [B, G] NVFP4 main / MXFP4 index records
  float *q = nullptr, *fresh = nullptr;   // [B, H, D] queries, [B, D] each sequence's newest kv row
  float *sink = nullptr, *iq = nullptr, *ihw = nullptr;  // [H]; [B, nh·dh] MXFP4 values; [B, nh]
  float *scores = nullptr, *bmax = nullptr, *logits = nullptr, *out = nullptr, *work = nullptr;
  int32_t *topk = nullptr, *candidates = nullptr;
  uint8_t* scratch = nullptr;
  std::vector<void*> owned;
  template <typename T>
  T* take(size_t n, const char* what) {
    T* p = dalloc<T>(n, what);
    owned.push_back(p);
    return p;
  }
  ~Buffers() {
    for (void* p : owned) cudaFree(p);
  }
};

static_assert(EngineOptions{}.chain == dk::IndexSelectChain::kMax, "the bench's default chain: the backend's");

class EngineStep {
 public:
  // early: kernels placed before the kernel they follow has ended, as CudaExec launches them by
  // default (kernel_launch.cuh); false, each once the one before has ended.
  // refine: the layers without a pool as IndexSelectChain units (filter and refine where it takes
  // them); false, every score exact first.
  // hints: the top-k's pools and floors (CudaExec::set_topk_hints), or none.
  // warpgroup: the fast scores on warpgroup MMAs (CudaExec::set_index_warpgroup), or each warp's.
  EngineStep(int B, int64_t C, cudaStream_t s, const EngineOptions& o)
      : B_(B), C_(C), s_(s, o.early), refine_(o.refine), hints_(o.hints), warpgroup_(o.warpgroup),
        chain_(std::clamp(o.chain, 1, dk::IndexSelectChain::kMax)) {}

  void setup() {
    Buffers& b = buf_;
    b.rings = b.take<uint8_t>(size_t(kLayers) * B_ * kWindow * kWinBytes, "rings");
    fill(b.rings, int64_t{kLayers} * B_ * kWindow, kWinBytes, kDim, 0, 11);
    for (int k = 0; k < 4; ++k) {
      const int64_t G = entries(k);
      b.mains[k] = b.take<uint8_t>(size_t(B_) * G * kMainBytes, "main rows");
      b.idx[k] = b.take<uint8_t>(size_t(B_) * G * kIdxBytes, "index rows");
      fill(b.mains[k], int64_t{B_} * G, kMainBytes, kDim / 2, 1, 100 + k);
      fill(b.idx[k], int64_t{B_} * G, kIdxBytes, kIdxDim / 2, 2, 200 + k);
    }
    b.q = b.take<float>(size_t(B_) * kHeads * kDim, "q");
    fill_floats<<<1024, 256>>>(b.q, int64_t{B_} * kHeads * kDim, 5, 4.0f);
    b.fresh = b.take<float>(size_t(B_) * kDim, "fresh kv");
    fill_floats<<<256, 256>>>(b.fresh, int64_t{B_} * kDim, 9, 4.0f);
    b.sink = b.take<float>(kHeads, "sink");
    fill_floats<<<1, 64>>>(b.sink, kHeads, 6, 2.0f);
    // The indexer's queries as the backend leaves them: floats fake-quantised to MXFP4 per head.
    b.iq = b.take<float>(size_t(B_) * kIdxHeads * kIdxDim, "index q");
    fill_floats<<<256, 256>>>(b.iq, int64_t{B_} * kIdxHeads * kIdxDim, 7, 4.0f);
    simple(int64_t{B_} * kIdxHeads * kIdxDim / 32, dk::FakeQuantK{b.iq, RowKind::kIndex}, cudaStream_t{});
    b.ihw = b.take<float>(size_t(B_) * kIdxHeads, "index weights");
    fill_floats<<<64, 256>>>(b.ihw, int64_t{B_} * kIdxHeads, 8, 0.5f);
    check(cudaGetLastError(), "fill_floats");
    b.scores = b.take<float>(size_t(B_) * C_, "scores");
    b.bmax = b.take<float>(size_t(B_) * blocks(), "block maxima");
    b.logits = b.take<float>(size_t(B_) * kHeads * kL, "logits");
    b.out = b.take<float>(size_t(B_) * kHeads * kDim, "out");
    b.work = b.take<float>(size_t(B_) * dk::IndexSelectChain::kWorkFloats, "refine work");
    b.topk = b.take<int32_t>(size_t(B_) * kTopk, "topk");
    check(cudaMemset(b.topk, 0xFF, size_t(B_) * kTopk * 4), "memset topk");
    b.candidates = upload(random_pools(B_, blocks(), kPoolBlocks), "candidates");
    b.owned.push_back(b.candidates);
    scratch_per_seq_ = dk::TopkBatch::scratch_bytes(1, C_, kTopk) + dk::TopkBatch::scratch_bytes(1, blocks(), kPoolBlocks);
    b.scratch = b.take<uint8_t>(size_t(B_) * scratch_per_seq_, "select scratch");
    check(cudaDeviceSynchronize(), "setup");
  }

  // The index step of layer l: scores, block maxima (layer 20), selections.
  void index_layer(int l) {
    const int k = index_source(l);
    const bool restricted = reindex_layer(l), candidates = candidate_layer(l);
    if (!restricted && refine_ && chained(k, candidates)) return;
    score(k, restricted);
    if (candidates) block_maxima(k);
    select(k, candidates, true, restricted);
  }
  void score(int k, bool restricted) {
    const int64_t G = entries(k);
    const float scale = static_cast<float>(std::pow(double(kIdxDim), -0.5));
    for (int a = 0; a < B_; a += dk::Batched<dk::IndexScoreK>::kMax) {
      dk::Batched<dk::IndexScoreK> batch;
      for (int b = a; b < B_ && batch.n < dk::Batched<dk::IndexScoreK>::kMax; ++b) {
        const dk::KeyRows keys =
            dk::KeyRows::records(buf_.idx[k] + size_t(b) * G * kIdxBytes, RowKind::kIndex, kIdxDim);
        const int32_t* kept = restricted ? buf_.candidates + size_t(b) * kPoolBlocks : nullptr;
        batch.count[batch.n] = G;
        batch.body[batch.n++] = {buf_.iq + size_t(b) * kIdxHeads * kIdxDim, buf_.ihw + size_t(b) * kIdxHeads, keys, G,
                                 kIdxHeads, kIdxDim, C_ - 1, k < 3 ? 2 : 1, scale, kept, kPoolBlocks, kPoolBlock,
                                 buf_.scores + size_t(b) * G};
      }
      if (fast::launch_index_int(batch, s_)) {
        ++int_launches_;
      } else if (fast::launch_index_f64(batch, s_)) {
        ++f64_launches_;
      } else {
        die("indexer", "neither index kernel takes the step's bodies");
      }
      check(cudaGetLastError(), "index scores");
    }
  }
  // Scores and selections of kv source k as IndexSelectChain units of chain_ sequences (scores_only:
  // the fast scores alone, fast::launch_fast_scores); false (nothing launched) where filter and
  // refine declines them.
  bool chained(int k, bool candidates, bool scores_only = false) {
    const int64_t G = entries(k), nb = blocks();
    const float scale = static_cast<float>(std::pow(double(kIdxDim), -0.5));
    for (int a = 0; a < B_; a += chain_) {
      dk::IndexSelectChain chain;
      chain.k = kTopk;
      chain.hints = hints_;
      chain.warpgroup = warpgroup_;
      for (int b = a; b < B_ && chain.n < chain_; ++b) {
        uint8_t* scratch = buf_.scratch + size_t(b) * scratch_per_seq_;
        dk::IndexSelectChain::Job& j = chain.jobs[chain.n++];
        j.score = {buf_.iq + size_t(b) * kIdxHeads * kIdxDim, buf_.ihw + size_t(b) * kIdxHeads,
                   dk::KeyRows::records(buf_.idx[k] + size_t(b) * G * kIdxBytes, RowKind::kIndex, kIdxDim), G,
                   kIdxHeads, kIdxDim, C_ - 1, k < 3 ? 2 : 1, scale, nullptr, kPoolBlocks, kPoolBlock,
                   buf_.scores + size_t(b) * G};
        j.rows = 1;
        j.topk = buf_.topk + size_t(b) * kTopk;
        j.topk_scratch = scratch;
        j.work = buf_.work + size_t(b) * dk::IndexSelectChain::kWorkFloats;
        if (candidates) {
          j.blocks = nb, j.bs = kPoolBlock, j.nb = kPoolBlocks;
          j.bmax = buf_.bmax + size_t(b) * nb;
          j.candidates = buf_.candidates + size_t(b) * kPoolBlocks;
          j.cand_scratch = scratch + dk::TopkBatch::scratch_bytes(1, C_, kTopk);
        }
      }
      if (scores_only) {
        if (!fast::launch_fast_scores(chain, s_)) die("indexer", "filter and refine's scorer declined the chain");
        continue;
      }
      if (!fast::launch_chain(chain, s_, CudaExec::kIndexRefineMinScores)) {
        if (a == 0) return false;
        die("indexer", "filter and refine took some of the step's sequences but not all");
      }
      ++refine_launches_;
      check(cudaGetLastError(), "filter and refine");
    }
    return true;
  }
  // Entries scored again a row (mean over the batch) by the last chain of kv source k's layer.
  double rescored_per_row() {
    std::vector<float> w(size_t(B_) * dk::IndexSelectChain::kWorkFloats);
    check(cudaMemcpy(w.data(), buf_.work, w.size() * sizeof(float), cudaMemcpyDeviceToHost), "work");
    double total = 0;
    for (int b = 0; b < B_; ++b) {
      uint32_t n = 0;
      std::memcpy(&n, &w[size_t(b) * dk::IndexSelectChain::kWorkFloats + 3], 4);
      total += n;
    }
    return total / B_;
  }
  void block_maxima(int k) {
    const int64_t G = entries(k), nb = blocks();
    dk::Batched<dk::BlockMaxK> batch;
    for (int b = 0; b < B_; ++b) {
      batch.count[batch.n] = nb;
      batch.body[batch.n++] = {buf_.scores + size_t(b) * G, G, nb, C_ - 1, kPoolBlock, 1, buf_.bmax + size_t(b) * nb};
      if (batch.n == dk::Batched<dk::BlockMaxK>::kMax || b + 1 == B_) {
        int64_t n = 0;
        for (int j = 0; j < batch.n; ++j) n += batch.count[j];
        simple(n, batch, s_);
        batch = {};
      }
    }
  }
  // Per sequence the candidate blocks (layer 20) and the top-k of its scores, in TopkBatch units;
  // a Reindex layer's top-k reads only its pool (the backend's hint for restricted jobs).
  void select(int k, bool candidates, bool topk, bool pooled = false) {
    const int64_t G = entries(k), nb = blocks();
    std::vector<dk::TopkBatch::Job> jobs;
    for (int b = 0; b < B_; ++b) {
      uint8_t* scratch = buf_.scratch + size_t(b) * scratch_per_seq_;
      if (candidates)
        jobs.push_back({buf_.bmax + size_t(b) * nb, 1, nb, kPoolBlocks, buf_.candidates + size_t(b) * kPoolBlocks,
                        scratch + dk::TopkBatch::scratch_bytes(1, C_, kTopk)});
      if (!topk) continue;
      dk::TopkBatch::Job t{buf_.scores + size_t(b) * G, 1, G, kTopk, buf_.topk + size_t(b) * kTopk, scratch};
      if (pooled && hints_) t.kept = buf_.candidates + size_t(b) * kPoolBlocks, t.nb = kPoolBlocks, t.bs = kPoolBlock;
      jobs.push_back(t);
    }
    for (size_t a = 0; a < jobs.size(); a += dk::TopkBatch::kMax) {
      dk::TopkBatch unit;
      unit.hints = hints_;
      for (size_t j = a; j < jobs.size() && unit.n < dk::TopkBatch::kMax; ++j) unit.jobs[unit.n++] = jobs[j];
      if (!fast::launch_chain(unit, s_)) die("top-k", "the radix selection declines the step's jobs");
      check(cudaGetLastError(), "top-k");
    }
  }

  // The sink attention of layer l for every sequence (AttnBatch units of 64 jobs).
  void attend(int l) {
    const bool sparse = l >= 2;
    const int64_t start = C_ - 1, first = std::max<int64_t>(0, start - (kWindow - 1));
    for (int a = 0; a < B_; a += dk::AttnBatch::kMax) {
      dk::AttnBatch batch;
      batch.sink = buf_.sink;
      batch.scaling = static_cast<float>(std::pow(double(kDim), -0.5));
      batch.tensor = B_ >= 2;  // DeviceBackend::kTensorAttentionMinRows query rows
      for (int b = a; b < B_ && batch.n < dk::AttnBatch::kMax; ++b) {
        const int src = index_source(l);
        const dk::KeyRows main =
            sparse ? dk::KeyRows::records(buf_.mains[src] + size_t(b) * entries(src) * kMainBytes, RowKind::kMain, kDim)
                   : dk::KeyRows{};
        dk::AttnGeom g{1, kHeads, kDim, kL, start, kWindow, 0, first, kTopk, nullptr, main,
                       sparse ? buf_.topk + size_t(b) * kTopk : nullptr};
        g.ring = dk::KeyRows::records(buf_.rings + (size_t(l) * B_ + b) * kWindow * kWinBytes, RowKind::kWindow, kDim);
        g.slots = kWindow;
        g.fresh = buf_.fresh + size_t(b) * kDim;
        batch.jobs[batch.n++] = {g, buf_.q + size_t(b) * kHeads * kDim, buf_.logits + size_t(b) * kHeads * kL,
                                 buf_.out + size_t(b) * kHeads * kDim};
      }
      if (!fast::launch_chain(batch, s_)) die("attention", "no fast kernel takes the step's attention");
      check(cudaGetLastError(), "attention");
    }
  }

  void step() {
    for (int l = 0; l < kLayers; ++l) {
      if (full_index_layer(l) || reindex_layer(l)) index_layer(l);
      attend(l);
    }
  }

  int64_t int_launches_ = 0, f64_launches_ = 0, refine_launches_ = 0;

 private:
  static constexpr int64_t kL = kWindow + kTopk;  // key slots a row attends (the backend's win + k)
  int64_t entries(int k) const { return k < 3 ? C_ / 2 : C_; }
  int64_t blocks() const { return (C_ + kPoolBlock - 1) / kPoolBlock; }
  int B_;
  int64_t C_;
  fast::Stream s_;
  Buffers buf_;
  bool refine_ = true, hints_ = false, warpgroup_ = false;
  int chain_ = dk::IndexSelectChain::kMax;
  int64_t scratch_per_seq_ = 0;
};

}  // namespace

Result run_engine(int B, int64_t C, int iters, cudaStream_t s, const EngineOptions& o) {
  Result r{};
  r.kernels = !o.refine ? "engine-exact" : o.early ? "engine" : "engine-late";
  r.batch = B, r.context = C;
  if (!records_fit(r, B, C)) return r;
  EngineStep e(B, C, s, o);
  e.setup();
  e.step();  // first run outside capture: kernel attributes, every launch checked
  check(cudaStreamSynchronize(s), "first step");
  const int64_t int0 = e.int_launches_, f640 = e.f64_launches_, refine0 = e.refine_launches_;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "begin capture");
  e.step();
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  r.int_index_launches = e.int_launches_ - int0;
  r.f64_index_launches = e.f64_launches_ - f640;
  r.refine_launches = e.refine_launches_ - refine0;
  r.step_ms = time_ms(s, 3, iters, [&] { check(cudaGraphLaunch(exec, s), "graph launch"); });
  r.attn_window_ms = time_ms(s, 2, iters, [&] { e.attend(0); });
  r.attn_sparse_ms = time_ms(s, 2, iters, [&] { e.attend(21); });
  r.idx_r2_ms = time_ms(s, 2, iters, [&] { e.index_layer(2); });
  if (r.refine_launches > 0) r.rescored_r2 = e.rescored_per_row();
  r.idx_r1_ms = time_ms(s, 2, iters, [&] { e.index_layer(20); });
  if (r.refine_launches > 0) r.rescored_r1 = e.rescored_per_row();
  r.cand_ms = time_ms(s, 2, iters, [&] { e.select(3, true, false); });
  r.idx_pool_ms = time_ms(s, 2, iters, [&] { e.index_layer(24); });
  r.select_ms = time_ms(s, 2, iters, [&] { e.select(3, false, true); });
  if (r.refine_launches > 0) r.scorer_ms = time_ms(s, 2, iters, [&] { e.chained(3, false, true); });
  check(cudaDeviceSynchronize(), "timing");
  count_bytes(r, B, C);
  r.ran = true;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  check(cudaDeviceSynchronize(), "free");
  return r;
}

}  // namespace dsv41::step_bench
