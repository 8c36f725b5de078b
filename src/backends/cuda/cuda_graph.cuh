// StreamGraphs: replays a stretch of launches as one CUDA graph. The caller opens a capture on its
// stream (begin), launches as usual (the kernels and copies are recorded, not run), and closes it
// (end_and_launch): the recorded graph updates the executable graph kept for this stretch's place
// in the step (the k-th stretch since restart()), or is instantiated where there is none yet or
// the update is refused (other kernels or another shape of graph), and then launched on the stream.
// A steady decode records the same kernels step after step with new parameters (positions, lengths,
// pointers), so every step after the first is one update and one graph launch: the device runs the
// kernels back to back instead of one launch at a time. The graph runs exactly the recorded
// launches in their order on one stream, so its results are the launches' bits.
// Shared by the device backend's executor (cuda_exec.cuh); nothing here knows about the model.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace dsv41 {

class StreamGraphs {
 public:
  struct Stats {
    int64_t launches = 0;        // graphs launched
    int64_t updates = 0;         // ... of which replayed an existing executable graph after an update
    int64_t instantiations = 0;  // ... of which needed a new one
  };
  StreamGraphs() = default;
  StreamGraphs(const StreamGraphs&) = delete;
  StreamGraphs& operator=(const StreamGraphs&) = delete;
  ~StreamGraphs() {
    for (cudaGraphExec_t e : execs_)
      if (e) cudaGraphExecDestroy(e);
  }
  bool capturing() const { return capturing_; }
  const Stats& stats() const { return stats_; }
  // A new step: the next stretch is the step's first again.
  void restart() { next_ = 0; }
  // Relaxed mode: calls of this thread that are unsafe during capture (cudaMalloc, a cudaMemcpy on
  // the legacy stream) are not made while capturing — the executor ends the capture first.
  cudaError_t begin(cudaStream_t s) {
    const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    capturing_ = e == cudaSuccess;
    return e;
  }
  cudaError_t end_and_launch(cudaStream_t s) {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (e != cudaSuccess) return e;
    if (next_ == execs_.size()) execs_.push_back(nullptr);
    cudaGraphExec_t& exec = execs_[next_++];
    e = replace(exec, graph);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return e;
    ++stats_.launches;
    return cudaGraphLaunch(exec, s);
  }

 private:
  // Updates exec with graph where it can, else instantiates it anew.
  cudaError_t replace(cudaGraphExec_t& exec, cudaGraph_t graph) {
    if (exec) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess) {
        ++stats_.updates;
        return cudaSuccess;
      }
      cudaGetLastError();  // a refused update is not an error of the step: leave none behind
      cudaGraphExecDestroy(exec);
      exec = nullptr;
    }
    ++stats_.instantiations;
    return cudaGraphInstantiate(&exec, graph, 0);
  }

  std::vector<cudaGraphExec_t> execs_;
  size_t next_ = 0;
  bool capturing_ = false;
  Stats stats_;
};

}  // namespace dsv41
