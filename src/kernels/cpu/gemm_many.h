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

#include "base/function_ref.h"
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

// Two dependent stages of products in one parallel region (issue 13: a decode token's MoE step,
// w1 / w3 of every expert, SwiGLU, w2, was two fork/joins per layer). Every job belongs to a
// group g < groups: between(g) runs once, on whichever thread finishes the last block of g's
// first-stage jobs (before the region when g has none), and g's second-stage jobs start only
// after it returned; they may read what it wrote (their x), nothing of another group's. The
// blocks are handed out first stage first, so a thread waits only for blocks other threads
// have already taken. Same bits as gemm_many(first), between(0 … groups−1), gemm_many(second),
// which is also what runs when the jobs do not fit one region (too many, or not all qualify).
// between must not throw or touch another group's data; it may run on a pool thread.
struct GemmStages {
  std::span<const GemmJob> first, second;
  std::span<const int32_t> first_group, second_group;  // one entry per job
  int32_t groups = 0;
};
void gemm_many_staged(const CpuExec& ex, const GemmStages& stages, FunctionRef<void(int32_t)> between);

}  // namespace dsv41
