// Safetensors checkpoints: strict header parsing, read-only mmap of one file or of a sharded model
// (model.safetensors.index.json → shards) as one TensorSet, and a writer.
// Spec: model.md §2 (dtypes the V4.1 release uses); format: 8-byte little-endian header length N,
// N bytes of UTF-8 JSON {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {..}},
// then the data section that the offsets index.
// Owns: the file mappings (TensorSet); TensorViews borrow bytes from them.
//
// Validation is strict and every error names the file and, where there is one, the tensor:
// header length within the file and ≤ kMaxHeaderBytes, valid UTF-8, a JSON object without
// duplicate keys, entries with exactly dtype/shape/data_offsets, known dtype, non-negative dims
// with an overflow-checked element count, bytes = numel × dtype size, offsets inside the data
// section and non-overlapping; across shards: no tensor twice, every indexed tensor present.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/file_io.h"
#include "base/status.h"

namespace dsv41 {

enum class DType { kF32, kF16, kBF16, kF8E4M3, kF8E8M0, kI8, kU8, kI32, kI64, kBool };

const char* dtype_name(DType dtype);                    // the safetensors spelling, "F8_E4M3"
size_t dtype_size(DType dtype);                         // bytes per element
std::optional<DType> parse_dtype(std::string_view name);  // nullopt for anything not above
inline bool is_float_dtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

// Header size limit: the real release's largest header is a few MB; 100 MB stops a forged length
// from making us allocate or scan gigabytes.
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// One tensor as a borrowed view. `bytes` point into a TensorSet's mapping (valid while the set
// lives) or, for the writer, into the caller's buffer. Element data are little-endian and NOT
// necessarily aligned: read them with memcpy.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
  std::string file;  // the file it came from, for messages

  int64_t numel() const;
  std::string shape_string() const;  // "[512, 64]"
};

// One header entry; offsets are relative to the start of the data section.
struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;            // in header (JSON) order
  std::map<std::string, std::string> metadata;  // "__metadata__", string → string
  uint64_t data_start = 0;                      // 8 + header length
  uint64_t data_size = 0;                       // file size - data_start
};

// Parses and validates the header of a whole safetensors file held in memory (`file` = all of
// its bytes). `source` names the file in messages. Never reads outside `file`; the entry point the
// fuzzer drives.
Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file, const std::string& source);

// All tensors of a checkpoint, from one file or from all shards of an index, by name.
// Movable; views handed out stay valid while any copy of the set lives (mappings are shared).
class TensorSet {
 public:
  // `path`: a .safetensors file, a model.safetensors.index.json, or a directory holding either
  // (the index wins when both exist).
  static Result<TensorSet> open(const std::string& path);
  static Result<TensorSet> open_file(const std::string& path);
  static Result<TensorSet> open_index(const std::string& index_path);

  const TensorView* find(std::string_view name) const;  // nullptr if absent
  bool has(std::string_view name) const { return find(name) != nullptr; }
  Result<TensorView> get(std::string_view name) const;  // not_found naming the source
  std::vector<std::string> names() const;               // sorted
  size_t size() const { return tensors_.size(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& source() const { return source_; }  // the path it was opened from
  size_t num_files() const { return files_.size(); }

 private:
  std::string source_;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  std::map<std::string, TensorView, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Serialises `tensors` (in the given order, data contiguous) with `metadata` to a single
// safetensors file at `path`, atomically. Validates names (non-empty, unique, not
// "__metadata__") and bytes = numel × dtype size first; nothing is written on error.
// The header is padded with spaces to a multiple of 8 bytes so the data section starts aligned.
Status write_safetensors(const std::string& path, std::span<const TensorView> tensors,
                         const std::map<std::string, std::string>& metadata = {});
// The same bytes in memory (what write_safetensors writes).
Result<std::vector<uint8_t>> serialize_safetensors(std::span<const TensorView> tensors,
                                                   const std::map<std::string, std::string>& metadata = {});

}  // namespace dsv41
