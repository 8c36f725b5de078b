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

}  // namespace dsv41::cuda
