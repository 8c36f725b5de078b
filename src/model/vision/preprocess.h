// From an RGB image to the tower's input: the release's image processor
// (model.md §3.10, "Preprocessing"; `plan_image_grid`, `safe_resize`, `load_image` of the
// release's inference/image_processor.py).
//
//   1. plan: if w·h < min_pixels, both sides × √(min_pixels/(w·h)) (truncated); each side up to a
//      multiple of the patch size; if the span n_h·(n_w+1)+2 (n = ⌈(side/14)/3⌉) exceeds
//      max_tokens, the largest aspect-preserving size that fits (solve_resize_ratio, with its two
//      collapse cases for extreme aspect ratios).
//   2. pixels: Pillow's ImageOps.pad to that size, bicubic, grey 127 canvas (pillow_resize.h,
//      which says how exact that is); with max_wh_ratio set and a wide image, a plain bicubic
//      resize instead.
//   3. values: x/255, then (x − 0.5)/0.5, in float32, rounded to BF16 (what the release feeds
//      the tower); patches [n_vit_h·n_vit_w, 3, 14, 14]: channel, then row, then column inside
//      a patch; patches in row-major grid order.
#pragma once

#include <optional>
#include <vector>

#include "format/config.h"
#include "format/image_decode.h"

namespace dsv41 {

struct VisionPreprocessConfig {
  int patch_size = 14;
  int downsample_ratio = 3;
  int max_image_tokens = 1024;        // the whole span: start + rows·(cols + newline) + end
  int64_t min_pixels = 295936;        // 544²
  std::optional<double> max_wh_ratio; // null for V4.1
};

struct ImageGrid {
  int width = 0, height = 0;    // pixel size fed to the tower (multiples of patch_size)
  int n_vit_h = 0, n_vit_w = 0; // patch grid
  int n_llm_h = 0, n_llm_w = 0; // token grid after the 3×3 aligner
  // Span length in the prompt: n_llm_h·(n_llm_w + 1) + 2.
  int span_tokens() const { return n_llm_h * (n_llm_w + 1) + 2; }
};

// The preprocessing fields of a config's vision_config.
VisionPreprocessConfig preprocess_config(const VisionConfig& vision);

// Step 1 for an image of width × height (both > 0).
Result<ImageGrid> plan_image_grid(int width, int height, const VisionPreprocessConfig& config);

struct VisionInput {
  ImageGrid grid;
  std::vector<float> patches;  // [n_vit_h·n_vit_w, 3, patch, patch], BF16-exact values
};

// Steps 1–3.
Result<VisionInput> preprocess_image(const RgbImage& image, const VisionPreprocessConfig& config);

}  // namespace dsv41
