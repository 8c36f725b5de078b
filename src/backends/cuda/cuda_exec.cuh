// CudaExec: the device backend's executor on a CUDA GPU. Memory from cudaMalloc, copies through
// the legacy default stream (so every launch and copy is ordered after the previous one), one
// thread per index of a launch running a kernel body of device_kernels.h, or the body's fast
// kernel (fast_kernels.h) where one exists. Errors are sticky: the
// first failed CUDA call is kept (status()) and every later call does nothing, so a backend step
// (which returns void, engine/backend.h) fails visibly at the next status check instead of
// computing on garbage.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <typeinfo>

#include "backends/cuda/cuda_graph.cuh"
#include "backends/cuda/exec_counts.h"
#include "backends/cuda/fast_kernels.h"
#include "base/status.h"

namespace dsv41 {

template <class F>
__global__ void dsv41_for_each_kernel(int64_t n, F f) {
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

class CudaExec {
 public:
  std::string name() const { return "cuda"; }
  Status status() const { return status_; }
  const ExecCounts& counts() const { return counts_; }
  void* alloc(int64_t bytes) {
    void* p = nullptr;
    if (!status_.ok()) return nullptr;
    check(cudaMalloc(&p, static_cast<size_t>(bytes > 0 ? bytes : 1)), "cudaMalloc");
    return status_.ok() ? p : nullptr;
  }
  void release(void* p) {
    if (p) cudaFree(p);
  }
  void upload(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.uploads;
    check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyHostToDevice), "upload");
  }
  void download(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.downloads;
    check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDeviceToHost), "download");
  }
  void copy(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.copies;
    check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice), "copy");
  }
  // Pinned host memory for staging (cudaMallocHost; null after an error), and the upload from it
  // queued on the default stream without waiting: the source must stay unchanged until the
  // device has run it (the caller syncs, or downloads, before reusing it).
  void* alloc_host(int64_t bytes) {
    void* p = nullptr;
    if (!status_.ok()) return nullptr;
    check(cudaMallocHost(&p, static_cast<size_t>(bytes > 0 ? bytes : 1)), "cudaMallocHost");
    return status_.ok() ? p : nullptr;
  }
  void release_host(void* p) {
    if (p) cudaFreeHost(p);
  }
  void upload_async(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || !status_.ok()) return;
    ++counts_.async_uploads;
    check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, 0), "upload_async");
  }
  // Runs f for every index in [0, n): its fast kernel (fast_kernels.h) when one exists and fast
  // kernels are on, else one thread per index.
  template <class F>
  void for_each(int64_t n, const F& f) {
    if (n <= 0 || !status_.ok()) return;
    constexpr int kThreads = 256;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    ++counts_.launches;
    if (profiling_) check(cudaEventRecord(events_[0]), "cudaEventRecord");
    if (!(fast_ && fast::launch(n, f))) dsv41_for_each_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(n, f);
    check(cudaGetLastError(), "kernel launch");
    if (profiling_) add_time(profile_label(f));
  }
  // A chain of dependent launches (dk::MhcCoeffChain, dk::AttnChain): one fused kernel when fast
  // kernels are on and fast_kernels.h has one for it, else its simple launches.
  template <class C>
  void run_chain(const C& c) {
    if (!status_.ok()) return;
    if (!fast_) return c.run_simple(*this);
    if (profiling_) check(cudaEventRecord(events_[0]), "cudaEventRecord");
    if (!fast::launch_chain(c)) return c.run_simple(*this);
    ++counts_.launches;
    check(cudaGetLastError(), "kernel launch");
    if (profiling_) add_time(typeid(C).name());
  }
  // CUDA graphs (cuda_graph.cuh): the launches between begin_capture and end_capture are recorded,
  // not run; replay runs them. Not while profiling (its per-launch waits cannot be captured).
  using Graph = CudaGraph;
  bool can_capture() const { return status_.ok() && !profiling_; }
  void begin_capture() {
    if (status_.ok()) check(CudaGraph::begin_capture(), "cudaStreamBeginCapture");
  }
  Graph end_capture() {
    Graph g;
    check(CudaGraph::end_capture(g), "cudaStreamEndCapture");
    return g;
  }
  void replay(const Graph& g) {
    if (!status_.ok()) return;
    ++counts_.graph_launches;
    check(g ? g.replay() : cudaErrorInvalidValue, "cudaGraphLaunch");
  }
  // Fast kernels on (the default) or off (every body as its simple kernel: the reference the fast
  // ones are checked against, and the "before" of benchmarks).
  void set_fast_kernels(bool on) { fast_ = on; }
  bool fast_kernels() const { return fast_; }
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
  ~CudaExec() {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
  }
  CudaExec() = default;
  CudaExec(const CudaExec&) = delete;
  CudaExec& operator=(const CudaExec&) = delete;
  void sync() {
    if (status_.ok()) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess && status_.ok())
      status_ = internal_error(std::string("cuda backend: ") + what + ": " + cudaGetErrorName(e) + " (" +
                               cudaGetErrorString(e) + ")");
  }
  void add_time(const std::string& name) {
    check(cudaEventRecord(events_[1]), "cudaEventRecord");
    check(cudaEventSynchronize(events_[1]), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events_[0], events_[1]), "cudaEventElapsedTime");
    KernelTime& t = profile_[name];
    ++t.launches;
    t.ms += ms;
  }
  Status status_ = ok_status();
  ExecCounts counts_;
  bool profiling_ = false;
  bool fast_ = true;
  cudaEvent_t events_[2] = {nullptr, nullptr};
  std::map<std::string, KernelTime> profile_;
};

}  // namespace dsv41
