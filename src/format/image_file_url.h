// An image given as a local file (`file:///abs/path`, the OpenAI `image_url` content part; issue
// 16 "behind an option"): read only from inside one directory the operator chose (`dsv41 serve
// --image-dir DIR`). The request names the file; whether it may be read is decided here, on the
// real path (symlinks resolved), so neither `..` nor a symlink inside DIR can reach a file
// outside it. Nothing else is read: no host other than `localhost`, no relative path, no
// directory, device or FIFO, nothing over the byte limit (the data: URL limit).
//
// Order of the checks, and why: the path is first checked lexically (after `.` / `..` are
// folded), so a path outside DIR is refused without touching the file system — the answers
// "missing" and "outside" can then never be used to probe for files outside DIR. Then the real
// path must lie inside DIR's real path; then the file is opened, and the real path of what was
// opened (/proc/self/fd) is checked once more, so a symlink swapped in between cannot redirect
// the read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// The directory local images may come from: as given (absolute, lexically normal) and its real
// path. Made once at startup by open_image_dir.
struct ImageDir {
  std::string given;  // absolute, lexically normal, no trailing '/' (except "/")
  std::string real;   // realpath of `given`
};

// DIR must exist and be a directory; errors name it.
Result<ImageDir> open_image_dir(const std::string& dir);

// True when `url` is a `file:` URL (the scheme compared case-insensitively).
bool is_file_url(std::string_view url);

// `file:///abs/path` or `file://localhost/abs/path` (percent-escapes decoded; %00, a query or a
// fragment refused) → the file's bytes, when its real path lies inside `dir` and it is a regular
// file of at most `max_bytes` bytes. Errors are messages for the client: they name the path the
// request gave and the problem (outside the image directory, no such file, a directory, too
// large, …), never the real path a symlink leads to.
Result<std::vector<uint8_t>> read_image_file_url(std::string_view url, const ImageDir& dir, uint64_t max_bytes);

}  // namespace dsv41
