// A weight matrix held as float32 or, when every value is exactly a bfloat16, as bfloat16 bits:
// the same values in half the bytes, which is what memory-bound decode reads per token
// (docs/BENCHMARKS.md, "The memory-bandwidth roofline"). Numeric policy (model.h): the values
// are the exact float32 widening of the stored weight either way, and gemm_bf16w sums in the
// same order as gemm_f32 (kernels/cpu/gemm.h) with an exact widening, so the products are
// bit-identical to those on the float32 copy.
// Owns: its f32 or bf16 storage. WeightRef is a borrowed view of either.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

// A borrowed [out, in] row-major matrix: exactly one of f32 / bf16 is set (or neither: empty).
struct WeightRef {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  WeightRef() = default;
  WeightRef(const float* p) : f32(p) {}  // NOLINT: implicit, float pointers stay valid views
  WeightRef(const uint16_t* p) : bf16(p) {}  // NOLINT
  float at(int64_t i) const;  // element i, widened exactly
  WeightRef offset(int64_t n) const { return bf16 ? WeightRef(bf16 + n) : WeightRef(f32 + n); }
};
// The bf16 holding when it is not empty, else the float32 one.
inline WeightRef weight_ref(const std::vector<float>& f32, const std::vector<uint16_t>& bf16) {
  return bf16.empty() ? WeightRef(f32.data()) : WeightRef(bf16.data());
}

// y [rows, out] = x [rows, in] · Wᵀ by gemm_f32 or gemm_bf16w (bit-identical for the same values),
// threaded on ex.pool.
void matmul(const CpuExec& ex, const float* x, int64_t rows, int64_t in, WeightRef w, int64_t out, float* y);
// Σ_i a[i] · w[off + i] with double accumulation (the scalar references).
double dot_reference(WeightRef w, int64_t off, const float* a, int64_t n);

struct WeightMatrix {
  std::vector<float> f32;      // float32 values, or empty when held as bf16
  std::vector<uint16_t> bf16;  // bfloat16 bits, or empty when held as float32
  bool is_bf16() const { return !bf16.empty(); }
  int64_t size() const { return is_bf16() ? int64_t(bf16.size()) : int64_t(f32.size()); }
  int64_t bytes() const { return int64_t(f32.size() * sizeof(float) + bf16.size() * sizeof(uint16_t)); }
  WeightRef ref() const { return is_bf16() ? WeightRef(bf16.data()) : WeightRef(f32.data()); }
};

// True when every value survives float32 → bf16 → float32 bit for bit (NaNs never do: their
// payload may change, so a tensor with a NaN stays float32).
bool bf16_exact(const std::vector<float>& values);
// Holds `values` as bf16 when allow_bf16 and bf16_exact(values), else as float32.
WeightMatrix make_weight_matrix(std::vector<float> values, bool allow_bf16);

}  // namespace dsv41
