// HostExec: the device backend's executor on the CPU. "Device" memory is host memory and a
// launch is a loop over the indices, running the same kernel bodies (device_kernels.h) that
// CudaExec runs on the GPU. It exists so that the device backend's whole data flow and every
// kernel body are tested against the CPU engine on machines without a GPU (device_backend_test);
// it is not a fast path (one index at a time, one thread). Graphs (set_graphs, CudaExec's CUDA graphs)
// are emulated by deferral: between graph_begin and graph_end the launches and asynchronous uploads
// are queued and run when the host next needs the "device" (a blocking copy, an allocation, sync,
// graph_end, every `chunk` launches), as a captured graph runs on the GPU; so the emulation tests
// that the backend reads nothing before the work that writes it has run, and that its staging
// stays unchanged until the graph that copies it has run.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/exec_counts.h"
#include "base/status.h"

namespace dsv41 {

class HostExec {
 public:
  std::string name() const { return "host (device-backend emulation)"; }
  // Sticky like CudaExec's: after a device error every launch and copy does nothing.
  Status status() const { return failure_; }
  // Test support: a device error (what a failed CUDA call does to CudaExec) at the launch that
  // would be number `launch` of counts().launches (that launch and all after it do nothing).
  void fail_at_launch(int64_t launch, Status error) {
    fail_launch_ = launch;
    pending_failure_ = std::move(error);
  }
  const ExecCounts& counts() const { return counts_; }
  // Host memory sets no bound of its own here: 0 (unknown).
  int64_t free_bytes() { return 0; }
  // Test support: every later allocation fails with `error` (what a cudaMalloc out of memory does
  // to CudaExec: a null pointer and a sticky error).
  void fail_allocs(Status error) { alloc_failure_ = std::move(error); }
  void* alloc(int64_t bytes) {
    flush_graph();
    if (!alloc_failure_.ok()) {
      if (failure_.ok()) failure_ = alloc_failure_;
      return nullptr;
    }
    return std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1));
  }
  void release(void* p) {
    flush_graph();
    std::free(p);
  }
  void upload(void* dst, const void* src, int64_t bytes) { blocking_move(dst, src, bytes, counts_.uploads); }
  void download(void* dst, const void* src, int64_t bytes) { blocking_move(dst, src, bytes, counts_.downloads); }
  void copy(void* dst, const void* src, int64_t bytes) { blocking_move(dst, src, bytes, counts_.copies); }
  // Staging host memory (pinned on a GPU) and the upload from it that the caller does not wait for
  // (here it is done at once; the caller keeps the source unchanged until the next sync anyway).
  void* alloc_host(int64_t bytes) {
    flush_graph();
    return std::malloc(static_cast<size_t>(bytes > 0 ? bytes : 1));
  }
  void release_host(void* p) {
    flush_graph();
    std::free(p);
  }
  void upload_async(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0 || !failure_.ok()) return;
    if (!graph_armed_) return move(dst, src, bytes, counts_.async_uploads);
    ++counts_.async_uploads;
    queued_.push_back([dst, src, bytes] { std::memcpy(dst, src, static_cast<size_t>(bytes)); });
  }
  template <class F>
  void for_each(int64_t n, const F& f) {
    if (n <= 0 || !failure_.ok()) return;
    if (counts_.launches == fail_launch_) {
      failure_ = pending_failure_;
      return;
    }
    ++counts_.launches;
    if (!graph_armed_) {
      for (int64_t i = 0; i < n; ++i) f(i);
      return;
    }
    queued_.push_back([n, f] {
      for (int64_t i = 0; i < n; ++i) f(i);
    });
    if (graph_chunk_ > 0 && int64_t(queued_.size()) >= graph_chunk_) flush_graph();
  }
  // CudaExec's graph controls (cuda_exec.cuh); here graphs are off by default, so the emulation
  // runs every launch at once unless a test turns them on.
  void set_graphs(bool on, int64_t chunk = 0) {
    graphs_on_ = on;
    graph_chunk_ = chunk > 0 ? chunk : 0;
  }
  bool graphs() const { return graphs_on_; }
  void graph_begin(int /*program*/ = 0) {  // (CudaExec's executable graphs per program: none here)
    flush_graph();
    graph_armed_ = graphs_on_;
  }
  void graph_end() {
    flush_graph();
    graph_armed_ = false;
  }
  // CudaExec's kept graphs (run_kept): the first time a key is met, record()'s launches are queued
  // (deferred as a graph's, unchunked), kept with their arguments and run; after that the kept
  // launches run again as they were captured. So a replay reads what the "device" memory holds
  // then, and computes from stale values wherever the caller baked one into a launch: what a CUDA
  // graph replayed as it is does. A blocking call during record() ends the capture (run, not
  // kept), as on the GPU. Graphs off (the default here): record() runs launch by launch.
  template <class F>
  bool run_kept(uint64_t key, const F& record) {
    if (!graphs_on_ || !failure_.ok()) {
      record();
      return false;
    }
    flush_graph();
    const auto kept = kept_.find(key);
    if (kept != kept_.end()) {
      ++counts_.graph_launches;
      ++counts_.kept_replays;
      for (const auto& f : kept->second) f();
      return true;
    }
    const bool armed = graph_armed_;
    const int64_t chunk = graph_chunk_;
    graph_armed_ = true;
    graph_chunk_ = 0;
    keeping_ = true;
    record();
    if (keeping_) {
      keeping_ = false;
      ++counts_.kept_captures;
      kept_[key] = queued_;
    }
    flush_graph();
    graph_armed_ = armed;
    graph_chunk_ = chunk;
    return false;
  }
  // A chain of dependent launches (e.g. dk::MhcCoeffChain): here always its simple launches.
  template <class C>
  void run_chain(const C& c) {
    c.run_simple(*this);
  }
  void sync() { flush_graph(); }

 private:
  // Runs what was queued since the last flush, in order (a graph launched and waited for).
  void flush_graph() {
    keeping_ = false;  // a kept capture the host needs the device in is not kept
    if (queued_.empty()) return;
    ++counts_.graph_launches;
    std::vector<std::function<void()>> run;
    run.swap(queued_);
    for (const auto& f : run) f();
  }
  void blocking_move(void* dst, const void* src, int64_t bytes, int64_t& count) {
    flush_graph();
    move(dst, src, bytes, count);
  }
  void move(void* dst, const void* src, int64_t bytes, int64_t& count) {
    if (bytes <= 0 || !failure_.ok()) return;
    ++count;
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  ExecCounts counts_;
  Status failure_ = ok_status(), pending_failure_ = ok_status();
  Status alloc_failure_;
  int64_t fail_launch_ = -1;
  bool graphs_on_ = false;
  bool graph_armed_ = false;
  int64_t graph_chunk_ = 0;
  std::vector<std::function<void()>> queued_;
  bool keeping_ = false;  // run_kept is capturing
  std::map<uint64_t, std::vector<std::function<void()>>> kept_;
};

}  // namespace dsv41
