// Several independent products y = x · Wᵀ in one parallel region (issue 13: batch-1 decode).
// A decode token of one sequence runs many short products (the routed experts' w1 / w3 / w2, the
// query and kv projections); each gemm_* call is its own fork/join on the pool, and a short one
// leaves the other threads idle at the join while the caller waits for them to wake. gemm_many
// cuts every product of a batch into blocks of outputs and hands all the blocks out from one job.
//
// Same bits: each y[r, o] is computed by the same block kernel as in that product's own gemm_f32 /
// gemm_bf16w / gemm_quant call, whose summation order depends only on `in` (gemm.h), and an FP8
// product's fold range is that of its own x (gemm_quant_fold.h). Products those calls would not
// run on the vector blocks (more than kGemmManyMaxRows rows: prefill widening or AMX; the
// portable ISA) are simply run as their own calls, one after another.
// Owns nothing; the jobs' pointers are borrowed for the call.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/gemm_quant.h"

namespace dsv41 {

// Rows up to which a product goes through gemm_many's shared region (gemm_quant widens blocks
// above this; see gemm.cpp).
constexpr int64_t kGemmManyMaxRows = 8;

// One product: exactly one of f32 / bf16 / quant is set. x: [rows, in], w: [out, in], y: [rows, out].
struct GemmJob {
  const float* x = nullptr;
  int64_t rows = 0, in = 0, out = 0;
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
  const QuantWeights* quant = nullptr;
  float* y = nullptr;
};

// Runs every job; the same bits as calling gemm_f32 / gemm_bf16w / gemm_quant on each in turn.
// The y buffers must not overlap any job's x or each other. No allocation.
void gemm_many(const CpuExec& ex, std::span<const GemmJob> jobs);

}  // namespace dsv41
