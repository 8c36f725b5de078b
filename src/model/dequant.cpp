// Scalar dequantisation (see dequant.h). A weight is decoded row by row: the row's scales are
// read (and checked for NaN) once, then each element is code-value × its block's scale.
#include "model/dequant.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>

#include "base/numerics.h"

namespace dsv41 {
namespace {

enum class Kind { kFloat, kFp8, kFp4 };

// How to decode one stored 2-D weight (or a float tensor of any rank when there is no scale).
struct Plan {
  Kind kind = Kind::kFloat;
  int64_t rows = 1, cols = 0;     // logical
  const TensorView* scale = nullptr;
  ScaleBlock block;
  int64_t scale_cols = 0;
};

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> a{};
    for (int c = 0; c < 256; ++c) a[c] = e4m3_to_f32(static_cast<uint8_t>(c));
    return a;
  }();
  return t;
}

const std::array<float, 16>& e2m1_table() {
  static const std::array<float, 16> t = [] {
    std::array<float, 16> a{};
    for (int c = 0; c < 16; ++c) a[c] = e2m1_to_f32(static_cast<uint8_t>(c));
    return a;
  }();
  return t;
}

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// One element of a float-format tensor (unaligned-safe, little-endian).
float load_float(DType d, const uint8_t* p) {
  switch (d) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16: return bf16_to_f32(load_u16(p));
    case DType::kF16: return f16_to_f32(load_u16(p));
    case DType::kF8E8M0: return ue8m0_to_f32(*p);
    default: return NAN;  // unreachable: callers check the dtype first
  }
}

std::string q(const std::string& s) { return "'" + s + "'"; }

// The first block size the scale's shape fits (see infer_scale_block), or null.
const ScaleBlock* match_scale_block(int64_t rows, int64_t cols, int64_t scale_rows, int64_t scale_cols) {
  for (const ScaleBlock& b : kScaleBlocks)
    if ((rows + b.rows - 1) / b.rows == scale_rows && (cols + b.cols - 1) / b.cols == scale_cols) return &b;
  return nullptr;
}

Result<Plan> make_plan(const TensorView& w, const TensorView* scale) {
  Plan p;
  const bool fp8 = w.dtype == DType::kF8E4M3;
  const bool packed = is_packed_fp4(w, scale);
  // A bare UE8M0 tensor (a scale itself) widens like a float tensor.
  const bool plain = is_float_dtype(w.dtype) || (w.dtype == DType::kF8E8M0 && scale == nullptr);
  if (!plain && !fp8 && !packed) {
    if (w.dtype == DType::kI8 || w.dtype == DType::kU8)
      return corrupt(fmt::format("{}: tensor {}: {} without a '.scale' companion is not a packed FP4 weight",
                                 w.file, q(w.name), dtype_name(w.dtype)));
    return unsupported(fmt::format("{}: tensor {}: dtype {} is not a weight format (no float32 view)", w.file,
                                   q(w.name), dtype_name(w.dtype)));
  }
  if (fp8 && scale == nullptr)
    return corrupt(fmt::format("{}: tensor {}: F8_E4M3 weight without its '.scale' companion", w.file, q(w.name)));
  p.kind = fp8 ? Kind::kFp8 : packed ? Kind::kFp4 : Kind::kFloat;
  if (scale == nullptr) {  // plain float tensor, any rank
    p.rows = 1;
    p.cols = w.numel();
    return p;
  }
  if (w.shape.size() != 2 || scale->shape.size() != 2)
    return corrupt(fmt::format("{}: tensor {} {} with scale {}: block scales need 2-D weight and scale", w.file,
                               q(w.name), w.shape_string(), scale->shape_string()));
  if (scale->dtype != DType::kF8E8M0 && !is_float_dtype(scale->dtype))
    return corrupt(fmt::format("{}: scale {} has dtype {}, expected F8_E8M0 or a float type", scale->file,
                               q(scale->name), dtype_name(scale->dtype)));
  p.rows = w.shape[0];
  p.cols = packed ? 2 * w.shape[1] : w.shape[1];
  p.scale = scale;
  p.scale_cols = scale->shape[1];
  if (packed) {
    // FP4 experts: one scale per row per 32 logical columns, nothing else.
    const int64_t want_cols = (p.cols + kRowScaleCols - 1) / kRowScaleCols;
    if (scale->shape[0] != p.rows || scale->shape[1] != want_cols)
      return corrupt(fmt::format("{}: FP4 weight {} [{}, {}] (packed {}) needs scale [{}, {}], found {} {}",
                                 w.file, q(w.name), p.rows, p.cols, w.shape_string(), p.rows, want_cols,
                                 q(scale->name), scale->shape_string()));
    p.block = {1, kRowScaleCols};
    return p;
  }
  // The name is only built for the error (plans are made at every Engram lookup).
  if (const ScaleBlock* b = match_scale_block(p.rows, p.cols, scale->shape[0], scale->shape[1])) {
    p.block = *b;
    return p;
  }
  return infer_scale_block(p.rows, p.cols, scale->shape[0], scale->shape[1], w.file + ": tensor '" + w.name + "'")
      .status();
}

// Decodes logical row `r` into out[0..cols).
Status decode_row(const Plan& p, const TensorView& w, int64_t r, float* out) {
  const int64_t cols = p.cols;
  if (p.kind == Kind::kFloat && p.scale == nullptr) {
    const size_t es = dtype_size(w.dtype);
    const uint8_t* src = w.bytes.data() + static_cast<size_t>(r * cols) * es;
    // The common dtypes get their own loops (dispatch once per row, not per element).
    if (w.dtype == DType::kF32) {
      if (cols > 0) std::memcpy(out, src, static_cast<size_t>(cols) * 4);
    } else if (w.dtype == DType::kBF16) {
      for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(load_u16(src + 2 * c));
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = load_float(w.dtype, src + c * es);
    }
    return ok_status();
  }
  // This row's scales, one per column block.
  const int64_t srow = r / p.block.rows;
  const int64_t nblocks = p.scale_cols;
  const size_t ses = dtype_size(p.scale->dtype);
  // Every scale of the row is checked before anything is written, then read again per block (no
  // buffer: rows are decoded at every Engram lookup, which must not allocate).
  auto scale_at = [&](int64_t b) {
    return load_float(p.scale->dtype, p.scale->bytes.data() + static_cast<size_t>(srow * nblocks + b) * ses);
  };
  for (int64_t b = 0; b < nblocks; ++b) {
    const float sb = scale_at(b);
    if (!std::isfinite(sb))
      return corrupt(fmt::format("{}: scale {} of weight {}: {} at [{}, {}]", p.scale->file, q(p.scale->name),
                                 q(w.name), std::isnan(sb) ? "NaN" : "infinite", srow, b));
  }
  // Column blocks outermost so the scale is looked up once per block, not divided out per element
  // (the Engram rows are dequantised at every lookup); each value is still code value × scale.
  const int64_t bc = p.block.cols;
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t c0 = b * bc, c1 = std::min(cols, c0 + bc);
    const float sb = scale_at(b);
    switch (p.kind) {
      case Kind::kFloat: {
        const size_t es = dtype_size(w.dtype);
        const uint8_t* src = w.bytes.data() + static_cast<size_t>(r * cols) * es;
        for (int64_t c = c0; c < c1; ++c) out[c] = load_float(w.dtype, src + c * es) * sb;
        break;
      }
      case Kind::kFp8: {
        const auto& lut = e4m3_table();
        const uint8_t* src = w.bytes.data() + static_cast<size_t>(r * cols);
        for (int64_t c = c0; c < c1; ++c) out[c] = lut[src[c]] * sb;
        break;
      }
      case Kind::kFp4: {
        const auto& lut = e2m1_table();
        const uint8_t* src = w.bytes.data() + static_cast<size_t>(r * (cols / 2));
        for (int64_t c = c0; c < c1; ++c) {
          const uint8_t byte = src[c / 2];  // column 2k in the low nibble, 2k+1 in the high nibble
          out[c] = lut[(c & 1) ? (byte >> 4) : (byte & 0x0F)] * sb;
        }
        break;
      }
    }
  }
  return ok_status();
}

}  // namespace

int64_t FloatTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<ScaleBlock> infer_scale_block(int64_t rows, int64_t cols, int64_t scale_rows, int64_t scale_cols,
                                     const std::string& name) {
  if (const ScaleBlock* b = match_scale_block(rows, cols, scale_rows, scale_cols)) return *b;
  return corrupt(fmt::format("{}: scale shape [{}, {}] fits no block size (32x32, 128x128, 1x32) for weight [{}, {}]",
                             name, scale_rows, scale_cols, rows, cols));
}

bool is_packed_fp4(const TensorView& weight, const TensorView* scale) {
  return scale != nullptr && (weight.dtype == DType::kI8 || weight.dtype == DType::kU8);
}

std::vector<int64_t> logical_shape(const TensorView& weight, const TensorView* scale) {
  std::vector<int64_t> s = weight.shape;
  if (is_packed_fp4(weight, scale) && !s.empty()) s.back() *= 2;
  return s;
}

Result<FloatTensor> dequantize(const TensorView& weight, const TensorView* scale) {
  DSV41_ASSIGN_OR_RETURN(Plan p, make_plan(weight, scale));
  FloatTensor out;
  out.shape = logical_shape(weight, scale);
  try {
    out.data.resize(static_cast<size_t>(p.rows * p.cols));
  } catch (const std::bad_alloc&) {
    return out_of_range(fmt::format("{}: tensor {} {}: too large to widen to float32 in memory", weight.file,
                                    q(weight.name), weight.shape_string()));
  }
  for (int64_t r = 0; r < p.rows; ++r) DSV41_RETURN_IF_ERROR(decode_row(p, weight, r, out.data.data() + r * p.cols));
  return out;
}

Status dequantize_rows_to(const TensorView& weight, const TensorView* scale, std::span<const int64_t> rows,
                          int64_t cols, float* out) {
  if (weight.shape.size() != 2)
    return invalid_argument(fmt::format("{}: tensor {} {}: row lookup needs a 2-D tensor", weight.file,
                                        q(weight.name), weight.shape_string()));
  DSV41_ASSIGN_OR_RETURN(Plan p, make_plan(weight, scale));
  // Without a scale the plan treats the tensor as one flat row; view it as [rows, cols] here.
  const int64_t nrows = weight.shape[0];
  const int64_t width = scale == nullptr ? weight.shape[1] : p.cols;
  if (scale == nullptr) { p.rows = nrows; p.cols = width; }
  if (width != cols)
    return internal_error(fmt::format("{}: tensor {}: rows have {} columns, expected {}", weight.file, q(weight.name),
                                      width, cols));
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= nrows)
      return out_of_range(fmt::format("{}: tensor {}: row {} outside [0, {})", weight.file, q(weight.name),
                                      rows[i], nrows));
    DSV41_RETURN_IF_ERROR(decode_row(p, weight, rows[i], out + i * cols));
  }
  return ok_status();
}

Result<FloatTensor> dequantize_rows(const TensorView& weight, const TensorView* scale, std::span<const int64_t> rows) {
  if (weight.shape.size() != 2)
    return invalid_argument(fmt::format("{}: tensor {} {}: row lookup needs a 2-D tensor", weight.file,
                                        q(weight.name), weight.shape_string()));
  DSV41_ASSIGN_OR_RETURN(Plan p, make_plan(weight, scale));
  const int64_t cols = scale == nullptr ? weight.shape[1] : p.cols;
  FloatTensor out;
  out.shape = {static_cast<int64_t>(rows.size()), cols};
  out.data.resize(rows.size() * static_cast<size_t>(cols));
  DSV41_RETURN_IF_ERROR(dequantize_rows_to(weight, scale, rows, cols, out.data.data()));
  return out;
}

}  // namespace dsv41
