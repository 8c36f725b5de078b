// The bytes of an image_url part (see image_source.h).
#include "server/image_source.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "format/image_data_url.h"

namespace dsv41::server {
namespace {

// The start of a URL for a message, never a whole (possibly long) URL.
std::string excerpt(std::string_view s) { return s.size() <= 60 ? std::string(s) : std::string(s.substr(0, 60)) + "…"; }

}  // namespace

Result<std::vector<uint8_t>> image_url_bytes(std::string_view url, const ImageDir* image_dir, uint64_t max_bytes) {
  std::string scheme(url.substr(0, 5));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (scheme == "data:") {
    DSV41_ASSIGN_OR_RETURN(DataUrlImage data, decode_image_data_url(url, max_bytes));
    return std::move(data.bytes);
  }
  if (is_file_url(url)) {
    if (!image_dir)
      return unsupported("image URL '" + excerpt(url) +
                         "': local files are read only when the server is started with --image-dir DIR (it was not)");
    return read_image_file_url(url, *image_dir, max_bytes);
  }
  if (!url.empty() && url[0] == '/')
    return invalid_argument("image URL '" + excerpt(url) + "': a local file is given as a file: URL (file://" +
                            excerpt(url) + "), read only under the server's --image-dir");
  return invalid_argument("image URL '" + excerpt(url) +
                          "': only data: URLs (data:image/png;base64,… or data:image/jpeg;base64,…) and, with "
                          "--image-dir, file: URLs are read; nothing is fetched from the network");
}

}  // namespace dsv41::server
