// The random generator of random models (see random_stream.h).
#include "testing/random_stream.h"

namespace dsv41 {

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

uint64_t RandomStream::next() { return gen_.next(); }
float RandomStream::uniform() { return gen_.uniform24(); }

float RandomStream::normal() {
  // Sum of 4 U(0,1): mean 2, variance 4/12; scaled by sqrt(3) to unit variance.
  const float s = uniform() + uniform() + uniform() + uniform();
  return (s - 2.0f) * 1.7320508f;
}

}  // namespace dsv41
