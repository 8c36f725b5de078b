// HostExec: the device backend's executor on the CPU. "Device" memory is host memory and a
// launch is a loop over the indices, running the same kernel bodies (device_kernels.h) that
// CudaExec runs on the GPU. It exists so that the device backend's whole data flow and every
// kernel body are tested against the CPU engine on machines without a GPU (device_backend_test);
// it is not a fast path (one index at a time, one thread).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

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
    if (n <= 0 || !failure_.ok()) return;
    if (counts_.launches == fail_launch_) {
      failure_ = pending_failure_;
      return;
    }
    ++counts_.launches;
    for (int64_t i = 0; i < n; ++i) f(i);
  }
  // A chain of dependent launches (e.g. dk::MhcCoeffChain): here always its simple launches.
  template <class C>
  void run_chain(const C& c) {
    c.run_simple(*this);
  }
  void sync() {}

 private:
  void move(void* dst, const void* src, int64_t bytes, int64_t& count) {
    if (bytes <= 0 || !failure_.ok()) return;
    ++count;
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  ExecCounts counts_;
  Status failure_ = ok_status(), pending_failure_ = ok_status();
  int64_t fail_launch_ = -1;
};

}  // namespace dsv41
