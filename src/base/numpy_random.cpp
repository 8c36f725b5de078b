// numpy SeedSequence + PCG64 + Generator.integers (int64), bit-exact. See numpy_random.h.
#include "base/numpy_random.h"

#include <cstddef>

namespace dsv41 {

namespace {

// SeedSequence constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

constexpr unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;

}  // namespace

std::vector<uint32_t> seed_sequence_state(uint64_t entropy, int n_words32) {
  // Entropy as little-endian 32-bit words; zero is the single word [0].
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy != 0);

  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i)
    pool[i] = hashmix(i < static_cast<int>(words.size()) ? words[i] : 0u, hash_const);
  for (int src = 0; src < kPoolSize; ++src)
    for (int dst = 0; dst < kPoolSize; ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
  for (std::size_t src = kPoolSize; src < words.size(); ++src)
    for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], hash_const));

  std::vector<uint32_t> out(n_words32);
  uint32_t hc = kInitB;
  for (int i = 0; i < n_words32; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hc;
    hc *= kMultB;
    v *= hc;
    v ^= v >> kXShift;
    out[i] = v;
  }
  return out;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  // generate_state(4, uint64): uint32 pairs read little-endian.
  const std::vector<uint32_t> w = seed_sequence_state(seed, 8);
  uint64_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = uint64_t(w[2 * i]) | (uint64_t(w[2 * i + 1]) << 32);
  const unsigned __int128 initstate = (static_cast<unsigned __int128>(v[0]) << 64) | v[1];
  const unsigned __int128 initseq = (static_cast<unsigned __int128>(v[2]) << 64) | v[3];
  // pcg_setseq_128_srandom_r
  state_ = 0;
  inc_ = (initseq << 1) | 1u;
  state_ = state_ * kPcgMult + inc_;
  state_ += initstate;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t NumpyPcg64::next_u64() {
  state_ = state_ * kPcgMult + inc_;
  const uint64_t hi = static_cast<uint64_t>(state_ >> 64), lo = static_cast<uint64_t>(state_);
  const unsigned rot = static_cast<unsigned>(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyPcg64::next_u32() {
  if (has_u32_) {
    has_u32_ = false;
    return u32_;
  }
  const uint64_t v = next_u64();
  has_u32_ = true;
  u32_ = static_cast<uint32_t>(v >> 32);
  return static_cast<uint32_t>(v);
}

int64_t NumpyPcg64::integers(int64_t low, int64_t high) {
  // numpy draws over the inclusive range [low, high - 1].
  const uint64_t rng = static_cast<uint64_t>(high) - static_cast<uint64_t>(low) - 1;
  uint64_t r = 0;
  if (rng == 0) {
    r = 0;  // no draw is consumed
  } else if (rng <= 0xFFFFFFFFull) {
    if (rng == 0xFFFFFFFFull) {
      r = next_u32();
    } else {  // buffered_bounded_lemire_uint32
      const uint32_t rng_excl = static_cast<uint32_t>(rng) + 1;
      uint64_t m = uint64_t(next_u32()) * rng_excl;
      uint32_t leftover = static_cast<uint32_t>(m);
      if (leftover < rng_excl) {
        const uint32_t threshold = (0xFFFFFFFFu - static_cast<uint32_t>(rng)) % rng_excl;
        while (leftover < threshold) {
          m = uint64_t(next_u32()) * rng_excl;
          leftover = static_cast<uint32_t>(m);
        }
      }
      r = m >> 32;
    }
  } else if (rng == 0xFFFFFFFFFFFFFFFFull) {
    r = next_u64();
  } else {  // bounded_lemire_uint64
    const uint64_t rng_excl = rng + 1;
    unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * rng_excl;
    uint64_t leftover = static_cast<uint64_t>(m);
    if (leftover < rng_excl) {
      const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
      while (leftover < threshold) {
        m = static_cast<unsigned __int128>(next_u64()) * rng_excl;
        leftover = static_cast<uint64_t>(m);
      }
    }
    r = static_cast<uint64_t>(m >> 64);
  }
  return static_cast<int64_t>(static_cast<uint64_t>(low) + r);
}

}  // namespace dsv41
