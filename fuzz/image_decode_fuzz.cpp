// libFuzzer target: arbitrary bytes into decode_image (format/image_decode.h: PNG via libpng,
// JPEG via libjpeg-turbo), with a small pixel limit so a header may claim anything but no
// decode allocates much. A decoded image must have its pixels; its tower plan must fit the span.
// Seeds: any PNG/JPEG (tests write some; see docs/FUZZING.md).
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
  return 0;
}
