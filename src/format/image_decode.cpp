#include "format/image_decode.h"

#include <fmt/format.h>

namespace dsv41 {

std::string sniff_image_format(std::span<const uint8_t> b) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() >= 8 && std::equal(kPng, kPng + 8, b.begin())) return "png";
  if (b.size() >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return "jpeg";
  return "";
}

Result<RgbImage> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name) {
  if (bytes.empty()) return invalid_argument(name + ": empty image (0 bytes)");
  if (bytes.size() > limits.max_bytes)
    return out_of_range(fmt::format("{}: image is {} bytes, more than the limit of {}", name, bytes.size(), limits.max_bytes));
  const std::string format = sniff_image_format(bytes);
  Result<RgbImage> image = format == "png"    ? decode_png(bytes, limits)
                           : format == "jpeg" ? decode_jpeg(bytes, limits)
                                              : Result<RgbImage>(unsupported("unsupported image format (only PNG and JPEG are read)"));
  if (!image.ok()) return image.status().with_context(name);
  return image;
}

}  // namespace dsv41
