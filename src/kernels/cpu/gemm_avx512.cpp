// AVX-512 micro-kernels for y = x · Wᵀ with the SAME summation order, and so the same bits, as
// the AVX2 path (gemm.h): a zmm register holds two outputs side by side, [w[o, i..i+7] |
// w[o+1, i..i+7]], and multiplies the broadcast [x[r, i..i+7] | x[r, i..i+7]], so each half is
// exactly the AVX2 kernel's 8 lanes for its output (FMA per lane in increasing i, zero-padded
// tail), and the reduction below is the AVX2 lane tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)),
// done for 8 outputs at once with shuffles.
// What the 32 registers buy: a tile of up to 8 rows × 6 outputs (24 accumulators), so a small
// batch (decode of 2..16 sequences) loads each weight once per 8 rows instead of once per 4 rows.
// Only intrinsics and file-local templates here: this file alone is built with -mavx512*.
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_avx512_lanes.h"
#include "kernels/cpu/weight_prefetch.h"

namespace dsv41 {
namespace {

// Two outputs' 8 weights as one zmm (b = nullptr: the upper half is zero), widened to f32.
inline __m512 load_pair(const float* a, const float* b) {
  const __m256 lo = _mm256_loadu_ps(a);
  // zext, not cast: the same instructions, and no "uninitialised upper half" warnings from GCC.
  return b ? _mm512_insertf32x8(_mm512_zextps256_ps512(lo), _mm256_loadu_ps(b), 1) : _mm512_zextps256_ps512(lo);
}
inline __m512 load_pair_tail(const float* a, const float* b, __mmask8 m) {
  const __m256 lo = _mm256_maskz_loadu_ps(m, a);
  return b ? _mm512_insertf32x8(_mm512_zextps256_ps512(lo), _mm256_maskz_loadu_ps(m, b), 1)
           : _mm512_zextps256_ps512(lo);
}
// bf16 → f32 is exact: the 16 bits become the high half of the float.
inline __m512 widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
// One vpermt2w puts a's 8 bf16 into the high halves of lanes 0..7 and b's into lanes 8..15, the
// low halves zeroed by the mask: the same floats as widen_bf16 of [a | b], in one shuffle instead
// of an insert, a zero-extension and a shift (the tiles' widening, not their FMAs, bounded them).
inline __m512 load_pair(const uint16_t* a, const uint16_t* b) {
  // Word 2l + 1 of the result takes word l of a (l < 8) or word l − 8 of b (table index 32 + l − 8).
  const __m512i idx = _mm512_setr_epi32(0 << 16, 1 << 16, 2 << 16, 3 << 16, 4 << 16, 5 << 16, 6 << 16, 7 << 16, 32 << 16,
                                        33 << 16, 34 << 16, 35 << 16, 36 << 16, 37 << 16, 38 << 16, 39 << 16);
  const __m512i lo = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  if (!b) return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0x0000AAAA, idx, lo));
  const __m512i hi = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  return _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi16(0xAAAAAAAA, lo, idx, hi));
}
inline __m512 load_pair_tail(const uint16_t* a, const uint16_t* b, __mmask8 m) {
  const __m128i lo = _mm_maskz_loadu_epi16(m, a);
  const __m128i hi = b ? _mm_maskz_loadu_epi16(m, b) : _mm_setzero_si128();
  return widen_bf16(_mm256_inserti128_si256(_mm256_zextsi128_si256(lo), hi, 1));
}

// y[r·ldy + o] = Σ_i x[r·in + i] · w[o·in + i] for r < R, o < O.
template <int R, int O, typename W>
void tile(const float* x, const W* w, int64_t in, float* y, int64_t ldy) {
  constexpr int P = (O + 1) / 2;  // registers per row; the last one half empty when O is odd
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  int64_t i = 0;
  constexpr int64_t kLine = 64 / sizeof(W);  // columns per cache line of a weight row
  const uint8_t* w_bytes = reinterpret_cast<const uint8_t*>(w);
  for (; i + 8 <= in; i += 8) {
    if (i % kLine == 0) prefetch_rows_ahead<O>(w_bytes, in * int64_t(sizeof(W)), i * int64_t(sizeof(W)));
    __m512 wv[P];
    for (int p = 0; p < P; ++p) wv[p] = load_pair(w + 2 * p * in + i, 2 * p + 1 < O ? w + (2 * p + 1) * in + i : nullptr);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x + r * in + i));
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
    }
  }
  if (i < in) {  // zero-padded tail: the padded lanes add 0·0, as in the AVX2 path
    const __mmask8 m = static_cast<__mmask8>((1u << (in - i)) - 1);
    __m512 wv[P];
    for (int p = 0; p < P; ++p)
      wv[p] = load_pair_tail(w + 2 * p * in + i, 2 * p + 1 < O ? w + (2 * p + 1) * in + i : nullptr, m);
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m, x + r * in + i));
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p], acc[r][p]);
    }
  }
  store_pair_tile<R, O>(acc, y, ldy);
}

// Widest output group per row count: accumulators R·ceil(O/2) + ceil(O/2) weights + 1 x ≤ 32.
constexpr int kMaxRows = 8;
constexpr int kMaxOut[kMaxRows + 1] = {0, 16, 16, 8, 8, 8, 6, 6, 6};

template <typename W>
using TileFn = void (*)(const float*, const W*, int64_t, float*, int64_t);

template <typename W, int R, int... Os>
constexpr std::array<TileFn<W>, sizeof...(Os)> row_table(std::integer_sequence<int, Os...>) {
  return {&tile<R, Os + 1, W>...};
}

template <typename W, int R>
TileFn<W> tile_for_rows(int o) {
  static constexpr auto table = row_table<W, R>(std::make_integer_sequence<int, kMaxOut[R]>{});
  return table[o - 1];
}

template <typename W>
TileFn<W> tile_for(int r, int o) {
  switch (r) {
    case 1: return tile_for_rows<W, 1>(o);
    case 2: return tile_for_rows<W, 2>(o);
    case 3: return tile_for_rows<W, 3>(o);
    case 4: return tile_for_rows<W, 4>(o);
    case 5: return tile_for_rows<W, 5>(o);
    case 6: return tile_for_rows<W, 6>(o);
    case 7: return tile_for_rows<W, 7>(o);
    default: return tile_for_rows<W, 8>(o);
  }
}

// Rows split into balanced groups of ≤ 8 (16 → 8 + 8, 9 → 5 + 4).
inline int row_group(int64_t rows) {
  const int64_t groups = (rows + kMaxRows - 1) / kMaxRows;
  return static_cast<int>((rows + groups - 1) / groups);
}

// Row groups outside, output groups inside: the block's weights (sized by the caller to sit in L2)
// are re-read from cache for each row group, the group's rows of x stay in L1. (Output groups
// outside, for few rows, measured 2× slower at 12 and 16 rows: keep this order for every shape.)
template <typename W>
void block(const float* x, int64_t r0, int64_t r1, int64_t in, const W* w, int64_t o0, int64_t o1, int64_t out,
           float* y) {
  const int rg = row_group(r1 - r0 < 2 * kMaxRows ? r1 - r0 : kMaxRows);
  const int og = kMaxOut[rg];
  for (int64_t r = r0; r < r1; r += rg) {
    const int rn = static_cast<int>(r1 - r < rg ? r1 - r : rg);
    for (int64_t o = o0; o < o1; o += og) {
      const int on = static_cast<int>(o1 - o < og ? o1 - o : og);
      tile_for<W>(rn, on)(x + r * in, w + o * in, in, y + r * out + o, out);
    }
  }
}

}  // namespace

void gemm_f32_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const float* w, int64_t o0,
                           int64_t o1, int64_t out, float* y) {
  block<float>(x, r0, r1, in, w, o0, o1, out, y);
}

void gemm_bf16w_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const uint16_t* w, int64_t o0,
                             int64_t o1, int64_t out, float* y) {
  block<uint16_t>(x, r0, r1, in, w, o0, o1, out, y);
}

}  // namespace dsv41
