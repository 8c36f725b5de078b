// y = x · Wᵀ straight from block-quantised checkpoint bytes (issue 13): FP8 E4M3 codes with UE8M0
// block scales (32×32, 128×128), and packed FP4 E2M1 codes (two per byte, low nibble = even
// column) with one UE8M0 scale per row per 32 columns. Spec: model.md §2 (storage), §4 (formats).
//
// Same function, same bits: each weight is dequantised in registers to code_value × scale, one
// float32 multiply, exactly as the scalar reference (model/dequant.h) widens it, and the products
// are summed in gemm_f32's order (gemm.h: 8 lanes by i mod 8, FMA, fixed lane tree; the portable
// path unfused like gemm_f32_portable). So gemm_quant on a view gives the bits gemm_f32 gives on
// the widened matrix, for every ISA path of the same kind (vector paths = gemm_f32's vector bits,
// portable = gemm_f32_portable's), including NaN codes (E4M3 0x7F / 0xFF → NaN, as dequant.h).
// Only the weight bytes read change: 1 (FP8) or ½ (FP4) byte per weight instead of 4.
// Two shortcuts keep those bits: matrices scanned NaN-free at load (nan_free) skip the NaN merge,
// and an FP8 block whose scale a whole tile shares scales x once instead of every weight where
// x · 2^k is exact (gemm_quant_fold.h), the FMA then forming the same exact product (so do the
// AVX2 FP4 tiles of ≤ 2 rows, per output and block).
// Owns nothing: a QuantWeights view borrows the mapped checkpoint.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

enum class QuantFormat : uint8_t { kFp8E4M3, kFp4E2M1 };

// A borrowed [rows, in] matrix in its stored format. Row r's codes start at codes + r·row_bytes();
// its scales are the UE8M0 bytes scales[((row_phase + r) >> block_rows_log2) · scale_cols + (c >>
// block_cols_log2)] for column c. row_phase ≠ 0 only for views that start inside a block row
// (a row slice of a bigger matrix, e.g. one output group of wo_a).
struct QuantWeights {
  QuantFormat format = QuantFormat::kFp8E4M3;
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0;         // rows of this view
  int64_t in = 0;           // logical columns (FP4: even)
  int64_t scale_cols = 0;   // ceil(in / block_cols)
  int32_t block_rows_log2 = 0, block_cols_log2 = 5;
  int32_t row_phase = 0;
  // FP8 only: true when no code is an E4M3 NaN (0x7F / 0xFF), as checked at load
  // (e4m3_codes_nan_free); the kernels then skip the per-element NaN merge. False is always safe.
  bool nan_free = false;

  int64_t row_bytes() const { return format == QuantFormat::kFp8E4M3 ? in : in / 2; }
  // The view of rows [r, ...): codes advanced, the scale row folded into scales + row_phase.
  QuantWeights rows_from(int64_t r) const;
  // The float32 value of element (r, c): code value × scale, as dequant.h computes it.
  float at(int64_t r, int64_t c) const;
};

// True when none of the n FP8 E4M3 codes is a NaN code (0x7F / 0xFF): a load-time scan whose
// answer lets a matrix take the kernels' NaN-free path (the results are the same either way).
bool e4m3_codes_nan_free(const uint8_t* codes, int64_t n);

// y[r, o] = Σ_i x[r, i] · w(o, i), in the order of gemm_f32 (see above); threaded on ex.pool,
// inner loop ex.gemm_isa(). w.in must equal `in`.
void gemm_quant(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out,
                float* y);
// The portable inner loop alone (gemm_f32_portable's order), for tests and CPUs without AVX2.
void gemm_quant_portable(const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out, float* y);

}  // namespace dsv41
