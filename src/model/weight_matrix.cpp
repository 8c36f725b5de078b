// WeightMatrix: the bf16-or-f32 holding decision and the product dispatch (weight_matrix.h).
#include "model/weight_matrix.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "base/numerics.h"
#include "kernels/cpu/gemm.h"
#include "model/dequant.h"

namespace dsv41 {

float WeightRef::at(int64_t i) const {
  if (is_quant()) return quant.at(i / quant.in, i % quant.in);
  return bf16 ? bf16_to_f32(bf16[i]) : f32[i];
}

WeightRef WeightRef::offset(int64_t n) const {
  if (is_quant()) return WeightRef(quant.rows_from(n / quant.in));
  return bf16 ? WeightRef(bf16 + n) : WeightRef(f32 + n);
}

void matmul(const CpuExec& ex, const float* x, int64_t rows, int64_t in, WeightRef w, int64_t out, float* y) {
  if (w.is_quant()) {
    gemm_quant(ex, x, rows, in, w.quant, out, y);
  } else if (w.bf16) {
    gemm_bf16w(ex, x, rows, in, w.bf16, out, y);
  } else {
    gemm_f32(ex, x, rows, in, w.f32, out, y);
  }
}

GemmJob gemm_job(const float* x, int64_t rows, int64_t in, const WeightRef& w, int64_t out, float* y) {
  GemmJob j;
  j.x = x;
  j.rows = rows;
  j.in = in;
  j.out = out;
  j.y = y;
  if (w.is_quant()) {
    j.quant = &w.quant;
  } else if (w.bf16) {
    j.bf16 = w.bf16;
  } else {
    j.f32 = w.f32;
  }
  return j;
}

double dot_reference(WeightRef w, int64_t off, const float* a, int64_t n) {
  double acc = 0;
  if (w.is_quant()) {
    for (int64_t i = 0; i < n; ++i) acc += double(w.at(off + i)) * a[i];
  } else if (w.bf16) {
    for (int64_t i = 0; i < n; ++i) acc += double(bf16_to_f32(w.bf16[off + i])) * a[i];
  } else {
    for (int64_t i = 0; i < n; ++i) acc += double(w.f32[off + i]) * a[i];
  }
  return acc;
}

bool bf16_exact(const std::vector<float>& values) {
  for (float v : values) {
    if (std::isnan(v)) return false;
    const float back = bf16_to_f32(f32_to_bf16(v));
    uint32_t a, b;
    std::memcpy(&a, &v, sizeof a);
    std::memcpy(&b, &back, sizeof b);
    if (a != b) return false;
  }
  return true;
}

WeightMatrix make_weight_matrix(std::vector<float> values, bool allow_bf16) {
  WeightMatrix m;
  if (allow_bf16 && !values.empty() && bf16_exact(values)) {
    m.bf16.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) m.bf16[i] = f32_to_bf16(values[i]);
  } else {
    m.f32 = std::move(values);
  }
  return m;
}

Result<std::optional<QuantWeights>> stored_quant_view(const TensorView& weight, const TensorView* scale,
                                                      int64_t* bytes) {
  const bool fp8 = weight.dtype == DType::kF8E4M3 && scale != nullptr;
  const bool fp4 = is_packed_fp4(weight, scale);
  if ((!fp8 && !fp4) || scale->dtype != DType::kF8E8M0) return std::optional<QuantWeights>();
  const std::string name = weight.file + ": tensor '" + weight.name + "'";
  if (weight.shape.size() != 2 || scale->shape.size() != 2 || weight.numel() == 0)
    return corrupt(fmt::format("{} {} with scale {}: a stored FP8/FP4 matrix needs a non-empty 2-D weight and scale",
                               name, weight.shape_string(), scale->shape_string()));
  const std::vector<int64_t> logical = logical_shape(weight, scale);
  const int64_t rows = logical[0], cols = logical[1];
  ScaleBlock block{1, kRowScaleCols};
  if (fp8) {
    DSV41_ASSIGN_OR_RETURN(block, infer_scale_block(rows, cols, scale->shape[0], scale->shape[1], name));
  } else if (scale->shape[0] != rows || scale->shape[1] != (cols + kRowScaleCols - 1) / kRowScaleCols) {
    return corrupt(fmt::format("{} (FP4, logical [{}, {}]): scale '{}' {} is not one per row per {} columns", name,
                               rows, cols, scale->name, scale->shape_string(), kRowScaleCols));
  }
  // Blocks narrower than 32 columns would break the kernels' one-scale-per-32-columns walk.
  if (block.cols < 32)
    return corrupt(fmt::format("{}: scale block {}x{} is narrower than 32 columns", name, block.rows, block.cols));
  for (size_t k = 0; k < scale->bytes.size(); ++k)
    if (scale->bytes[k] == 0xFF)
      return corrupt(fmt::format("{}: scale '{}' holds the UE8M0 NaN code at [{}, {}]", name, scale->name,
                                 int64_t(k) / scale->shape[1], int64_t(k) % scale->shape[1]));
  QuantWeights q;
  q.format = fp8 ? QuantFormat::kFp8E4M3 : QuantFormat::kFp4E2M1;
  q.codes = weight.bytes.data();
  q.scales = scale->bytes.data();
  q.rows = rows;
  q.in = cols;
  q.scale_cols = scale->shape[1];
  q.block_rows_log2 = std::countr_zero(static_cast<uint64_t>(block.rows));
  q.block_cols_log2 = std::countr_zero(static_cast<uint64_t>(block.cols));
  // NaN codes are legal (they widen to NaN); a matrix without any takes the kernels' cheaper path.
  q.nan_free = fp8 && e4m3_codes_nan_free(q.codes, rows * cols);
  if (bytes) *bytes = int64_t(weight.bytes.size() + scale->bytes.size());
  return std::optional<QuantWeights>(q);
}

}  // namespace dsv41
