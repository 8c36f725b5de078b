// Record layout sizes (see record_layout.h).
#include "format/record_layout.h"

#include <string>

namespace dsv41 {
namespace {

constexpr size_t kWindowBlock = 32;  // channels per UE8M0 scale in window rows
constexpr size_t kMainBlock = 16;    // channels per E4M3 scale in main rows
constexpr size_t kIndexBlock = 32;   // channels per UE8M0 scale in index rows

}  // namespace

const char* row_kind_name(RowKind kind) {
  switch (kind) {
    case RowKind::kWindow: return "window";
    case RowKind::kMain: return "main";
    case RowKind::kIndex: return "index";
  }
  return "unknown";
}

size_t row_block_channels(RowKind kind) {
  switch (kind) {
    case RowKind::kWindow: return kWindowBlock;
    case RowKind::kMain: return kMainBlock;
    case RowKind::kIndex: return kIndexBlock;
  }
  return 0;
}

Status check_row_channels(RowKind kind, size_t channels) {
  const size_t block = row_block_channels(kind);
  if (channels == 0 || channels % block != 0) {
    return invalid_argument(std::string(row_kind_name(kind)) + " cache row: " + std::to_string(channels) +
                            " channels is not a positive multiple of the " + std::to_string(block) +
                            "-channel scale block");
  }
  return ok_status();
}

size_t window_row_bytes(size_t channels) { return channels + channels / kWindowBlock; }
size_t main_row_bytes(size_t channels) { return channels / 2 + channels / kMainBlock; }
size_t index_row_bytes(size_t channels) { return channels / 2 + channels / kIndexBlock; }

size_t row_bytes(RowKind kind, size_t channels) {
  switch (kind) {
    case RowKind::kWindow: return window_row_bytes(channels);
    case RowKind::kMain: return main_row_bytes(channels);
    case RowKind::kIndex: return index_row_bytes(channels);
  }
  return 0;
}

}  // namespace dsv41
