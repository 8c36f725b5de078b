// Tests of the cache record codecs (records.h): sizes, byte layout, worked examples computed by
// hand, clamps, all-zero and non-finite blocks, and the three-way agreement
// unpack(pack(x)) == fake_quant(x) == fake_quant(fake_quant(x)) bit for bit on random rows;
// and the unpack fast paths (table, AVX2, the dispatching entry points) against the reference
// bit for bit on random records holding every code and every scale code.
#include "cache/records.h"
#include "cache/records_reference.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/numerics.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/unpack_avx2.h"
#include "kernels/cpu/unpack_avx512.h"

namespace dsv41 {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint32_t kCanonicalNaN = 0x7FC00000u;

const RowKind kKinds[] = {RowKind::kWindow, RowKind::kMain, RowKind::kIndex};

std::vector<float> fake(RowKind kind, std::vector<float> x) {
  row_fake_quant(kind, x.data(), x.size());
  return x;
}

std::vector<float> pack_unpack(RowKind kind, const std::vector<float>& x, std::vector<uint8_t>* record = nullptr) {
  std::vector<uint8_t> rec(row_bytes(kind, x.size()));
  row_pack(kind, x.data(), x.size(), rec.data());
  std::vector<float> out(x.size(), 12345.0f);
  row_unpack(kind, rec.data(), x.size(), out.data());
  if (record) *record = rec;
  return out;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(bits(a[i]), bits(b[i])) << what << " channel " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(CacheRecords, SizesForV41AndTinyConfigs) {
  // V4.1-Flash: head_dim 512, index_head_dim 128 (model.md §4).
  EXPECT_EQ(window_row_bytes(512), 528u);
  EXPECT_EQ(main_row_bytes(512), 288u);
  EXPECT_EQ(index_row_bytes(128), 68u);
  // Tiny fixture: head_dim 64, index_head_dim 32.
  EXPECT_EQ(window_row_bytes(64), 66u);
  EXPECT_EQ(main_row_bytes(64), 36u);
  EXPECT_EQ(index_row_bytes(32), 17u);
  EXPECT_EQ(row_bytes(RowKind::kWindow, 512), 528u);
  EXPECT_EQ(row_bytes(RowKind::kMain, 512), 288u);
  EXPECT_EQ(row_bytes(RowKind::kIndex, 128), 68u);
}

TEST(CacheRecords, ChannelCountsMustBeWholeBlocks) {
  EXPECT_TRUE(check_row_channels(RowKind::kWindow, 512).ok());
  EXPECT_TRUE(check_row_channels(RowKind::kMain, 48).ok());
  EXPECT_TRUE(check_row_channels(RowKind::kIndex, 32).ok());
  Status s = check_row_channels(RowKind::kWindow, 48);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(s.message(), "window cache row: 48 channels is not a positive multiple of the 32-channel scale block");
  EXPECT_FALSE(check_row_channels(RowKind::kMain, 0).ok());
  EXPECT_FALSE(check_row_channels(RowKind::kIndex, 16).ok());
}

TEST(CacheRecords, WindowWorkedExampleAndLayout) {
  std::vector<float> x(64);
  for (int c = 0; c < 32; ++c) x[c] = 0.37f * c;  // amax 11.47 -> /448 = 0.0256 -> scale 2^-5
  x[32] = 448.0f;                                 // amax 448 -> scale exactly 1
  x[33] = -1.0f;
  x[34] = 449.0f - 448.0f + 0.0625f;              // 1.0625: tie between 1 and 1.125 -> 1
  std::vector<uint8_t> rec;
  const std::vector<float> out = pack_unpack(RowKind::kWindow, x, &rec);
  ASSERT_EQ(rec.size(), 66u);
  EXPECT_EQ(rec[64], 127 - 5);  // block 0 scale byte: UE8M0 2^-5
  EXPECT_EQ(rec[65], 127);      // block 1 scale byte: 2^0
  EXPECT_EQ(rec[0], 0x00);
  EXPECT_EQ(rec[32], 0x7E);  // 448
  EXPECT_EQ(rec[33], 0xB8);  // -1
  EXPECT_EQ(rec[34], 0x38);  // 1.0625 -> 1
  EXPECT_EQ(out[1], 0.375f);  // 0.37 * 32 = 11.84 -> 12 (step 1 in [8,16)) -> 12/32
  EXPECT_EQ(out[31], 11.0f);  // 11.47 * 32 = 367.04 -> 352 (step 32 in [256,448]) -> 11
  EXPECT_EQ(out[32], 448.0f);
  EXPECT_EQ(out[34], 1.0f);
  x[32] = 449.0f;  // amax just above 448 -> scale 2
  const std::vector<float> out2 = fake(RowKind::kWindow, x);
  EXPECT_EQ(out2[32], 448.0f);  // 224.5 -> 224 (step 8 in [128,256)) -> 448
  EXPECT_EQ(out2[33], -1.0f);
  EXPECT_EQ(out2[34], 1.0f);  // 0.53125 -> 0.5 (step 1/16) -> 1.0
}

TEST(CacheRecords, MainWorkedExampleAndNibbleOrder) {
  std::vector<float> x(32, 0.0f);
  // Block 0: amax 3 -> scale e4m3(0.5) = 0.5.
  x[0] = 0.25f;   // 0.5 -> code 1
  x[1] = 0.5f;    // 1.0 -> code 2
  x[2] = 1.3f;    // 2.6 -> 3 (code 5) -> 1.5
  x[3] = 1.25f;   // 2.5 tie -> 2 (code 4) -> 1.0
  x[4] = -0.1f;   // -0.2 -> +0
  x[5] = -3.0f;   // -6 -> code 15
  // Block 1: amax 6.6 -> 1.1 -> e4m3 1.125.
  x[16] = 6.6f;   // 5.8667 -> 6 -> 6.75
  x[17] = 2.0f;   // 1.7778 -> 2 -> 2.25
  std::vector<uint8_t> rec;
  const std::vector<float> out = pack_unpack(RowKind::kMain, x, &rec);
  ASSERT_EQ(rec.size(), 18u);
  EXPECT_EQ(rec[0], 0x21);  // channel 0 in the low nibble, channel 1 in the high nibble
  EXPECT_EQ(rec[1], 0x45);
  EXPECT_EQ(rec[2], 0xF0);
  EXPECT_EQ(rec[16], f32_to_e4m3(0.5f));
  EXPECT_EQ(rec[17], f32_to_e4m3(1.125f));
  const float want[] = {0.25f, 0.5f, 1.5f, 1.0f, 0.0f, -3.0f};
  for (int c = 0; c < 6; ++c) EXPECT_EQ(out[c], want[c]) << c;
  EXPECT_EQ(bits(out[4]), 0u);  // +0
  EXPECT_EQ(out[16], 6.75f);
  EXPECT_EQ(out[17], 2.25f);
}

TEST(CacheRecords, IndexWorkedExample) {
  std::vector<float> x(32, 0.0f);
  x[0] = 5.0f;   // amax 5 -> 5/6 -> scale 2^0
  x[1] = 2.7f;   // -> 3
  x[2] = -0.7f;  // -> -0.5
  x[3] = 0.75f;  // tie -> 1
  std::vector<uint8_t> rec;
  const std::vector<float> out = pack_unpack(RowKind::kIndex, x, &rec);
  ASSERT_EQ(rec.size(), 17u);
  EXPECT_EQ(rec[16], 127);
  EXPECT_EQ(out[0], 4.0f);  // 5 is a tie between 4 and 6 -> 4
  EXPECT_EQ(out[1], 3.0f);
  EXPECT_EQ(out[2], -0.5f);
  EXPECT_EQ(out[3], 1.0f);
  x[0] = 6.01f;  // amax/6 just above 1 -> scale 2
  const std::vector<float> out2 = fake(RowKind::kIndex, x);
  EXPECT_EQ(out2[0], 6.0f);  // 3.005 -> 3 -> 6
  EXPECT_EQ(out2[1], 3.0f);  // 1.35 -> 1.5 -> 3
}

TEST(CacheRecords, AllZeroBlocksUseTheClampedScale) {
  for (RowKind kind : kKinds) {
    const size_t channels = 2 * row_block_channels(kind);
    std::vector<float> x(channels, 0.0f);
    std::vector<uint8_t> rec;
    const std::vector<float> out = pack_unpack(kind, x, &rec);
    expect_same_bits(out, x, row_kind_name(kind));
    expect_same_bits(fake(kind, x), x, row_kind_name(kind));
    const uint8_t* scales = rec.data() + (kind == RowKind::kWindow ? channels : channels / 2);
    for (size_t b = 0; b < 2; ++b) {
      switch (kind) {
        case RowKind::kWindow: EXPECT_EQ(scales[b], 127 - 22); break;  // 1e-4/448 -> 2^-22
        case RowKind::kMain: EXPECT_EQ(scales[b], 0x01); break;        // E4M3 2^-9
        case RowKind::kIndex: EXPECT_EQ(scales[b], 1); break;          // 2^-126
      }
    }
  }
}

TEST(CacheRecords, TinyAmaxIsClamped) {
  // Window: amax 1e-6 still gets the 1e-4 floor's scale 2^-22.
  std::vector<float> w(32, 0.0f);
  w[0] = 1e-6f;
  w[1] = -3e-7f;
  const std::vector<float> wq = fake(RowKind::kWindow, w);
  EXPECT_EQ(wq[0], round_to_e4m3(1e-6f * 0x1p22f) * 0x1p-22f);
  EXPECT_EQ(wq[1], round_to_e4m3(-3e-7f * 0x1p22f) * 0x1p-22f);
  EXPECT_EQ(wq[0], 4.0f * 0x1p-22f);  // 4.194 -> 4 (step 0.5 in [4, 8))
  // Main: amax 0.01 < 6·2^-9 -> scale 2^-9: 0.01 / 2^-9 = 5.12 -> 6.
  std::vector<float> m(16, 0.0f);
  m[0] = 0.01f;
  m[1] = 0.0004f;  // 0.2048 -> 0
  const std::vector<float> mq = fake(RowKind::kMain, m);
  EXPECT_EQ(mq[0], 6.0f * 0x1p-9f);
  EXPECT_EQ(bits(mq[1]), 0u);
  // Index: amax far below 6·2^-126 (a subnormal) -> scale 2^-126, the smallest code.
  std::vector<float> k(32, 0.0f);
  k[0] = 0x1p-128f;  // 0.25 of the scale: tie -> 0
  k[1] = 0x1p-127f;  // 0.5 -> 2^-127, a subnormal that still round trips
  k[2] = 3 * 0x1p-127f;
  std::vector<uint8_t> rec;
  const std::vector<float> kq = pack_unpack(RowKind::kIndex, k, &rec);
  EXPECT_EQ(rec[16], 1);
  EXPECT_EQ(bits(kq[0]), 0u);
  EXPECT_EQ(kq[1], 0x1p-127f);
  EXPECT_EQ(kq[2], 3 * 0x1p-127f);
  expect_same_bits(fake(RowKind::kIndex, k), kq, "index tiny");
}

TEST(CacheRecords, SignOfZero) {
  std::vector<float> x(32, -0.0f);
  x[5] = 1.0f;
  x[6] = -1e-9f;
  // Window (E4M3) keeps -0, like torch's cast.
  const std::vector<float> w = pack_unpack(RowKind::kWindow, x);
  EXPECT_EQ(bits(w[0]), 0x80000000u);
  EXPECT_EQ(bits(w[6]), 0x80000000u);
  expect_same_bits(fake(RowKind::kWindow, x), w, "window");
  // E2M1 rows give +0.
  for (RowKind kind : {RowKind::kMain, RowKind::kIndex}) {
    const std::vector<float> q = pack_unpack(kind, x);
    EXPECT_EQ(bits(q[0]), 0u);
    EXPECT_EQ(bits(q[6]), 0u);
    expect_same_bits(fake(kind, x), q, row_kind_name(kind));
  }
}

TEST(CacheRecords, NonFiniteInputPoisonsOnlyItsBlock) {
  for (RowKind kind : kKinds) {
    const size_t block = row_block_channels(kind);
    for (float bad : {kNaN, -kNaN, kInf, -kInf}) {
      std::mt19937 rng(5);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> x(3 * block);
      for (float& v : x) v = dist(rng);
      x[block + 3] = bad;  // poison block 1 only
      std::vector<float> clean_blocks = x;
      for (size_t i = block; i < 2 * block; ++i) clean_blocks[i] = 0.0f;
      const std::vector<float> want_clean = fake(kind, clean_blocks);

      const std::vector<float> fq = fake(kind, x);
      std::vector<uint8_t> rec;
      const std::vector<float> pu = pack_unpack(kind, x, &rec);
      expect_same_bits(pu, fq, row_kind_name(kind));
      for (size_t i = 0; i < x.size(); ++i) {
        if (i >= block && i < 2 * block) {
          ASSERT_EQ(bits(fq[i]), kCanonicalNaN) << row_kind_name(kind) << " " << bad << " channel " << i;
        } else {
          ASSERT_EQ(bits(fq[i]), bits(want_clean[i])) << row_kind_name(kind) << " channel " << i;
        }
      }
      const size_t scale_offset = kind == RowKind::kWindow ? x.size() : x.size() / 2;
      EXPECT_EQ(rec[scale_offset + 1], kind == RowKind::kMain ? 0x7F : 0xFF) << row_kind_name(kind);
    }
  }
}

TEST(CacheRecords, UnpackOfNanScaleGivesCanonicalNan) {
  // A record whose scale byte is NaN (e.g. written by pack for a poisoned block, or read
  // from a damaged cache file) unpacks to canonical NaN whatever its code bytes hold.
  for (RowKind kind : kKinds) {
    const size_t channels = row_block_channels(kind);
    std::vector<uint8_t> rec(row_bytes(kind, channels), 0x33);
    rec.back() = 0xFF;  // the only scale byte: E4M3 0xFF is -NaN, UE8M0 0xFF is NaN
    std::vector<float> out(channels);
    row_unpack(kind, rec.data(), channels, out.data());
    for (float v : out) ASSERT_EQ(bits(v), kCanonicalNaN) << row_kind_name(kind);
  }
}

// Random rows over many magnitudes, with values planted exactly on rounding ties.
std::vector<float> random_row(std::mt19937& rng, RowKind kind, size_t channels) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-12.0f, 6.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  const float mag = std::pow(10.0f, log_mag(rng));
  std::vector<float> x(channels);
  for (float& v : x) v = normal(rng) * mag;
  const size_t block = row_block_channels(kind);
  for (size_t b = 0; b < channels / block; ++b) {
    if (pick(rng) < 3) {
      // Plant ties: amax fixed so the block scale is known (1 for window, 0.5 for main, 1 for
      // index), then values exactly halfway between neighbouring grid points.
      float* xb = x.data() + b * block;
      if (kind == RowKind::kWindow) {
        xb[0] = 448.0f;
        const float ties[] = {1.0625f, 17.0f, 3 * 0x1p-10f, 0x1p-10f, 232.0f, -1.1875f, 440.0f, -0.0f, -5 * 0x1p-10f};
        for (size_t i = 1; i < 10; ++i) xb[i] = ties[i - 1];
      } else {
        const float s = kind == RowKind::kMain ? 0.5f : 1.0f;
        xb[0] = 6.0f * s;
        const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -2.5f, -0.25f};
        for (size_t i = 1; i < 10; ++i) xb[i] = ties[i - 1] * s;
      }
    }
    if (pick(rng) == 0) {
      for (size_t i = 0; i < block; ++i) x[b * block + i] = 0.0f;
    }
  }
  return x;
}

// True when every main-row block of x gets a normal E4M3 scale (records.h: only then is
// NVFP4 fake-quant idempotent). Other kinds always are.
bool idempotent_case(RowKind kind, const std::vector<float>& x) {
  if (kind != RowKind::kMain) return true;
  for (size_t b = 0; b < x.size() / 16; ++b) {
    float amax = 0.0f;
    for (size_t i = 0; i < 16; ++i) amax = std::fmax(amax, std::fabs(x[b * 16 + i]));
    if (round_to_e4m3(std::fmax(amax, 6.0f * 0x1p-9f) / 6.0f) < 0x1p-6f) return false;
  }
  return true;
}

TEST(CacheRecords, PackUnpackEqualsFakeQuantAndFakeQuantIsIdempotent) {
  std::mt19937 rng(2026);
  int idempotency_checked = 0;
  for (RowKind kind : kKinds) {
    for (size_t channels : {row_block_channels(kind), size_t{64}, size_t{128}, size_t{512}}) {
      for (int trial = 0; trial < 200; ++trial) {
        const std::vector<float> x = random_row(rng, kind, channels);
        const std::vector<float> fq = fake(kind, x);
        expect_same_bits(pack_unpack(kind, x), fq, row_kind_name(kind));
        for (float v : fq) ASSERT_EQ(bits(round_to_bf16(v)), bits(v)) << "not BF16-exact: " << v;
        if (idempotent_case(kind, x)) {
          ++idempotency_checked;
          expect_same_bits(fake(kind, fq), fq, row_kind_name(kind));
          expect_same_bits(pack_unpack(kind, fq), fq, row_kind_name(kind));
        }
      }
    }
  }
  EXPECT_GT(idempotency_checked, 1500);
}

TEST(CacheRecords, MainRowsWithSubnormalScaleAreNotAlwaysFixedPoints) {
  // The documented exception (records.h): amax/6 = 1.6·2^-9 rounds to the E4M3 subnormal
  // 2·2^-9, the block max 4.8 then rounds to code 4, and the new amax 8·2^-9 gives scale 2^-9
  // on a second pass: the reference's quantiser moves the value again.
  std::vector<float> x(16, 0.0f);
  x[0] = 1.6f * 6.0f * 0x1p-9f;
  const std::vector<float> once = fake(RowKind::kMain, x);
  EXPECT_EQ(once[0], 8 * 0x1p-9f);
  const std::vector<float> twice = fake(RowKind::kMain, once);
  EXPECT_EQ(twice[0], 6 * 0x1p-9f);
  // With a normal scale the same shape is a fixed point.
  x[0] = 1.6f;
  const std::vector<float> big = fake(RowKind::kMain, x);
  expect_same_bits(fake(RowKind::kMain, big), big, "main normal scale");
}

TEST(CacheRecords, QuantisationErrorIsWithinHalfAGridStep) {
  std::mt19937 rng(99);
  for (RowKind kind : kKinds) {
    const size_t block = row_block_channels(kind);
    for (int trial = 0; trial < 200; ++trial) {
      const std::vector<float> x = random_row(rng, kind, 4 * block);
      const std::vector<float> fq = fake(kind, x);
      for (size_t b = 0; b < 4; ++b) {
        float amax = 0.0f;
        for (size_t i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(x[b * block + i]));
        for (size_t i = 0; i < block; ++i) {
          const float xi = x[b * block + i];
          const float err = std::fabs(fq[b * block + i] - xi);
          // Coarse bound: half the largest grid step relative to the block's range, plus the
          // scale floors for tiny blocks; main rows also saturate at 6·448 (E4M3 scale cap).
          float bound = kind == RowKind::kWindow ? amax / 16 + 1e-4f / 448 * 32 : amax / 3 + 0.02f;
          if (kind == RowKind::kMain) bound += std::fmax(0.0f, std::fabs(xi) - 6.0f * 448.0f);
          ASSERT_LE(err, bound) << row_kind_name(kind) << " x=" << xi;
        }
      }
    }
  }
}

TEST(CacheRecords, MainScaleSaturatesAt448) {
  std::vector<float> x(16, 0.0f);
  x[0] = 1e6f;
  x[1] = -3000.0f;
  x[2] = 100.0f;  // 100/448 = 0.223 -> 0 (E2M1 below 0.25)
  std::vector<uint8_t> rec;
  const std::vector<float> out = pack_unpack(RowKind::kMain, x, &rec);
  EXPECT_EQ(rec[8], 0x7E);  // E4M3 448
  EXPECT_EQ(out[0], 6.0f * 448.0f);
  EXPECT_EQ(out[1], -6.0f * 448.0f);
  EXPECT_EQ(out[2], 0.0f);
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// Channel counts per kind: whole blocks only (the formats have no partial blocks), including odd
// block counts and the sizes configs use (64, 128 index/head dims; 512 V4.1 head_dim).
std::vector<size_t> unpack_channel_counts(RowKind kind) {
  if (kind == RowKind::kMain) return {16, 48, 64, 80, 128, 144, 512};
  return {32, 64, 96, 128, 160, 512};
}

using UnpackFn = void (*)(const uint8_t*, size_t, float*);

UnpackFn avx2_unpack(RowKind kind) {
  switch (kind) {
    case RowKind::kWindow: return window_row_unpack_avx2;
    case RowKind::kMain: return main_row_unpack_avx2;
    case RowKind::kIndex: return index_row_unpack_avx2;
  }
  return nullptr;
}

// Runs `fn` into a buffer pre-filled with a sentinel, output starting at float offset `shift`
// (so unaligned stores are exercised), and checks nothing outside the row was written.
std::vector<float> run_unpack(const std::function<void(float*)>& fn, size_t channels, size_t shift) {
  std::vector<float> buf(channels + shift + 8, 777.0f);
  fn(buf.data() + shift);
  for (size_t i = 0; i < shift; ++i) EXPECT_EQ(buf[i], 777.0f) << "wrote before the row";
  for (size_t i = shift + channels; i < buf.size(); ++i) EXPECT_EQ(buf[i], 777.0f) << "wrote past the row";
  return std::vector<float>(buf.begin() + static_cast<std::ptrdiff_t>(shift),
                            buf.begin() + static_cast<std::ptrdiff_t>(shift + channels));
}

TEST(CacheRecordsUnpack, FastPathsMatchReferenceBitForBitOnRandomRecords) {
  std::mt19937 rng(20261129);
  std::uniform_int_distribution<int> byte(0, 255);
  const bool avx2 = cpu_has_avx2_fma() && cpu_has_f16c();
  const bool avx512 = avx2 && cpu_best_isa() >= CpuIsa::kAvx512;
  if (!avx2) std::fprintf(stderr, "note: no AVX2/F16C here, only the table path is compared\n");
  if (avx2 && !avx512) std::fprintf(stderr, "note: no AVX-512 here, its unpack path is not compared\n");
  for (RowKind kind : kKinds) {
    const size_t block = row_block_channels(kind);
    for (size_t channels : unpack_channel_counts(kind)) {
      const size_t nbytes = row_bytes(kind, channels), nblocks = channels / block;
      const size_t scale_off = nbytes - nblocks;
      // Enough records that the scale bytes run through all 256 codes (NaN codes included),
      // each block seeing a different code; code bytes uniform random (E4M3 NaN codes 0x7F/0xFF
      // and every E2M1 nibble included).
      const size_t records = (256 + nblocks - 1) / nblocks + 8;
      for (size_t r = 0; r < records; ++r) {
        const size_t shift = r % 3;  // record and output at varying alignments
        std::vector<uint8_t> buf(nbytes + shift);
        uint8_t* rec = buf.data() + shift;
        for (size_t i = 0; i < nbytes; ++i) rec[i] = static_cast<uint8_t>(byte(rng));
        for (size_t b = 0; b < nblocks; ++b) rec[scale_off + b] = static_cast<uint8_t>((r * nblocks + b) % 256);
        SCOPED_TRACE(std::string(row_kind_name(kind)) + " channels " + std::to_string(channels) + " record " +
                     std::to_string(r));
        const auto ref = run_unpack([&](float* o) { row_unpack_reference(kind, rec, channels, o); }, channels, shift);
        expect_same_bits(ref, run_unpack([&](float* o) { row_unpack_table(kind, rec, channels, o); }, channels, shift),
                         "table");
        if (avx2) {
          expect_same_bits(ref, run_unpack([&](float* o) { avx2_unpack(kind)(rec, channels, o); }, channels, shift),
                           "avx2");
        }
        if (avx512 && kind == RowKind::kWindow)
          expect_same_bits(ref, run_unpack([&](float* o) { window_row_unpack_avx512(rec, channels, o); }, channels, shift),
                           "avx512");
        if (avx512 && kind == RowKind::kMain)
          expect_same_bits(ref, run_unpack([&](float* o) { main_row_unpack_avx512(rec, channels, o); }, channels, shift),
                           "avx512");
        // The dispatching entry point, on whichever path this CPU selects.
        expect_same_bits(ref, run_unpack([&](float* o) { row_unpack(kind, rec, channels, o); }, channels, shift),
                         "row_unpack");
      }
    }
  }
}

TEST(CacheRecordsUnpack, FastPathsMatchReferenceOnPackedRandomRows) {
  // Records written by pack from real-looking rows (the values the cache holds), not only
  // random bytes: every path must reproduce fake_quant exactly.
  std::mt19937 rng(7);
  for (RowKind kind : kKinds) {
    for (size_t channels : unpack_channel_counts(kind)) {
      for (int trial = 0; trial < 20; ++trial) {
        const std::vector<float> x = random_row(rng, kind, channels);
        std::vector<uint8_t> rec(row_bytes(kind, channels));
        row_pack(kind, x.data(), channels, rec.data());
        std::vector<float> ref(channels), table(channels), dispatched(channels);
        row_unpack_reference(kind, rec.data(), channels, ref.data());
        row_unpack_table(kind, rec.data(), channels, table.data());
        row_unpack(kind, rec.data(), channels, dispatched.data());
        expect_same_bits(ref, table, "table");
        expect_same_bits(ref, dispatched, "row_unpack");
        expect_same_bits(ref, fake(kind, x), "fake_quant");
      }
    }
  }
}

// The pack and fake-quant entry points (AVX2 loops where the CPU has them) against the scalar
// references, bit for bit: random rows of every magnitude with planted ties and zero blocks
// (random_row), plus blocks of special values — signed zeros, float subnormals, values at and
// past the formats' limits, E4M3-subnormal scales, NaN and ±Inf (a poisoned block) — placed at
// every block of rows of several widths.
TEST(CacheRecordsQuant, FastPathsMatchReferenceBitForBit) {
  if (!cpu_has_avx2_fma()) std::fprintf(stderr, "note: no AVX2 here, the entry points are the references\n");
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int> pick(0, 15);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float specials[] = {0.0f, -0.0f, 0x1p-149f, -0x1p-140f, 0x1p-127f, 1e-30f, 448.0f, -464.0f, 3000.0f,
                            -2880.0f, 6.0f, -6.0f, 0x1p-10f, 0x1p-9f, 3 * 0x1p-11f, 0.25f, -0.75f, 5.0f};
  for (RowKind kind : kKinds) {
    const size_t block = row_block_channels(kind);
    for (size_t channels : unpack_channel_counts(kind)) {
      for (int trial = 0; trial < 60; ++trial) {
        std::vector<float> x = random_row(rng, kind, channels);
        for (size_t b = 0; b < channels / block; ++b) {
          float* xb = x.data() + b * block;
          const int what = pick(rng);
          if (what == 0) xb[pick(rng) % block] = kNaN;
          if (what == 1) xb[pick(rng) % block] = pick(rng) % 2 ? kInf : -kInf;
          if (what == 2)  // a tiny block: E4M3-subnormal main scales, clamped amax
            for (size_t i = 0; i < block; ++i) xb[i] = normal(rng) * 0x1p-12f;
          if (what >= 3 && what < 6)
            for (size_t i = 0; i < block; ++i)
              if (pick(rng) < 5) xb[i] = specials[static_cast<size_t>(pick(rng) + pick(rng)) % std::size(specials)];
        }
        SCOPED_TRACE(std::string(row_kind_name(kind)) + " channels " + std::to_string(channels) + " trial " +
                     std::to_string(trial));
        std::vector<float> fast = x, ref = x;
        row_fake_quant(kind, fast.data(), channels);
        row_fake_quant_reference(kind, ref.data(), channels);
        expect_same_bits(ref, fast, "fake_quant");
        std::vector<uint8_t> rec_fast(row_bytes(kind, channels)), rec_ref(row_bytes(kind, channels));
        row_pack(kind, x.data(), channels, rec_fast.data());
        row_pack_reference(kind, x.data(), channels, rec_ref.data());
        ASSERT_EQ(rec_fast, rec_ref) << "pack";
      }
    }
  }
}

}  // namespace
}  // namespace dsv41
