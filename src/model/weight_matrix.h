// A weight matrix held as the checkpoint's own FP8 / FP4 bytes (a view into the mapping, issue 13),
// as float32, or, when every value is exactly a bfloat16, as bfloat16 bits: fewer bytes per token
// for memory-bound decode (docs/BENCHMARKS.md). Numeric policy (model.h): the values are the exact
// float32 widening of the stored weight every way; gemm_bf16w and gemm_quant widen in registers
// and sum in gemm_f32's order (kernels/cpu/gemm.h, gemm_quant.h), so the products are
// bit-identical to those on the float32 copy.
// Owns: its f32 or bf16 storage (a stored view borrows the registry's mapping). WeightRef: a view.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "format/safetensors.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_many.h"
#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

// A borrowed [out, in] row-major matrix: exactly one of f32 / bf16 / quant (quant.codes != null)
// is set (or none: empty). quant is the checkpoint's own FP8 / FP4 bytes (issue 13), read in place
// from the mapping and dequantised inside the product (gemm_quant.h: same bits as widening).
struct WeightRef {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  QuantWeights quant;
  WeightRef() = default;
  WeightRef(const float* p) : f32(p) {}  // NOLINT: implicit, float pointers stay valid views
  WeightRef(const uint16_t* p) : bf16(p) {}  // NOLINT
  explicit WeightRef(const QuantWeights& q) : quant(q) {}
  bool is_quant() const { return quant.codes != nullptr; }
  float at(int64_t i) const;  // element i, widened exactly
  // The view from element n on; for a quantised matrix n must be a whole number of rows.
  WeightRef offset(int64_t n) const;
};
// The stored FP8 / FP4 view when set, else the bf16 holding when not empty, else float32.
inline WeightRef weight_ref(const std::vector<float>& f32, const std::vector<uint16_t>& bf16,
                            const QuantWeights& quant = {}) {
  if (quant.codes) return WeightRef(quant);
  return bf16.empty() ? WeightRef(f32.data()) : WeightRef(bf16.data());
}

// y [rows, out] = x [rows, in] · Wᵀ by gemm_f32 or gemm_bf16w (bit-identical for the same values),
// threaded on ex.pool.
void matmul(const CpuExec& ex, const float* x, int64_t rows, int64_t in, WeightRef w, int64_t out, float* y);
// The same product as a job of gemm_many (kernels/cpu/gemm_many.h: several products in one
// parallel region, the same bits as a matmul each). w must outlive the job (quant is borrowed).
GemmJob gemm_job(const float* x, int64_t rows, int64_t in, const WeightRef& w, int64_t out, float* y);
// Σ_i a[i] · w[off + i] with double accumulation (the scalar references).
double dot_reference(WeightRef w, int64_t off, const float* a, int64_t n);

struct WeightMatrix {
  std::vector<float> f32;      // float32 values, or empty when held as bf16 or stored
  std::vector<uint16_t> bf16;  // bfloat16 bits, or empty when held as float32 or stored
  QuantWeights quant;          // the checkpoint's FP8 / FP4 bytes in place (codes null: not stored)
  int64_t quant_bytes = 0;     // codes + scales of `quant`, as stored
  bool is_bf16() const { return !bf16.empty(); }
  bool is_quant() const { return quant.codes != nullptr; }
  int64_t bytes() const {
    return int64_t(f32.size() * sizeof(float) + bf16.size() * sizeof(uint16_t)) + quant_bytes;
  }
  WeightRef ref() const { return weight_ref(f32, bf16, quant); }
};

// The stored view of an FP8 (E4M3 + UE8M0 32×32 / 128×128 block scales) or packed FP4 (E2M1 +
// UE8M0 per-32 row scales) 2-D weight, or nullopt for any other storage (float dtypes, float-typed
// scales: those are widened). Errors, naming the tensor: a scale shape that fits no block size
// (dequant.h's check), a UE8M0 NaN scale code, a 1-D or empty weight. `bytes` gets codes + scales.
Result<std::optional<QuantWeights>> stored_quant_view(const TensorView& weight, const TensorView* scale,
                                                      int64_t* bytes);

// True when every value survives float32 → bf16 → float32 bit for bit (NaNs never do: their
// payload may change, so a tensor with a NaN stays float32).
bool bf16_exact(const std::vector<float>& values);
// Holds `values` as bf16 when allow_bf16 and bf16_exact(values), else as float32.
WeightMatrix make_weight_matrix(std::vector<float> values, bool allow_bf16);

}  // namespace dsv41
