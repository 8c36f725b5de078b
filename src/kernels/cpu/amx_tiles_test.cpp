// The AMX tile kernels' packing and loops (amx_tile_kernels.h) on the scalar model of the tiles
// (EmulatedTiles: runs on every CPU) and, where the CPU has AMX, the same checks on the real tiles:
//   - the GEMM against the widened double reference at shapes off every tile / block / K-chunk edge;
//   - one token's sink attention (attention_amx.h) against a double reference, with boundary key
//     counts (1, 31, 32, 33, the full window, window + selected);
//   - one-hot keys / values: the logits and the outputs carry every bit of the query and of the
//     probability (a dropped part or a misplaced pair changes the bits);
//   - a key row not exact in bf16 is refused and the output untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/numerics.h"
#include "base/thread_pool.h"
#include "kernels/cpu/amx_emulated.h"
#include "kernels/cpu/amx_tile_kernels.h"
#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/stored_quant_test_util.h"

namespace dsv41 {
namespace {

using testing::random_x;
using Stored = testing::StoredQuant;

Stored random_fp(QuantFormat f, int64_t rows, int64_t in, int64_t br, int64_t bc, std::mt19937& rng) {
  Stored s{f, rows, in, br, bc, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255), near(118, 134);
  s.codes.resize(rows * (f == QuantFormat::kFp8E4M3 ? in : in / 2));
  for (uint8_t& c : s.codes) {
    c = static_cast<uint8_t>(byte(rng));
    if (f == QuantFormat::kFp8E4M3 && (c & 0x7F) == 0x7F) c ^= 1;
  }
  s.scales.resize(s.scale_rows() * s.scale_cols());
  for (uint8_t& c : s.scales) c = static_cast<uint8_t>(near(rng));
  return s;
}

// y against Σ x·w in double within (8 + 3K)·2^-24 · Σ|x·w| (gemm_amx_test.cpp's bound, no denormals here).
void expect_gemm_close(const std::vector<float>& y, const std::vector<float>& x, int64_t rows, int64_t in,
                       const std::vector<float>& w, int64_t out, const std::string& what) {
  const double tol = (8.0 + 3.0 * in) * std::ldexp(1.0, -24);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0, mag = 0;
      for (int64_t i = 0; i < in; ++i) {
        const double p = static_cast<double>(x[r * in + i]) * w[o * in + i];
        sum += p;
        mag += std::fabs(p);
      }
      ASSERT_LE(std::fabs(y[r * out + o] - sum), tol * mag + 1e-30)
          << what << " at r=" << r << " o=" << o << ": " << y[r * out + o] << " vs " << sum;
    }
}

struct GemmShape {
  int64_t rows, in, out;
};
// Rows off 16/32 and past several row blocks, K past one and two K chunks (1024), outputs off the
// 16/32 units and past one 128-output panel.
const GemmShape kGemmShapes[] = {{16, 32, 16}, {17, 1, 1},     {33, 31, 17},  {65, 100, 130},
                                 {40, 1056, 33}, {35, 2100, 50}, {129, 64, 260}};

TEST(AmxTilesEmulated, GemmMatchesTheWidenedReference) {
  std::mt19937 rng(1601);
  ThreadPool pool(3);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  for (const GemmShape& s : kGemmShapes) {
    const std::string at = std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out);
    for (int64_t block : {32, 128}) {
      const Stored st = random_fp(QuantFormat::kFp8E4M3, s.out, s.in, block, block, rng);
      const std::vector<float> x = random_x(s.rows * s.in, rng), w = st.widened();
      std::vector<float> y(s.rows * s.out, -1.0f);
      gemm_quant_amx_emulated(ex, x.data(), s.rows, s.in, st.view(), s.out, y.data());
      expect_gemm_close(y, x, s.rows, s.in, w, s.out, "fp8 " + std::to_string(block) + " " + at);
    }
    const int64_t in2 = s.in + (s.in & 1);
    const Stored st = random_fp(QuantFormat::kFp4E2M1, s.out, in2, 1, 32, rng);
    const std::vector<float> x = random_x(s.rows * in2, rng), w = st.widened();
    std::vector<float> y(s.rows * s.out, -1.0f);
    gemm_quant_amx_emulated(CpuExec::serial(), x.data(), s.rows, in2, st.view(), s.out, y.data());
    expect_gemm_close(y, x, s.rows, in2, w, s.out, "fp4 " + at);
    const std::vector<float> wf = random_x(s.out * s.in, rng), xb = random_x(s.rows * s.in, rng);
    std::vector<uint16_t> wb(wf.size());
    std::vector<float> wr(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wr[i] = bf16_to_f32(wb[i] = f32_to_bf16(wf[i]));
    gemm_bf16w_amx_emulated(ex, xb.data(), s.rows, s.in, wb.data(), s.out, y.data());
    expect_gemm_close(y, xb, s.rows, s.in, wr, s.out, "bf16 " + at);
  }
}

// The real tiles with the K chunks and many row blocks / panels the GemmAmx shapes do not reach.
TEST(AmxTiles, GemmMatchesTheWidenedReferenceAcrossKChunks) {
  if (!cpu_has_amx()) GTEST_SKIP() << "no AMX here: " << amx_unavailable_reason();
  std::mt19937 rng(1602);
  ThreadPool pool(4);
  CpuExec ex = CpuExec::serial();
  ex.pool = &pool;
  for (const GemmShape& s : {GemmShape{300, 4096, 200}, GemmShape{70, 2100, 520}, GemmShape{33, 1056, 33}}) {
    const Stored st = random_fp(QuantFormat::kFp8E4M3, s.out, s.in, 32, 32, rng);
    const std::vector<float> x = random_x(s.rows * s.in, rng), w = st.widened();
    std::vector<float> y(s.rows * s.out, -1.0f);
    gemm_quant_amx(ex, x.data(), s.rows, s.in, st.view(), s.out, y.data());
    expect_gemm_close(y, x, s.rows, s.in, w, s.out, "amx fp8 " + std::to_string(s.in));
  }
}

// ---- Sink attention of one token ---------------------------------------------------------------

float to_bf16_exact(float v) { return bf16_to_f32(f32_to_bf16(v)); }

struct Token {
  int64_t H, D, nwin, nsel;
  std::vector<float> q, win, sel, sinks;
};

Token random_token(int64_t H, int64_t D, int64_t nwin, int64_t nsel, std::mt19937& rng) {
  Token t{H, D, nwin, nsel, random_x(H * D, rng), random_x(nwin * D, rng), random_x(nsel * D, rng), random_x(H, rng)};
  for (float& v : t.win) v = to_bf16_exact(v);  // cache rows are exact in bf16 (records.h)
  for (float& v : t.sel) v = to_bf16_exact(v);
  return t;
}

SinkTokenArgs args_of(const Token& t, std::vector<float>& logits, std::vector<float>& o) {
  SinkTokenArgs a;
  a.q = t.q.data();
  a.heads = t.H;
  a.D = t.D;
  a.win_rows = t.win.data();
  a.nwin = t.nwin;
  a.sel_rows = t.sel.data();
  a.nsel = t.nsel;
  a.scaling = static_cast<float>(1.0 / std::sqrt(static_cast<double>(t.D)));
  a.sinks = t.sinks.data();
  a.isa = CpuIsa::kPortable;
  a.lstride = t.nwin + t.nsel + 3;
  logits.assign(static_cast<size_t>(t.H * a.lstride), 0.0f);
  o.assign(static_cast<size_t>(t.H * t.D), -5.0f);
  a.logits = logits.data();
  a.o = o.data();
  return a;
}

// o against a double reference: logits in double, the sink softmax of them rounded to float,
// Σ p·v in double. Bound: a logit error ≤ (3D + 8)·2^-24·Σ|q·k| moves each probability by ≤ about
// 2·scaling·that relative; the value sum adds (3L + 16)·2^-24 relative to Σ p·|v|.
void expect_token_close(const Token& t, const std::vector<float>& o, const std::string& what) {
  const int64_t L = t.nwin + t.nsel, D = t.D;
  const double scaling = 1.0 / std::sqrt(static_cast<double>(D)), u = std::ldexp(1.0, -24);
  auto key = [&](int64_t j) { return j < t.nwin ? &t.win[j * D] : &t.sel[(j - t.nwin) * D]; };
  for (int64_t h = 0; h < t.H; ++h) {
    std::vector<float> lg(L);
    double dmax = 0;
    for (int64_t j = 0; j < L; ++j) {
      double s = 0, mag = 0;
      for (int64_t d = 0; d < D; ++d) {
        s += static_cast<double>(t.q[h * D + d]) * key(j)[d];
        mag += std::fabs(static_cast<double>(t.q[h * D + d]) * key(j)[d]);
      }
      lg[j] = static_cast<float>(s);
      dmax = std::max(dmax, (3.0 * D + 8) * u * mag);
    }
    sink_softmax_reference(lg.data(), L, static_cast<float>(scaling), t.sinks[h]);
    const double rel = 2.5 * scaling * dmax + (3.0 * L + 16) * u;
    for (int64_t d = 0; d < D; ++d) {
      double s = 0, mag = 0;
      for (int64_t j = 0; j < L; ++j) {
        s += static_cast<double>(lg[j]) * key(j)[d];
        mag += std::fabs(static_cast<double>(lg[j]) * key(j)[d]);
      }
      ASSERT_LE(std::fabs(o[h * D + d] - s), rel * mag + 1e-30)
          << what << " h=" << h << " d=" << d << ": " << o[h * D + d] << " vs " << s;
    }
  }
}

struct TokenShape {
  int64_t H, D, nwin, nsel;
};
const TokenShape kTokenShapes[] = {{32, 32, 1, 0},  {32, 64, 31, 0},  {32, 64, 32, 1},  {64, 96, 33, 0},
                                   {32, 32, 128, 5}, {64, 64, 17, 40}, {32, 128, 100, 64}};

using TokenFn = bool (*)(const SinkTokenArgs&, SinkTokenBuffers&);

void check_tokens(TokenFn fn, uint32_t seed, const char* name) {
  std::mt19937 rng(seed);
  SinkTokenBuffers buffers;  // reused across tokens of different sizes, as a range does
  for (const TokenShape& s : kTokenShapes) {
    const Token t = random_token(s.H, s.D, s.nwin, s.nsel, rng);
    std::vector<float> logits, o;
    const SinkTokenArgs a = args_of(t, logits, o);
    ASSERT_TRUE(fn(a, buffers)) << name;
    expect_token_close(t, o, std::string(name) + " H" + std::to_string(s.H) + " D" + std::to_string(s.D) + " win" +
                                 std::to_string(s.nwin) + " sel" + std::to_string(s.nsel));
  }
}

TEST(AmxTilesEmulated, SinkAttentionMatchesTheReference) {
  check_tokens(sink_attention_token_amx_emulated, 1603, "emulated");
}

TEST(AmxTiles, SinkAttentionMatchesTheReference) {
  if (!cpu_has_amx()) GTEST_SKIP() << "no AMX here: " << amx_unavailable_reason();
  check_tokens(sink_attention_token_amx, 1603, "amx");
  // mini-flash's shape: 64 heads × 512, a full window and 512 selected entries.
  std::mt19937 rng(1604);
  const Token t = random_token(64, 512, 128, 512, rng);
  std::vector<float> logits, o;
  SinkTokenBuffers buffers;
  ASSERT_TRUE(sink_attention_token_amx(args_of(t, logits, o), buffers));
  expect_token_close(t, o, "amx mini-flash");
}

TEST(AmxTilesEmulated, KeyNotExactInBf16IsRefused) {
  std::mt19937 rng(1605);
  for (TokenFn fn : {TokenFn{sink_attention_token_amx_emulated}, TokenFn{sink_attention_token_amx}}) {
    if (fn == TokenFn{sink_attention_token_amx} && !cpu_has_amx()) continue;
    Token t = random_token(32, 64, 20, 9, rng);
    t.sel[5 * 64 + 7] = std::nextafter(t.sel[5 * 64 + 7], 10.0f);
    std::vector<float> logits, o;
    SinkTokenBuffers buffers;
    EXPECT_FALSE(fn(args_of(t, logits, o), buffers));
    for (float v : o) ASSERT_EQ(v, -5.0f);
    std::vector<float> logits2, o2;
    SinkTokenArgs odd = args_of(random_token(48, 64, 3, 0, rng), logits2, o2);  // 48 heads: not a tile shape
    EXPECT_FALSE(fn(odd, buffers));
  }
}

// The key rows given as bf16 (the window rows, and the selected rows as ids into a bigger table in
// another order: SinkTokenArgs::win_bf16) pack the same bits as the float rows, so the token's
// logits and output are the same bits; at every boundary shape, emulated and (with AMX) real.
TEST(AmxTilesEmulated, Bf16KeyRowsGiveTheBitsOfTheFloatRows) {
  std::mt19937 rng(1608);
  for (TokenFn fn : {TokenFn{sink_attention_token_amx_emulated}, TokenFn{sink_attention_token_amx}}) {
    if (fn == TokenFn{sink_attention_token_amx} && !cpu_has_amx()) continue;
    SinkTokenBuffers buffers;  // shared by both forms and every shape, as a range's are
    for (const TokenShape& s : kTokenShapes) {
      const Token t = random_token(s.H, s.D, s.nwin, s.nsel, rng);
      std::vector<float> logits, o, logits16, o16;
      ASSERT_TRUE(fn(args_of(t, logits, o), buffers));
      // The table: the selected rows at shuffled places among 7 other rows.
      const int64_t entries = s.nsel + 7;
      std::vector<int32_t> slot(static_cast<size_t>(entries));
      for (int64_t g = 0; g < entries; ++g) slot[g] = static_cast<int32_t>(g);
      std::shuffle(slot.begin(), slot.end(), rng);
      std::vector<float> table = random_x(entries * s.D, rng);
      for (float& v : table) v = to_bf16_exact(v);
      for (int64_t j = 0; j < s.nsel; ++j)
        std::copy_n(t.sel.begin() + j * s.D, s.D, table.begin() + slot[j] * s.D);
      std::vector<uint16_t> win16(t.win.size()), table16(table.size());
      ASSERT_TRUE(key_rows_to_bf16(t.win.data(), s.nwin, s.D, win16.data()));
      ASSERT_TRUE(key_rows_to_bf16(table.data(), entries, s.D, table16.data()));
      for (const bool prefetch : {false, true}) {  // SinkTileOptions::prefetch_rows either way
        SinkTokenArgs a = args_of(t, logits16, o16);
        a.win_rows = a.sel_rows = nullptr;  // not read
        a.win_bf16 = win16.data();
        a.table_bf16 = table16.data();
        a.sel_ids = slot.data();
        a.tile.prefetch_rows = prefetch;
        ASSERT_TRUE(fn(a, buffers));
        const std::string what = "H" + std::to_string(s.H) + " D" + std::to_string(s.D) + " win" +
                                 std::to_string(s.nwin) + " sel" + std::to_string(s.nsel) + " prefetch " +
                                 std::to_string(prefetch);
        for (size_t i = 0; i < o.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(o16[i]), std::bit_cast<uint32_t>(o[i])) << what << " o[" << i << "]";
        for (size_t i = 0; i < logits.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(logits16[i]), std::bit_cast<uint32_t>(logits[i])) << what << " p[" << i << "]";
      }
    }
  }
}

TEST(AmxTilesEmulated, KeyRowsToBf16FlagsAnInexactValue) {
  std::vector<float> rows = {1.0f, -2.5f, 0.0f, std::ldexp(1.0f, -130), 3.0f, 7.0f};
  std::vector<uint16_t> out(rows.size());
  EXPECT_TRUE(key_rows_to_bf16(rows.data(), 2, 3, out.data()));
  EXPECT_EQ(out[1], f32_to_bf16(-2.5f));
  rows[4] = std::nextafter(3.0f, 4.0f);
  EXPECT_FALSE(key_rows_to_bf16(rows.data(), 2, 3, out.data()));
}

// Keys one-hot on channel c_j with a power-of-two weight: logit[h, j] = q[h, c_j] · 2^e_j exactly,
// so the logits carry all 24 bits of each query element (all three parts, at the right pair).
TEST(AmxTilesEmulated, LogitsCarryEveryBitOfTheQuery) {
  std::mt19937 rng(1606);
  const int64_t H = 64, D = 96, L = 45, Lp = 64;
  std::uniform_int_distribution<int> chan(0, D - 1), ex(-6, 6);
  std::vector<float> q = random_x(H * D, rng), keys(L * D, 0.0f);
  std::vector<int> c(L), e(L);
  for (int64_t j = 0; j < L; ++j) {
    c[j] = chan(rng);
    e[j] = ex(rng);
    keys[j * D + c[j]] = std::ldexp(1.0f, e[j]);
  }
  SinkTokenArgs a;
  a.q = q.data();
  a.heads = H;
  a.D = D;
  a.win_rows = keys.data();
  a.nwin = L;
  std::vector<uint16_t> kp(Lp * D), vp(Lp * D), qp(H * D * amx::kParts);
  const std::vector<uint32_t> zeros(D, 0u);
  ASSERT_TRUE(amx::pack_token_keys(a, L, Lp, zeros.data(), kp.data(), vp.data()));
  // Both query packs and logits scatters: the plain loops, and amx_pack.h's where AVX-512 runs.
  for (const bool avx512 : {false, true}) {
    if (avx512 && cpu_best_isa() < CpuIsa::kAvx512) continue;
    if (avx512) pack_token_queries_avx512(q.data(), H, D, qp.data());
    else amx::pack_token_queries(q.data(), H, D, qp.data());
    const int64_t ls = L + 1;
    std::vector<float> logits(H * ls, -1.0f);
    amx::EmulatedTiles tiles;
    amx::token_logits_tiles(tiles, kp.data(), qp.data(), H, D, L, Lp, logits.data(), ls, avx512);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < L; ++j)
        ASSERT_EQ(std::bit_cast<uint32_t>(logits[h * ls + j]), std::bit_cast<uint32_t>(std::ldexp(q[h * D + c[j]], e[j])))
            << "avx512 " << avx512 << " h=" << h << " j=" << j;
      ASSERT_EQ(logits[h * ls + L], -1.0f) << "wrote past the keys, avx512 " << avx512 << " h=" << h;
    }
  }
}

// Values one-hot: key j carries 2^e_j on channel j (L ≤ D), so o[h, j] = p[h, j] · 2^e_j exactly
// and every other channel 0: the outputs carry all bits of each probability, at the right key.
TEST(AmxTilesEmulated, OutputsCarryEveryBitOfTheProbabilities) {
  std::mt19937 rng(1607);
  const int64_t H = 32, D = 64, L = 37, Lp = 64;
  std::uniform_int_distribution<int> ex(-6, 6);
  std::vector<float> rows(L * D, 0.0f), p = random_x(H * L, rng);
  std::vector<int> e(L);
  for (int64_t j = 0; j < L; ++j) rows[j * D + j] = std::ldexp(1.0f, e[j] = ex(rng));
  SinkTokenArgs a;
  a.heads = H;
  a.D = D;
  a.win_rows = rows.data();
  a.nwin = 30;
  a.sel_rows = rows.data() + 30 * D;  // the selected rows continue the list
  a.nsel = L - 30;
  std::vector<uint16_t> kp(Lp * D), vp(Lp * D), pp(H * Lp * amx::kParts);
  const std::vector<uint32_t> zeros(D, 0u);
  ASSERT_TRUE(amx::pack_token_keys(a, L, Lp, zeros.data(), kp.data(), vp.data()));
  amx::pack_token_probs(p.data(), L, H, L, Lp, pp.data());
  std::vector<float> o(H * D, -1.0f);
  amx::EmulatedTiles tiles;
  amx::token_values_tiles(tiles, pp.data(), vp.data(), H, D, Lp, o.data());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t d = 0; d < D; ++d) {
      const float want = d < L ? std::ldexp(p[h * L + d], e[d]) : 0.0f;
      ASSERT_EQ(std::bit_cast<uint32_t>(o[h * D + d]), std::bit_cast<uint32_t>(want)) << "h=" << h << " d=" << d;
    }
}

// Each setting of SinkTileOptions gives the same bits (the softmax's vector exps, summed chains
// and reciprocal; the query pack's and the logits scatter's AVX-512 transposes), at every boundary shape, emulated and (with AMX) real; and the part clock
// counts the tokens it timed.
TEST(AmxTilesEmulated, TileOptionsGiveTheSameBits) {
  std::mt19937 rng(1809);
  for (TokenFn fn : {TokenFn{sink_attention_token_amx_emulated}, TokenFn{sink_attention_token_amx}}) {
    if (fn == TokenFn{sink_attention_token_amx} && !cpu_has_amx()) continue;
    SinkTokenBuffers buffers;
    SinkTokenTimes times;
    int64_t runs = 0;
    for (const TokenShape& s : kTokenShapes) {
      const Token t = random_token(s.H, s.D, s.nwin, s.nsel, rng);
      std::vector<float> logits0, o0;
      SinkTokenArgs a0 = args_of(t, logits0, o0);
      a0.isa = CpuIsa::kAvx512;  // the softmax's vector path where the CPU has it (capped otherwise)
      a0.tile.softmax_heads = false;
      a0.tile.vector_pack = false;
      a0.tile.prefetch_rows = false;
      ASSERT_TRUE(fn(a0, buffers));
      for (const int setting : {0, 1, 2, 3, 4, 7}) {
        const bool softmax_heads = setting & 1, vector_pack = setting & 2, prefetch_rows = setting & 4;
        std::vector<float> logits, o;
        SinkTokenArgs a = args_of(t, logits, o);
        a.isa = CpuIsa::kAvx512;
        a.tile.softmax_heads = softmax_heads;
        a.tile.vector_pack = vector_pack;
        a.tile.prefetch_rows = prefetch_rows;
        a.times = &times;
        ASSERT_TRUE(fn(a, buffers));
        ++runs;
        const std::string what = "H" + std::to_string(s.H) + " D" + std::to_string(s.D) + " win" +
                                 std::to_string(s.nwin) + " sel" + std::to_string(s.nsel) + " softmax_heads " +
                                 std::to_string(softmax_heads) + " vector_pack " +
                                 std::to_string(vector_pack) + " prefetch " + std::to_string(prefetch_rows);
        for (size_t i = 0; i < o.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(o[i]), std::bit_cast<uint32_t>(o0[i])) << what << " o[" << i << "]";
        for (size_t i = 0; i < logits.size(); ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(logits[i]), std::bit_cast<uint32_t>(logits0[i])) << what << " p[" << i << "]";
      }
    }
    EXPECT_EQ(times.tokens, runs);
    double total = 0;
    for (double ns : times.ns) {
      EXPECT_GE(ns, 0.0);
      total += ns;
    }
    EXPECT_GT(total, 0.0);
  }
}

}  // namespace
}  // namespace dsv41
