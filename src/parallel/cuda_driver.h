// The few CUDA driver API entry points the NCCL communicator needs (device count, primary
// context, device memory, a stream), loaded at run time from libcuda.so.1 with dlopen, so that
// the library builds and runs on machines without CUDA (where load() says why it cannot).
// Declarations written from the driver API's documented C signatures (docs/PARALLEL.md); no CUDA
// header is needed. Not used by the CUDA device backend (backends/cuda links the runtime).
// Owns: the dlopen handle (closed on destruction) and the primary contexts it retained.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

class CudaDriver {
 public:
  using Result_ = int;                 // CUresult (0 = CUDA_SUCCESS)
  using Context = struct CudaCtx_*;    // CUcontext
  using Stream = struct CudaStream_*;  // CUstream (also cudaStream_t)
  using DevicePtr = unsigned long long;  // CUdeviceptr

  // Loads the driver (path "" = the loader's search for libcuda.so.1) and calls cuInit.
  static Result<std::unique_ptr<CudaDriver>> load(const std::string& path = "");
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  int device_count() const { return devices_; }
  // Makes device d's primary context current on the calling thread (retained once per device).
  // Any thread may call it.
  Status use_device(int d);
  Result<DevicePtr> alloc(size_t bytes);
  Status free(DevicePtr p);
  Status copy_to_device(DevicePtr dst, const void* src, size_t bytes);
  Status copy_to_host(void* dst, DevicePtr src, size_t bytes);
  Result<Stream> create_stream();
  Status destroy_stream(Stream s);
  Status synchronize(Stream s);

 private:
  CudaDriver() = default;
  Status check(Result_ r, const char* what) const;

  void* handle_ = nullptr;
  int devices_ = 0;
  std::mutex mu_;                  // guards contexts_ (ranks' threads retain their devices)
  std::vector<Context> contexts_;  // per device, null until retained
  Result_ (*init_)(unsigned) = nullptr;
  Result_ (*get_count_)(int*) = nullptr;
  Result_ (*get_device_)(int*, int) = nullptr;
  Result_ (*retain_)(Context*, int) = nullptr;
  Result_ (*release_)(int) = nullptr;
  Result_ (*set_current_)(Context) = nullptr;
  Result_ (*mem_alloc_)(DevicePtr*, size_t) = nullptr;
  Result_ (*mem_free_)(DevicePtr) = nullptr;
  Result_ (*htod_)(DevicePtr, const void*, size_t) = nullptr;
  Result_ (*dtoh_)(void*, DevicePtr, size_t) = nullptr;
  Result_ (*stream_create_)(Stream*, unsigned) = nullptr;
  Result_ (*stream_destroy_)(Stream) = nullptr;
  Result_ (*stream_sync_)(Stream) = nullptr;
  Result_ (*error_string_)(Result_, const char**) = nullptr;
};

}  // namespace dsv41
