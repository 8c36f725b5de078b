// The AMX-BF16 prefill products (see gemm_amx.h): the tile loops of amx_tile_kernels.h on the real
// tiles, the weight panels laid out by amx_pack.h's AVX-512 transpose (every AMX CPU has AVX-512). Built with -mamx-tile -mamx-bf16 (and the AVX-512 flags: every AMX CPU has AVX-512);
// called only when cpu_has_amx().
#include "kernels/cpu/gemm_amx.h"

#include <vector>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/gemm_avx2.h"

namespace dsv41 {

void gemm_bf16w_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w, int64_t out,
                    float* y, GemmTileTimes* times) {
  amx::gemm_tiles<amx::AmxTiles>(ex, x, rows, in, out, y, amx::Bf16Fill{w, in, /*avx512=*/true}, times);
}

void gemm_quant_amx(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w, int64_t out,
                    float* y, GemmTileTimes* times) {
  amx::gemm_tiles<amx::AmxTiles>(ex, x, rows, in, out, y, amx::QuantFill{&w, in, /*avx512=*/true}, times);
}

}  // namespace dsv41
