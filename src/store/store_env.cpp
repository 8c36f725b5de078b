// POSIX StoreEnv (store_env.h).
#include "store/store_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/file_io.h"

namespace dsv41 {
namespace {

Status os_error(const std::string& path, const char* call) {
  return io_error(path + ": " + call + ": " + std::strerror(errno));
}

class PosixFile final : public StoreFile {
 public:
  PosixFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixFile() override { ::close(fd_); }

  Result<size_t> pread(uint8_t* buf, size_t n, uint64_t off) override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, buf + done, n - done, static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return os_error(path_, "pread");
      }
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }

  Status pwrite(const uint8_t* buf, size_t n, uint64_t off) override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pwrite(fd_, buf + done, n - done, static_cast<off_t>(off + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return os_error(path_, "pwrite");
      }
      done += static_cast<size_t>(r);
    }
    return ok_status();
  }

  Status sync() override { return ::fdatasync(fd_) == 0 ? ok_status() : os_error(path_, "fdatasync"); }

  Status truncate(uint64_t size) override {
    return ::ftruncate(fd_, static_cast<off_t>(size)) == 0 ? ok_status() : os_error(path_, "ftruncate");
  }

  Result<uint64_t> size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return os_error(path_, "fstat");
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  int fd_;
};

class PosixLock final : public StoreLock {
 public:
  explicit PosixLock(int fd) : fd_(fd) {}
  ~PosixLock() override { ::close(fd_); }  // closing the last fd releases the flock

 private:
  int fd_;
};

class PosixEnv final : public StoreEnv {
 public:
  Result<std::unique_ptr<StoreFile>> open(const std::string& path, OpenMode mode) override {
    int flags = O_CLOEXEC;
    if (mode == OpenMode::kRead) flags |= O_RDONLY;
    if (mode == OpenMode::kReadWrite) flags |= O_RDWR;
    if (mode == OpenMode::kCreateNew) flags |= O_RDWR | O_CREAT | O_EXCL;
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return os_error(path, mode == OpenMode::kCreateNew ? "create" : "open");
    return std::unique_ptr<StoreFile>(new PosixFile(path, fd));
  }

  Status remove(const std::string& path) override {
    return ::unlink(path.c_str()) == 0 ? ok_status() : os_error(path, "unlink");
  }

  Status sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return os_error(dir, "open");
    Status s = ::fsync(fd) == 0 ? ok_status() : os_error(dir, "fsync");
    ::close(fd);
    return s;
  }

  Result<std::vector<std::string>> list_dir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return os_error(dir, "opendir");
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
    return names;
  }

  bool is_dir(const std::string& path) override { return is_directory(path); }

  Status create_dirs(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    return ec ? io_error(dir + ": create directory: " + ec.message()) : ok_status();
  }

  Result<std::string> read_file(const std::string& path) override {
    if (!is_regular_file(path)) return not_found(path + ": no such file");
    return dsv41::read_file(path);
  }

  Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) override {
    return dsv41::write_file_atomic(path, bytes);
  }

  Result<std::unique_ptr<StoreLock>> try_lock(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return os_error(path, "open");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder = "unknown pid";
      char buf[32] = {};
      if (::pread(fd, buf, sizeof buf - 1, 0) > 0) holder = "pid " + std::string(buf, std::strcspn(buf, "\n"));
      ::close(fd);
      if (err == EWOULDBLOCK) return invalid_argument(holder);
      errno = err;
      return os_error(path, "flock");
    }
    // The pid is only for the message a second writer gets; failing to record it is harmless.
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
    return std::unique_ptr<StoreLock>(new PosixLock(fd));
  }
};

}  // namespace

std::shared_ptr<StoreEnv> make_posix_store_env() { return std::make_shared<PosixEnv>(); }

}  // namespace dsv41
