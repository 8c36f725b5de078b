// The FP8 multi-row product of gemm_fp8_rows.h. Layout as gemm_avx512.cpp: a zmm accumulator
// holds two outputs' 8 lanes side by side, lane j summing the columns ≡ j (mod 8) in increasing
// order with FMA, reduced by the AVX2 lane tree (gemm_avx512_lanes.h).
// Only intrinsics and file-local functions here: this file alone of the FP8 rows is built with
// -mavx512*.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "base/numerics.h"
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_avx512_lanes.h"
#include "kernels/cpu/gemm_fp8_rows.h"
#include "kernels/cpu/thread_scratch.h"
#include "kernels/cpu/weight_prefetch.h"

namespace dsv41 {
namespace {

constexpr int kTileRows = 8;   // rows per tile (a row group)
constexpr int kTileOut = 4;    // outputs per tile: 8 × 2 accumulators + 2 × 4 decoded groups
constexpr int kBigScaleCode = 247;  // from here up 256 · s is not exact (gemm_quant_avx2.cpp)

// 32 columns of rows a and b (b null: zeros) as the four pair groups of columns 0–7, 8–15,
// 16–23, 24–31: [a's 8 | b's 8] each, as value × 2^-8 (a half-float view of the E4M3 code,
// exact; the matrix holds no NaN code).
inline void decode_block(const uint8_t* a, const uint8_t* b, __m512 out[4]) {
  const __m256i ra = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i rb = b ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)) : _mm256_setzero_si256();
  // [a 0–7, b 0–7 | a 16–23, b 16–23] and [a 8–15, b 8–15 | a 24–31, b 24–31]
  const __m256i pairs[2] = {_mm256_unpacklo_epi64(ra, rb), _mm256_unpackhi_epi64(ra, rb)};
  const __m512i kbfff = _mm512_set1_epi16(static_cast<short>(0xBFFF));
  for (int h = 0; h < 2; ++h) {
    // Sign-extended and shifted left 7, the sign sits in bits 15 and 14: clearing 14 leaves the
    // half sign | 0 eeee mmm 0000000 = value × 2^-8.
    const __m512i f16 = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(pairs[h]), 7), kbfff);
    out[h] = _mm512_cvtph_ps(_mm512_castsi512_si256(f16));
    out[h + 2] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(f16, 1));
  }
}

// y[r·ldy + o] for r < R, o < O over xs [R, in] (x already × 256 · s per block) and the O code
// rows from `codes` (row_bytes apart); in a multiple of 32.
template <int R, int O>
void tile(const float* xs, const uint8_t* codes, int64_t row_bytes, int64_t in, float* y, int64_t ldy) {
  constexpr int P = (O + 1) / 2;
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    if ((i0 & 63) == 0) prefetch_rows_ahead<O>(codes, row_bytes, i0);  // weight_prefetch.h
    __m512 wv[P][4];
    for (int p = 0; p < P; ++p)
      decode_block(codes + 2 * p * row_bytes + i0, 2 * p + 1 < O ? codes + (2 * p + 1) * row_bytes + i0 : nullptr, wv[p]);
    for (int g = 0; g < 4; ++g)  // columns in increasing order per lane
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(xs + r * in + i0 + 8 * g));
        for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(xv, wv[p][g], acc[r][p]);
      }
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) reduce_store(acc[r][0], P > 1 ? acc[r][1] : zero, zero, zero, y + r * ldy, O);
}

using TileFn = void (*)(const float*, const uint8_t*, int64_t, int64_t, float*, int64_t);

template <int R>
TileFn tile_for_rows(int o) {
  switch (o) {
    case 1: return &tile<R, 1>;
    case 2: return &tile<R, 2>;
    case 3: return &tile<R, 3>;
    default: return &tile<R, 4>;
  }
}

TileFn tile_for(int r, int o) {
  switch (r) {
    case 1: return tile_for_rows<1>(o);
    case 2: return tile_for_rows<2>(o);
    case 3: return tile_for_rows<3>(o);
    case 4: return tile_for_rows<4>(o);
    case 5: return tile_for_rows<5>(o);
    case 6: return tile_for_rows<6>(o);
    case 7: return tile_for_rows<7>(o);
    default: return tile_for_rows<8>(o);
  }
}

// xs [rn, in] = x's rows × 256 · s per 32-column block for one row of scales, as the one-call
// tile forms them; false (xs unusable) when some block cannot fold.
bool scale_rows(const float* x, int rn, int64_t in, const uint8_t* scale_row, int block_cols_log2,
                const FoldRange& fold, float* xs) {
  if (in % 32 != 0) return false;
  const float* ue8m0 = ue8m0_decode_table();
  for (int64_t i0 = 0; i0 < in; i0 += 32) {
    const uint8_t e = scale_row[i0 >> block_cols_log2];
    if (e >= kBigScaleCode || !fold.contains(e - 119)) return false;
    const __m512 s1 = _mm512_set1_ps(ue8m0[e] * 256.0f);
    for (int r = 0; r < rn; ++r)
      for (int64_t i = i0; i < i0 + 32; i += 16)
        _mm512_storeu_ps(xs + r * in + i, _mm512_mul_ps(_mm512_loadu_ps(x + r * in + i), s1));
  }
  return true;
}

}  // namespace

void gemm_fp8_rows_avx512_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w,
                                int64_t o0, int64_t o1, int64_t out, float* y, const FoldRange& fold) {
  if (!w.nan_free) return gemm_quant_avx512_block(x, r0, r1, in, w, o0, o1, out, y, fold);
  // The calling thread's scratch for ≤ 8 rows of x (thread_scratch.h: not state).
  float* const xs = thread_scratch_f32(ScratchSlot::kFp8Rows, static_cast<size_t>(kTileRows * in));
  const int64_t rows = r1 - r0, groups = (rows + kTileRows - 1) / kTileRows;
  const int rg = static_cast<int>((rows + groups - 1) / groups);  // balanced: 12 → 6 + 6
  const int64_t block_rows = int64_t{1} << w.block_rows_log2;
  for (int64_t r = r0; r < r1; r += rg) {
    const int rn = static_cast<int>(r1 - r < rg ? r1 - r : rg);
    // Outputs in runs that share one row of scales: [o, e) with (row_phase + o) in one block row.
    for (int64_t o = o0; o < o1;) {
      const int64_t phase = (w.row_phase + o) & (block_rows - 1);
      const int64_t e = std::min(o1, o + block_rows - phase);
      const uint8_t* scale_row = w.scales + ((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols;
      if (!scale_rows(x + r * in, rn, in, scale_row, w.block_cols_log2, fold, xs)) {
        gemm_quant_avx512_block(x, r, r + rn, in, w, o, e, out, y, fold);
      } else {
        for (int64_t t = o; t < e; t += kTileOut) {
          const int on = static_cast<int>(e - t < kTileOut ? e - t : kTileOut);
          tile_for(rn, on)(xs, w.codes + t * w.row_bytes(), w.row_bytes(), in, y + r * out + t, out);
        }
      }
      o = e;
    }
  }
}

}  // namespace dsv41
