// Test helpers for the CUDA kernels: device detection (tests skip without a GPU), a device
// buffer that owns its memory, and the relative-error measure of METHOD-style checks.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_kernels.h"

namespace dsv41::cuda::test {

// Skips the calling test when no CUDA device can be used, saying why.
#define DSV41_REQUIRE_CUDA_DEVICE()                                                         \
  do {                                                                                      \
    const auto n_ = ::dsv41::cuda::device_count();                                          \
    if (!n_.ok()) GTEST_SKIP() << "no CUDA device: " << n_.status().to_string();            \
    if (*n_ == 0) GTEST_SKIP() << "no CUDA device: cudaGetDeviceCount reports 0 devices";   \
  } while (0)

#define DSV41_CUDA_OK(call) ASSERT_EQ(cudaSuccess, (call)) << #call
#define DSV41_STATUS_OK(expr)                     \
  do {                                            \
    const ::dsv41::Status st_ = (expr);           \
    ASSERT_TRUE(st_.ok()) << st_.to_string();     \
  } while (0)

// Device memory of n elements of T; freed on destruction. Filled with 0xFF bytes (NaN for
// floats, −1 for ints) so unwritten outputs show.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (cudaMalloc(&p_, n * sizeof(T) + 16) != cudaSuccess) p_ = nullptr;
    if (p_) cudaMemset(p_, 0xFF, n * sizeof(T) + 16);
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (p_ && !host.empty()) cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  std::vector<T> to_host() const {
    std::vector<T> h(n_);
    if (n_) cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

// ‖a − b‖ / ‖b‖ over finite pairs; +inf if shapes differ or a is NaN where b is not.
inline double rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(b[i])) continue;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace dsv41::cuda::test
