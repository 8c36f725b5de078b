// gemm_quant's AVX-512 block on CPUs that also have AVX512-VBMI and GFNI (Ice Lake, Zen 4 and
// later; gemm.cpp and gemm_many.cpp take it for CpuIsa::kAvx512 wherever cpu_has_avx512_vbmi_gfni()):
// the tiles of gemm_quant_avx512_tile.h with cheaper decoders for
// their two hot paths. Both produce the two top bytes of each weight's float32 bits with GFNI bit
// maps / byte lookups over 64 codes at once, then place them in the pair layout with one byte
// permute per 16 weights (the low two bytes are zero for every E4M3 and E2M1 value), instead of
// widening shuffles and float conversions. On one Zen 5 core from cache (a scratch loop, one row,
// 8 outputs per tile): FP8 36–41 GB/s against the base decoders' 30–31, FP4 12.1–13.5 against
// 10.4–11.7.
// - FP8 whole blocks folded onto x (NaN-free matrices): the float32 bits of value · 2^-120 are
//   the code's bits moved into place (sign → bit 31, exponent and mantissa → bits 26..20; E4M3
//   subnormals land on float32 subnormals: exact too), and x carries s · 2^120 = 2^(e-7) where
//   that product is exact (gemm_quant_fold.h), so the FMA forms x · w exactly as before.
// - FP4 whole blocks: one bit map splits the nibbles (low ones in the low half, high ones in the
//   high half), two 16-entry lookups give the float32 top bytes of dequant's E2M1 values, then ×
//   the pair's scales as the base decoder does: the same rounded products. (One-row FP4 products
//   take fp4_tile's broadcast decoder instead, on every AVX-512 CPU: gemm_quant_avx512_tile.h.)
#include "kernels/cpu/gemm_avx512.h"
#include "kernels/cpu/gemm_quant_avx512_tile.h"

namespace dsv41 {
namespace {

// GF2P8AFFINEQB matrices (one per qword): output bit i of a byte is the parity of the input
// bits in the matrix's byte 7 - i.
constexpr long long kFp8TopByte = 0x1020400000000080;   // s e3 e2 e1 e0 m2 m1 m0 → s 0 0 0 0 e3 e2 e1
constexpr long long kFp8NextByte = 0x0000000001020408;  //                        → e0 m2 m1 m0 0 0 0 0
constexpr long long kLowNibble = 0x0102040800000000;    // bits 3..0 → 3..0
constexpr long long kHighNibble = 0x1020408000000000;   // bits 7..4 → 3..0
// Bytes 2 and 3 of every dword: the float32 top bytes a placing permute writes (the rest zero).
constexpr __mmask64 kTopTwoBytes = 0xCCCCCCCCCCCCCCCCull;

// Byte permute indices for the pair group g (lanes 0–7: row a's columns 8g..8g+7, lanes 8–15:
// row b's): lane L takes byte pos(L) of the "next" table for its byte 2 and of the "top" table
// (index bit 6) for its byte 3.
template <typename Pos>
__m512i place(Pos pos) {
  alignas(64) uint8_t idx[64] = {};
  for (int lane = 0; lane < 16; ++lane) {
    idx[4 * lane + 2] = static_cast<uint8_t>(pos(lane));
    idx[4 * lane + 3] = static_cast<uint8_t>(pos(lane) | 64);
  }
  return _mm512_load_si512(idx);
}

struct PlaceTables {
  __m512i fp8[4], fp4[4];
  __m512i fp4_top, fp4_next;  // E2M1 code → float32 byte 3 / byte 2, in each 128-bit lane
};

const PlaceTables& place_tables() {
  static const PlaceTables t = [] {
    PlaceTables p;
    for (int g = 0; g < 4; ++g) {
      // FP8: [a's 32 codes | b's 32 codes], column c of a at c.
      p.fp8[g] = place([g](int lane) { return (lane < 8 ? 0 : 32) + 8 * g + (lane & 7); });
      // FP4 after the split: a's low nibbles (even columns) at 0..15, b's at 16..31, high nibbles
      // (odd columns) 32 further on.
      p.fp4[g] = place([g](int lane) {
        const int c = 8 * g + (lane & 7);
        return ((c & 1) ? 32 : 0) + (lane < 8 ? 0 : 16) + c / 2;
      });
    }
    alignas(64) uint8_t top[64], next[64];
    for (int i = 0; i < 64; ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(e2m1_decode_table()[i & 15]);
      top[i] = static_cast<uint8_t>(bits >> 24);
      next[i] = static_cast<uint8_t>(bits >> 16);
    }
    p.fp4_top = _mm512_load_si512(top);
    p.fp4_next = _mm512_load_si512(next);
    return p;
  }();
  return t;
}

// Whole FP8 blocks of NaN-free matrices as value · 2^-120, for the tile's folded path.
struct VbmiFp8Fold {
  static constexpr int kBias = 7;                                 // s · 2^120 = 2^(e - 7)
  static bool usable(uint8_t e) { return e <= 127 + kBias; }      // 2^(e-7) a finite float
  const PlaceTables& t = place_tables();
  template <bool HasB>
  void block(const uint8_t* a, const uint8_t* b, __m512 out[4]) const {
    const __m256i ra = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m512i v = HasB ? _mm512_inserti64x4(_mm512_castsi256_si512(ra),
                                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1)
                           : _mm512_zextsi256_si512(ra);
    const __m512i top = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(kFp8TopByte), 0);
    const __m512i next = _mm512_gf2p8affine_epi64_epi8(v, _mm512_set1_epi64(kFp8NextByte), 0);
    for (int g = 0; g < 4; ++g)
      out[g] = _mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(kTopTwoBytes, next, t.fp8[g], top));
  }
};

// Whole FP4 blocks (16 bytes per row), × the pair's scales s.
struct VbmiFp4Full {
  const PlaceTables& t = place_tables();
  template <bool HasB>
  void block32(const uint8_t* a, const uint8_t* b, __m512 s, __m512 out[4]) const {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
    const __m128i vb = HasB ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)) : _mm_setzero_si128();
    const __m512i both = _mm512_broadcast_i64x4(_mm256_inserti128_si256(_mm256_castsi128_si256(va), vb, 1));
    const __m512i split = _mm512_setr_epi64(kLowNibble, kLowNibble, kLowNibble, kLowNibble, kHighNibble, kHighNibble,
                                            kHighNibble, kHighNibble);
    const __m512i codes = _mm512_gf2p8affine_epi64_epi8(both, split, 0);
    const __m512i top = _mm512_shuffle_epi8(t.fp4_top, codes), next = _mm512_shuffle_epi8(t.fp4_next, codes);
    for (int g = 0; g < 4; ++g)
      out[g] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(kTopTwoBytes, next, t.fp4[g], top)), s);
  }
};

struct VbmiDecoders {
  template <bool NanFree>
  using Fp8Fold = std::conditional_t<NanFree, VbmiFp8Fold, BaseFp8FoldDecoder<NanFree>>;
  using Fp4Full = VbmiFp4Full;
};

}  // namespace

void gemm_quant_avx512vbmi_block(const float* x, int64_t r0, int64_t r1, int64_t in, const QuantWeights& w, int64_t o0,
                                 int64_t o1, int64_t out, float* y, const FoldRange& fold) {
  if (w.format == QuantFormat::kFp4E2M1) {
    block<QuantFormat::kFp4E2M1, false, VbmiDecoders>(x, r0, r1, in, w, o0, o1, out, y, fold);
  } else if (w.nan_free) {
    block<QuantFormat::kFp8E4M3, true, VbmiDecoders>(x, r0, r1, in, w, o0, o1, out, y, fold);
  } else {
    block<QuantFormat::kFp8E4M3, false, VbmiDecoders>(x, r0, r1, in, w, o0, o1, out, y, fold);
  }
}

}  // namespace dsv41
