// The AMX-BF16 prefill products (gemm_amx.h) against the scalar widened reference: dequant.h's
// float32 widening (or the bf16 bits widened), multiplied with double accumulation. AMX changes
// the float32 summation order, so the bound is relative to Σ|x·w| (≈ one rounding per addition,
// 3 parts × K of them) plus the denormal flush's absolute floor; and one test checks bit for bit
// that the three bf16 parts carry every bit of x. Fresh random inputs at boundary shapes: rows,
// K and outputs off the 16 / 32 tile edges, partial 32- and 128-blocks, FP4, a row slice starting
// inside a block row, scale codes at the low extreme (denormal weights, flushed) and high ones,
// an E4M3 NaN code. The tile tests SKIP (with the reason) where the CPU or Linux gives no AMX.
#include "kernels/cpu/gemm_amx.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/numerics.h"
#include "base/thread_pool.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/stored_quant_test_util.h"
#include "model/dequant.h"

namespace dsv41 {
namespace {

#define SKIP_WITHOUT_AMX() \
  if (!cpu_has_amx()) GTEST_SKIP() << "no AMX here: " << amx_unavailable_reason()

using Stored = testing::StoredQuant;

// Scale codes near 2^0; with `low` some at 0..2 (weights down to 2^-136: denormal floats, which
// AMX flushes), with `high` some at 200..230 (large, finite products and sums).
Stored random_stored(QuantFormat f, int64_t rows, int64_t in, int64_t br, int64_t bc, bool low, bool high,
                     std::mt19937& rng) {
  Stored s{f, rows, in, br, bc, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), near(118, 134), lo(0, 2), hi(200, 230), pick(0, 9);
  s.codes.resize(rows * (f == QuantFormat::kFp8E4M3 ? in : in / 2));
  for (uint8_t& c : s.codes) {
    c = static_cast<uint8_t>(byte(rng));
    if (f == QuantFormat::kFp8E4M3 && (c & 0x7F) == 0x7F) c ^= 1;  // NaN codes: their own test
  }
  s.scales.resize(s.scale_rows() * s.scale_cols());
  for (uint8_t& c : s.scales) {
    const int p = pick(rng);
    c = static_cast<uint8_t>(low && p < 2 ? lo(rng) : high && p >= 8 ? hi(rng) : near(rng));
  }
  return s;
}

using testing::random_x;

// y[r, o] against Σ x·w in double: NaN where the reference is NaN, the same Inf, otherwise within
// (8 + 3K)·2^-24 · Σ|x·w| + (3K + Σ|x|)·2^-126 (summation order; flushed denormals).
void expect_close(const std::vector<float>& got, const float* x, int64_t rows, int64_t in, const std::vector<float>& w,
                  int64_t out, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), rows * out) << what;
  const double tol = (8.0 + 3.0 * in) * std::ldexp(1.0, -24), tiny = std::ldexp(1.0, -126);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0, mag = 0, xabs = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double p = static_cast<double>(x[r * in + i]) * w[o * in + i];
        sum += p;
        mag += std::fabs(p);
        xabs += std::fabs(x[r * in + i]);
      }
      const float want = static_cast<float>(sum), g = got[r * out + o];
      const std::string at = what + " at r=" + std::to_string(r) + " o=" + std::to_string(o);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(g)) << at << ": " << g;
      } else if (std::isinf(want)) {
        ASSERT_EQ(g, want) << at;
      } else {
        ASSERT_LE(std::fabs(g - sum), tol * mag + (3.0 * in + xabs) * tiny) << at << ": " << g << " vs " << sum;
      }
    }
}

struct Shape {
  int64_t rows, in, out;
};
// Rows from one tile to past two micro-blocks, K and outputs off every tile / block edge.
const Shape kShapes[] = {{16, 32, 16},  {17, 1, 1},    {33, 31, 17},  {47, 33, 33},  {64, 64, 130},
                         {65, 100, 15}, {31, 257, 129}, {96, 160, 260}, {129, 48, 40}};

TEST(GemmAmx, Fp8MatchesTheWidenedReference) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1301);
  ThreadPool pool(3);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  for (const Shape& s : kShapes)
    for (int64_t block : {32, 128}) {
      const Stored st = random_stored(QuantFormat::kFp8E4M3, s.out, s.in, block, block, false, false, rng);
      const std::vector<float> x = random_x(s.rows * s.in, rng), w = st.widened();
      std::vector<float> y(s.rows * s.out, -1.0f);
      gemm_quant_amx(ex, x.data(), s.rows, s.in, st.view(), s.out, y.data());
      expect_close(y, x.data(), s.rows, s.in, w, s.out,
                   "fp8 " + std::to_string(block) + " " + std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" +
                       std::to_string(s.out));
    }
}

TEST(GemmAmx, Fp8RowSliceStartingInsideABlockRow) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1302);
  const int64_t rows = 40, in = 200, out = 300, skip = 77;
  const Stored st = random_stored(QuantFormat::kFp8E4M3, out, in, 128, 128, false, false, rng);
  const std::vector<float> x = random_x(rows * in, rng), w = st.widened();
  std::vector<float> y((rows) * (out - skip));
  gemm_quant_amx(CpuExec::serial(), x.data(), rows, in, st.view().rows_from(skip), out - skip, y.data());
  expect_close(y, x.data(), rows, in, std::vector<float>(w.begin() + skip * in, w.end()), out - skip, "fp8 slice");
}

TEST(GemmAmx, Fp4MatchesTheWidenedReference) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1303);
  for (const Shape& s : kShapes) {
    const int64_t in = s.in + (s.in & 1);  // FP4 rows hold whole bytes
    const Stored st = random_stored(QuantFormat::kFp4E2M1, s.out, in, 1, 32, false, false, rng);
    const std::vector<float> x = random_x(s.rows * in, rng), w = st.widened();
    std::vector<float> y(s.rows * s.out);
    gemm_quant_amx(CpuExec::serial(), x.data(), s.rows, in, st.view(), s.out, y.data());
    expect_close(y, x.data(), s.rows, in, w, s.out,
                 "fp4 " + std::to_string(s.rows) + "x" + std::to_string(in) + "x" + std::to_string(s.out));
  }
}

TEST(GemmAmx, Bf16WeightsMatchTheWidenedReference) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1304);
  for (const Shape& s : kShapes) {
    const std::vector<float> x = random_x(s.rows * s.in, rng), wf = random_x(s.out * s.in, rng);
    std::vector<uint16_t> wb(wf.size());
    std::vector<float> w(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) w[i] = bf16_to_f32(wb[i] = f32_to_bf16(wf[i]));
    std::vector<float> y(s.rows * s.out);
    gemm_bf16w_amx(CpuExec::serial(), x.data(), s.rows, s.in, wb.data(), s.out, y.data());
    expect_close(y, x.data(), s.rows, s.in, w, s.out,
                 "bf16 " + std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out));
  }
}

TEST(GemmAmx, ExtremeScaleCodes) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1305);
  for (const Shape& s : {Shape{33, 96, 70}, Shape{20, 130, 33}})
    for (QuantFormat f : {QuantFormat::kFp8E4M3, QuantFormat::kFp4E2M1}) {
      const bool fp8 = f == QuantFormat::kFp8E4M3;
      const Stored st = random_stored(f, s.out, s.in, fp8 ? 32 : 1, 32, true, true, rng);
      const std::vector<float> x = random_x(s.rows * s.in, rng), w = st.widened();
      std::vector<float> y(s.rows * s.out);
      gemm_quant_amx(CpuExec::serial(), x.data(), s.rows, s.in, st.view(), s.out, y.data());
      expect_close(y, x.data(), s.rows, s.in, w, s.out, fp8 ? "fp8 extreme scales" : "fp4 extreme scales");
    }
}

// One nonzero weight per output, a power of two: y = x[sel] · 2^e exactly, so every one of x's 24
// significant bits must arrive through hi + mid + lo (a dropped part changes the bits).
TEST(GemmAmx, TheThreePartsCarryEveryBitOfX) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1306);
  const int64_t rows = 37, in = 45, out = 50;
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> sel(0, in - 1), ex(-20, 20), sign(0, 1);
  std::vector<float> x(rows * in);
  for (float& v : x) v = std::ldexp(mant(rng), ex(rng)) * (sign(rng) ? -1.0f : 1.0f);
  std::vector<uint16_t> w(out * in, 0);
  std::vector<int> pick(out), power(out);
  for (int64_t o = 0; o < out; ++o) {
    pick[o] = sel(rng);
    power[o] = ex(rng) / 4;
    w[o * in + pick[o]] = f32_to_bf16(std::ldexp(sign(rng) ? -1.0f : 1.0f, power[o]));
  }
  std::vector<float> y(rows * out);
  gemm_bf16w_amx(CpuExec::serial(), x.data(), rows, in, w.data(), out, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const float want = x[r * in + pick[o]] * bf16_to_f32(w[o * in + pick[o]]);
      ASSERT_EQ(std::bit_cast<uint32_t>(y[r * out + o]), std::bit_cast<uint32_t>(want))
          << "r=" << r << " o=" << o << ": " << y[r * out + o] << " vs " << want;
    }
}

TEST(GemmAmx, AnE4M3NanCodePoisonsOnlyItsOutput) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1307);
  const int64_t rows = 18, in = 70, out = 40;
  Stored st = random_stored(QuantFormat::kFp8E4M3, out, in, 32, 32, false, false, rng);
  st.codes[5 * in + 41] = 0x7F;
  st.codes[33 * in + 69] = 0xFF;
  const std::vector<float> x = random_x(rows * in, rng), w = st.widened();
  std::vector<float> y(rows * out);
  gemm_quant_amx(CpuExec::serial(), x.data(), rows, in, st.view(), out, y.data());
  expect_close(y, x.data(), rows, in, w, out, "fp8 with NaN codes");
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(std::isnan(y[r * out + 5]) && std::isnan(y[r * out + 33])) << r;
    EXPECT_FALSE(std::isnan(y[r * out + 6])) << r;
  }
}

// gemm_quant / gemm_bf16w with isa = amx take the tiles from kAmxMinRows rows on (the same bits
// as calling them directly, with any pool: a y element's order depends only on K), and the
// vector loops below that.
TEST(GemmAmx, DispatchAndThreadCountDoNotChangeTheBits) {
  SKIP_WITHOUT_AMX();
  std::mt19937 rng(1308);
  const int64_t in = 300, out = 1000;
  const Stored st = random_stored(QuantFormat::kFp8E4M3, out, in, 128, 128, false, false, rng);
  ThreadPool pool(4);
  CpuExec amx = CpuExec::serial(), vec = CpuExec::serial();
  amx.isa = CpuIsa::kAmx;
  amx.pool = &pool;
  ASSERT_TRUE(amx.use_amx());
  for (int64_t rows : {kAmxMinRows - 1, kAmxMinRows, int64_t{200}}) {
    const std::vector<float> x = random_x(rows * in, rng);
    std::vector<float> direct(rows * out), via(rows * out), vec_y(rows * out);
    gemm_quant_amx(CpuExec::serial(), x.data(), rows, in, st.view(), out, direct.data());
    gemm_quant(amx, x.data(), rows, in, st.view(), out, via.data());
    gemm_quant(vec, x.data(), rows, in, st.view(), out, vec_y.data());
    const std::vector<float>& want = rows >= kAmxMinRows ? direct : vec_y;
    EXPECT_EQ(0, std::memcmp(via.data(), want.data(), via.size() * 4)) << "rows " << rows;
  }
}

// Runs everywhere: `amx` parses, and an AMX request on a CPU without it says why and runs the
// vector loops.
TEST(GemmAmx, AvailabilityIsExplained) {
  CpuIsa isa = CpuIsa::kPortable;
  ASSERT_TRUE(parse_cpu_isa("amx", &isa));
  EXPECT_EQ(isa, CpuIsa::kAmx);
  EXPECT_STREQ(cpu_isa_name(CpuIsa::kAmx), "amx");
  CpuExec ex = CpuExec::serial();
  ex.isa = CpuIsa::kAmx;
  EXPECT_EQ(ex.use_amx(), cpu_has_amx());
  EXPECT_EQ(ex.gemm_isa(), cpu_best_isa());
  if (cpu_has_amx()) {
    EXPECT_STREQ(amx_unavailable_reason(), "");
  } else {
    EXPECT_GT(std::strlen(amx_unavailable_reason()), 10u);
    std::printf("AMX unavailable: %s\n", amx_unavailable_reason());
  }
}

}  // namespace
}  // namespace dsv41
