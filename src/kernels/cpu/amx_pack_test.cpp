// amx_pack.h's AVX-512 B-tile packers give the plain loops' bits (pack_panel, pack_token_queries
// in amx_tile_kernels.h): every element of every tile, at ragged shapes (K off the 32-step, odd
// K, outputs off the 16-wide group), with NaN (any payload and sign), ±Inf, subnormals, zeros and
// values using all 24 significant bits. The outputs start as garbage, so an element the packer
// forgets to write shows.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/amx_pack.h"
#include "kernels/cpu/amx_tile_kernels.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/stored_quant_test_util.h"

namespace dsv41 {
namespace {

constexpr uint16_t kGarbage = 0xA5A5;

// Random float32 with the special values mixed in (1 in 8).
float random_value(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 15);
  std::uniform_int_distribution<uint32_t> bits;
  std::normal_distribution<float> nd;
  switch (pick(rng)) {
    case 0: return std::bit_cast<float>(0x7F800001u | (bits(rng) & 0x807FFFFFu));  // NaN, any payload and sign
    case 1: return (bits(rng) & 1) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
    case 2: return std::bit_cast<float>(bits(rng) & 0x807FFFFFu);  // subnormal or ±0
    default: return std::bit_cast<float>((std::bit_cast<uint32_t>(nd(rng)) & 0xFFFFFF00u) | (bits(rng) & 0xFFu));
  }
}

bool has_avx512() { return cpu_best_isa() >= CpuIsa::kAvx512; }

struct PanelShape {
  int64_t in, ncols, groups;
};
const PanelShape kPanelShapes[] = {{1, 1, 1},   {2, 16, 1},  {31, 17, 2}, {32, 32, 2},  {33, 15, 2},
                                   {63, 31, 2}, {64, 1, 2},  {100, 20, 2}, {1056, 32, 2}, {97, 48, 3}};

TEST(AmxPack, PanelFromFloatRowsGivesPackPanelsBits) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(2219);
  for (const PanelShape& s : kPanelShapes) {
    const int64_t kpad = amx::round_up(s.in, amx::kKStep), size = s.groups * 16 * kpad;
    std::vector<float> src(s.ncols * s.in);
    for (float& v : src) v = random_value(rng);
    std::vector<uint16_t> want(size, kGarbage), got(size, kGarbage);
    amx::pack_panel<float>(src.data(), s.in, s.ncols, s.groups, kpad, want.data());
    pack_panel_f32_avx512(src.data(), s.in, s.ncols, s.groups, kpad, got.data());
    for (int64_t i = 0; i < size; ++i)
      ASSERT_EQ(got[i], want[i]) << "in " << s.in << " ncols " << s.ncols << " groups " << s.groups << " at " << i;
  }
}

TEST(AmxPack, PanelFromBf16RowsGivesPackPanelsBits) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(2220);
  std::uniform_int_distribution<int> word(0, 0xFFFF);
  for (const PanelShape& s : kPanelShapes) {
    const int64_t kpad = amx::round_up(s.in, amx::kKStep), size = s.groups * 16 * kpad;
    std::vector<uint16_t> src(s.ncols * s.in);
    for (uint16_t& v : src) v = static_cast<uint16_t>(word(rng));
    std::vector<uint16_t> want(size, kGarbage), got(size, kGarbage);
    amx::pack_panel<uint16_t>(src.data(), s.in, s.ncols, s.groups, kpad, want.data());
    pack_panel_bf16_avx512(src.data(), s.in, s.ncols, s.groups, kpad, got.data());
    for (int64_t i = 0; i < size; ++i)
      ASSERT_EQ(got[i], want[i]) << "in " << s.in << " ncols " << s.ncols << " groups " << s.groups << " at " << i;
  }
}

// Stored FP8 / FP4 straight into the panel against QuantFill's plain path (the AVX2 widening,
// then pack_panel): 32×32 and 128×128 FP8 blocks, a view starting inside a block row, NaN codes,
// every scale code (0, the two-multiply codes ≥ 247 that overflow, 0xFF = NaN), FP4 with ragged
// K, units narrower than 32 outputs.
TEST(AmxPack, QuantPanelGivesTheWidenedPanelsBits) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(2222);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Shape {
    QuantFormat f;
    int64_t rows, in, block;
  };
  const Shape shapes[] = {{QuantFormat::kFp8E4M3, 70, 100, 32}, {QuantFormat::kFp8E4M3, 40, 300, 128},
                          {QuantFormat::kFp8E4M3, 33, 1, 32},   {QuantFormat::kFp8E4M3, 64, 1056, 32},
                          {QuantFormat::kFp8E4M3, 256, 1024, 32},  // 8 × 32 blocks: every scale code
                          {QuantFormat::kFp4E2M1, 50, 98, 32},  {QuantFormat::kFp4E2M1, 33, 2, 32},
                          {QuantFormat::kFp4E2M1, 64, 1024, 32}};
  for (const Shape& sh : shapes) {
    const int64_t block_rows = sh.f == QuantFormat::kFp4E2M1 ? 1 : sh.block;
    testing::StoredQuant st{sh.f, sh.rows, sh.in, block_rows, sh.block, {}, {}};
    st.codes.resize(sh.rows * (sh.f == QuantFormat::kFp8E4M3 ? sh.in : sh.in / 2));
    for (uint8_t& c : st.codes) c = static_cast<uint8_t>(byte(rng));  // NaN codes included
    st.scales.resize(st.scale_rows() * st.scale_cols());
    for (size_t i = 0; i < st.scales.size(); ++i)  // every code, then random ones
      st.scales[i] = static_cast<uint8_t>(i < 256 ? (i * 37) % 256 : byte(rng));
    const QuantWeights whole = st.view();
    const int64_t kpad = amx::round_up(sh.in, amx::kKStep);
    for (const int64_t first : {int64_t{0}, int64_t{5}}) {  // 5: a view starting inside a block row
      const QuantWeights w = whole.rows_from(first);
      for (int64_t o0 = 0; o0 < sh.rows - first; o0 += 32) {
        const int64_t o1 = std::min(sh.rows - first, o0 + 32), size = 32 * kpad;
        std::vector<uint16_t> want(size, kGarbage), got(size, kGarbage);
        amx::QuantFill{&w, sh.in, false}(o0, o1, want.data(), 2, kpad);
        fill_quant_panel_avx512(w, o0, o1, 2, kpad, got.data());
        for (int64_t i = 0; i < size; ++i)
          ASSERT_EQ(got[i], want[i]) << (sh.f == QuantFormat::kFp8E4M3 ? "fp8" : "fp4") << " in " << sh.in
                                     << " block " << sh.block << " first " << first << " o0 " << o0 << " at " << i;
      }
    }
  }
}

TEST(AmxPack, TokenQueriesGivePackTokenQueriesBits) {
  if (!has_avx512()) GTEST_SKIP() << "no AVX-512 here";
  std::mt19937 rng(2221);
  for (const auto& [H, D] : {std::pair<int64_t, int64_t>{16, 32}, {32, 64}, {64, 512}, {48, 96}}) {
    std::vector<float> q(H * D);
    for (float& v : q) v = random_value(rng);
    const int64_t size = H * D * amx::kParts;
    std::vector<uint16_t> want(size, kGarbage), got(size, kGarbage);
    amx::pack_token_queries(q.data(), H, D, want.data());
    pack_token_queries_avx512(q.data(), H, D, got.data());
    for (int64_t i = 0; i < size; ++i) ASSERT_EQ(got[i], want[i]) << "H " << H << " D " << D << " at " << i;
  }
}

}  // namespace
}  // namespace dsv41
