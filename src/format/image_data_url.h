// An image given inline as an RFC 2397 `data:` URL (the OpenAI `image_url` content part; issue
// 16): `data:image/png;base64,<base64>` or `data:image/jpeg;base64,…` → the file's bytes, checked
// before anything is decoded. Anything else is refused with a message naming the problem: an
// http(s) or other URL (nothing is fetched from the network), a media type other than PNG / JPEG,
// no `;base64` (percent-encoded bytes are not read), bad base64 (the offset of the first bad
// character), more bytes than the limit (known from the base64 length, before decoding), and data
// whose magic bytes say another format than the declared type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

struct DataUrlImage {
  std::string media_type;      // "image/png" or "image/jpeg" (image/jpg is read as image/jpeg)
  std::vector<uint8_t> bytes;  // the encoded file
};

Result<DataUrlImage> decode_image_data_url(std::string_view url, uint64_t max_bytes);

// Standard base64 (RFC 4648 §4, '=' padding required to a multiple of 4, no whitespace) → bytes.
// An error names the offset of the first character that does not fit.
Result<std::vector<uint8_t>> decode_base64(std::string_view text);

}  // namespace dsv41
