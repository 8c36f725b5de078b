// Device queries for the CUDA backend (see cuda_kernels.h).
#include <cuda_runtime.h>

#include <cstdio>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_kernels.h"

namespace dsv41::cuda {

Result<int> device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // a failed query is sticky in some runtimes; leave none behind
    return cuda_status(err, "cudaGetDeviceCount");
  }
  return n;
}

Result<std::string> device_summary(int device) {
  cudaDeviceProp prop{};
  const Status s = cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (!s.ok()) return s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30),
                prop.l2CacheSize >> 20);
  return std::string(buf);
}

Result<double> copy_bandwidth(int64_t bytes, int passes) {
  if (bytes < (1 << 20) || passes < 1) return invalid_argument("copy_bandwidth: bytes must be ≥ 1 MiB and passes ≥ 1");
  void* src = nullptr;
  void* dst = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaStream_t stream = nullptr;
  // Everything made is released on every path; the first error is the one reported.
  Status s = cuda_status(cudaMalloc(&src, size_t(bytes)), "cudaMalloc (copy bandwidth source)");
  if (s.ok()) s = cuda_status(cudaMalloc(&dst, size_t(bytes)), "cudaMalloc (copy bandwidth destination)");
  if (s.ok()) s = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  if (s.ok()) s = cuda_status(cudaEventCreate(&start), "cudaEventCreate");
  if (s.ok()) s = cuda_status(cudaEventCreate(&stop), "cudaEventCreate");
  if (s.ok()) s = cuda_status(cudaMemsetAsync(src, 0x5A, size_t(bytes), stream), "cudaMemsetAsync");
  double best_ms = 0;
  for (int pass = -1; s.ok() && pass < passes; ++pass) {  // pass -1: the unmeasured first copy
    s = cuda_status(cudaEventRecord(start, stream), "cudaEventRecord");
    if (s.ok()) s = cuda_status(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    if (s.ok()) s = cuda_status(cudaEventRecord(stop, stream), "cudaEventRecord");
    if (s.ok()) s = cuda_status(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (s.ok()) s = cuda_status(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (s.ok() && pass >= 0 && ms > 0 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
  }
  if (stop) cudaEventDestroy(stop);
  if (start) cudaEventDestroy(start);
  if (stream) cudaStreamDestroy(stream);
  if (dst) cudaFree(dst);
  if (src) cudaFree(src);
  if (!s.ok()) return s;
  if (best_ms <= 0) return internal_error("copy_bandwidth: no copy took measurable time");
  return 2.0 * double(bytes) / (best_ms * 1e-3);
}

}  // namespace dsv41::cuda
