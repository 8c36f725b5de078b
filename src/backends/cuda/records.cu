// Device pack / unpack of the three cache record formats (cache/records.h, model.md §4).
// One thread per scale block: the scale first, then every channel of the block, as the CPU
// codecs do. These run when rows enter the cache or in tests, not in the attention inner loops
// (those decode records in registers), so the simple layout wins over speed.
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/cuda_check.cuh"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/record_codecs.cuh"

namespace dsv41::cuda {
namespace {

constexpr int kThreads = 256;

// amax over n values; false if any is NaN or ±Inf.
__device__ bool finite_amax_dev(const float* x, int n, float* amax) {
  float m = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    if (!isfinite(x[i])) finite = false;
    m = fmaxf(m, fabsf(x[i]));
  }
  *amax = m;
  return finite;
}

// ---- window rows: [C] E4M3, [C/32] UE8M0 -----------------------------------------------------
__global__ void window_pack_kernel(const float* __restrict__ x, int64_t rows, int C, uint8_t* __restrict__ rec) {
  const int64_t nb = C / 32;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (id >= rows * nb) return;
  const int64_t r = id / nb, b = id % nb;
  const float* xb = x + r * C + b * 32;
  uint8_t* row = rec + r * (C + nb);
  float amax;
  if (!finite_amax_dev(xb, 32, &amax)) {
    row[C + b] = 0xFF;
    for (int i = 0; i < 32; ++i) row[b * 32 + i] = 0;
    return;
  }
  const int k = ceil_pow2_exponent_dev(fmaxf(amax, kWindowAmaxFloor) * (1.0f / kE4m3Max));
  const float scale = ldexpf(1.0f, k);
  row[C + b] = static_cast<uint8_t>(k + 127);
  for (int i = 0; i < 32; ++i) row[b * 32 + i] = f32_to_e4m3_dev(clamp_sym_dev(xb[i] / scale, kE4m3Max));
}

__global__ void window_unpack_kernel(const uint8_t* __restrict__ rec, int64_t rows, int C, float* __restrict__ out) {
  const int64_t nb = C / 32;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (id >= rows * nb) return;
  const int64_t r = id / nb, b = id % nb;
  const uint8_t* row = rec + r * (C + nb);
  const float scale = ue8m0_to_f32_dev(row[C + b]);
  float* ob = out + r * C + b * 32;
  for (int i = 0; i < 32; ++i) ob[i] = isnan(scale) ? canonical_nan() : e4m3_to_f32_dev(row[b * 32 + i]) * scale;
}

// ---- FP4 rows (main: block 16, E4M3 scale; index: block 32, UE8M0 scale) -----------------------
template <int kBlock>
__global__ void fp4_pack_kernel(const float* __restrict__ x, int64_t rows, int C, uint8_t* __restrict__ rec) {
  const int64_t nb = C / kBlock;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (id >= rows * nb) return;
  const int64_t r = id / nb, b = id % nb;
  const float* xb = x + r * C + b * kBlock;
  uint8_t* row = rec + r * (C / 2 + nb);
  uint8_t* codes = row + b * kBlock / 2;
  float amax;
  if (!finite_amax_dev(xb, kBlock, &amax)) {
    row[C / 2 + b] = kBlock == 16 ? 0x7F : 0xFF;
    for (int i = 0; i < kBlock / 2; ++i) codes[i] = 0;
    return;
  }
  float scale;
  if (kBlock == 16) {
    const uint8_t code = f32_to_e4m3_dev(fmaxf(amax, kMainAmaxFloor) / kE2m1Max);  // division, §9.4
    scale = e4m3_to_f32_dev(code);
    row[C / 2 + b] = code;
  } else {
    const int k = ceil_pow2_exponent_dev(fmaxf(amax, kIndexAmaxFloor) * (1.0f / kE2m1Max));
    scale = ldexpf(1.0f, k);
    row[C / 2 + b] = static_cast<uint8_t>(k + 127);
  }
  for (int i = 0; i < kBlock; i += 2) {
    const uint8_t lo = f32_to_e2m1_dev(clamp_sym_dev(xb[i] / scale, kE2m1Max));
    const uint8_t hi = f32_to_e2m1_dev(clamp_sym_dev(xb[i + 1] / scale, kE2m1Max));
    codes[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

template <int kBlock>
__global__ void fp4_unpack_kernel(const uint8_t* __restrict__ rec, int64_t rows, int C, float* __restrict__ out) {
  const int64_t nb = C / kBlock;
  const int64_t id = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (id >= rows * nb) return;
  const int64_t r = id / nb, b = id % nb;
  const uint8_t* row = rec + r * (C / 2 + nb);
  const float scale = kBlock == 16 ? e4m3_to_f32_dev(row[C / 2 + b]) : ue8m0_to_f32_dev(row[C / 2 + b]);
  const uint8_t* codes = row + b * kBlock / 2;
  float* ob = out + r * C + b * kBlock;
  for (int i = 0; i < kBlock; ++i) {
    const uint8_t byte = codes[i / 2];
    const uint8_t code = (i & 1) ? (byte >> 4) : (byte & 0xF);
    ob[i] = isnan(scale) ? canonical_nan() : e2m1_to_f32_dev(code) * scale;
  }
}

Status check_rows(RowKind kind, int64_t rows, int channels, const void* a, const void* b, const char* what) {
  if (rows < 0) return invalid_argument(std::string(what) + ": negative row count");
  if (rows > 0 && (!a || !b)) return invalid_argument(std::string(what) + ": null pointer");
  return check_row_channels(kind, static_cast<size_t>(channels > 0 ? channels : 0)).with_context(what);
}

unsigned grid_for(int64_t items) { return static_cast<unsigned>((items + kThreads - 1) / kThreads); }

}  // namespace

Status rows_pack(RowKind kind, const float* x, int64_t rows, int channels, uint8_t* records, cudaStream_t stream) {
  if (Status s = check_rows(kind, rows, channels, x, records, "rows_pack"); !s.ok()) return s;
  if (rows == 0) return ok_status();
  const int64_t items = rows * channels / static_cast<int64_t>(row_block_channels(kind));
  switch (kind) {
    case RowKind::kWindow: window_pack_kernel<<<grid_for(items), kThreads, 0, stream>>>(x, rows, channels, records); break;
    case RowKind::kMain: fp4_pack_kernel<16><<<grid_for(items), kThreads, 0, stream>>>(x, rows, channels, records); break;
    case RowKind::kIndex: fp4_pack_kernel<32><<<grid_for(items), kThreads, 0, stream>>>(x, rows, channels, records); break;
  }
  return launch_status("rows_pack kernel");
}

Status rows_unpack(RowKind kind, const uint8_t* records, int64_t rows, int channels, float* out,
                   cudaStream_t stream) {
  if (Status s = check_rows(kind, rows, channels, records, out, "rows_unpack"); !s.ok()) return s;
  if (rows == 0) return ok_status();
  const int64_t items = rows * channels / static_cast<int64_t>(row_block_channels(kind));
  switch (kind) {
    case RowKind::kWindow: window_unpack_kernel<<<grid_for(items), kThreads, 0, stream>>>(records, rows, channels, out); break;
    case RowKind::kMain: fp4_unpack_kernel<16><<<grid_for(items), kThreads, 0, stream>>>(records, rows, channels, out); break;
    case RowKind::kIndex: fp4_unpack_kernel<32><<<grid_for(items), kThreads, 0, stream>>>(records, rows, channels, out); break;
  }
  return launch_status("rows_unpack kernel");
}

}  // namespace dsv41::cuda
