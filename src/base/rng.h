// The project's deterministic random generator: splitmix64 seeding, xoshiro256** output.
// Used wherever dsv41 needs reproducible randomness (sampling, random-weight models); results
// depend only on the seed, never on the standard library's distributions.
#pragma once

#include <cstdint>

namespace dsv41 {

// One splitmix64 step: advances `state` and returns the next output.
uint64_t splitmix64(uint64_t& state);

// Defined here so that callers drawing millions of values (random models) inline them.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);  // four splitmix64 outputs of `seed`
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 bits
  float uniform24() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }  // [0, 1), 24 bits

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace dsv41
