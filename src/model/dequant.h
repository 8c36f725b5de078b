// Dequantisation of stored checkpoint tensors to float32: float widening, FP8 E4M3 with block
// scales, packed FP4 E2M1 experts with per-32 scales. Spec: model.md §2 (storage), §4 (formats).
// Owns nothing: inputs are borrowed TensorViews, outputs fresh FloatTensors.
//
// This is the scalar reference (a lookup table per code, one multiply per element); it is what
// WeightRegistry::load_f32 uses and what any faster path must match.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/safetensors.h"

namespace dsv41 {

// A dense float32 tensor, row-major.
struct FloatTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
  int64_t numel() const;
};

// The rectangle of weight elements that share one scale.
struct ScaleBlock {
  int64_t rows = 0, cols = 0;
};

// The block sizes a scale tensor may imply (model.md §2: 32×32 for V4.1, 128×128 for V4, one row
// by 32 columns for the row-wise Engram table and FP4 experts).
inline constexpr ScaleBlock kScaleBlocks[] = {{32, 32}, {128, 128}, {1, 32}};
// Columns per scale of row-wise scaled tensors (FP4 experts, the Engram table): a format
// constant of the release (model.md §2), not a model size.
inline constexpr int64_t kRowScaleCols = 32;

// Infers the block from the weight's logical [rows, cols] and the scale's [srows, scols]:
// the first candidate with ceil(rows/br) == srows and ceil(cols/bc) == scols. When several match
// the weight lies inside one block either way, so the choice cannot change any value.
// `name` is for the message.
Result<ScaleBlock> infer_scale_block(int64_t rows, int64_t cols, int64_t scale_rows, int64_t scale_cols,
                                     const std::string& name);

// True for I8/U8 weights with a scale: two FP4 codes per byte.
bool is_packed_fp4(const TensorView& weight, const TensorView* scale);
// The logical shape of a stored weight (FP4: columns doubled).
std::vector<int64_t> logical_shape(const TensorView& weight, const TensorView* scale);

// The whole tensor as float32. `scale` is the weight's `.scale` companion or nullptr.
// Errors (naming the tensor): an FP8/FP4 weight without a scale, a scale whose shape fits no
// block, a NaN or infinite scale, a dtype that is not a weight format (I32, I64, BOOL, ...).
Result<FloatTensor> dequantize(const TensorView& weight, const TensorView* scale);

// Rows `rows` of a 2-D weight as float32, shape [rows.size(), cols]; ids are bounds-checked and
// only the scales of those rows are read (the Engram table is hundreds of GB of rows).
Result<FloatTensor> dequantize_rows(const TensorView& weight, const TensorView* scale,
                                    std::span<const int64_t> rows);
// The same rows written to out [rows.size(), cols], where cols must be the weight's logical row
// width (checked). Allocates nothing when it succeeds (the Engram lookup of every decode step).
Status dequantize_rows_to(const TensorView& weight, const TensorView* scale, std::span<const int64_t> rows,
                          int64_t cols, float* out);

}  // namespace dsv41
