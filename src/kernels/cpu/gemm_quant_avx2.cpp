// AVX2/FMA inner loops of gemm_quant (gemm_quant.h): FP8 / FP4 codes dequantised in registers to
// code value × scale, then summed in gemm.h's lane order, so the bits are those of
// gemm_f32_avx2_block on the widened matrix. A tile is R ≤ 4 rows × O ≤ 4 outputs; the loop walks
// `in` one 32-column scale block at a time (every block size is a multiple of 32), so each
// output's scale is fetched once per 32 weights.
//
// Blocks whose scale all of a tile's outputs share scale x instead of each weight where that is
// exact (gemm_quant_fold.h); matrices without NaN codes (QuantWeights::nan_free) skip the NaN merge.
//
// FP8 E4M3 → float without a 256-entry gather: the code shifted into an IEEE half,
// sign | 0 eeee mmm 0000000, is exactly value × 2^-8 for every finite code, subnormals included
// (E4M3 bias 7 vs half bias 15); vcvtph2ps widens it exactly and the 2^8 is folded into the
// scale (256 · s is exact while s < 2^120; larger scales take two multiplies). Codes 0x7F / 0xFF
// (NaN in E4M3, 480 · 2^-8 as a half) are forced to NaN.
// FP4 E2M1: at 1–2 rows, where every scale of the call folds onto x, the codes shifted straight
// into float bits (Fp4BitsDecoder, fast_fp4_tile); else whole blocks through a byte shuffle of
// 2 · value (block32_twice); partial blocks through the 16-entry table (dequant's, +0 for code 8)
// as two 8-lane permutes and a blend on the sign bit.
#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "base/numerics.h"
#include "kernels/cpu/gemm_avx2.h"
#include "kernels/cpu/gemm_avx2_lanes.h"
#include "kernels/cpu/gemm_quant_fold.h"
#include "kernels/cpu/weight_prefetch.h"

namespace dsv41 {
namespace {

// UE8M0 codes from here up make 256 · s overflow or round: those blocks take two multiplies.
constexpr int kBigScaleCode = 247;

// 8 codes at p (n < 8: the first n, the rest code 0 = +0) as value × 2^-8 (FP8) or value (FP4).
struct Fp8Decoder {
  __m128i kbfff = _mm_set1_epi16(static_cast<short>(0xBFFF)), k3f80 = _mm_set1_epi16(0x3F80);
  // NanFree: the caller knows no code is 0x7F / 0xFF (QuantWeights::nan_free): no NaN merge.
  template <bool NanFree = false>
  __m256 load(const uint8_t* row, int64_t i, int64_t n) const {
    __m128i c;
    if (n >= 8) {
      c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i));
    } else {
      uint8_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::memcpy(buf, row + i, static_cast<size_t>(n));
      c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(buf));
    }
    // Sign-extended and shifted left 7, the sign lands in bits 15 and 14: clearing 14 leaves
    // the half sign | 0 eeee mmm 0000000.
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(c), 7), kbfff);
    if constexpr (NanFree) {
      return _mm256_cvtph_ps(h);
    } else {
      const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(h, k3f80), k3f80);  // magnitude 0x7F
      return _mm256_or_ps(_mm256_cvtph_ps(h), _mm256_castsi256_ps(_mm256_cvtepi16_epi32(nan)));
    }
  }
  // 16 codes at p (all present) as two groups of 8, load()'s values: one widening of 16 bytes to
  // 16 halves instead of two of 8 (≈ 7 instructions for 16 weights, not 10) — the batch-1 products
  // are instruction-bound on AVX2 (docs/BENCHMARKS.md, session 23).
  template <bool NanFree = false>
  void load16(const uint8_t* row, int64_t i, __m256 out[2]) const {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(c), 7), _mm256_set1_epi16(static_cast<short>(0xBFFF)));
    const __m128i lo = _mm256_castsi256_si128(h), hi = _mm256_extracti128_si256(h, 1);
    out[0] = _mm256_cvtph_ps(lo);
    out[1] = _mm256_cvtph_ps(hi);
    if constexpr (!NanFree) {
      const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x3F80)), _mm256_set1_epi16(0x3F80));
      out[0] = _mm256_or_ps(out[0], _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(nan))));
      out[1] = _mm256_or_ps(out[1], _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(nan, 1))));
    }
  }
};

// FP8 E4M3 → float32 bits straight, for NaN-free whole blocks whose scale folds onto x as
// s · 2^120 (gemm_quant_fold.h): the code sign-extended to 32 bits and shifted left 20 puts its
// exponent and mantissa in the float's low exponent bits and top mantissa bits, sign | 0000 eeee
// mmm 0…0, which is exactly value × 2^-120 for every finite code — subnormal codes become float
// subnormals of the same ratio (the FMA takes them as they are: nothing here sets DAZ). Three
// instructions for 8 weights against load16's ≈ 5 (no vcvtph2ps).
struct Fp8BitsDecoder {
  __m256i mask = _mm256_set1_epi32(static_cast<int>(0x87F00000u));  // sign and the 7 code bits
  __m256 load8(const uint8_t* row, int64_t i) const {
    const __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i)));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(c, 20), mask));
  }
};

struct Fp4Decoder {
  __m256 pos = _mm256_loadu_ps(e2m1_decode_table()), neg = _mm256_loadu_ps(e2m1_decode_table() + 8);
  __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);  // even column: low nibble
  template <bool NanFree = false>  // no NaN codes in E2M1: the same either way
  __m256 load(const uint8_t* row, int64_t i, int64_t n) const {
    uint32_t b = 0;
    if (n >= 8) std::memcpy(&b, row + i / 2, 4);  // a constant size: one load, not a call
    else std::memcpy(&b, row + i / 2, static_cast<size_t>(n / 2));
    const __m128i v = _mm_cvtsi32_si128(static_cast<int>(b));
    const __m256i idx = _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(v, v)), shifts);
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(pos, idx), _mm256_permutevar8x32_ps(neg, idx),
                            _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  }
  // A whole 32-column block (16 bytes) as its 4 groups of 8 columns, each weight as 2 · value
  // (small exact integers; the ½ goes into the scale): the nibbles split and interleaved back
  // into column order bytewise, one byte shuffle looks 2 · value up as int8 (+0 for code 8, as
  // dequant's table), then widen and convert. About half the instructions of load() per weight.
  void block32_twice(const uint8_t* row, __m256 out[4]) const {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
    const __m128i k0f = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(v, k0f), hi = _mm_and_si128(_mm_srli_epi16(v, 4), k0f);
    const __m128i twice = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i c[2] = {_mm_shuffle_epi8(twice, _mm_unpacklo_epi8(lo, hi)),   // columns 0–15
                          _mm_shuffle_epi8(twice, _mm_unpackhi_epi8(lo, hi))};  // columns 16–31
    for (int h = 0; h < 2; ++h) {
      out[2 * h] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c[h]));
      out[2 * h + 1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(c[h], c[h])));
    }
  }
};

// FP4 E2M1 → float32 bits straight: the 4 bytes of 8 columns broadcast to every lane, column j's
// nibble (bits 4j … 4j + 3, even columns in the low nibbles) shifted to the top of lane j, then
// shifted right 6 with its sign and masked to sign | 000000 ee m 0…0, which is exactly
// value × 2^-126 for every code (the E2M1 subnormal 0.5 becomes the float subnormal 2^-127; code 8
// gives −0, which adds as the table's +0 into sums that start at +0). Three instructions for 8
// weights against block32_twice's ≈ 5 (nibble split, interleave, table, widen, convert).
struct Fp4BitsDecoder {
  __m256i shifts = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
  __m256i mask = _mm256_set1_epi32(static_cast<int>(0x81C00000u));  // sign, exponent 1–0, mantissa 1
  __m256 load8(const uint8_t* row, int64_t i) const {
    int32_t b;
    std::memcpy(&b, row + i / 2, 4);
    const __m256i t = _mm256_srai_epi32(_mm256_sllv_epi32(_mm256_set1_epi32(b), shifts), 6);
    return _mm256_castsi256_ps(_mm256_and_si256(t, mask));
  }
};

// A NaN-free FP8 tile whose outputs share one scale row, every block whole and every scale
// foldable as 2^(e − 7) (fast_fp8_tile_fits): the weights as value · 2^-120 (Fp8BitsDecoder), x
// scaled once per 8 columns, no per-block checks left in the loop. The products and their order
// are tile()'s for such blocks, so the bits are too. (The 8-column loop is tile()'s bits block
// written out again: as a shared always-inline helper taking the accumulators by reference, the
// 512 × 1280 product from cache ran 3–10 % slower, session 25.)
template <int R, int O>
void fast_fp8_tile(const float* x, const QuantWeights& w, int64_t in, float* y, int64_t ldy) {
  const Fp8BitsDecoder bits;
  const uint8_t* code_row[O];
  for (int o = 0; o < O; ++o) code_row[o] = w.codes + o * w.row_bytes();
  const uint8_t* scales = w.scales + (w.row_phase >> w.block_rows_log2) * w.scale_cols;
  __m256 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 63) == 0) prefetch_rows_ahead<O>(w.codes, w.row_bytes(), i0);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_set1_epi32((scales[i0 >> w.block_cols_log2] + 120) << 23));
    for (int64_t i = i0; i < i0 + 32; i += 8) {
      __m256 wv[O];
      for (int o = 0; o < O; ++o) wv[o] = bits.load8(code_row[o], i);
      for (int r = 0; r < R; ++r) {
        const __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(x + r * in + i), s1);
        for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xs, wv[o], acc[r][o]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) y[r * ldy + o] = hsum(acc[r][o]);
}

// Whether fast_fp8_tile computes the tile: whole blocks only, O outputs in one scale row, every
// scale code of that row ≤ 134 with x · 2^(e − 7) exact (FoldRange: checked at the row's extremes).
bool fast_fp8_tile_fits(const QuantWeights& w, int o_count, int64_t in, const FoldRange& fold) {
  if (in % 32 != 0 || (w.row_phase >> w.block_rows_log2) != ((w.row_phase + o_count - 1) >> w.block_rows_log2))
    return false;
  const uint8_t* scales = w.scales + (w.row_phase >> w.block_rows_log2) * w.scale_cols;
  const int64_t blocks = (in + (int64_t(1) << w.block_cols_log2) - 1) >> w.block_cols_log2;
  int lo = 255, hi = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    lo = std::min<int>(lo, scales[b]);
    hi = std::max<int>(hi, scales[b]);
  }
  return hi <= 134 && fold.contains(lo - 7) && fold.contains(hi - 7);
}

// An FP4 tile of ≤ 2 rows, every block whole and every scale s = 2^(e − 127) of its O rows
// foldable onto x as 2^(e − 1) (fast_fp4_rows_fit): x · 2^(e − 1) times value · 2^-126
// (Fp4BitsDecoder) is x · (value × s), the table path's exact product, added in its order, so the
// same bits. No per-block checks: the accumulators stay in registers (a per-output branch in
// the loop kept them on the stack, each FMA waiting on a store).
template <int R, int O>
void fast_fp4_tile(const float* x, const QuantWeights& w, int64_t in, float* y, int64_t ldy, const FoldRange&) {
  const Fp4BitsDecoder bits;
  const uint8_t* code_row[O];
  const uint8_t* scale_row[O];
  for (int o = 0; o < O; ++o) {
    code_row[o] = w.codes + o * w.row_bytes();
    scale_row[o] = w.scales + ((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols;
  }
  __m256 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 127) == 0) prefetch_rows_ahead<O>(w.codes, w.row_bytes(), i0 / 2);
    const int64_t b = i0 >> w.block_cols_log2;
    __m256 s1[O];
#pragma GCC unroll 4
    for (int o = 0; o < O; ++o) s1[o] = _mm256_castsi256_ps(_mm256_set1_epi32((scale_row[o][b] + 126) << 23));  // 2^(e − 1)
#pragma GCC unroll 4
    for (int64_t i = i0; i < i0 + 32; i += 8) {
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_loadu_ps(x + r * in + i);
#pragma GCC unroll 4
        for (int o = 0; o < O; ++o)
          acc[r][o] = _mm256_fmadd_ps(_mm256_mul_ps(xv, s1[o]), bits.load8(code_row[o], i), acc[r][o]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) y[r * ldy + o] = hsum(acc[r][o]);
}

// Whether fast_fp4_tile computes every tile of outputs [o0, o1): whole blocks only, every scale
// code e of those rows ≤ 128 with x · 2^(e − 1) exact (FoldRange: checked at the extremes of their
// scale rows, which lie next to each other — one pass per call, not one per tile).
bool fast_fp4_rows_fit(const QuantWeights& w, int64_t o0, int64_t o1, int64_t in, const FoldRange& fold) {
  if (in % 32 != 0 || fold.lo > fold.hi || o1 <= o0) return false;
  const uint8_t* first = w.scales + ((w.row_phase + o0) >> w.block_rows_log2) * w.scale_cols;
  const uint8_t* last = w.scales + (((w.row_phase + o1 - 1) >> w.block_rows_log2) + 1) * w.scale_cols;
  uint8_t lo = 255, hi = 0;
  for (const uint8_t* p = first; p < last; ++p) {
    lo = std::min(lo, *p);
    hi = std::max(hi, *p);
  }
  return hi <= 128 && fold.contains(lo - 1) && fold.contains(hi - 1);  // 2^(e − 1) finite
}

template <int R, int O, QuantFormat F, bool NanFree>
void tile(const float* x, const QuantWeights& w, int64_t in, float* y, int64_t ldy, const FoldRange& fold) {
  if constexpr (F == QuantFormat::kFp8E4M3 && NanFree) {
    if (fast_fp8_tile_fits(w, O, in, fold)) return fast_fp8_tile<R, O>(x, w, in, y, ldy);
  }
  using Decoder = std::conditional_t<F == QuantFormat::kFp8E4M3, Fp8Decoder, Fp4Decoder>;
  const Decoder dec;
  const float* ue8m0 = ue8m0_decode_table();
  const __m256 k256 = _mm256_set1_ps(256.0f);
  const uint8_t* code_row[O];
  const uint8_t* scale_row[O];
  for (int o = 0; o < O; ++o) {
    code_row[o] = w.codes + o * w.row_bytes();
    scale_row[o] = w.scales + ((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols;
  }
  // FP8: all O outputs in one scale row, so each block has one scale for the whole tile.
  const bool shared = F == QuantFormat::kFp8E4M3 &&
                      (w.row_phase >> w.block_rows_log2) == ((w.row_phase + O - 1) >> w.block_rows_log2);
  __m256 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  const int64_t step = F == QuantFormat::kFp8E4M3 ? 32 : 16;  // bytes per 32 columns
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 63) == 0) prefetch_rows_ahead<O>(w.codes, w.row_bytes(), i0 / 32 * step);
    if constexpr (F == QuantFormat::kFp8E4M3) {
      // A whole block with the tile's one scale, exact to move onto x (gemm_quant_fold.h): x ·
      // 256 · s once per 8 columns per row, the weights as value · 2^-8.
      const uint8_t e = scale_row[0][i0 >> w.block_cols_log2];
      // x · s · 2^120 = x · 2^(e − 7), finite for e ≤ 134: the weights as value · 2^-120.
      if (NanFree && shared && i0 + 32 <= in && e <= 134 && fold.contains(e - 7)) {
        const Fp8BitsDecoder bits;
        const __m256 s1 = _mm256_castsi256_ps(_mm256_set1_epi32((e + 120) << 23));  // 2^(e − 7)
        for (int64_t i = i0; i < i0 + 32; i += 8) {
          __m256 wv[O];
          for (int o = 0; o < O; ++o) wv[o] = bits.load8(code_row[o], i);
          for (int r = 0; r < R; ++r) {
            const __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(x + r * in + i), s1);
            for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xs, wv[o], acc[r][o]);
          }
        }
        continue;
      }
      if (shared && i0 + 32 <= in && e < kBigScaleCode && fold.contains(e - 119)) {
        const __m256 s1 = _mm256_set1_ps(ue8m0[e] * 256.0f);
        if constexpr (R <= 2) {  // 16 columns a step (load16); the same products in the same order
          for (int64_t i = i0; i < i0 + 32; i += 16) {
            __m256 wv[O][2];
            for (int o = 0; o < O; ++o) dec.template load16<NanFree>(code_row[o], i, wv[o]);
            for (int half = 0; half < 2; ++half)
              for (int r = 0; r < R; ++r) {
                const __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(x + r * in + i + 8 * half), s1);
                for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xs, wv[o][half], acc[r][o]);
              }
          }
          continue;
        }
        for (int64_t i = i0; i < i0 + 32; i += 8) {
          __m256 wv[O];
          for (int o = 0; o < O; ++o) wv[o] = dec.template load<NanFree>(code_row[o], i, 8);
          for (int r = 0; r < R; ++r) {
            const __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(x + r * in + i), s1);
            for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xs, wv[o], acc[r][o]);
          }
        }
        continue;
      }
    }
    if constexpr (F == QuantFormat::kFp4E2M1) {
      if (i0 + 32 <= in) {  // a whole block, one output at a time (its 4 groups fill the registers)
        for (int o = 0; o < O; ++o) {
          // (2 · value) × (s / 2) = value × s: both factors exact (s / 2 ≥ 2^-128), one rounding-free product.
          const __m256 half_s = _mm256_set1_ps(ue8m0[scale_row[o][i0 >> w.block_cols_log2]] * 0.5f);
          __m256 wv[4];
          dec.block32_twice(code_row[o] + i0 / 2, wv);
          for (int g = 0; g < 4; ++g) {
            const __m256 wg = _mm256_mul_ps(wv[g], half_s);
            for (int r = 0; r < R; ++r)
              acc[r][o] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * in + i0 + 8 * g), wg, acc[r][o]);
          }
        }
        continue;
      }
    }
    __m256 s[O];
    bool big = false;
    for (int o = 0; o < O; ++o) {
      const uint8_t e = scale_row[o][i0 >> w.block_cols_log2];
      big |= F == QuantFormat::kFp8E4M3 && e >= kBigScaleCode;
      s[o] = _mm256_set1_ps(ue8m0[e]);
    }
    if (F == QuantFormat::kFp8E4M3 && !big)
      for (int o = 0; o < O; ++o) s[o] = _mm256_mul_ps(s[o], k256);  // exact: s < 2^120
    const int64_t i1 = i0 + 32 < in ? i0 + 32 : in;
    for (int64_t i = i0; i < i1; i += 8) {
      const int64_t n = in - i;
      __m256 wv[O];
      for (int o = 0; o < O; ++o) {
        __m256 v = dec.template load<NanFree>(code_row[o], i, n);
        if (F == QuantFormat::kFp8E4M3 && big) v = _mm256_mul_ps(v, k256);
        wv[o] = _mm256_mul_ps(v, s[o]);  // code value × scale, rounded once as in dequant.h
      }
      if (n >= 8) {
        for (int r = 0; r < R; ++r) {
          const __m256 xv = _mm256_loadu_ps(x + r * in + i);
          for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
        }
      } else {  // zero-padded tail: the padded lanes add 0·0, as gemm_f32_avx2_block's do
        const __m256i m = tail_mask(n);
        for (int r = 0; r < R; ++r) {
          const __m256 xv = _mm256_maskload_ps(x + r * in + i, m);
          for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) y[r * ldy + o] = hsum(acc[r][o]);
}

using TileFn = void (*)(const float*, const QuantWeights&, int64_t, float*, int64_t, const FoldRange&);

template <QuantFormat F, bool NF, int R>
TileFn tile_for(int o) {
  switch (o) {
    case 1: return &tile<R, 1, F, NF>;
    case 2: return &tile<R, 2, F, NF>;
    case 3: return &tile<R, 3, F, NF>;
    default: return &tile<R, 4, F, NF>;
  }
}

template <QuantFormat F, bool NF>
TileFn tile_for(int r, int o) {
  switch (r) {
    case 1: return tile_for<F, NF, 1>(o);
    case 2: return tile_for<F, NF, 2>(o);
    case 3: return tile_for<F, NF, 3>(o);
    default: return tile_for<F, NF, 4>(o);
  }
}

template <int R>
TileFn fast_fp4_tile_for(int o) {
  switch (o) {
    case 1: return &fast_fp4_tile<R, 1>;
    case 2: return &fast_fp4_tile<R, 2>;
    case 3: return &fast_fp4_tile<R, 3>;
    default: return &fast_fp4_tile<R, 4>;
  }
}

// fast_fp4_tile for 1 or 2 rows (its only row counts) and 1–4 outputs.
TileFn fast_fp4_tile_for(int r, int o) { return r == 1 ? fast_fp4_tile_for<1>(o) : fast_fp4_tile_for<2>(o); }

// The float block's row / output grouping (gemm_avx2.cpp), with 2 outputs at 3–4 rows: the
// decoder's constants take the registers the third output's weights had. NF: no NaN codes.
template <QuantFormat F, bool NF>
void block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0, int64_t o1,
           int64_t out, float* y, const FoldRange& fold) {
  const int64_t rows = r1 - r0, groups = (rows + 3) / 4;
  const int rg = rows <= 16 ? static_cast<int>((rows + groups - 1) / groups) : 4;
  const int og = rg <= 2 ? 4 : 2;
  // FP4 at 1–2 rows: the bits decoder's tiles when every block's scale folds onto x.
  const bool fp4_bits = F == QuantFormat::kFp4E2M1 && rg <= 2 && fast_fp4_rows_fit(w, o0, o1, in, fold);
  for (int64_t r = r0; r < r1; r += rg) {
    const int rn = static_cast<int>(r1 - r < rg ? r1 - r : rg);
    for (int64_t o = o0; o < o1; o += og) {
      const int on = static_cast<int>(o1 - o < og ? o1 - o : og);
      const TileFn fn = fp4_bits ? fast_fp4_tile_for(rn, on) : tile_for<F, NF>(rn, on);
      fn(x + r * in, w.rows_from(o), in, y + r * out + o, out, fold);
    }
  }
}

template <QuantFormat F>
void widen(const QuantWeights& w, int64_t o0, int64_t o1, float* dst) {
  using Decoder = std::conditional_t<F == QuantFormat::kFp8E4M3, Fp8Decoder, Fp4Decoder>;
  const Decoder dec;
  const float* ue8m0 = ue8m0_decode_table();
  const __m256 k256 = _mm256_set1_ps(256.0f);
  const int64_t in = w.in;
  for (int64_t o = o0; o < o1; ++o, dst += in) {
    const uint8_t* codes = w.codes + o * w.row_bytes();
    const uint8_t* scales = w.scales + ((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols;
    for (int64_t i0 = 0; i0 < in; i0 += 32) {
      const uint8_t e = scales[i0 >> w.block_cols_log2];
      const bool big = F == QuantFormat::kFp8E4M3 && e >= kBigScaleCode;
      __m256 s = _mm256_set1_ps(ue8m0[e]);
      if (F == QuantFormat::kFp8E4M3 && !big) s = _mm256_mul_ps(s, k256);
      const int64_t i1 = i0 + 32 < in ? i0 + 32 : in;
      for (int64_t i = i0; i < i1; i += 8) {
        const int64_t n = in - i;
        __m256 v = dec.load(codes, i, n);
        if (F == QuantFormat::kFp8E4M3 && big) v = _mm256_mul_ps(v, k256);
        v = _mm256_mul_ps(v, s);
        if (n >= 8) _mm256_storeu_ps(dst + i, v);
        else _mm256_maskstore_ps(dst + i, tail_mask(n), v);
      }
    }
  }
}

}  // namespace

FoldRange fold_range(const float* x, int64_t n) {
  // |x| as int32 bits orders as |x| does: the largest finite |x| (NaN counted as 0) and the
  // smallest nonzero one (zeros and NaN counted as INT32_MAX).
  const __m256i abs_mask = _mm256_set1_epi32(INT32_MAX), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i none = _mm256_set1_epi32(INT32_MAX), zero = _mm256_setzero_si256();
  __m256i top8 = zero, bottom8 = none;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), abs_mask);
    const __m256i nan = _mm256_cmpgt_epi32(a, inf);
    top8 = _mm256_max_epi32(top8, _mm256_andnot_si256(nan, a));
    bottom8 = _mm256_min_epi32(bottom8, _mm256_blendv_epi8(a, none, _mm256_or_si256(nan, _mm256_cmpeq_epi32(a, zero))));
  }
  alignas(32) int32_t t[8], b[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), top8);
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), bottom8);
  int32_t top = 0, bottom = INT32_MAX;
  for (int k = 0; k < 8; ++k) {
    top = std::max(top, t[k]);
    bottom = std::min(bottom, b[k]);
  }
  for (; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, x + i, 4);
    const int32_t a = bits & INT32_MAX;
    const bool nan = a > 0x7F800000;
    top = std::max(top, nan ? 0 : a);
    bottom = std::min(bottom, (a == 0 || nan) ? INT32_MAX : a);
  }
  if (top >= 0x7F800000) return {};  // an infinite x
  // Exponent field − 127: floor(log2 |x|) for normal x, −127 for subnormal x (which then allows
  // only k ≥ 0, where scaling a subnormal up is exact).
  FoldRange r;
  r.hi = top == 0 ? 1000 : 127 - ((top >> 23) - 127);
  r.lo = bottom == INT32_MAX ? -1000 : std::min(0, -126 - ((bottom >> 23) - 127));
  return r;
}

void gemm_quant_avx2_widen(const QuantWeights& w, int64_t o0, int64_t o1, float* dst) {
  if (w.format == QuantFormat::kFp8E4M3) {
    widen<QuantFormat::kFp8E4M3>(w, o0, o1, dst);
  } else {
    widen<QuantFormat::kFp4E2M1>(w, o0, o1, dst);
  }
}

void gemm_quant_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                           int64_t o1, int64_t out, float* y,
                           const FoldRange& fold) {
  if (w.format == QuantFormat::kFp4E2M1) {
    block<QuantFormat::kFp4E2M1, false>(x, r0, r1, in, w, o0, o1, out, y, fold);
  } else if (w.nan_free) {
    block<QuantFormat::kFp8E4M3, true>(x, r0, r1, in, w, o0, o1, out, y, fold);
  } else {
    block<QuantFormat::kFp8E4M3, false>(x, r0, r1, in, w, o0, o1, out, y, fold);
  }
}

}  // namespace dsv41
