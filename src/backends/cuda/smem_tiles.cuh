// Shared-memory tile helpers for the tensor-core kernels of the vision tower (vision_gemm.cu,
// vision_attention.cu): 16-byte asynchronous copies with zero fill, ldmatrix fragment loads and
// bf16 packing. Fragment layouts: mma.cuh.
//
// ldmatrix.x4: lanes 8j..8j+7 give the row addresses of 8×8 matrix j (16 bytes each); register j
// of every lane receives matrix j's row lane/4, elements 2(lane%4), +1 — an m16n8k16 fragment
// register. With .trans a lane receives rows 2(lane%4), +1 at column lane/4 instead.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dsv41::cuda::tiles {

// 16 bytes global → shared, asynchronously; `full` false writes 16 zero bytes (src-size 0, the
// source is not read but must be a valid address).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool full) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(full ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// Two floats as bf16 (round to nearest even), `lo` in the low half: one fragment register.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace dsv41::cuda::tiles
