// AVX2/FMA micro-kernels for y = x · Wᵀ (see gemm.h for the summation order they implement).
// A tile is R rows × O outputs (R ≤ 4, O ≤ 4) held in R·O ymm accumulators while the kernel walks
// `in` once, 8 floats at a time: both operands are contiguous along `in`, so no packing is needed.
// Only intrinsics and file-local templates here: this file is built with -mavx2 -mfma, and an
// inline function from a shared header compiled here could be picked by the linker for callers
// on CPUs without AVX2.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_avx2.h"
#include "kernels/cpu/gemm_avx2_lanes.h"
#include "kernels/cpu/weight_prefetch.h"

namespace dsv41 {
namespace {

// Weight loaders: 8 consecutive weights widened to f32; the tail versions zero lanes ≥ n.
inline __m256 load_w(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_w_tail(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
// bf16 → f32 is exact: the 16 bits become the high half of the float.
inline __m256 load_w(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load_w_tail(const uint16_t* p, int64_t n) {
  uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // no 16-bit masked load in AVX2
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return load_w(buf);
}

// y[r·ldy + o] = Σ_i x[r·in + i] · w[o·in + i] for r < R, o < O.
template <int R, int O, typename W>
void tile(const float* x, const W* w, int64_t in, float* y, int64_t ldy) {
  __m256 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_ps();
  int64_t i = 0;
  constexpr int64_t kLine = 64 / sizeof(W);  // columns per cache line of a weight row
  const uint8_t* w_bytes = reinterpret_cast<const uint8_t*>(w);
  for (; i + 8 <= in; i += 8) {
    if (i % kLine == 0) prefetch_rows_ahead<O>(w_bytes, in * int64_t(sizeof(W)), i * int64_t(sizeof(W)));
    __m256 wv[O];
    for (int o = 0; o < O; ++o) wv[o] = load_w(w + o * in + i);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * in + i);
      for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
    }
  }
  if (i < in) {  // zero-padded tail: the padded lanes add 0·0
    const int64_t n = in - i;
    const __m256i m = tail_mask(n);
    __m256 wv[O];
    for (int o = 0; o < O; ++o) wv[o] = load_w_tail(w + o * in + i, n);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_maskload_ps(x + r * in + i, m);
      for (int o = 0; o < O; ++o) acc[r][o] = _mm256_fmadd_ps(xv, wv[o], acc[r][o]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) y[r * ldy + o] = hsum(acc[r][o]);
}

template <typename W>
using TileFn = void (*)(const float*, const W*, int64_t, float*, int64_t);

template <typename W, int R>
TileFn<W> tile_for(int o) {
  switch (o) {
    case 1: return &tile<R, 1, W>;
    case 2: return &tile<R, 2, W>;
    case 3: return &tile<R, 3, W>;
    default: return &tile<R, 4, W>;
  }
}

template <typename W>
TileFn<W> tile_for(int r, int o) {
  switch (r) {
    case 1: return tile_for<W, 1>(o);
    case 2: return tile_for<W, 2>(o);
    case 3: return tile_for<W, 3>(o);
    default: return tile_for<W, 4>(o);
  }
}

// Row groups outside (balanced, ≤ 4: 7 → 4 + 3, 9 → 3 + 3 + 3), output groups inside: the
// block's weights (sized by the caller to sit in L2) are re-read from cache for each row group, the
// group's rows of x stay in L1. Few rows use wider output groups (4) to keep enough independent FMA
// chains; 3 or 4 rows use 3 so the 12 accumulators + 3 weight vectors + 1 x vector fit the 16 ymm
// registers.
template <typename W>
void block(const float* x, int64_t r0, int64_t r1, int64_t in, const W* w, int64_t o0, int64_t o1, int64_t out,
           float* y) {
  const int64_t rows = r1 - r0, groups = (rows + 3) / 4;
  const int rg = rows <= 16 ? static_cast<int>((rows + groups - 1) / groups) : 4;
  const int og = rg <= 2 ? 4 : 3;
  for (int64_t r = r0; r < r1; r += rg) {
    const int rn = static_cast<int>(r1 - r < rg ? r1 - r : rg);
    for (int64_t o = o0; o < o1; o += og) {
      const int on = static_cast<int>(o1 - o < og ? o1 - o : og);
      tile_for<W>(rn, on)(x + r * in, w + o * in, in, y + r * out + o, out);
    }
  }
}

}  // namespace

void gemm_f32_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const float* w, int64_t o0,
                         int64_t o1, int64_t out, float* y) {
  block<float>(x, r0, r1, in, w, o0, o1, out, y);
}

void gemm_bf16w_avx2_block(const float* x, int64_t r0, int64_t r1, int64_t in, const uint16_t* w, int64_t o0,
                           int64_t o1, int64_t out, float* y) {
  block<uint16_t>(x, r0, r1, in, w, o0, o1, out, y);
}

}  // namespace dsv41
