// libFuzzer target: arbitrary text into decode_image_data_url (format/image_data_url.h: the
// server's image_url data: URLs), with a small byte limit. A refusal has a message; an accepted
// URL is a data: URL of image/png or image/jpeg whose bytes are within the limit and carry that
// type's magic bytes; those bytes then go through decode_image, which must not crash either.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "format/image_data_url.h"
#include "format/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  constexpr uint64_t kMaxBytes = 1 << 16;
  dsv41::Result<dsv41::DataUrlImage> got = dsv41::decode_image_data_url(url, kMaxBytes);
  if (!got.ok()) {
    if (got.status().message().empty()) std::abort();
    return 0;
  }
  if (got->bytes.size() > kMaxBytes || got->bytes.empty()) std::abort();
  const std::string format = dsv41::sniff_image_format(got->bytes);
  if ((got->media_type == "image/png") != (format == "png")) std::abort();
  if ((got->media_type == "image/jpeg") != (format == "jpeg")) std::abort();
  dsv41::ImageLimits limits;
  limits.max_bytes = kMaxBytes;
  limits.max_pixels = 1 << 16;
  dsv41::Result<dsv41::RgbImage> image = dsv41::decode_image(got->bytes, limits, "fuzz");
  if (image.ok() && image->rgb.size() != size_t(image->width) * image->height * 3) std::abort();
  return 0;
}
