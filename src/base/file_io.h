// Small file-system primitives for dsv41: whole-file read, atomic whole-file write and a
// read-only memory map. Every other module does its file I/O through these, so every error
// carries the file name and the OS message ("model.safetensors: open: No such file or directory").
// Owns: the mapping (MappedFile unmaps on destruction).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace dsv41 {

// Reads the whole file into a string.
Result<std::string> read_file(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file beside it, then rename. On failure the
// temporary is removed and `path` is left as it was.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
// The same for several pieces written back to back (no concatenated copy in memory).
Status write_file_atomic(const std::string& path, std::span<const std::span<const uint8_t>> pieces);

// True if `path` names an existing directory / regular file.
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);

// A read-only, private mapping of a whole file. Empty files map to an empty span. The bytes stay
// valid for the lifetime of the object; share it (shared_ptr) with every view that borrows them.
class MappedFile {
 public:
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace dsv41
