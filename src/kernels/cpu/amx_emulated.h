// The AMX tile kernels (gemm_amx.h, attention_amx.h) on EmulatedTiles (amx_tile_kernels.h): the
// same packing, blocking and loops on a scalar model of the eight tiles, for tests on CPUs
// without AMX. Slow (one scalar multiply-add per tile product element); never on a fast path.
#pragma once

#include <cstdint>

#include "kernels/cpu/attention_amx.h"
#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

void gemm_bf16w_amx_emulated(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const uint16_t* w,
                             int64_t out, float* y);
void gemm_quant_amx_emulated(const CpuExec& ex, const float* x, int64_t rows, int64_t in, const QuantWeights& w,
                             int64_t out, float* y);
bool sink_attention_token_amx_emulated(const SinkTokenArgs& a, SinkTokenBuffers& buffers);

}  // namespace dsv41
