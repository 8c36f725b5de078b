// Where the bytes of a chat `image_url` part come from (issue 16; docs/SERVER.md "Images"): a
// `data:` URL (format/image_data_url.h), or — only when the server was started with --image-dir —
// a `file:` URL under that directory (format/image_file_url.h). Nothing is ever fetched from the
// network: http(s) and every other scheme are refused, naming the URL.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/image_file_url.h"

namespace dsv41::server {

// `image_dir` null: file: URLs are refused, saying the server was not started with --image-dir.
// Errors are messages for the client (the caller prefixes the image's name).
Result<std::vector<uint8_t>> image_url_bytes(std::string_view url, const ImageDir* image_dir, uint64_t max_bytes);

}  // namespace dsv41::server
