// The vision tower's element-wise steps (vision_kernels.h): RMSNorm, RoPE tables, RoPE + head split,
// GELU, bf16 conversion and the aligner's unfold. Memory-bound and small next to the GEMMs and
// attention, so they are written plainly: one thread per output (a block per row for RMSNorm).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/vision_kernels.h"

namespace dsv41::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint16_t to_bf16(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

unsigned blocks_for(int64_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

__global__ void rmsnorm_kernel(const float* x, int n, const float* w, float eps, uint16_t* out_bf16, float* out_f32) {
  const float* row = x + int64_t(blockIdx.x) * n;
  float ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += row[i] * row[i];
  __shared__ float part[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0;
  for (int i = 0; i < kThreads / 32; ++i) total += part[i];
  const float r = rsqrtf(total / float(n) + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float y = w[i] * (row[i] * r);
    if (out_bf16)
      out_bf16[int64_t(blockIdx.x) * n + i] = to_bf16(y);
    else
      out_f32[int64_t(blockIdx.x) * n + i] = y;
  }
}

// One thread per (row, head, i < hd/2): rotates the pair (i, i + hd/2) of q and k, copies v's.
__global__ void rope_split_kernel(const float* qkv, int64_t n, int heads, int hd, const float* cos_t,
                                  const float* sin_t, uint16_t* q, uint16_t* k, uint16_t* v) {
  const int half = hd / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n * heads * half) return;
  const int i = int(idx % half), h = int(idx / half % heads);
  const int64_t row = idx / half / heads, d = int64_t(heads) * hd;
  const float c = cos_t[row * half + i], s = sin_t[row * half + i];
  const float* src = qkv + row * 3 * d + h * hd;
  const int64_t dst = (int64_t(h) * n + row) * hd;
  const float q1 = src[i], q2 = src[i + half], k1 = src[d + i], k2 = src[d + i + half];
  q[dst + i] = to_bf16(q1 * c - q2 * s);
  q[dst + i + half] = to_bf16(q2 * c + q1 * s);
  k[dst + i] = to_bf16(k1 * c - k2 * s);
  k[dst + i + half] = to_bf16(k2 * c + k1 * s);
  v[dst + i] = to_bf16(src[2 * d + i]);
  v[dst + i + half] = to_bf16(src[2 * d + i + half]);
}

// One thread per (patch, k < hd/2): angle = (k < hd/4 ? row : col) · inv_freq[k mod hd/4].
__global__ void rope_table_kernel(int n_h, int n_w, int half, const float* inv_freq, float* cos_t, float* sin_t) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(n_h) * n_w * half) return;
  const int k = int(idx % half), quarter = half / 2;
  const int64_t patch = idx / half;
  const float angle = float(k < quarter ? patch / n_w : patch % n_w) * inv_freq[k % quarter];
  cos_t[idx] = cosf(angle);
  sin_t[idx] = sinf(angle);
}

__global__ void to_bf16_kernel(const float* x, int64_t rows, int n, uint16_t* out, int ldo) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * ldo) return;
  const int64_t r = idx / ldo, c = idx % ldo;
  out[idx] = c < n ? to_bf16(x[r * n + c]) : uint16_t{0};
}

__global__ void gelu_kernel(const float* x, int64_t count, uint16_t* out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= count) return;
  const float v = x[idx];
  out[idx] = to_bf16(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
}

// One thread per output element of [tokens, r·r·d].
__global__ void unfold_kernel(const float* features, int n_h, int n_w, int d, int r, uint16_t* out) {
  const int th = (n_h + r - 1) / r, tw = (n_w + r - 1) / r;
  const int64_t cols = int64_t(r) * r * d, idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(th) * tw * cols) return;
  const int64_t token = idx / cols, col = idx % cols;
  const int ch = int(col / (r * r)), kh = int(col % (r * r)) / r, kw = int(col % r);
  const int y = int(token / tw) * r + kh, x = int(token % tw) * r + kw;
  out[idx] = (y < n_h && x < n_w) ? to_bf16(features[(int64_t(y) * n_w + x) * d + ch]) : uint16_t{0};
}

}  // namespace

Status rmsnorm_rows_f32(const float* x, int64_t rows, int n, const float* w, double eps, uint16_t* out_bf16,
                        float* out_f32, cudaStream_t stream) {
  if (rows <= 0 || n <= 0 || rows > 0x7fffffff || !x || !w || (out_bf16 == nullptr) == (out_f32 == nullptr))
    return invalid_argument("rmsnorm_rows_f32: bad sizes or pointers (exactly one output)");
  rmsnorm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, n, w, float(eps), out_bf16, out_f32);
  return launch_status("rmsnorm_kernel");
}

Status rope_split_qkv(const float* qkv, int64_t n, int heads, int hd, const float* cos_t, const float* sin_t,
                      uint16_t* q, uint16_t* k, uint16_t* v, cudaStream_t stream) {
  if (n <= 0 || heads <= 0 || hd <= 0 || hd % 2) return invalid_argument("rope_split_qkv: bad sizes");
  const int64_t count = n * heads * (hd / 2);
  rope_split_kernel<<<blocks_for(count), kThreads, 0, stream>>>(qkv, n, heads, hd, cos_t, sin_t, q, k, v);
  return launch_status("rope_split_kernel");
}

Status rope_tables_device(int n_h, int n_w, int hd, const float* inv_freq, float* cos_t, float* sin_t,
                          cudaStream_t stream) {
  if (n_h <= 0 || n_w <= 0 || hd <= 0 || hd % 4) return invalid_argument("rope_tables_device: bad sizes");
  const int64_t count = int64_t(n_h) * n_w * (hd / 2);
  rope_table_kernel<<<blocks_for(count), kThreads, 0, stream>>>(n_h, n_w, hd / 2, inv_freq, cos_t, sin_t);
  return launch_status("rope_table_kernel");
}

Status f32_to_bf16_rows(const float* x, int64_t rows, int n, uint16_t* out, int ldo, cudaStream_t stream) {
  if (rows <= 0 || n <= 0 || ldo < n) return invalid_argument("f32_to_bf16_rows: bad sizes");
  to_bf16_kernel<<<blocks_for(rows * ldo), kThreads, 0, stream>>>(x, rows, n, out, ldo);
  return launch_status("to_bf16_kernel");
}

Status gelu_f32_to_bf16(const float* x, int64_t count, uint16_t* out, cudaStream_t stream) {
  if (count <= 0) return invalid_argument("gelu_f32_to_bf16: bad size");
  gelu_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, out);
  return launch_status("gelu_kernel");
}

Status unfold_bf16(const float* features, int n_h, int n_w, int d, int r, uint16_t* out, cudaStream_t stream) {
  if (n_h <= 0 || n_w <= 0 || d <= 0 || r <= 0) return invalid_argument("unfold_bf16: bad sizes");
  const int64_t count = int64_t((n_h + r - 1) / r) * ((n_w + r - 1) / r) * r * r * d;
  unfold_kernel<<<blocks_for(count), kThreads, 0, stream>>>(features, n_h, n_w, d, r, out);
  return launch_status("unfold_kernel");
}

}  // namespace dsv41::cuda
