// StreamGraphs: replays a stretch of launches as one CUDA graph. The caller opens a capture on its
// stream (begin), launches as usual (the kernels and copies are recorded, not run), and closes it
// (end_and_launch): the recorded graph updates the executable graph kept for this stretch's place
// in the step (the k-th stretch since restart(), among the graphs of the step's program) and its
// shape (its kernels in order: a few shapes kept per place), or is instantiated where there is none
// yet or the update is refused, and then launched on the stream.
// A steady decode records the same kernels step after step with new parameters (positions, lengths,
// pointers), so every step after the first is one update and one graph launch: the device runs the
// kernels back to back instead of one launch at a time. The graph runs exactly the recorded
// launches in their order on one stream, so its results are the launches' bits.
// Shared by the device backend's executor (cuda_exec.cuh); nothing here knows about the model.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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
    for (const auto& [program, stretches] : execs_)
      for (const auto& kept : stretches)
        for (const Shaped& k : kept)
          if (k.exec) cudaGraphExecDestroy(k.exec);
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
    shape_ = 1469598103934665603ULL;
    return e;
  }
  // The capturer names each node it records (a kernel body's type and which kernel ran it, a
  // copy): the stretch's shape, a hash of the names in order (FNV-1a), picks its executable graph.
  void note(uint64_t node) {
    shape_ ^= node;
    shape_ *= 1099511628211ULL;
  }
  cudaError_t end_and_launch(cudaStream_t s) {
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (e != cudaSuccess) return e;
    // The recorded node count joins the shape: a fast kernel may launch more than one kernel for
    // a body at some sizes, and an update across node counts is always refused (a topology
    // change), so graphs of different counts must not share an executable graph.
    size_t nodes = 0;
    if (cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess) note(uint64_t(nodes));
    std::vector<std::vector<Shaped>>& stretches = execs_[program_];
    if (next_ == stretches.size()) stretches.emplace_back();
    cudaGraphExec_t& exec = kept_for(stretches[next_++], shape_);
    e = replace(exec, graph);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) return e;
    ++stats_.launches;
    return cudaGraphLaunch(exec, s);
  }

 private:
  // An executable graph and the shape of the graph it was made or last updated from.
  struct Shaped {
    uint64_t shape = 0;
    cudaGraphExec_t exec = nullptr;
  };
  // A stretch's kernels can differ from step to step (a compressor group completes on every other
  // decode step, an open group ends empty or not, so launches come and go and every later kernel
  // moves to another place): an update across shapes is refused and the graph instantiated anew,
  // each step. So each stretch keeps up to kShapes executable graphs, one per shape (note), and
  // updates the one of its shape (a refused update still instantiates: the shape is a hint).
  // 8: a program of DSpark verify steps serves every row count of its sequence count (device
  // backend), whose stretches differ where a sequence's rows complete a compressor group or not.
  static constexpr size_t kShapes = 8;
  // The stretch's executable graph of `shape` (a null one added when it has none; the oldest of
  // kShapes dropped to make room).
  cudaGraphExec_t& kept_for(std::vector<Shaped>& kept, uint64_t shape) {
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i].shape == shape) {
        std::rotate(kept.begin() + i, kept.begin() + i + 1, kept.end());  // the newest last
        return kept.back().exec;
      }
    if (kept.size() == kShapes) {
      if (kept.front().exec) cudaGraphExecDestroy(kept.front().exec);
      kept.erase(kept.begin());
    }
    kept.push_back({shape, nullptr});
    return kept.back().exec;
  }
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

  std::map<int, std::vector<std::vector<Shaped>>> execs_;  // per program, per stretch, per shape
  uint64_t shape_ = 0;  // of the stretch being captured (note)
  int program_ = 0;
  size_t next_ = 0;
  bool capturing_ = false;
  Stats stats_;
};

}  // namespace dsv41
