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

// C += A·B on signed 8-bit integers, int32 accumulation (exact), 16×8×32. Fragments as above
// with four 8-bit k per register: a0 (row g, k 4t…4t+3), a1 (row g+8, same k), a2 (row g,
// k 16+4t…), a3 (row g+8, k 16+4t…); b0 (k 4t…4t+3, col g), b1 (k 16+4t…, col g).
__device__ __forceinline__ void mma_s8_16832(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Eight E2M1 codes (one word of a packed FP4 row: channel 2i in the low nibble of byte i, 2i+1 in
// the high nibble) as eight int8 holding 2·value (0, ±1, ±2, ±3, ±4, ±6, ±8, ±12): lo = channels
// 0…3, hi = channels 4…7, one per byte in channel order. The magnitudes come from one byte-permute
// table, the code itself the selector: a code's sign bit is prmt's sign-replicate bit, and every
// table byte is below 0x80, so a negative code selects 0x00. With the sign bits flipped the same
// table gives the negative codes' magnitudes N (0 for the others), negated bytewise as
// (0x80808080 − N) ^ 0x80808080 (each byte 0x80 − N ≥ 0x20: no borrow between bytes) and merged.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
// The byte table {lo, hi}: the eight magnitudes 2·value of codes 0…7.
struct E2m1Tables {
  uint32_t lo, hi;
};
__host__ __device__ constexpr E2m1Tables e2m1_tables() {
  return {0x03020100u, 0x0C080604u};  // 0 1 2 3 | 4 6 8 12
}

// The table of 2·value·2^shift (shift 0 … 3: every magnitude stays within 96, below 0x80, and the
// bytes shift as one word).
__device__ __forceinline__ E2m1Tables e2m1_tables_shifted(int shift) {
  constexpr E2m1Tables t = e2m1_tables();
  return {t.lo << shift, t.hi << shift};
}

// Four codes (selector nibbles, the low 16 bits of `codes`) as signed bytes from table `tab`.
__device__ __forceinline__ uint32_t e2m1x4_to_s8(uint32_t codes, const E2m1Tables& tab) {
  const uint32_t pos = prmt(tab.lo, tab.hi, codes), neg = prmt(tab.lo, tab.hi, codes ^ 0x8888u);
  return ((0x80808080u - neg) ^ 0x80808080u) | pos;
}

__device__ __forceinline__ void e2m1x8_to_s8(uint32_t w, uint32_t& lo, uint32_t& hi,
                                             const E2m1Tables& tab = e2m1_tables()) {
  lo = e2m1x4_to_s8(w, tab);
  hi = e2m1x4_to_s8(w >> 16, tab);
}

// The same eight codes as two non-negative parts, value = pos − neg: pos holds the magnitudes of
// the codes whose sign bit is clear (0 for the others, as in e2m1x4_to_s8), neg those of the codes
// whose sign bit is set (the selector with its sign bits flipped). [0] channels 0…3, [1] 4…7. Two
// permutes a half and no negation: an MMA of each part (neg against the negated other operand)
// sums to the MMA of the signed bytes.
__device__ __forceinline__ void e2m1x8_to_s8_parts(uint32_t w, uint32_t (&pos)[2], uint32_t (&neg)[2],
                                                   const E2m1Tables& tab) {
  const uint32_t flipped = w ^ 0x88888888u;
  pos[0] = prmt(tab.lo, tab.hi, w);
  neg[0] = prmt(tab.lo, tab.hi, flipped);
  pos[1] = prmt(tab.lo, tab.hi, w >> 16);
  neg[1] = prmt(tab.lo, tab.hi, flipped >> 16);
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

// ---- Warpgroup MMA (wgmma, sm_90a): the 4 consecutive warps of a warpgroup multiply together.
// D[64, N] = A[64, 32] · B[32, N] on FP8 E4M3, fp32 accumulation; A from registers (warp i of
// the group holds rows 16i..16i+15 like an m16n8k32 A fragment: a0 row g, k 4t..4t+3; a1 row
// g+8, same k; a2 row g, k 16+4t..16+4t+3; a3 row g+8), B from shared memory through a matrix
// descriptor. D like N/8 m16n8 C fragments: d[4j..4j+1] row g, cols 8j+2t, +1; d[4j+2..] row g+8.
// Within one 32-channel MXFP4 block both operands share one scale each, so the products are
// integers times one power of two and the fp32 partial sum is exact (|sum| < 2^13 units).

// Shared-memory matrix descriptor, no swizzle: B stored K-major as 8-row × 16-byte core matrices
// (128 B each), `lbo` bytes between core matrices along K, `sbo` bytes between 8-row groups.
__device__ __forceinline__ uint64_t wgmma_desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint64_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return ((a & 0x3FFFF) >> 4) | (uint64_t{(lbo >> 4) & 0x3FFF} << 16) | (uint64_t{(sbo >> 4) & 0x3FFF} << 32);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from touching accumulator registers across a wait (no data dependence
// between the asm statements otherwise).
template <int R>
__device__ __forceinline__ void wgmma_reg_fence(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void wgmma_reg_fence(int (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// D = A·B (no accumulation: scale-d false), N = 32 or 8.
template <int N>
__device__ __forceinline__ void wgmma_e4m3_m64k32(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b);
template <>
__device__ __forceinline__ void wgmma_e4m3_m64k32<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}
template <>
__device__ __forceinline__ void wgmma_e4m3_m64k32<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, 0, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// D (+)= A·B on int8 with exact int32 sums, m64n64k32: A from registers as above, B from shared
// memory (K-major core matrices, wgmma_desc); `accumulate` false writes D = A·B.
__device__ __forceinline__ void wgmma_s8_m64n64k32(int (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
        "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
        "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}

// The same with N = 32 (four 8-column tiles: 16 accumulators a thread).
__device__ __forceinline__ void wgmma_s8_m64n32k32(int (&d)[16], const uint32_t (&a)[4], uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
}
