// amx_emulated.h: the tile kernels instantiated on EmulatedTiles (plain C++, any CPU).
#include "kernels/cpu/amx_emulated.h"

#include "kernels/cpu/amx_tile_kernels.h"

namespace dsv41 {
namespace {

// The weight panels as the real tiles' GEMM lays them out (amx_pack.h's AVX-512 fills) where this
// CPU can, so the emulated GEMM tests check that path too; the plain loops elsewhere.
bool vector_fill() { return cpu_best_isa() >= CpuIsa::kAvx512; }

}  // namespace

void gemm_bf16w_amx_emulated(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w,
                             int64_t out, float* y) {
  amx::gemm_tiles<amx::EmulatedTiles>(ex, x, rows, in, out, y, amx::Bf16Fill{w, in, vector_fill()});
}

void gemm_quant_amx_emulated(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w,
                             int64_t out, float* y) {
  amx::gemm_tiles<amx::EmulatedTiles>(ex, x, rows, in, out, y, amx::QuantFill{&w, in, vector_fill()});
}

bool sink_attention_token_amx_emulated(const SinkTokenArgs& a, SinkTokenBuffers& buffers) {
  return amx::sink_attention_token_tiles<amx::EmulatedTiles>(a, buffers);
}

}  // namespace dsv41
