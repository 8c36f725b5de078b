// data: URLs of images (see image_data_url.h).
#include "format/image_data_url.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "format/image_decode.h"

namespace dsv41 {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

// The start of a URL for a message, never the whole (possibly megabytes of) payload.
std::string excerpt(std::string_view s) {
  return s.size() <= 40 ? std::string(s) : std::string(s.substr(0, 40)) + "…";
}

}  // namespace

Result<std::vector<uint8_t>> decode_base64(std::string_view text) {
  if (text.size() % 4 != 0)
    return invalid_argument(fmt::format("base64 of {} characters is not a multiple of 4 (padding '=' missing?)", text.size()));
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      // '=' only at the end: the last one or two characters of the last group.
      if (c == '=' && i + 4 == text.size() && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        v[k] = 0;
        ++pad;
        continue;
      }
      v[k] = base64_value(c);
      if (v[k] < 0 || pad > 0)
        return invalid_argument(fmt::format("not base64: character '{}' at offset {}", c, i + k));
    }
    const uint32_t n = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 | uint32_t(v[2]) << 6 | uint32_t(v[3]);
    out.push_back(uint8_t(n >> 16));
    if (pad < 2) out.push_back(uint8_t(n >> 8));
    if (pad < 1) out.push_back(uint8_t(n));
  }
  return out;
}

Result<DataUrlImage> decode_image_data_url(std::string_view url, uint64_t max_bytes) {
  if (lower(url.substr(0, 5)) != "data:")
    return invalid_argument("image URL '" + excerpt(url) +
                            "': only data: URLs are read (data:image/png;base64,… or data:image/jpeg;base64,…); "
                            "nothing is fetched from the network");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return invalid_argument("data: URL without ',' before its data");
  const std::string header = lower(url.substr(5, comma - 5));
  const size_t semi = header.find(';');
  std::string media = header.substr(0, semi);
  if (media == "image/jpg") media = "image/jpeg";
  if (media != "image/png" && media != "image/jpeg")
    return unsupported("data: URL of type '" + (media.empty() ? std::string("text/plain") : media) +
                       "': only image/png and image/jpeg are read");
  if (semi == std::string::npos || header.substr(semi).find(";base64") == std::string::npos)
    return unsupported("data: URL without ';base64': only base64 image data is read");
  const std::string_view data = url.substr(comma + 1);
  // Every 4 characters are at most 3 bytes: refuse an oversized image before decoding it.
  if (data.size() / 4 * 3 > max_bytes + 2)
    return out_of_range(fmt::format("data: URL holds about {} bytes of image, more than the limit of {}",
                                    data.size() / 4 * 3, max_bytes));
  auto bytes = decode_base64(data);
  if (!bytes.ok()) return bytes.status().with_context("data: URL");
  if (bytes->size() > max_bytes)
    return out_of_range(fmt::format("data: URL holds {} bytes of image, more than the limit of {}", bytes->size(), max_bytes));
  const std::string sniffed = sniff_image_format(*bytes);
  const std::string declared = media == "image/png" ? "png" : "jpeg";
  if (sniffed != declared)
    return invalid_argument("data: URL declares " + media + " but its data is " +
                            (sniffed.empty() ? std::string("neither PNG nor JPEG") : "a " + (sniffed == "png" ? std::string("PNG") : std::string("JPEG"))));
  return DataUrlImage{media, std::move(*bytes)};
}

}  // namespace dsv41
