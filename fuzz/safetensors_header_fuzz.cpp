// libFuzzer target: arbitrary bytes as a whole safetensors file through the in-memory header
// parser (format/safetensors.h). The parser must return ok or an error, never crash or read
// outside the input; on success every entry must lie inside the data section.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = dsv41::parse_safetensors(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  if (h.ok()) {
    for (const auto& t : h->tensors) {
      if (t.end < t.begin || t.end > h->data_size || h->data_start + h->data_size != size) std::abort();
    }
  }
  return 0;
}
