// The one random generator of dsv41's random models (testing/random_model.cpp, `dsv41
// init-random`, random tokenizers): xoshiro256** seeded by splitmix64, "normal" values as an
// Irwin–Hall sum of 4 uniforms (24-bit) rescaled to unit variance — plain integer and float
// arithmetic, identical on every platform and libstdc++ (std::normal_distribution is not).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/rng.h"

namespace dsv41 {

// The deterministic generator: splitmix64 seeding, xoshiro256** output.
class RandomStream {
 public:
  explicit RandomStream(uint64_t seed) : gen_(seed) {}
  // Inline: a random model draws billions of these.
  uint64_t next() { return gen_.next(); }
  float uniform() { return gen_.uniform24(); }  // [0, 1), 24-bit resolution
  float normal() {  // mean 0, variance 1 (Irwin–Hall of 4 uniforms)
    // Sum of 4 U(0,1): mean 2, variance 4/12; scaled by sqrt(3) to unit variance. Drawn one
    // after another (the order the bytes of every written model depend on).
    const float u0 = uniform(), u1 = uniform(), u2 = uniform(), u3 = uniform();
    return (u0 + u1 + u2 + u3 - 2.0f) * 1.7320508f;
  }
 private:
  Xoshiro256 gen_;
};
uint64_t fnv1a64(std::string_view s);

}  // namespace dsv41
