// Local image files behind --image-dir (see image_file_url.h).
#include "format/image_file_url.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dsv41 {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path of a file: URL, percent-escapes decoded. A message for the client on error.
Result<std::string> file_url_path(std::string_view url) {
  std::string_view rest = url.substr(5);  // after "file:"
  if (rest.substr(0, 2) != "//")
    return invalid_argument("file: URL without '//': write a local file as file:///absolute/path");
  rest.remove_prefix(2);
  const size_t slash = rest.find('/');
  const std::string host = lower(rest.substr(0, slash));
  if (!host.empty() && host != "localhost")
    return invalid_argument("file: URL with host '" + host + "': only local files are read (file:///absolute/path)");
  if (slash == std::string_view::npos) return invalid_argument("file: URL without a path");
  rest.remove_prefix(slash);
  if (rest.find_first_of("?#") != std::string_view::npos)
    return invalid_argument("file: URL with a query or fragment ('?' or '#'; write them as %3F / %23 in a file name)");
  std::string path;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] != '%') {
      path += rest[i];
      continue;
    }
    const int hi = i + 2 < rest.size() ? hex_value(rest[i + 1]) : -1;
    const int lo = i + 2 < rest.size() ? hex_value(rest[i + 2]) : -1;
    if (hi < 0 || lo < 0) return invalid_argument(fmt::format("file: URL with a bad percent-escape at offset {}", i + 5 + 2 + slash));
    if (hi == 0 && lo == 0) return invalid_argument("file: URL with %00 in its path");
    path += char(hi * 16 + lo);
    i += 2;
  }
  return path;
}

// True when `path` is `root` or lies below it (both absolute and normal).
bool inside(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

// realpath(3); on failure *err is its errno.
Result<std::string> real_path(const std::string& path, int* err) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    *err = errno;
    return io_error(std::strerror(*err));
  }
  return std::string(buf);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

Result<ImageDir> open_image_dir(const std::string& dir) {
  if (dir.empty()) return invalid_argument("--image-dir: empty path");
  std::error_code ec;
  std::filesystem::path given = std::filesystem::absolute(dir, ec);
  if (ec) return io_error("--image-dir " + dir + ": " + ec.message());
  given = given.lexically_normal();
  std::string g = given.string();
  while (g.size() > 1 && g.back() == '/') g.pop_back();
  int err = 0;
  auto real = real_path(g, &err);
  if (!real.ok()) return io_error("--image-dir " + dir + ": " + real.status().message());
  struct stat st;
  if (::stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return invalid_argument("--image-dir " + dir + ": not a directory");
  return ImageDir{g, *real};
}

bool is_file_url(std::string_view url) { return lower(url.substr(0, 5)) == "file:"; }

Result<std::vector<uint8_t>> read_image_file_url(std::string_view url, const ImageDir& dir, uint64_t max_bytes) {
  if (!is_file_url(url)) return invalid_argument("not a file: URL");
  DSV41_ASSIGN_OR_RETURN(std::string path, file_url_path(url));
  const std::string named = "image file " + path;
  if (path.empty() || path[0] != '/') return invalid_argument(named + ": not an absolute path");
  // Lexically first: a path outside the directory is refused before the file system is asked.
  std::string normal = std::filesystem::path(path).lexically_normal().string();
  if (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  if (!inside(normal, dir.given) && !inside(normal, dir.real))
    return invalid_argument(named + ": outside the image directory (--image-dir)");
  int err = 0;
  auto real = real_path(normal, &err);
  if (!real.ok()) {
    if (err == ENOENT || err == ENOTDIR) return not_found(named + ": no such file");
    return io_error(named + ": " + real.status().message());
  }
  // A symlink inside the directory may lead out of it.
  if (!inside(*real, dir.real)) return invalid_argument(named + ": outside the image directory (--image-dir) once symlinks are resolved");
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
  Fd fd(::open(real->c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW));
  if (fd.get() < 0) return io_error(named + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return io_error(named + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return invalid_argument(named + ": is a directory, not an image file");
  if (!S_ISREG(st.st_mode)) return invalid_argument(named + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    return out_of_range(fmt::format("{}: {} bytes, more than the limit of {}", named, st.st_size, max_bytes));
  // What was opened, once more: a path component swapped for a symlink after the check above
  // shows here. (Without /proc the check above stands alone.)
  char buf[PATH_MAX];
  const std::string proc = "/proc/self/fd/" + std::to_string(fd.get());
  const ssize_t n = ::readlink(proc.c_str(), buf, sizeof(buf) - 1);
  if (n > 0 && !inside(std::string(buf, static_cast<size_t>(n)), dir.real))
    return invalid_argument(named + ": outside the image directory (--image-dir): it changed while it was opened");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error(named + ": read: " + std::strerror(errno));
    if (r == 0) break;  // shrank while read: what is there is decoded (and refused if cut)
    got += static_cast<size_t>(r);
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace dsv41
