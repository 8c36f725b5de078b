// The AVX-512 tiles of gemm_quant (gemm_quant.h), shared by the two files built with AVX-512
// flags: gemm_quant_avx512.cpp (every AVX-512 CPU) and gemm_quant_avx512vbmi.cpp (+ VBMI and GFNI).
// Include only from those: everything here has internal linkage, so each file's copy is compiled
// with its own flags (one shared inline copy could carry VBMI instructions into the base path).
// tile() takes a `Fast` policy: the decoders of its two hot paths, whole FP8 blocks with the
// scale folded onto x and whole FP4 blocks (BaseDecoders below; gemm_quant_avx512vbmi.cpp has the
// VBMI / GFNI ones). Whatever the policy, the bits are gemm_f32's on the widened matrix.
//
// The inner loops of gemm_quant (gemm_quant.h), with the layout of gemm_avx512.cpp: a zmm holds
// two outputs' 8 weights side by side, so each half is the AVX2 kernel's 8 lanes and the bits are
// gemm_f32's. Whole 32-column blocks (the common case) decode two rows at once with 32 codes per
// instruction: FP8 through an IEEE half (value × 2^-8, exact; 2^8 folded into the scale below
// 2^120), with the NaN merge only for matrices that hold NaN codes (QuantWeights::nan_free); FP4
// as each row's 4 code bytes broadcast, shifted per lane to its nibble, then one 16-entry
// permute of dequant's table per 16 weights at one row (Fp4BroadcastDecoder, fp4_tile); at more
// rows split into nibbles bytewise, then one 16-entry permute of dequant's table per 16 weights.
// Partial blocks and the largest FP8 scales take the 8-column group loads. Scales are fetched
// once per 32 columns per output.
#pragma once

#include <immintrin.h>

#include <array>
#include <bit>
#include <cstring>
#include <type_traits>
#include <utility>

#include "base/numerics.h"
#include "kernels/cpu/gemm_avx512_lanes.h"
#include "kernels/cpu/gemm_quant.h"
#include "kernels/cpu/gemm_quant_fold.h"
#include "kernels/cpu/weight_prefetch.h"

namespace dsv41 {
namespace {

constexpr int kBigScaleCode = 247;  // see gemm_quant_avx2.cpp

// 8 bytes of each of two rows (no row b: zeros) as one xmm, low half row a; Full: all 8 bytes,
// else the first `bytes` (the rest zero). The conditions are template arguments so the decode
// loop has no branches.
template <bool Full, bool HasB>
inline __m128i load_two(const uint8_t* a, const uint8_t* b, int64_t bytes) {
  if constexpr (Full) {
    const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(a));
    if constexpr (!HasB) return lo;
    else return _mm_unpacklo_epi64(lo, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
  } else {
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, a, static_cast<size_t>(bytes));
    if constexpr (HasB) std::memcpy(buf + 8, b, static_cast<size_t>(bytes));
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
}

struct Fp8Decoder {
  __m256i k4000 = _mm256_set1_epi16(0x4000), k3f80 = _mm256_set1_epi16(0x3F80);
  __m512 nan = _mm512_set1_ps(__builtin_nanf(""));
  // Columns i..i+7 (n < 8: the first n, the rest +0) of rows a and b, as value × 2^-8.
  template <bool Full, bool HasB>
  __m512 load(const uint8_t* a, const uint8_t* b, int64_t i, int64_t n) const {
    const __m256i t = _mm256_slli_epi16(_mm256_cvtepu8_epi16(load_two<Full, HasB>(a + i, b + i, n)), 7);
    const __m256i h = _mm256_add_epi16(t, _mm256_and_si256(t, k4000));
    const __mmask16 is_nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(t, k3f80), k3f80);
    return _mm512_mask_mov_ps(_mm512_cvtph_ps(h), is_nan, nan);
  }
  // A whole 32-column block of rows a and b at once, as the four pair groups of columns 0–7,
  // 8–15, 16–23, 24–31, already × the pair's scale s (which carries the 2^8). Twice the codes per
  // instruction of load(): two 32-byte loads, quadword unpacks that pair the rows' 8-byte
  // groups, and the half-float bit work on 32 codes per zmm.
  // Scaled false: the values × 2^-8 alone (s unused), for the folded blocks of tile().
  template <bool HasB, bool NanFree, bool Scaled = true>
  void block32(const uint8_t* a, const uint8_t* b, __m512 s, __m512 out[4]) const {
    const __m256i ra = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i rb = HasB ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)) : _mm256_setzero_si256();
    // lo = [a 0–7, b 0–7 | a 16–23, b 16–23], hi = [a 8–15, b 8–15 | a 24–31, b 24–31]
    const __m256i pairs[2] = {_mm256_unpacklo_epi64(ra, rb), _mm256_unpackhi_epi64(ra, rb)};
    const __m512i kbfff = _mm512_set1_epi16(static_cast<short>(0xBFFF)), k3f80w = _mm512_set1_epi16(0x3F80);
    for (int h = 0; h < 2; ++h) {
      // Sign-extended, the code shifted left 7 has the sign in bits 15 and 14; clearing bit 14
      // leaves sign | 0 eeee mmm 0000000, the half of load() in one operation less.
      const __m512i f16 = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(pairs[h]), 7), kbfff);
      const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(f16)), hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f16, 1));
      // Group h (columns 8h..8h+7) sits in the low 256 bits, group h + 2 in the high ones.
      if constexpr (NanFree) {
        out[h] = Scaled ? _mm512_mul_ps(lo, s) : lo;
        out[h + 2] = Scaled ? _mm512_mul_ps(hi, s) : hi;
      } else {
        const __mmask32 ok = _mm512_cmpneq_epi16_mask(_mm512_and_si512(f16, k3f80w), k3f80w);  // not a NaN code
        const __mmask16 ok_lo = static_cast<__mmask16>(ok), ok_hi = static_cast<__mmask16>(ok >> 16);
        out[h] = Scaled ? _mm512_mask_mul_ps(nan, ok_lo, lo, s) : _mm512_mask_mov_ps(nan, ok_lo, lo);
        out[h + 2] = Scaled ? _mm512_mask_mul_ps(nan, ok_hi, hi, s) : _mm512_mask_mov_ps(nan, ok_hi, hi);
      }
    }
  }
};

struct Fp4Decoder {
  __m512 table = _mm512_loadu_ps(e2m1_decode_table());
  __m512i shifts = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  template <bool Full, bool HasB>
  __m512 load(const uint8_t* a, const uint8_t* b, int64_t i, int64_t n) const {
    // 4 bytes (8 codes) per row.
    uint32_t wa = 0, wb = 0;
    const size_t bytes = Full ? 4 : static_cast<size_t>(n / 2);
    std::memcpy(&wa, a + i / 2, bytes);
    if constexpr (HasB) std::memcpy(&wb, b + i / 2, bytes);
    const __m128i v = _mm_setr_epi32(static_cast<int>(wa), static_cast<int>(wb), 0, 0);
    // [a0 a0 a1 a1 a2 a2 a3 a3 b0 b0 ...]: each byte twice, odd lanes take the high nibble.
    const __m128i twice = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7));
    const __m512i idx = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(twice), shifts);
    return _mm512_permutexvar_ps(idx, table);
  }
  // A whole 32-column block (16 bytes) of rows a and b, as block32 of Fp8Decoder: the four pair
  // groups of columns 0–7, 8–15, 16–23, 24–31, × the pair's scale s. The nibbles are split and
  // interleaved back into column order bytewise (32 codes per instruction), then each group's
  // 16 codes widen to lane indices of the table permute.
  template <bool HasB>
  void block32(const uint8_t* a, const uint8_t* b, __m512 s, __m512 out[4]) const {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i vb = HasB ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)) : _mm_setzero_si128();
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(va), vb, 1);  // [a bytes | b bytes]
    const __m256i k0f = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(v, k0f), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), k0f);
    // Columns 0–15 and 16–31 of a (low lane) and b (high lane), one code per byte; the quadword
    // permute then orders each as [a 0–7, b 0–7, a 8–15, b 8–15] (resp. 16–31).
    const __m256i c[2] = {_mm256_permute4x64_epi64(_mm256_unpacklo_epi8(lo, hi), 0xD8),
                          _mm256_permute4x64_epi64(_mm256_unpackhi_epi8(lo, hi), 0xD8)};
    for (int h = 0; h < 2; ++h) {
      const __m512i i0 = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(c[h]));
      const __m512i i1 = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(c[h], 1));
      out[2 * h] = _mm512_mul_ps(_mm512_permutexvar_ps(i0, table), s);
      out[2 * h + 1] = _mm512_mul_ps(_mm512_permutexvar_ps(i1, table), s);
    }
  }
};

// Whole FP4 blocks of one-row products (fp4_tile: a decode step's experts) without byte
// shuffles: for each 8-column group, row a's 4 code bytes broadcast to lanes 0–7 and row b's to
// lanes 8–15 (a masked broadcast load), each lane shifted right to its own nibble (lane j: 4j
// bits; the permute reads the index's low 4 bits only, so the higher nibbles left above it do not
// matter), then one 16-entry table permute of dequant's E2M1 values × the pair's scales, as
// Fp4Decoder rounds them. One shuffle per 16 weights where Fp4Decoder::block32 takes two and the
// VBMI decoder seven per 64; one Zen 5 core from cache, a 512 × 1024 product at one row 20.8 →
// 19.0 µs (session 34). At more rows the block decoders stay ahead (the decode is shared by the
// rows, and their four groups at once suit tile()): at 2 rows this decoder took 28.1 µs against
// their 26.4, at 5–6 rows 5–12 % longer.
struct Fp4BroadcastDecoder {
  __m512 table = _mm512_loadu_ps(e2m1_decode_table());
  __m512i shifts = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  // One 8-column group: a and b point at the group's 4 code bytes of each row.
  template <bool HasB>
  __m512 group(const uint8_t* a, const uint8_t* b, __m512 s) const {
    int32_t wa, wb = 0;
    std::memcpy(&wa, a, 4);
    if constexpr (HasB) std::memcpy(&wb, b, 4);
    const __m512i v = HasB ? _mm512_mask_set1_epi32(_mm512_set1_epi32(wa), 0xFF00, wb)
                           : _mm512_maskz_set1_epi32(0x00FF, wa);  // no row b: code 0 = +0
    return _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srlv_epi32(v, shifts), table), s);
  }
};

// The decoders every AVX-512 CPU runs (a `Fast` policy of tile()): FP8 blocks folded with x ·
// 256 · s (the weights as value · 2^-8, the half of Fp8Decoder), FP4 blocks by Fp4Decoder.
// kBias: the folded 256 · s is 2^(e - kBias); usable: 256 · s is finite.
struct BaseFp8Fold {
  static constexpr int kBias = 119;
  static bool usable(uint8_t e) { return e < kBigScaleCode; }
};
template <bool NanFree>
struct BaseFp8FoldDecoder : BaseFp8Fold {
  Fp8Decoder dec;
  template <bool HasB>
  void block(const uint8_t* a, const uint8_t* b, __m512 out[4]) const {
    dec.template block32<HasB, NanFree, false>(a, b, _mm512_setzero_ps(), out);
  }
};
struct BaseDecoders {
  template <bool NanFree>
  using Fp8Fold = BaseFp8FoldDecoder<NanFree>;
  using Fp4Full = Fp4Decoder;
};

template <int R, int O, QuantFormat F, bool NanFree, class Fast>
void tile(const float* x, const QuantWeights& w, int64_t in, float* y, int64_t ldy, const FoldRange& fold) {
  using Decoder = std::conditional_t<F == QuantFormat::kFp8E4M3, Fp8Decoder, Fp4Decoder>;
  using Fold8 = typename Fast::template Fp8Fold<NanFree>;
  using Full4 = typename Fast::Fp4Full;
  constexpr int P = (O + 1) / 2;
  const Decoder dec;
  const std::conditional_t<F == QuantFormat::kFp8E4M3, Fold8, Full4> fast;
  const float* ue8m0 = ue8m0_decode_table();
  const __m512 k256 = _mm512_set1_ps(256.0f);
  const uint8_t* code_row[2 * P];  // the missing odd row of an odd O: never read (HasB false)
  const uint8_t* scale_row[2 * P];
  for (int o = 0; o < 2 * P; ++o) {
    code_row[o] = o < O ? w.codes + o * w.row_bytes() : w.codes;
    scale_row[o] = o < O ? w.scales + ((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols : nullptr;
  }
  // FP8: all O outputs in one scale row, so each block has one scale for the whole tile.
  const bool shared = F == QuantFormat::kFp8E4M3 &&
                      (w.row_phase >> w.block_rows_log2) == ((w.row_phase + O - 1) >> w.block_rows_log2);
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  const int64_t step = F == QuantFormat::kFp8E4M3 ? 32 : 16;  // bytes per 32 columns
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 63) == 0) prefetch_rows_ahead<O>(w.codes, w.row_bytes(), i0 / 32 * step);
    if constexpr (F == QuantFormat::kFp8E4M3) {
      // A whole block with the tile's one scale, exact to move onto x (gemm_quant_fold.h): x ·
      // 2^k once per 8 columns per row, the weights as value · s / 2^k (Fold8::kBias).
      const uint8_t e = scale_row[0][i0 >> w.block_cols_log2];
      const int k = e - Fold8::kBias;  // s · 2^(127 - kBias) = 2^k
      if (shared && i0 + 32 <= in && Fold8::usable(e) && fold.contains(k)) {
        const __m512 s1 = _mm512_set1_ps(std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23));
        __m512 wv[P][4];
        [&]<int... p>(std::integer_sequence<int, p...>) {
          (fast.template block<(2 * p + 1 < O)>(code_row[2 * p] + i0, code_row[2 * p + 1] + i0, wv[p]), ...);
        }(std::make_integer_sequence<int, P>{});
        for (int g = 0; g < 4; ++g)
          for (int r = 0; r < R; ++r) {
            const __m512 xs = _mm512_mul_ps(_mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * in + i0 + 8 * g)), s1);
            for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xs, wv[p][g], acc[r][p]);
          }
        continue;
      }
    }
    __m512 s[P];
    bool big = false;
    for (int p = 0; p < P; ++p) {
      const int64_t sc = i0 >> w.block_cols_log2;
      const uint8_t ea = scale_row[2 * p][sc], eb = scale_row[2 * p + 1] ? scale_row[2 * p + 1][sc] : 127;
      big |= F == QuantFormat::kFp8E4M3 && (ea >= kBigScaleCode || eb >= kBigScaleCode);
      s[p] = _mm512_insertf32x8(_mm512_set1_ps(ue8m0[ea]), _mm256_set1_ps(ue8m0[eb]), 1);
    }
    if (F == QuantFormat::kFp8E4M3 && !big)
      for (int p = 0; p < P; ++p) s[p] = _mm512_mul_ps(s[p], k256);  // exact: s < 2^120
    // One 8-column group: Full = all 8 columns in range; Big = the two-multiply FP8 scales.
    auto group = [&]<bool Full, bool Big>(int64_t i) {
      const int64_t n = in - i;
      __m512 wv[P];
      [&]<int... p>(std::integer_sequence<int, p...>) {  // HasB is a constant per pair
        ((wv[p] = dec.template load<Full, (2 * p + 1 < O)>(code_row[2 * p], code_row[2 * p + 1], i, n)), ...);
      }(std::make_integer_sequence<int, P>{});
      for (int p = 0; p < P; ++p) {
        if constexpr (Big) wv[p] = _mm512_mul_ps(wv[p], k256);
        wv[p] = _mm512_mul_ps(wv[p], s[p]);  // code value × scale, rounded once as in dequant.h
      }
      for (int r = 0; r < R; ++r) {  // tail lanes: x = 0 and w = +0, adding 0·0 as the float path
        const __m512 xv = Full ? _mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * in + i))
                               : _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(static_cast<__mmask8>((1u << n) - 1),
                                                                              x + r * in + i));
        for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
      }
    };
    const bool two_mul = F == QuantFormat::kFp8E4M3 && big;
    if (i0 + 32 <= in && !two_mul) {  // the common case: a whole block, one-multiply scales
      const int64_t at = F == QuantFormat::kFp8E4M3 ? i0 : i0 / 2;
      __m512 wv[P][4];
      [&]<int... p>(std::integer_sequence<int, p...>) {
        if constexpr (F == QuantFormat::kFp8E4M3)
          (dec.template block32<(2 * p + 1 < O), NanFree>(code_row[2 * p] + at, code_row[2 * p + 1] + at, s[p], wv[p]), ...);
        else
          (fast.template block32<(2 * p + 1 < O)>(code_row[2 * p] + at, code_row[2 * p + 1] + at, s[p], wv[p]), ...);
      }(std::make_integer_sequence<int, P>{});
      for (int g = 0; g < 4; ++g)  // columns in increasing order per lane, as every path
        for (int r = 0; r < R; ++r) {
          const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * in + i0 + 8 * g));
          for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p][g], acc[r][p]);
        }
      continue;
    }
    for (int64_t i = i0; i < in && i < i0 + 32; i += 8) {  // a partial block, or two-multiply scales
      const bool full = i + 8 <= in;
      if (two_mul) full ? group.template operator()<true, true>(i) : group.template operator()<false, true>(i);
      else full ? group.template operator()<true, false>(i) : group.template operator()<false, false>(i);
    }
  }
  store_pair_tile<R, O>(acc, y, ldy);
}

// tile()'s folded FP8 branch alone, for a NaN-free tile where that branch takes every block
// (FoldTileCheck): no per-block scale checks, branches or fallbacks left in the loop, so the
// row pointers and constants stay in registers (in tile() they were reloaded from the stack every
// block). The same decoder, products and order as tile(): the same bits.
template <int R, int O, class Fold>
void fold_tile(const float* x, const QuantWeights& w, int64_t in, float* y, int64_t ldy, const FoldRange&) {
  constexpr int P = (O + 1) / 2;
  const Fold fold_dec;
  const int64_t rb = w.row_bytes();
  const uint8_t* codes = w.codes;
  const uint8_t* scales = w.scales + (w.row_phase >> w.block_rows_log2) * w.scale_cols;
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 63) == 0) prefetch_rows_ahead<O>(codes, rb, i0);
    const int e = scales[i0 >> w.block_cols_log2];
    const __m512 s1 = _mm512_castsi512_ps(_mm512_set1_epi32((e - Fold::kBias + 127) << 23));  // 2^(e - kBias)
    __m512 wv[P][4];
    [&]<int... p>(std::integer_sequence<int, p...>) {
      (fold_dec.template block<(2 * p + 1 < O)>(codes + 2 * p * rb + i0, codes + (2 * p + 1) * rb + i0, wv[p]), ...);
    }(std::make_integer_sequence<int, P>{});
    for (int g = 0; g < 4; ++g)
      for (int r = 0; r < R; ++r) {
        const __m512 xs = _mm512_mul_ps(_mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * in + i0 + 8 * g)), s1);
        for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xs, wv[p][g], acc[r][p]);
      }
  }
  store_pair_tile<R, O>(acc, y, ldy);
}

// One-row FP4 products of whole 32-column blocks by Fp4BroadcastDecoder, each group decoded just
// before its FMAs (inside tile(), which decodes a block's four groups of every pair first, the
// broadcast decoder ran slower than Fp4Decoder), no per-block branches. tile()'s products in its
// order: the same bits.
template <int O>
void fp4_tile(const float* x, const QuantWeights& w, int64_t in, float* y, int64_t ldy, const FoldRange&) {
  constexpr int P = (O + 1) / 2;
  const Fp4BroadcastDecoder dec;
  const float* ue8m0 = ue8m0_decode_table();
  const int64_t rb = w.row_bytes();
  const uint8_t* scale_row[2 * P];  // the missing odd row of an odd O: scale 1, codes never read
  for (int o = 0; o < 2 * P; ++o)
    scale_row[o] = o < O ? w.scales + ((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols : nullptr;
  __m512 acc[1][P];
  for (int p = 0; p < P; ++p) acc[0][p] = _mm512_setzero_ps();
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 127) == 0) prefetch_rows_ahead<O>(w.codes, rb, i0 / 2);  // a line per 128 columns
    const int64_t sc = i0 >> w.block_cols_log2;
    __m512 s[P];
    for (int p = 0; p < P; ++p) {
      const float sb = scale_row[2 * p + 1] ? ue8m0[scale_row[2 * p + 1][sc]] : 1.0f;
      s[p] = _mm512_mask_mov_ps(_mm512_set1_ps(ue8m0[scale_row[2 * p][sc]]), 0xFF00, _mm512_set1_ps(sb));
    }
    const uint8_t* at = w.codes + i0 / 2;
    for (int g = 0; g < 4; ++g) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + i0 + 8 * g));
      [&]<int... p>(std::integer_sequence<int, p...>) {
        (
            [&] {
              const __m512 wv = dec.template group<(2 * p + 1 < O)>(at + 2 * p * rb + 4 * g, at + (2 * p + 1) * rb + 4 * g, s[p]);
              acc[0][p] = _mm512_fmadd_ps(xv, wv, acc[0][p]);
            }(),
            ...);
      }(std::make_integer_sequence<int, P>{});
    }
  }
  store_pair_tile<1, O>(acc, y, ldy);
}

// Whether tile() would take its folded branch for every block of a tile: whole blocks, the tile's
// outputs in one scale row, every scale code of that row usable and x · 2^(e - kBias) exact
// (checked at the row's extremes: both conditions are intervals). A row's answer is kept for the
// tiles that follow in it (a 32-row block row holds four tiles of 8 outputs), so the row is
// scanned once, not once per tile.
template <class Fold>
class FoldTileCheck {
 public:
  FoldTileCheck(int64_t in, const FoldRange& fold) : in_(in), fold_(fold) {}
  bool fits(const QuantWeights& tw, int o_count) {
    if (in_ % 32 != 0 || (tw.row_phase >> tw.block_rows_log2) != ((tw.row_phase + o_count - 1) >> tw.block_rows_log2))
      return false;
    const uint8_t* scales = tw.scales + (tw.row_phase >> tw.block_rows_log2) * tw.scale_cols;
    if (scales != row_) {
      row_ = scales;
      row_fits_ = scan(scales, (in_ + (int64_t{1} << tw.block_cols_log2) - 1) >> tw.block_cols_log2);
    }
    return row_fits_;
  }

 private:
  bool scan(const uint8_t* scales, int64_t blocks) const {
    int lo = 255, hi = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      lo = scales[b] < lo ? scales[b] : lo;
      hi = scales[b] > hi ? scales[b] : hi;
    }
    return Fold::usable(static_cast<uint8_t>(hi)) && Fold::usable(static_cast<uint8_t>(lo)) &&
           fold_.contains(lo - Fold::kBias) && fold_.contains(hi - Fold::kBias);
  }
  int64_t in_;
  const FoldRange& fold_;
  const uint8_t* row_ = nullptr;
  bool row_fits_ = false;
};

// Widest output group per row count: R·⌈O/2⌉ accumulators + ⌈O/2⌉ weights + scales + decoder
// constants within the 32 registers.
constexpr int kMaxRows = 8;
constexpr int kMaxOut[kMaxRows + 1] = {0, 8, 8, 8, 6, 4, 4, 4, 4};

using TileFn = void (*)(const float*, const QuantWeights&, int64_t, float*, int64_t, const FoldRange&);

template <QuantFormat F, bool NF, class Fast, int R, int... Os>
constexpr std::array<TileFn, sizeof...(Os)> row_table(std::integer_sequence<int, Os...>) {
  return {&tile<R, Os + 1, F, NF, Fast>...};
}

template <QuantFormat F, bool NF, class Fast, int R>
TileFn tile_for_rows(int o) {
  static constexpr auto table = row_table<F, NF, Fast, R>(std::make_integer_sequence<int, kMaxOut[R]>{});
  return table[o - 1];
}

// fold_tile for 1–4 rows (FP8 products of 5 or more rows take gemm_fp8_rows) and its outputs.
constexpr int kFoldMaxRows = 4;
template <class Fold, int R, int... Os>
constexpr std::array<TileFn, sizeof...(Os)> fold_row_table(std::integer_sequence<int, Os...>) {
  return {&fold_tile<R, Os + 1, Fold>...};
}
template <class Fold, int R>
TileFn fold_tile_for_rows(int o) {
  static constexpr auto table = fold_row_table<Fold, R>(std::make_integer_sequence<int, kMaxOut[R]>{});
  return table[o - 1];
}
template <int... Os>
constexpr std::array<TileFn, sizeof...(Os)> fp4_row_table(std::integer_sequence<int, Os...>) {
  return {&fp4_tile<Os + 1>...};
}
// fp4_tile for one row (a decode step's experts) and its outputs.
inline TileFn fp4_tile_for(int o) {
  static constexpr auto table = fp4_row_table(std::make_integer_sequence<int, kMaxOut[1]>{});
  return table[o - 1];
}
template <class Fold>
TileFn fold_tile_for(int r, int o) {
  switch (r) {
    case 1: return fold_tile_for_rows<Fold, 1>(o);
    case 2: return fold_tile_for_rows<Fold, 2>(o);
    case 3: return fold_tile_for_rows<Fold, 3>(o);
    default: return fold_tile_for_rows<Fold, 4>(o);
  }
}

template <QuantFormat F, bool NF, class Fast>
TileFn tile_for(int r, int o) {
  switch (r) {
    case 1: return tile_for_rows<F, NF, Fast, 1>(o);
    case 2: return tile_for_rows<F, NF, Fast, 2>(o);
    case 3: return tile_for_rows<F, NF, Fast, 3>(o);
    case 4: return tile_for_rows<F, NF, Fast, 4>(o);
    case 5: return tile_for_rows<F, NF, Fast, 5>(o);
    case 6: return tile_for_rows<F, NF, Fast, 6>(o);
    case 7: return tile_for_rows<F, NF, Fast, 7>(o);
    default: return tile_for_rows<F, NF, Fast, 8>(o);
  }
}

// Row groups outside (balanced, ≤ 8), output groups inside, as gemm_avx512.cpp. NF: the FP8
// matrix has no NaN codes (QuantWeights::nan_free).
template <QuantFormat F, bool NF, class Fast>
void block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0, int64_t o1,
           int64_t out, float* y, const FoldRange& fold) {
  const int64_t rows = r1 - r0 < 2 * kMaxRows ? r1 - r0 : kMaxRows;
  const int64_t groups = (rows + kMaxRows - 1) / kMaxRows;
  const int rg = static_cast<int>((rows + groups - 1) / groups);
  const int og = kMaxOut[rg];
  using Fold = typename Fast::template Fp8Fold<true>;
  FoldTileCheck<Fold> fold_check(in, fold);
  for (int64_t r = r0; r < r1; r += rg) {
    const int rn = static_cast<int>(r1 - r < rg ? r1 - r : rg);
    for (int64_t o = o0; o < o1; o += og) {
      const int on = static_cast<int>(o1 - o < og ? o1 - o : og);
      const QuantWeights tw = w.rows_from(o);
      TileFn fn = tile_for<F, NF, Fast>(rn, on);
      if constexpr (F == QuantFormat::kFp8E4M3 && NF)
        if (rn <= kFoldMaxRows && fold_check.fits(tw, on)) fn = fold_tile_for<Fold>(rn, on);
      if constexpr (F == QuantFormat::kFp4E2M1)
        if (rn == 1 && in % 32 == 0 && w.block_cols_log2 == 5) fn = fp4_tile_for(on);
      fn(x + r * in, tw, in, y + r * out + o, out, fold);
    }
  }
}

}  // namespace
}  // namespace dsv41
