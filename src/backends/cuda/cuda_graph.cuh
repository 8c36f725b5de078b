// StreamGraphs: replays a stretch of launches as one CUDA graph. The caller opens a capture on its
// stream (begin), launches as usual (the kernels and copies are recorded, not run), and closes it
// (end_and_launch): the recorded graph updates the executable graph kept for this stretch's place
// in the step (the k-th stretch since restart(), among the graphs of the step's program), or is instantiated where there is none yet or
// the update is refused (other kernels or another shape of graph), and then launched on the stream.
// A steady decode records the same kernels step after step with new parameters (positions, lengths,
// pointers), so every step after the first is one update and one graph launch: the device runs the
// kernels back to back instead of one launch at a time. The graph runs exactly the recorded
// launches in their order on one stream, so its results are the launches' bits.
// Shared by the device backend's executor (cuda_exec.cuh); nothing here knows about the model.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
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
    for (const auto& [program, execs] : execs_)
      for (cudaGraphExec_t e : execs)
        if (e) cudaGraphExecDestroy(e);
  }
  bool capturing() const { return capturing_; }
  const Stats& stats() const { return stats_; }
  // A new step: the next stretch is the step's first again. `program` (≥ 0) names which
  // executable graphs the step's stretches update, each kind of step its own: a step that updated
  // another kind's graphs would find other kernels and instantiate anew, twice a cycle when two
  // kinds alternate — decode steps, DSpark drafts and verify steps of each row count (the device
  // backend numbers them). A program's graphs are kept until the StreamGraphs goes.
  void restart(int program = 0) {
    program_ = program >= 0 ? program : 0;
    next_ = 0;
  }
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
    std::vector<cudaGraphExec_t>& execs = execs_[program_];
    if (next_ == execs.size()) execs.push_back(nullptr);
    cudaGraphExec_t& exec = execs[next_++];
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

  std::map<int, std::vector<cudaGraphExec_t>> execs_;  // per program
  int program_ = 0;
  size_t next_ = 0;
  bool capturing_ = false;
  Stats stats_;
};

}  // namespace dsv41
