// amx_pack.h's B-tile packers on AVX-512 (F + BW). Built with the AVX-512 flags.
#include "kernels/cpu/amx_pack.h"

#include <immintrin.h>

#include <algorithm>

#include "base/numerics.h"

namespace dsv41 {
namespace {

constexpr int64_t kKStep = 32;       // K values (bf16) of one tile row
constexpr int64_t kTileElems = 512;  // bf16 in one tile
constexpr int kParts = 3;            // hi + mid + lo (split3)

// The 16 × 16 transpose of 32-bit lanes: out[r] lane c = in[c] lane r. Unpacks within 128-bit
// quarters pair up 2 then 4 inputs, then the quarters are gathered across inputs.
inline void transpose_16x16(const __m512i in[16], __m512i out[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // t[2i] quarter L: a0 b0 a1 b1, t[2i+1]: a2 b2 a3 b3 (a, b = in 2i, 2i+1)
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i+j] quarter L: lane 4L + j of inputs 4i … 4i+3
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);  // quarters 0, 1 of both
    const __m512i x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);  // quarters 2, 3
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
    out[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);       // lane j
    out[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);   // lane 4 + j
    out[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);   // lane 8 + j
    out[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);  // lane 12 + j
  }
}

// cols[n] = column n's 16 K pairs (32-bit lanes): stores the B tile, row kp = pair kp of every
// column, as 16 full 64-byte rows.
inline void store_pairs_transposed(const __m512i cols[16], uint16_t* tile) {
  __m512i rows[16];
  transpose_16x16(cols, rows);
  for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tile + r * 32, rows[r]);
}

// The high 16-bit halves of 32 float lanes (lo: values 0..15, hi: 16..31), in order.
inline __m512i high_halves(__m512i lo, __m512i hi) {
  const __m512i odd_words = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29,
                                             27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(lo, odd_words, hi);
}

inline __mmask16 nan_lanes(__m512i b) {
  return _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
}

// weight_bf16 of 32 floats: their high halves, a NaN as 0x7FC0.
inline __m512i weight_words(__m512 lo, __m512 hi) {
  const __m512i lb = _mm512_castps_si512(lo), hb = _mm512_castps_si512(hi);
  const __mmask32 nan = static_cast<__mmask32>(nan_lanes(lb)) | (static_cast<__mmask32>(nan_lanes(hb)) << 16);
  return _mm512_mask_mov_epi16(high_halves(lb, hb), nan, _mm512_set1_epi16(0x7FC0));
}

// split3 (amx_tile_kernels.h) on 16 lanes: each part's bf16 in the high half of its lane.
inline void split3_lanes(__m512 v, __m512i* hi, __m512i* mid, __m512i* lo) {
  const __m512i b = _mm512_castps_si512(v), high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i exp_mask = _mm512_set1_epi32(0x7F800000);
  const __mmask16 finite = _mm512_cmpneq_epi32_mask(_mm512_and_si512(b, exp_mask), exp_mask);
  const __m512i hb = _mm512_and_si512(b, high);
  const __m512 r1 = _mm512_maskz_sub_ps(finite, v, _mm512_castsi512_ps(hb));  // finite ? v − hi : +0
  const __m512i mb = _mm512_and_si512(_mm512_castps_si512(r1), high);
  const __m512 r2 = _mm512_sub_ps(r1, _mm512_castsi512_ps(mb));
  *hi = _mm512_mask_mov_epi32(hb, nan_lanes(b), _mm512_set1_epi32(0x7FC00000));
  *mid = mb;
  *lo = _mm512_castps_si512(r2);
}

inline __mmask16 first_lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << n) - 1);
}
inline __mmask32 first_lanes32(int64_t n) {
  return n >= 32 ? __mmask32(0xFFFFFFFFu) : n <= 0 ? __mmask32(0) : static_cast<__mmask32>((1u << n) - 1);
}

// Both panels: tile (group g, K step s) at panel + (g · steps + s) · 512, as pack_panel's
// g · kpad · 16 + s · 512. column(c, k0, n, mask) gives weight row c's values k0 … k0 + n − 1 as
// 32 bf16 (zero past n).
template <class Column>
void pack_panel_tiles(int64_t in, int64_t ncols, int64_t groups, int64_t kpad, uint16_t* panel, Column column) {
  const int64_t steps = kpad / kKStep;
  __m512i cols[16];
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k0 = s * kKStep, n = std::clamp<int64_t>(in - k0, 0, kKStep);
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t c = g * 16 + i;
        cols[i] = c < ncols ? column(c, k0, n) : _mm512_setzero_si512();
      }
      store_pairs_transposed(cols, panel + (g * steps + s) * kTileElems);
    }
}

}  // namespace

void pack_panel_f32_avx512(const float* src, int64_t in, int64_t ncols, int64_t groups, int64_t kpad,
                           uint16_t* panel) {
  pack_panel_tiles(in, ncols, groups, kpad, panel, [&](int64_t c, int64_t k0, int64_t n) {
    const float* p = src + c * in + k0;
    return weight_words(_mm512_maskz_loadu_ps(first_lanes16(n), p), _mm512_maskz_loadu_ps(first_lanes16(n - 16), p + 16));
  });
}

namespace {

// The codes of a 32-column step as 32 bf16 words of code value × scale, the float32 product
// gemm_quant_avx2_widen forms (one multiply, rounded once; FP8 codes as value × 2^-8 through the
// half trick of gemm_quant_avx2.cpp, the 2^8 folded into the scale below code 247), then its high
// half as weight_bf16 takes it (a NaN as 0x7FC0). Lanes ≥ n are zero.
struct QuantColumns {
  const QuantWeights& w;
  int64_t o0;
  const float* ue8m0 = ue8m0_decode_table();
  const __m512 e2m1 = _mm512_loadu_ps(e2m1_decode_table());

  __m512i operator()(int64_t c, int64_t k0, int64_t n) const {
    const int64_t o = o0 + c;
    const uint8_t e = w.scales[((w.row_phase + o) >> w.block_rows_log2) * w.scale_cols + (k0 >> w.block_cols_log2)];
    __m512 lo, hi;
    __mmask32 nan = 0;
    if (w.format == QuantFormat::kFp8E4M3) {
      const __m256i codes = _mm256_maskz_loadu_epi8(first_lanes32(n), w.codes + o * w.in + k0);
      // sign-extended and shifted left 7: sign in bits 15 and 14; clearing 14 gives the half
      // sign | 0 eeee mmm 0000000 = value × 2^-8.
      const __m512i h = _mm512_and_si512(_mm512_slli_epi16(_mm512_cvtepi8_epi16(codes), 7), _mm512_set1_epi16(static_cast<short>(0xBFFF)));
      const __m512i k3f80 = _mm512_set1_epi16(0x3F80);
      nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, k3f80), k3f80);  // magnitude 0x7F
      lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
      hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
      const __m512 k256 = _mm512_set1_ps(256.0f);
      if (e >= 247) {  // 256 · s would round or overflow: two multiplies, as the widening does
        lo = _mm512_mul_ps(lo, k256);
        hi = _mm512_mul_ps(hi, k256);
        const __m512 s = _mm512_set1_ps(ue8m0[e]);
        lo = _mm512_mul_ps(lo, s);
        hi = _mm512_mul_ps(hi, s);
      } else {
        const __m512 s = _mm512_mul_ps(_mm512_set1_ps(ue8m0[e]), k256);
        lo = _mm512_mul_ps(lo, s);
        hi = _mm512_mul_ps(hi, s);
      }
    } else {
      // 16 bytes, two codes each (low nibble = even column): dword lanes of byte i, then the
      // nibble index for column 2i / 2i + 1, looked up in the 16-entry table.
      const __m128i bytes = _mm_maskz_loadu_epi8(first_lanes16((n + 1) / 2), w.codes + o * (w.in / 2) + k0 / 2);
      const __m512i idx_lo = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes));  // bytes 0..7, each twice
      const __m512i idx_hi = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(bytes, bytes));  // bytes 8..15
      const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
      const __m512i nib = _mm512_set1_epi32(0xF);
      const __m512 s = _mm512_set1_ps(ue8m0[e]);
      lo = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(_mm512_srlv_epi32(idx_lo, shifts), nib), e2m1), s);
      hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_and_si512(_mm512_srlv_epi32(idx_hi, shifts), nib), e2m1), s);
    }
    const __m512i words = _mm512_mask_mov_epi16(weight_words(lo, hi), nan, _mm512_set1_epi16(0x7FC0));
    return _mm512_maskz_mov_epi16(first_lanes32(n), words);
  }
};

}  // namespace

void fill_quant_panel_avx512(const QuantWeights& w, int64_t o0, int64_t o1, int64_t groups, int64_t kpad,
                             uint16_t* panel) {
  pack_panel_tiles(w.in, o1 - o0, groups, kpad, panel, QuantColumns{w, o0});
}

void pack_panel_bf16_avx512(const uint16_t* src, int64_t in, int64_t ncols, int64_t groups, int64_t kpad,
                            uint16_t* panel) {
  pack_panel_tiles(in, ncols, groups, kpad, panel, [&](int64_t c, int64_t k0, int64_t n) {
    return _mm512_maskz_loadu_epi16(first_lanes32(n), src + c * in + k0);
  });
}

void store_logits_tile_avx512(const float* c, int64_t nkeys, float* logits, int64_t lstride) {
  __m512i keys[16], heads[16];
  for (int m = 0; m < 16; ++m) keys[m] = _mm512_loadu_si512(c + m * 16);
  transpose_16x16(keys, heads);
  const __mmask16 valid = first_lanes16(nkeys);
  for (int n = 0; n < 16; ++n) _mm512_mask_storeu_epi32(logits + n * lstride, valid, heads[n]);
}

void pack_token_queries_avx512(const float* q, int64_t H, int64_t D, uint16_t* qp) {
  const int64_t ds = D / kKStep;
  __m512i parts[kParts][16];
  for (int64_t hb = 0; hb < H / 16; ++hb)
    for (int64_t s = 0; s < ds; ++s) {
      for (int64_t i = 0; i < 16; ++i) {
        const float* src = q + (hb * 16 + i) * D + s * kKStep;
        __m512i a[kParts], b[kParts];
        split3_lanes(_mm512_loadu_ps(src), &a[0], &a[1], &a[2]);
        split3_lanes(_mm512_loadu_ps(src + 16), &b[0], &b[1], &b[2]);
        for (int p = 0; p < kParts; ++p) parts[p][i] = high_halves(a[p], b[p]);
      }
      uint16_t* t = qp + (hb * ds + s) * kParts * kTileElems;
      for (int p = 0; p < kParts; ++p) store_pairs_transposed(parts[p], t + p * kTileElems);
    }
}

}  // namespace dsv41
