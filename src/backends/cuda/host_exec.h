// HostExec: the device backend's executor on the CPU. "Device" memory is host memory and a
// launch is a loop over the indices, running the same kernel bodies (device_kernels.h) that
// CudaExec runs on the GPU. It exists so that the device backend's whole data flow and every
// kernel body are tested against the CPU engine on machines without a GPU (device_backend_test);
// it is not a fast path (one index at a time, one thread).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/exec_counts.h"
#include "base/status.h"

namespace dsv41 {

class HostExec {
 public:
  std::string name() const { return "host (device-backend emulation)"; }
  Status status() const { return ok_status(); }
  const ExecCounts& counts() const { return counts_; }
  void* alloc(int64_t bytes) { return std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1)); }
  void release(void* p) { std::free(p); }
  void upload(void* dst, const void* src, int64_t bytes) { move(dst, src, bytes, counts_.uploads); }
  void download(void* dst, const void* src, int64_t bytes) { move(dst, src, bytes, counts_.downloads); }
  void copy(void* dst, const void* src, int64_t bytes) { move(dst, src, bytes, counts_.copies); }
  // Staging host memory (pinned on a GPU) and the upload from it that the caller does not wait for
  // (here it is done at once; the caller keeps the source unchanged until the next sync anyway).
  void* alloc_host(int64_t bytes) { return std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1)); }
  void release_host(void* p) { std::free(p); }
  void upload_async(void* dst, const void* src, int64_t bytes) { move(dst, src, bytes, counts_.async_uploads); }
  template <class F>
  void for_each(int64_t n, const F& f) {
    if (n <= 0) return;
    ++counts_.launches;
    if (capturing_) {
      capturing_->steps.push_back([n, f] {
        for (int64_t i = 0; i < n; ++i) f(i);
      });
      return;
    }
    for (int64_t i = 0; i < n; ++i) f(i);
  }
  // The emulation of CudaExec's graphs (cuda_graph.cuh): the launches between begin_capture and
  // end_capture are recorded with their arguments, not run, and replay runs them, so that a
  // replay reads per-replay values only from "device" memory, as on the GPU. A copy during the
  // capture (which the GPU cannot capture) leaves an empty graph, and replaying that fails.
  struct Graph {
    std::vector<std::function<void()>> steps;
    bool valid = false;
    explicit operator bool() const { return valid; }
  };
  bool can_capture() const { return true; }
  void begin_capture() {
    capturing_ = std::make_unique<Graph>();
    capturing_->valid = true;
  }
  Graph end_capture() {
    Graph g = std::move(*capturing_);
    capturing_.reset();
    if (!g.valid) g.steps.clear();
    return g;
  }
  void replay(const Graph& g) {
    ++counts_.graph_launches;
    if (!g) std::abort();  // CudaExec's sticky error; a test sees the crash
    for (const auto& step : g.steps) step();
  }
  // A chain of dependent launches (e.g. dk::MhcCoeffChain): here always its simple launches.
  template <class C>
  void run_chain(const C& c) {
    c.run_simple(*this);
  }
  void sync() {}

 private:
  void move(void* dst, const void* src, int64_t bytes, int64_t& count) {
    if (bytes <= 0) return;
    if (capturing_) capturing_->valid = false;
    ++count;
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  ExecCounts counts_;
  std::unique_ptr<Graph> capturing_;
};

}  // namespace dsv41
