// POSIX implementations of the file primitives in file_io.h. Each failing system call becomes an
// io_error "<path>: <call>: <strerror>".
#include "base/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsv41 {
namespace {

Status os_error(const std::string& path, const char* call) {
  return io_error(path + ": " + call + ": " + std::strerror(errno));
}

// Closes an fd on scope exit (errors on close of a read-only fd carry no data loss).
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error(path, "open");
  FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return os_error(path, "fstat");
  if (!S_ISREG(st.st_mode)) return io_error(path + ": not a regular file");
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return os_error(path, "read");
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  const std::span<const uint8_t> one[] = {bytes};
  return write_file_atomic(path, one);
}

Status write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return os_error(tmp, "open");
  for (std::span<const uint8_t> bytes : pieces) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        Status s = os_error(tmp, "write");
        ::close(fd);
        ::unlink(tmp.c_str());
        return s;
      }
      done += static_cast<size_t>(n);
    }
  }
  if (::close(fd) != 0) {
    Status s = os_error(tmp, "close");
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = os_error(path, "rename");
    ::unlink(tmp.c_str());
    return s;
  }
  return ok_status();
}

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error(path, "open");
  FdCloser closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return os_error(path, "fstat");
  if (!S_ISREG(st.st_mode)) return io_error(path + ": not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return os_error(path, "mmap");
    // Ask for huge pages before the first touch: where the kernel and file system support large
    // page-cache folios (Linux ≥ 6.x on ext4 / xfs), the file's pages then come in as 2-MiB
    // folios mapped by one TLB entry each, and a decode step streaming the weights through them
    // runs ≈ 10 % faster than through 4-KiB pages (docs/BENCHMARKS.md, session 26). Pages already
    // cached in small folios stay small until the kernel drops them. Advice only: a kernel
    // without transparent huge pages refuses it, which changes nothing.
    (void)::madvise(p, size, MADV_HUGEPAGE);
    data = static_cast<const uint8_t*>(p);
  }
  return std::shared_ptr<const MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace dsv41
