// The AMX tile operands' B-side layouts (amx_tile_kernels.h) written with AVX-512: a B tile is
// [16 K pairs][16 columns][2] bf16, i.e. a 16 × 16 transpose of 32-bit pairs. The plain loops
// (pack_panel, pack_token_queries) store one 2- or 4-byte element per 64-byte tile row at a
// time, so each store lands on another cache line: on the Xeon the weight fill of a prefill GEMM
// took ≈ 17 cycles a weight (docs/BENCHMARKS.md, amx18's section). Here each tile is built in 16
// registers (one per column: that column's 32 K values as 16 pairs), transposed, and stored as
// 16 full 64-byte rows.
//
// Same bits as the plain loops (amx_pack_test.cpp checks them against pack_panel /
// pack_token_queries at ragged shapes, NaN and Inf included). Defined in amx_pack_avx512.cpp:
// call only where cpu_best_isa() ≥ kAvx512 (every AMX CPU has AVX-512).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

// pack_panel<float> / pack_panel<uint16_t> (amx_tile_kernels.h): `ncols` rows of `in` weights
// (row c at src + c · in) as `groups` 16-output B groups over kpad (a multiple of 32 ≥ in) K
// values; outputs ≥ ncols and K ≥ in are zero; a float becomes its high half (exact for
// dequantised weights), a NaN 0x7FC0.
void pack_panel_f32_avx512(const float* src, int64_t in, int64_t ncols, int64_t groups, int64_t kpad,
                           uint16_t* panel);
void pack_panel_bf16_avx512(const uint16_t* src, int64_t in, int64_t ncols, int64_t groups, int64_t kpad,
                            uint16_t* panel);

// Output rows [o0, o1) of the stored FP8 / FP4 matrix w dequantised straight into pack_panel's
// layout: the bits pack_panel<float> gives on gemm_quant_avx2_widen's rows (QuantFill's plain
// path), without the float32 rows in between (the same multiply, then the high half).
void fill_quant_panel_avx512(const QuantWeights& w, int64_t o0, int64_t o1, int64_t groups, int64_t kpad,
                             uint16_t* panel);

// pack_token_queries (amx_tile_kernels.h): q [H, D] float32 split in three bf16 parts (split3) as
// B tiles: 16-head block hb, channel step s, part p at qp + ((hb · (D/32) + s) · 3 + p) · 512.
// H a multiple of 16, D of 32.
void pack_token_queries_avx512(const float* q, int64_t H, int64_t D, uint16_t* qp);

// The logits tile c [16 keys][16 heads] (a tile store, 64-byte rows) into logits [16 heads,
// lstride]: logits[n · lstride + m] = c[m · 16 + n] for keys m < nkeys (≤ 16); the other keys'
// columns are not written. token_logits_tiles' scatter, 16 keys of a head per store.
void store_logits_tile_avx512(const float* c, int64_t nkeys, float* logits, int64_t lstride);

}  // namespace dsv41
