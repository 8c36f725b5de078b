// Warp-level tensor-core instructions (mma.sync) used by the attention and indexer kernels.
// (FP8 mma.sync exists for sm_89+, but on sm_90 ptxas lowers it to conversions plus fp16 HMMA,
// seen in the SASS on the H200, so the indexer places FP4 codes in fp16 itself.)
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A 16×K row-major: a0 (row g, k lo), a1 (row g+8, k lo), a2 (row g, k hi), a3 (row g+8, k hi)
//   B K×8:            b0 (k lo, col g), b1 (k hi, col g)
//   C 16×8 fp32:      c0, c1 (row g, cols 2t, 2t+1), c2, c3 (row g+8, cols 2t, 2t+1)
// where "k lo" is k = 2t, 2t+1 and "k hi" k = 2t+8, 2t+9 (K = 16). Each 32-bit register holds consecutive k, the lowest in the low bits.
#pragma once

#include <cstdint>

namespace dsv41::cuda {

// C += A·B, bf16 inputs, fp32 accumulation, 16×8×16.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// C += A·B, fp16 inputs, fp32 accumulation, 16×8×16.
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Eight E2M1 codes (one word, nibble j = channel j) as four fp16 pairs holding value·2^-14
// exactly: the code's exponent and mantissa bits land in fp16's low exponent bits and top
// mantissa bit (0.5 becomes the fp16 subnormal 2^-15). Pair i = channels (i, i+4).
__device__ __forceinline__ void e2m1x8_to_f16(uint32_t w, uint32_t (&h)[4]) {
  h[0] = ((w << 9) & 0x0E000E00u) | ((w << 12) & 0x80008000u);
  h[1] = ((w << 5) & 0x0E000E00u) | ((w << 8) & 0x80008000u);
  h[2] = ((w << 1) & 0x0E000E00u) | ((w << 4) & 0x80008000u);
  h[3] = ((w >> 3) & 0x0E000E00u) | (w & 0x80008000u);
}

// Eight E2M1 codes (one 32-bit word of a packed FP4 row: channel 2i in the low nibble of byte i,
// channel 2i+1 in the high nibble) as E4M3 bytes holding value·2^-6 exactly: E2M1's exponent
// and mantissa bits land in the low exponent bits and top mantissa bit of E4M3, and its
// subnormal 0.5 lands on E4M3's subnormal 2^-7, so no case needs a branch.
//   even: the even channels 0, 2, 4, 6 (bytes 0..3); odd: channels 1, 3, 5, 7.
__device__ __forceinline__ void e2m1x8_to_e4m3(uint32_t w, uint32_t& even, uint32_t& odd) {
  even = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
  odd = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
}

}  // namespace dsv41::cuda
