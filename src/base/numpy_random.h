// Bit-exact reimplementation of the part of numpy's random module the Engram hash constants
// depend on: `numpy.random.default_rng(seed).integers(low, high, size, dtype=int64)`.
// Spec: model.md §3.8 (multipliers = 2·integers(0, B, size=max_ngram) + 1 from
// default_rng(10007·layer)).
//
//   default_rng(seed)  = Generator(PCG64(SeedSequence(seed)))
//   SeedSequence       : entropy words (seed as little-endian uint32 words, [0] for 0) hashed
//                        into a 4-word pool; generate_state(4 × uint64) draws from the pool.
//   PCG64              : 128-bit LCG (multiplier 0x2360ED051FC65DA44385DF649FCCF645),
//                        seeded with state = words 0-1, increment = words 2-3 (high word first),
//                        output XSL-RR of the state after each step.
//   integers           : Lemire's bounded method on 64-bit draws (on buffered 32-bit halves
//                        when the range fits in 32 bits), as numpy's random_bounded_uint64_fill.
// Written from numpy's documented algorithms and checked against numpy outputs in the tests.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv41 {

// numpy.random.SeedSequence(entropy).generate_state(n_words, np.uint32) for a non-negative
// integer entropy and no spawn key.
std::vector<uint32_t> seed_sequence_state(uint64_t entropy, int n_words32);

class NumpyPcg64 {
 public:
  // numpy.random.default_rng(seed).bit_generator
  explicit NumpyPcg64(uint64_t seed);

  uint64_t next_u64();
  uint32_t next_u32();  // numpy's buffered halves: low 32 bits first, then the high 32 bits

  // Generator.integers(low, high, dtype=np.int64) for one value; high > low.
  int64_t integers(int64_t low, int64_t high);

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has_u32_ = false;
  uint32_t u32_ = 0;
};

}  // namespace dsv41
