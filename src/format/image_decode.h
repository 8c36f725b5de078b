// Decoding an image file (PNG or JPEG) into 8-bit RGB, with limits checked before any pixel
// buffer is allocated. Format-level only: what the model does with the pixels (resize, pad,
// normalise, patches) is model/vision/preprocess.h. Spec: model.md §3.10 ("convert to RGB").
//
// RGB conversion follows Pillow's `Image.convert("RGB")`, which the release's image processor
// calls: palette → its colours (transparency ignored), grey → (v, v, v), alpha dropped (not
// composited), 16-bit colour PNG samples → their high byte (Pillow's "RGB;16B" raw mode),
// 16-bit greyscale → min(value, 255) (Pillow opens it as an integer image and clips). JPEG goes
// through libjpeg-turbo with its defaults (islow DCT, fancy upsampling), as Pillow does.
// Checked against Pillow 9.4 (Debian 12) on RGB, L, LA, RGBA, P, 16-bit grey PNGs and baseline,
// progressive and greyscale JPEGs: identical pixels after preprocessing (docs/VISION.md).
// Known difference: CMYK / YCCK JPEG (rejected here as unsupported).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

struct ImageLimits {
  uint64_t max_bytes = 32ull << 20;    // encoded file size
  uint64_t max_pixels = 64ull << 20;   // width · height from the header, checked before decoding
};

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3], row-major
};

// "png", "jpeg" or "" (unknown) from the leading magic bytes.
std::string sniff_image_format(std::span<const uint8_t> bytes);

// Decodes `bytes` (PNG or JPEG, by magic bytes). Errors: empty input, too many bytes,
// unknown/unsupported format, zero width or height, too many pixels, truncated or corrupt data.
// `name` prefixes every message (a file name, "image 2", ...).
Result<RgbImage> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name);

// The codec halves (image_png.cpp, image_jpeg.cpp); decode_image checks bytes and dispatches.
Result<RgbImage> decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits);
Result<RgbImage> decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits);

// Writers, for tests and tools (8-bit RGB; JPEG at `quality` 1..100, 4:2:0).
Result<std::vector<uint8_t>> encode_png(const RgbImage& image);
Result<std::vector<uint8_t>> encode_jpeg(const RgbImage& image, int quality);

}  // namespace dsv41
