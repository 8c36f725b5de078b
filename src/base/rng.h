// The project's deterministic random generator: splitmix64 seeding, xoshiro256** output.
// Used wherever dsv41 needs reproducible randomness (sampling, random-weight models); results
// depend only on the seed, never on the standard library's distributions.
#pragma once

#include <cstdint>

namespace dsv41 {

// One splitmix64 step: advances `state` and returns the next output.
uint64_t splitmix64(uint64_t& state);

class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);  // four splitmix64 outputs of `seed`
  uint64_t next();
  double uniform();    // [0, 1), 53 bits
  float uniform24();   // [0, 1), 24 bits

 private:
  uint64_t s_[4];
};

}  // namespace dsv41
