// libFuzzer target: arbitrary bytes into decode_image (format/image_decode.h: PNG via libpng,
// JPEG via libjpeg-turbo), with a small pixel limit so a header may claim anything but no
// decode allocates much. A decoded image must have its pixels; its tower plan must fit the span;
// a small one must preprocess into patches in [-1, 1] (or a clear error: too thin to resize).
// Seeds: tests/data/images (scripts/run-fuzzers.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "format/image_decode.h"
#include "model/vision/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dsv41::ImageLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_pixels = 1 << 20;
  dsv41::Result<dsv41::RgbImage> image = dsv41::decode_image({data, size}, limits, "fuzz");
  if (!image.ok()) {
    if (image.status().message().rfind("fuzz: ", 0) != 0) std::abort();  // errors name the input
    return 0;
  }
  if (image->width <= 0 || image->height <= 0 || uint64_t(image->width) * image->height > limits.max_pixels ||
      image->rgb.size() != size_t(image->width) * image->height * 3)
    std::abort();
  dsv41::Result<dsv41::ImageGrid> grid = dsv41::plan_image_grid(image->width, image->height, {});
  if (!grid.ok() || grid->span_tokens() > 1024) std::abort();
  // Small images go through the whole preprocessing (Pillow's bicubic pad at fuzzer-chosen
  // sizes and aspect ratios) with a small span, so ASan sees the resampler's edge rows.
  if (uint64_t(image->width) * image->height <= 4096) {
    dsv41::VisionPreprocessConfig c;
    c.min_pixels = 1;
    c.max_image_tokens = 64;
    dsv41::Result<dsv41::VisionInput> in = dsv41::preprocess_image(*image, c);
    if (!in.ok()) {
      if (in.status().message().empty()) std::abort();
      return 0;
    }
    const dsv41::ImageGrid& g = in->grid;
    if (g.span_tokens() > 64 || in->patches.size() != size_t(g.n_vit_h) * g.n_vit_w * 3 * 14 * 14) std::abort();
    for (float v : in->patches)
      if (!(v >= -1.0f && v <= 1.0f)) std::abort();
  }
  return 0;
}
