// A probe of the AMX-BF16 tiles' own rate on this machine (a diagnostic for the bench, issue 13):
// how long TDPBF16PS takes back to back, with no tile loads or with the loads of the attention /
// GEMM inner loop (2 B + 6 A tiles per 12 products) from a buffer that stays in L1. Against the
// kernels' measured part times it says whether a part is bound by the tiles or by its data.
// Call only when cpu_has_amx().
#pragma once

#include <cstdint>

namespace dsv41 {

// Runs `steps` steps of 12 tile products (the 2 × 2 block, three parts), each step loading 8 tiles
// from `tiles` (8 KiB, 64-byte aligned) when with_loads; returns a value of the accumulators so
// the work is not dropped.
float amx_tile_probe(int64_t steps, bool with_loads, const uint16_t* tiles);

}  // namespace dsv41
