// CudaExec: the device backend's executor on a CUDA GPU. Memory from cudaMalloc; launches and
// asynchronous uploads on the executor's own stream, blocking copies on the legacy default stream
// (the executor's stream is a blocking one, so the two stay in order: every launch and copy runs
// after the previous one); one thread per index of a launch running a kernel body of
// device_kernels.h, or the body's fast kernel (fast_kernels.h) where one exists. Graphs (set_graphs,
// on by default): between graph_begin and graph_end the launches and asynchronous uploads are
// captured into a CUDA graph (cuda_graph.cuh) that is launched when the host next needs the device
// (a blocking copy, an allocation, sync, graph_end, or every `chunk` launches); so a decode step
// runs as one graph up to its logits download, with the same kernels in the same order. Errors are sticky: the
// first failed CUDA call is kept (status()) and every later call does nothing, so a backend step
// (which returns void, engine/backend.h) fails visibly at the next status check instead of
// computing on garbage.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "backends/cuda/cuda_graph.cuh"
#include "backends/cuda/exec_counts.h"
#include "backends/cuda/fast_kernels.h"
#include "backends/cuda/mma_gemm_launch.h"
#include "base/status.h"

namespace dsv41 {

template <class F>
__global__ void dsv41_for_each_kernel(int64_t n, F f) {
  fast::await_previous_kernel();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) f(i);
}

// The profile's key of a launch: the body's mangled type name, and for the GEMM and expert bodies
// "|" plus their shape (which projection it is; cuda_backend_profile demangles the part before "|").
template <class F>
std::string profile_label(const F&) {
  return typeid(F).name();
}
inline std::string profile_label(const dk::GemmK& k) {
  const char* kind = k.w.codes ? (k.w.fp4 ? "fp4" : "fp8") : k.w.bf16 ? "bf16" : "f32";
  return std::string(typeid(dk::GemmK).name()) + "|" + std::to_string(k.in) + "->" + std::to_string(k.out) + " " + kind;
}

inline std::string profile_label(const dk::MmaGemmChain& c) {
  return std::string(typeid(dk::MmaGemmChain).name()) + "|" + profile_label(c.gemm).substr(profile_label(c.gemm).find('|') + 1);
}

class CudaExec {
 public:
  std::string name() const { return "cuda"; }
  Status status() const { return status_; }
  const ExecCounts& counts() const { return counts_; }
  // The device's free memory now (cudaMemGetInfo), 0 after an error.
  int64_t free_bytes() {
    flush_graph();
    size_t free = 0, total = 0;
    if (!status_.ok() || cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return int64_t(free);
  }
  void* alloc(int64_t bytes) {
    void* p = nullptr;
    flush_graph();
    if (!status_.ok()) return nullptr;
    check(cudaMalloc(&p, static_cast<size_t>(bytes > 0 ? bytes : 1)), "cudaMalloc");
    return status_.ok() ? p : nullptr;
  }
  void release(void* p) {
    flush_graph();
    if (p) cudaFree(p);
  }
  void upload(void* dst, const void* src, int64_t bytes) {
    flush_graph();
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.uploads;
    check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyHostToDevice), "upload");
  }
  void download(void* dst, const void* src, int64_t bytes) {
    flush_graph();
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.downloads;
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDeviceToHost), "download");
    counts_.download_wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  }
  void copy(void* dst, const void* src, int64_t bytes) {
    flush_graph();
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.copies;
    check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice), "copy");
  }
  // Pinned host memory for staging (cudaMallocHost; null after an error), and the upload from it
  // queued on the default stream without waiting: the source must stay unchanged until the
  // device has run it (the caller syncs, or downloads, before reusing it).
  void* alloc_host(int64_t bytes) {
    void* p = nullptr;
    flush_graph();
    if (!status_.ok()) return nullptr;
    check(cudaMallocHost(&p, static_cast<size_t>(bytes > 0 ? bytes : 1)), "cudaMallocHost");
    return status_.ok() ? p : nullptr;
  }
  void release_host(void* p) {
    flush_graph();
    if (p) cudaFreeHost(p);
  }
  // While capturing, the copy becomes a node of the graph that reads `src` when the graph runs (no
  // earlier than now; the caller's rule above covers it); a pageable source cannot be captured and
  // ends the capture first.
  void upload_async(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || !status_.ok()) return;
    if (graph_armed_) {
      if (pinned(src))
        open_capture();
      else
        flush_graph();
    }
    ++counts_.async_uploads;
    if (graphs_.capturing()) graphs_.note(kCopyNode);
    check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream()), "upload_async");
  }
  // Runs f for every index in [0, n): its fast kernel (fast_kernels.h) when one exists and fast
  // kernels are on, else one thread per index.
  template <class F>
  void for_each(int64_t n, const F& f) {
    if (n <= 0 || !status_.ok()) return;
    constexpr int kThreads = 256;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    ++counts_.launches;
    open_capture();
    if (profiling_) check(cudaEventRecord(events_[0], stream()), "cudaEventRecord");
    const bool fast = fast_ && launch_fast(n, f);
    if (!fast)
      fast::launch_kernel(&dsv41_for_each_kernel<F>, static_cast<unsigned>(blocks), kThreads, 0, launch_stream(), n, f);
    if (graphs_.capturing()) graphs_.note(typeid(F).hash_code() ^ (fast ? kFastNode : 0));
    check(cudaGetLastError(), "kernel launch");
    if (profiling_) add_time(profile_label(f));
    count_captured();
  }
  // A chain of dependent launches (dk::MhcCoeffChain, dk::AttnChain): one fused kernel when fast
  // kernels are on and fast_kernels.h has one for it, else its simple launches.
  template <class C>
  void run_chain(const C& c) {
    if (!status_.ok()) return;
    if (!fast_) return c.run_simple(*this);
    open_capture();
    if (profiling_) check(cudaEventRecord(events_[0], stream()), "cudaEventRecord");
    if (!launch_fast_chain(c)) return c.run_simple(*this);
    if (graphs_.capturing()) graphs_.note(typeid(C).hash_code() ^ kFastNode);
    ++counts_.launches;
    check(cudaGetLastError(), "kernel launch");
    if (profiling_) add_time(profile_label(c));
    count_captured();
  }
  // Fast kernels on (the default) or off (every body as its simple kernel: the reference the fast
  // ones are checked against, and the "before" of benchmarks).
  void set_fast_kernels(bool on) { fast_ = on; }
  bool fast_kernels() const { return fast_; }
  // How the warp expert kernels (the batched up projection, the down + expand chain) read stored
  // FP8 / FP4 units: kDefault (fast_kernels.h, a rule by width) or one decode for all (the same
  // bits; the "before" of benchmarks).
  void set_expert_decode(fast::ExpertDecode d) { expert_decode_ = d; }
  // Indexer scores on integer tensor cores where the keys are MXFP4 records (the default), or
  // (off) always the double tiles: the same bits, the "before" of benchmarks.
  void set_integer_index(bool on) { integer_index_ = on; }
  // The indexer's selections by filter and refine where a chain holds at least min_scores scores
  // (rows × entries; index_refine.cu, the same ids), or (off) every score exact first: the "before"
  // of benchmarks. Measured on an H100 (docs/CUDA.md "Filter and refine on the GPU"): the decode step
  // at batch 64 / 1M 22 % faster (16 rows × 512K–1M entries a chain), but at batch 1 / 1M and batch
  // 64 / 128K (≤ 2M scores a chain) slower — the extra launches and the second selection cost more
  // than the scores save. Tests pass 1 to refine every chain.
  void set_index_refine(bool on, int64_t min_scores = kIndexRefineMinScores) {
    index_refine_ = on;
    index_refine_min_ = min_scores;
  }
  static constexpr int64_t kIndexRefineMinScores = int64_t{1} << 22;
  // The top-k's hints (dk::TopkBatch::Job: a restricted job's pool, filter and refine's floors, a
  // sampled floor for long rows; the same ids) or (off) none: the "before" of benchmarks.
  // kTopkHints is the default: on since the GPU suite passed with it (session 44, H200; batch 64 /
  // 1M 30.9 → 27.4 ms: docs/CUDA.md "Pools and floors for the top-k").
  static constexpr bool kTopkHints = true;
  void set_topk_hints(bool on) { topk_hints_ = on; }
  // Filter and refine's fast scores on warpgroup MMAs (wgmma m64nNk32 s8, N = 32 or 64 heads: the
  // block's four warps' tiles as one MMA a 32-channel block) or (off) each warp's m16n8k32 MMAs: the
  // same bits (IndexRefineCuda.WarpgroupScoresEqualWarpScores). On since session 46: batch 64 / 1M
  // 23.86 → 23.02 ms, the scorer 3.99 → 3.62 (H100; docs/CUDA.md "Session 46").
  static constexpr bool kIndexWarpgroup = true;
  void set_index_warpgroup(bool on) { index_warpgroup_ = on; }
  // Kernels may start before the kernel they follow has ended (kernel_launch.cuh: placed early,
  // waiting at their first instruction; the same kernels in the same order, so the same bits), or
  // (off) each only once the one before has ended. On by default since session 36 (the GPU suite
  // passed with it on; decode 4–8 % faster, DSpark K = 5 1.80× against 1.68×).
  void set_early_start(bool on) { early_start_ = on; }
  // Diagnostics for benchmarks: while on, every launch is timed by events around it (and waited
  // for, so a profiled step is slower than a plain one) and the device time is summed per kernel
  // body type (mangled type name → launches, milliseconds).
  struct KernelTime {
    int64_t launches = 0;
    double ms = 0;
  };
  void set_profiling(bool on) {
    if (on && !events_[0] && status_.ok()) {
      check(cudaEventCreate(&events_[0]), "cudaEventCreate");
      check(cudaEventCreate(&events_[1]), "cudaEventCreate");
    }
    profiling_ = on && status_.ok();
  }
  const std::map<std::string, KernelTime>& profile() const { return profile_; }
  // CUDA graphs on (the default) or off (every launch on its own: the "before" of benchmarks), and
  // the launches per graph (0: as many as come before the host needs the device). The default cuts
  // a graph every kGraphChunk launches so that the device runs one graph while the host records the
  // next: a whole decode step in one graph left the device idle while the host recorded it (on an
  // H200, mini-flash batch 1: 5.04 ms a step against 3.18 launched one by one; every 32 launches:
  // 3.19; dsv41-mini 1.74 against 1.97; docs/CUDA.md "CUDA graphs for the decode step").
  static constexpr int64_t kGraphChunk = 32;
  void set_graphs(bool on, int64_t chunk = kGraphChunk) {
    graphs_on_ = on;
    graph_chunk_ = chunk > 0 ? chunk : 0;
  }
  // A step's first stretches shorter: f, 2f, 4f, … launches until the chunk (0: every stretch the
  // chunk). The device waits for the host to record a step's first stretch before it runs
  // anything; the host then stays ahead while the device runs the stretches it has.
  // On the H100 (session 39) 8 took 0.03 ms off a batch-1 dsv41-mini step (off 852 → 879 tok/s)
  // and 1.8 % off mini-flash's at 4K; the default since.
  static constexpr int64_t kGraphFirstChunk = 8;
  void set_graph_first_chunk(int64_t first) { graph_first_chunk_ = first > 0 ? first : 0; }
  bool graphs() const { return graphs_on_; }
  // The stretch the caller wants replayed as graphs (a decode step): launches from here until
  // graph_end are captured (unless graphs or the executor are off, or profiling times launches).
  // program: which kind of step (StreamGraphs::restart), each updating its own executable graphs.
  void graph_begin(int program = 0) {
    flush_graph();
    stretch_ = 0;
    graph_armed_ = graphs_on_ && !profiling_ && status_.ok();
    graphs_.restart(program);
  }
  void graph_end() {
    flush_graph();
    graph_armed_ = false;
  }
  const StreamGraphs::Stats& graph_stats() const { return graphs_.stats(); }
  // Kept graphs: the stretch record() launches, captured once as one CUDA graph kept under `key`
  // and from then on replayed as it is — nothing recorded again, no update, one graph launch — for
  // work whose every varying input the device reads from memory at run time (a DSpark draft: its
  // tables uploaded first, its buffers at the addresses hashed into the key). record() must not
  // allocate or copy blocking: that ends the capture (what was captured runs once and is not kept,
  // the rest runs launch by launch). With graphs off or while profiling, record() runs launch by
  // launch. Returns whether a kept graph was replayed.
  template <class F>
  bool run_kept(uint64_t key, const F& record) {
    if (!graphs_on_ || profiling_ || !status_.ok()) {
      record();
      return false;
    }
    flush_graph();
    const bool armed = graph_armed_;
    graph_armed_ = false;  // record() goes into the kept capture, not StreamGraphs' stretches
    const auto kept = kept_.find(key);
    if (kept != kept_.end()) {
      ++counts_.graph_launches;
      ++counts_.kept_replays;
      check(cudaGraphLaunch(kept->second, stream()), "kept graph launch");
    } else {
      check(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
      keeping_ = status_.ok();
      record();
      if (keeping_) keep(key, end_kept_capture());
    }
    graph_armed_ = armed;
    return kept != kept_.end();
  }
  ~CudaExec() {
    if (graphs_.capturing()) {
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(stream_, &g) == cudaSuccess && g) cudaGraphDestroy(g);
    }
    for (const auto& [key, exec] : kept_) cudaGraphExecDestroy(exec);
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaExec() = default;
  CudaExec(const CudaExec&) = delete;
  CudaExec& operator=(const CudaExec&) = delete;
  void sync() {
    flush_graph();
    if (status_.ok()) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  // The executor's stream, made at first use: a blocking stream (ordered with the legacy stream's
  // copies), which unlike the legacy stream can be captured.
  cudaStream_t stream() {
    if (!stream_ && status_.ok()) check(cudaStreamCreate(&stream_), "cudaStreamCreate");
    return stream_;
  }
  // The stream the kernels go to, with the early start where it is on.
  fast::Stream launch_stream() { return {stream(), early_start_}; }
  static bool pinned(const void* p) {
    cudaPointerAttributes a{};
    const bool ok = cudaPointerGetAttributes(&a, p) == cudaSuccess;
    if (!ok) cudaGetLastError();
    return ok && a.type == cudaMemoryTypeHost;
  }
  template <class F>
  bool launch_fast(int64_t n, const F& f) {
    if constexpr (std::is_same_v<F, dk::Batched<dk::ExpertUpK>>)
      return fast::launch_experts_up(f, expert_decode_, launch_stream());
    else if constexpr (std::is_same_v<F, dk::Batched<dk::IndexScoreK>>)
      return launch_index(f);
    else if constexpr (std::is_same_v<F, dk::IndexScoreK>)
      return launch_index(dk::Batched<dk::IndexScoreK>::one(n, f));
    else
      return fast::launch(n, f, launch_stream());
  }
  // The indexer's scores: on integer tensor cores where that is on and the kernel takes every body
  // (counted: tests and benchmarks see which kernel ran), else on the double tiles.
  bool launch_index(const dk::Batched<dk::IndexScoreK>& b) {
    if (integer_index_ && fast::launch_index_int(b, launch_stream())) {
      ++counts_.integer_index;
      return true;
    }
    return fast::launch_index_f64(b, launch_stream());
  }
  template <class C>
  bool launch_fast_chain(const C& c) {
    if constexpr (std::is_same_v<C, dk::DownExpandChain>) {
      return fast::launch_down_expand(c, expert_decode_, launch_stream());
    } else if constexpr (std::is_same_v<C, dk::IndexSelectChain>) {
      dk::IndexSelectChain chain = c;
      chain.hints = chain.hints && topk_hints_;
      chain.warpgroup = chain.warpgroup && index_warpgroup_;
      if (!index_refine_ || !fast::launch_chain(chain, launch_stream(), index_refine_min_)) return false;
      ++counts_.index_refine;
      return true;
    } else if constexpr (std::is_same_v<C, dk::TopkBatch>) {
      dk::TopkBatch unit = c;
      unit.hints = unit.hints && topk_hints_;
      return fast::launch_chain(unit, launch_stream());
    } else {
      return fast::launch_chain(c, launch_stream());
    }
  }
  void open_capture() {
    if (!graph_armed_ || graphs_.capturing() || !status_.ok()) return;
    captured_ = 0;
    stretch_limit_ = graph_chunk_;
    if (graph_first_chunk_ > 0 && graph_chunk_ > 0 && stretch_ < 16)
      stretch_limit_ = std::min(graph_chunk_, graph_first_chunk_ << stretch_);
    ++stretch_;
    check(graphs_.begin(stream()), "cudaStreamBeginCapture");
  }
  void count_captured() {
    if (graphs_.capturing() && graph_chunk_ > 0 && ++captured_ >= stretch_limit_) flush_graph();
  }
  // Ends a kept capture (run_kept) and instantiates its graph; null on failure.
  cudaGraphExec_t end_kept_capture() {
    keeping_ = false;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture");
    if (graph && status_.ok()) check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    if (graph) cudaGraphDestroy(graph);
    return status_.ok() ? exec : nullptr;
  }
  // Launches a kept capture's graph and keeps it under key (the oldest dropped beyond kKeptGraphs).
  static constexpr size_t kKeptGraphs = 32;
  void keep(uint64_t key, cudaGraphExec_t exec) {
    if (!exec) return;
    ++counts_.graph_launches;
    ++counts_.kept_captures;
    check(cudaGraphLaunch(exec, stream()), "kept graph launch");
    if (kept_order_.size() == kKeptGraphs) {
      cudaGraphExecDestroy(kept_.at(kept_order_.front()));  // a launched graph finishes all the same
      kept_.erase(kept_order_.front());
      kept_order_.erase(kept_order_.begin());
    }
    kept_[key] = exec;
    kept_order_.push_back(key);
  }
  // Ends an open capture and launches its graph (the device runs what was recorded so far). A kept
  // capture that the host needs the device in runs once and is not kept.
  void flush_graph() {
    if (keeping_) {
      if (cudaGraphExec_t exec = end_kept_capture()) {
        ++counts_.graph_launches;
        check(cudaGraphLaunch(exec, stream()), "graph launch");
        cudaGraphExecDestroy(exec);
      }
      return;
    }
    if (!graphs_.capturing()) return;
    ++counts_.graph_launches;
    check(graphs_.end_and_launch(stream()), "graph launch");
  }
  void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess && status_.ok())
      status_ = internal_error(std::string("cuda backend: ") + what + ": " + cudaGetErrorName(e) + " (" +
                               cudaGetErrorString(e) + ")");
  }
  void add_time(const std::string& name) {
    check(cudaEventRecord(events_[1], stream()), "cudaEventRecord");
    check(cudaEventSynchronize(events_[1]), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[0], events_[1]), "cudaEventElapsedTime");
    KernelTime& t = profile_[name];
    ++t.launches;
    t.ms += ms;
  }
  // StreamGraphs::note's names besides the bodies' type hashes: a copy, and a body's fast kernel.
  static constexpr uint64_t kCopyNode = 0x9e3779b97f4a7c15ULL, kFastNode = 0x5bd1e9955bd1e995ULL;
  Status status_ = ok_status();
  ExecCounts counts_;
  bool profiling_ = false;
  bool fast_ = true;
  fast::ExpertDecode expert_decode_ = fast::ExpertDecode::kDefault;
  bool integer_index_ = true;
  bool topk_hints_ = kTopkHints;
  bool index_warpgroup_ = kIndexWarpgroup;
  bool index_refine_ = true;
  int64_t index_refine_min_ = kIndexRefineMinScores;
  // See set_early_start.
  bool early_start_ = true;
  cudaEvent_t events_[2] = {nullptr, nullptr};
  cudaStream_t stream_ = nullptr;
  StreamGraphs graphs_;
  bool graphs_on_ = true;
  bool graph_armed_ = false;
  int64_t graph_chunk_ = kGraphChunk, captured_ = 0;
  int64_t graph_first_chunk_ = kGraphFirstChunk, stretch_limit_ = kGraphChunk, stretch_ = 0;  // set_graph_first_chunk
  bool keeping_ = false;  // run_kept is capturing
  std::map<uint64_t, cudaGraphExec_t> kept_;
  std::vector<uint64_t> kept_order_;  // oldest first
  std::map<std::string, KernelTime> profile_;
};

}  // namespace dsv41
