// The random generator of random models (see random_stream.h).
#include "testing/random_stream.h"

namespace dsv41 {

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace dsv41
