#include "model/vision/preprocess.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/numerics.h"
#include "model/vision/pillow_resize.h"

namespace dsv41 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void llm_grid(ImageGrid& g, const VisionPreprocessConfig& c) {
  g.n_llm_h = int(ceil_div(g.height / c.patch_size, c.downsample_ratio));
  g.n_llm_w = int(ceil_div(g.width / c.patch_size, c.downsample_ratio));
}

// solve_resize_ratio: the largest aspect-preserving pixel size whose span fits. Python's
// evaluation order is kept (each product/quotient left to right in double).
void solve_resize_ratio(double height, double width, const VisionPreprocessConfig& c, ImageGrid& g) {
  const int p = c.patch_size, cell = c.patch_size * c.downsample_ratio, t = c.max_image_tokens;
  const double r = height / width;
  const double max_w = std::sqrt(double(t - 2) / r + 0.25) - 0.5;
  const double max_h = max_w * r;
  if (max_w < 1.0) {  // very tall: one column
    g.height = (t - 2) / 2 * cell;
    g.width = cell;
  } else if (max_h < 1.0) {  // very wide: one row
    g.height = cell;
    g.width = (t - 3) * cell;
  } else {
    const double beta = std::min(std::floor(max_w) * cell / width, std::floor(max_h) * cell / height);
    g.height = int(std::floor(height * beta / p)) * p;
    g.width = int(std::floor(width * beta / p)) * p;
  }
}

}  // namespace

VisionPreprocessConfig preprocess_config(const VisionConfig& v) {
  VisionPreprocessConfig c;
  c.patch_size = v.patch_size;
  c.downsample_ratio = v.downsample_ratio;
  c.max_image_tokens = v.max_image_tokens;
  c.min_pixels = v.min_pixels;
  c.max_wh_ratio = v.max_wh_ratio;
  return c;
}

Result<ImageGrid> plan_image_grid(int width_px, int height_px, const VisionPreprocessConfig& c) {
  if (width_px <= 0 || height_px <= 0) return invalid_argument(fmt::format("image is {}x{}: empty", width_px, height_px));
  if (c.patch_size <= 0 || c.downsample_ratio <= 0 || c.max_image_tokens < 5)
    return invalid_argument("vision preprocessing config: patch size, downsample ratio or max tokens out of range");
  double width = width_px, height = height_px;
  if (c.max_wh_ratio && width > height * *c.max_wh_ratio) width = height * *c.max_wh_ratio;
  if (width * height < double(c.min_pixels)) {
    const double ratio = std::pow(double(c.min_pixels) / (width * height), 0.5);
    width = std::trunc(width * ratio);
    height = std::trunc(height * ratio);
  }
  ImageGrid g;
  const int p = c.patch_size;
  g.width = int(std::ceil(width / p)) * p;
  g.height = int(std::ceil(height / p)) * p;
  llm_grid(g, c);
  if (g.span_tokens() > c.max_image_tokens) {
    solve_resize_ratio(height, width, c, g);
    llm_grid(g, c);
    if (g.span_tokens() > c.max_image_tokens || g.width <= 0 || g.height <= 0)
      return internal_error(fmt::format("image plan {}x{} still has {} tokens", g.width, g.height, g.span_tokens()));
  }
  g.n_vit_h = g.height / p;
  g.n_vit_w = g.width / p;
  return g;
}

Result<VisionInput> preprocess_image(const RgbImage& image, const VisionPreprocessConfig& c) {
  VisionInput v;
  DSV41_ASSIGN_OR_RETURN(v.grid, plan_image_grid(image.width, image.height, c));
  const ImageGrid& g = v.grid;
  RgbImage canvas;
  if (c.max_wh_ratio && image.width >= *c.max_wh_ratio * image.height) {
    canvas = pillow_resize_bicubic(image, g.width, g.height);
  } else {
    DSV41_ASSIGN_OR_RETURN(canvas, pillow_pad(image, g.width, g.height, 127));
  }
  const int p = c.patch_size;
  v.patches.resize(size_t(g.n_vit_h) * g.n_vit_w * 3 * p * p);
  float* out = v.patches.data();
  for (int ph = 0; ph < g.n_vit_h; ++ph)
    for (int pw = 0; pw < g.n_vit_w; ++pw)
      for (int ch = 0; ch < 3; ++ch)
        for (int y = 0; y < p; ++y)
          for (int x = 0; x < p; ++x) {
            const uint8_t px = canvas.rgb[(size_t(ph * p + y) * g.width + size_t(pw * p + x)) * 3 + ch];
            const float unit = float(px) / 255.0f;
            *out++ = round_to_bf16((unit - 0.5f) / 0.5f);
          }
  return v;
}

}  // namespace dsv41
