// The file operations the SSD store performs, behind one small interface (leveldb's Env idea),
// so tests can inject what real disks do rarely: a full disk, a failing sync, a short write.
// make_posix_store_env() is the real one; every error names the file and the failing call
// ("D/seg-…dseg: pwrite: No space left on device").
//
// Thread safety: a StoreEnv may be used from several threads; one StoreFile is used by the
// store's writer thread for writes and by any thread for pread (positional, no shared offset).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

class StoreFile {
 public:
  virtual ~StoreFile() = default;
  // Reads up to n bytes at off; fewer only at the end of the file.
  virtual Result<size_t> pread(uint8_t* buf, size_t n, uint64_t off) = 0;
  // Writes all n bytes at off, or fails (a partial write may remain; callers truncate it away).
  virtual Status pwrite(const uint8_t* buf, size_t n, uint64_t off) = 0;
  virtual Status sync() = 0;  // fdatasync: data and size durable
  virtual Status truncate(uint64_t size) = 0;
  virtual Result<uint64_t> size() = 0;
  virtual const std::string& path() const = 0;
};

// Held while the process owns a directory's writer lock; released on destruction (and by the
// kernel when the process dies).
class StoreLock {
 public:
  virtual ~StoreLock() = default;
};

class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  enum class OpenMode {
    kRead,       // existing file, read only
    kReadWrite,  // existing file
    kCreateNew,  // must not exist yet (O_EXCL)
  };
  virtual Result<std::unique_ptr<StoreFile>> open(const std::string& path, OpenMode mode) = 0;
  virtual Status remove(const std::string& path) = 0;
  virtual Status sync_dir(const std::string& dir) = 0;
  virtual Result<std::vector<std::string>> list_dir(const std::string& dir) = 0;  // names only
  virtual bool is_dir(const std::string& path) = 0;
  virtual Status create_dirs(const std::string& dir) = 0;  // like mkdir -p
  // not_found when the file does not exist.
  virtual Result<std::string> read_file(const std::string& path) = 0;
  virtual Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) = 0;
  // An exclusive, non-blocking lock on `path` (created if missing), recording this process's
  // pid in it. When another process holds it: kInvalidArgument whose message is the holder
  // ("pid 1234"); other failures are kIo naming the file.
  virtual Result<std::unique_ptr<StoreLock>> try_lock(const std::string& path) = 0;
};

// The real file system (POSIX calls; flock for the lock).
std::shared_ptr<StoreEnv> make_posix_store_env();

}  // namespace dsv41
