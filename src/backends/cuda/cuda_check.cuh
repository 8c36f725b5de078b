// CUDA errors as Status values (base/status.h), naming the call that failed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "base/status.h"

namespace dsv41::cuda {

inline Status cuda_status(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return ok_status();
  return internal_error(std::string(call) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

// After a launch: the launch's own error (bad configuration, no device). Clears it so the next
// call does not report it again.
inline Status launch_status(const char* kernel) { return cuda_status(cudaGetLastError(), kernel); }

}  // namespace dsv41::cuda

#define DSV41_CUDA_TRY(call)                                   \
  do {                                                         \
    const ::dsv41::Status s_ = ::dsv41::cuda::cuda_status((call), #call); \
    if (!s_.ok()) return s_;                                   \
  } while (0)
