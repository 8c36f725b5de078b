// CudaGraph: a sequence of launches captured once from the calling thread's default stream and
// replayed as one CUDA graph (one host call instead of one per launch). Capture needs the launches
// on a capturable stream: the CUDA sources are compiled with --default-stream=per-thread
// (CMakeLists.txt), so the `<<<…>>>` launches of every kernel, fast or simple, go to
// cudaStreamPerThread. A replay runs the kernels with the arguments they had when captured: the
// caller keeps every buffer they point to in place and passes per-replay values through device
// memory (device_drafter_impl.h does both).
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace dsv41 {

class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(CudaGraph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  CudaGraph& operator=(CudaGraph&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  explicit operator bool() const { return exec_ != nullptr; }

  // Thread-local mode: an unsafe call of this thread (a blocking copy, a cudaMalloc) during the
  // capture fails instead of being left out of the graph.
  static cudaError_t begin_capture() {
    return cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal);
  }
  // Ends the capture (always, so that a failed one does not leave the stream capturing) and
  // instantiates what it recorded into `out`.
  static cudaError_t end_capture(CudaGraph& out) {
    if (out.exec_) cudaGraphExecDestroy(std::exchange(out.exec_, nullptr));
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(cudaStreamPerThread, &graph);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&out.exec_, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    return e;
  }
  cudaError_t replay() const { return cudaGraphLaunch(exec_, cudaStreamPerThread); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace dsv41
