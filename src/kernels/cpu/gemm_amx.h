// AMX-BF16 prefill products (issue 13): y[M, N] = x[M, K] · W[N, K]ᵀ for M ≥ kAmxMinRows, with W
// as stored (bf16 bits, or FP8 E4M3 / FP4 E2M1 codes with UE8M0 scales, gemm_quant.h).
//
// Same function, different summation order. W is packed once per call into the tile's VNNI layout
// (pairs along K), threaded over 32-output units: code × scale is a float with ≤ 4 significant
// bits (FP8/FP4) or a bf16, so it is exact in bf16 — the values multiplied are exactly the
// dequantised weights. x is float32, which bf16 cannot hold, so each activation is split into
// three bf16 parts hi + mid + lo (truncations: hi = x's top 8 significant bits, mid the next 8, lo
// the last 8), exact for every normal float32, and the tile product runs once per part into the
// same float32 accumulators. Products of bf16 pairs are exact in float32; only the float32
// additions differ from gemm_f32's order (16-wide tiles, K in steps of 32 and chunks of 1024,
// parts interleaved), so results agree with the widened reference to float rounding, not bit for
// bit. The loops and layouts: amx_tile_kernels.h.
//
// AMX flushes denormals (inputs and results, DAZ/FTZ, regardless of MXCSR): a dequantised weight
// below 2^-126 (only the extreme low UE8M0 scale codes give one), an activation part that falls
// below 2^-126 (|x| < about 2^-110 loses its lower parts, |x| < 2^-126 is zero), and any partial
// product below 2^-126 count as zero. NaN / Inf weights and activations propagate (an Inf
// activation is its hi part alone; a NaN of either kind becomes the quiet NaN).
//
// Call only when cpu_has_amx() (cpu_exec.h); gemm.cpp dispatches here for rows ≥ kAmxMinRows when
// CpuExec::use_amx(). Threaded on ex.pool over (output panel × row block) tasks; each task sets
// the tile configuration on its thread and releases the tiles when done. Scratch (per calling
// thread, grows only): the packed x (3 · rows · K bf16) and W (out · K bf16: 84 MB for
// mini-flash's wq_b) live across calls.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

// Below this many rows a product stays on the vector loops: a tile is 16 rows tall.
constexpr int64_t kAmxMinRows = 16;

// Wall nanoseconds of a product's three phases, summed over the calls made with it (a diagnostic
// for the bench: the release path with a clock read between the phases).
struct GemmTileTimes {
  double pack_x_ns = 0;  // x split into its three bf16 parts, tile by tile (threaded)
  double fill_w_ns = 0;  // W dequantised / laid out as B tiles (threaded)
  double tiles_ns = 0;   // the tile products (threaded)
  int64_t calls = 0;
};

void gemm_bf16w_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                    float* y, GemmTileTimes* times = nullptr);
void gemm_quant_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out,
                    float* y, GemmTileTimes* times = nullptr);

}  // namespace dsv41
