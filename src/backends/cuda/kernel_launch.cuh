// How the fast kernels are launched: on a stream that may let a kernel start before the kernel it
// follows has ended (Hopper's programmatic dependent launch). A decode step at batch 1 is hundreds
// of small kernels back to back in a CUDA graph, each a few microseconds; between two of them the
// device otherwise drains the first grid before it begins to place the second. With an early
// start the next kernel's blocks are placed while the previous kernel finishes, and wait at their
// first instruction (await_previous_kernel) until it has ended and its writes are visible: the
// same kernels on the same data in the same order, so the same bits, with less idle time between
// them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace dsv41::fast {

// A stream, and whether kernels launched on it through launch_kernel may start early. Converts
// from a plain cudaStream_t (no early start), so a caller with only a stream gets the ordinary
// launches.
struct Stream {
  cudaStream_t s = nullptr;
  bool early = false;
  Stream() = default;
  Stream(cudaStream_t stream, bool early_start = false) : s(stream), early(early_start) {}  // NOLINT: implicit
  operator cudaStream_t() const { return s; }                                              // NOLINT: implicit
};

#ifdef __CUDACC__
// The first statement of every kernel launch_kernel starts: waits until the kernel before it on
// the stream has ended and its writes are visible (at once in a kernel launched the ordinary
// way), then lets the kernel after it be placed. Nothing may be read before it.
__device__ __forceinline__ void await_previous_kernel() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// kernel<<<grid, block, smem, st>>>(args...), with the early start where st asks for it. Only for
// kernels that begin with await_previous_kernel(). Errors are left for cudaGetLastError, as with
// <<< >>>.
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream st, Args&&... args) {
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = st.s;
  config.attrs = st.early ? &early : nullptr;
  config.numAttrs = st.early ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The entry of a launch's plan that holds item x: the last i < n with first[i] ≤ x, where the
// starts first[0 .. n) ascend from first[0] = 0 (a plan's jobs, each its items, one after another).
// A binary search: a plan holds up to 64 jobs, and a walk over them cost a block more than some
// blocks' own work.
template <class T>
__device__ __forceinline__ int launch_entry(const T* first, int n, int64_t x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (x >= first[mid]) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Blocks of `kernel` (`threads` each, no dynamic shared memory) resident on the current device at
// once — one wave, for kernels that loop over their work —, or `fallback` where the runtime cannot
// say.
template <class... Params>
int64_t resident_blocks(void (*kernel)(Params...), int threads, int64_t fallback) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess || sms * per_sm < 1) {
    (void)cudaGetLastError();
    return fallback;
  }
  return int64_t{sms} * per_sm;
}
#endif

}  // namespace dsv41::fast
