// Fast CUDA kernels for the device backend's hot bodies (docs/CUDA.md "Fast kernels"). CudaExec
// runs a body of device_kernels.h through `fast::launch` (or a chain of them through
// `fast::launch_chain`) when one exists here for its type and shape, else the simple kernel (one
// thread per index). Each computes the same function as its simple body with the work of one
// output spread over a warp or a block: GEMM and the experts one warp per output (lanes over the
// reduced dimension, coalesced, bf16 ×8 / float ×4 vector loads where aligned; stored FP8 / FP4
// weights 8 codes per lane, decoded in registers to the widened bits), RMSNorm one block
// per row, the mHC coefficients (rsqrt, mix, gates + Sinkhorn) one block per token, the sink
// attention one block per (row, head) for logits, softmax and values. Sums stay in double where
// the simple body sums in double, so only their order differs (results equal to the simple ones
// up to a rare last-bit difference after the rounding to float); softmax, Sinkhorn and the
// attention's value sums keep the simple order exactly. fast_kernels_test.cu checks each against
// its simple body on random inputs at boundary shapes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/device_kernels.h"
#include "backends/cuda/device_kernels_draft.h"
#include "backends/cuda/kernel_launch.cuh"

namespace dsv41::fast {

// Each launches the fast kernel of one body for the n indices the simple kernel would run, on
// stream s (0: the legacy default stream; CudaExec passes its own, which a CUDA graph can capture),
// and returns true; false (nothing launched) where the shape is outside
// what the fast kernel handles. Kernels in fast_kernels.cu.
bool launch(int64_t n, const dk::GemmK& k, Stream s = {});
bool launch(int64_t n, const dk::Batched<dk::GemmK>& b, Stream s = {});  // one launch where the weights' kinds agree
bool launch(int64_t n, const dk::RmsNormK& k, Stream s = {});
bool launch(int64_t n, const dk::Batched<dk::RmsNormK>& b, Stream s = {});
bool launch(int64_t n, const dk::ExpertUpK& k, Stream s = {});
bool launch(int64_t n, const dk::Batched<dk::ExpertUpK>& b, Stream s = {});  // routed + shared in one launch
bool launch(int64_t n, const dk::ExpertDownK& k, Stream s = {});
// How the batch-1 expert kernels (the batched up projection, the down + expand chain) read stored
// FP8 / FP4 units (docs/CUDA.md "Batch-1 experts without conversions"): kFloat, each code widened
// to float then double (before); kPlaced, the codes placed in doubles by byte permutes; kPlacedAhead,
// that with the next step's units loaded before the current step's sums; kDefault, the one launch()
// and launch_chain() take (a rule by the rows' length, fast_kernels.cu: kStreamShort where they are
// at least 2,048 long, else kFloat);
// kStream / kStreamShort (session 20, expert_stream.cuh), the placed decode on units streamed
// through a shared-memory ring 3 / 2 steps deep. All give the same bits. For the tests and the
// old / new bench.
enum class ExpertDecode { kDefault, kFloat, kPlaced, kPlacedAhead, kStream, kStreamShort };
bool launch_experts_up(const dk::Batched<dk::ExpertUpK>& b, ExpertDecode decode, Stream s = {});
bool launch_down_expand(const dk::DownExpandChain& c, ExpertDecode decode, Stream s = {});
bool launch(int64_t n, const dk::EngramGateK& k, Stream s = {});
// Indexer scores. launch(): a block per (row, 32 entries), the entries' keys decoded once for
// every head as doubles, the simple body's sums in its order (fast_attention.cu; the same bits).
// launch_index_int: on integer tensor cores where the keys are MXFP4 index records
// (index_scores_int.cu: a block per (row, chunks_per_block × 256 entries) — 0: chosen by the
// launch's size — or per (row, 256 entries of its candidate pool); each 32-channel block's products
// summed exactly as int32; the same bits, index_exact.h says why); false, launching nothing, where
// index_int_fits declines.
bool launch(int64_t n, const dk::IndexScoreK& k, Stream s = {});
bool launch(int64_t n, const dk::Batched<dk::IndexScoreK>& b, Stream s = {});
bool index_int_fits(int64_t n, const dk::IndexScoreK& k);
// gate (optional): body j's row r is scored only where gate.at[j][r · gate.stride] is nonzero (the
// device decides which rows; filter and refine's fallback, index_refine.cu).
struct RowGate {
  const float* at[dk::Batched<dk::IndexScoreK>::kMax] = {};
  int stride = 0;
};
bool launch_index_int(const dk::Batched<dk::IndexScoreK>& b, Stream s = {}, int chunks_per_block = 0,
                      const RowGate& gate = {});
bool launch_index_f64(const dk::Batched<dk::IndexScoreK>& b, Stream s = {});
// The indexer's scores and selections (dk::IndexSelectChain) by filter and refine
// (index_refine.cu): fast scores with a bound each on integer tensor cores, the selections of
// those, the entries the bounds leave open scored again exactly, the selections again — the simple
// path's ids. False, launching nothing, where index_refine_fits declines: keys that are not MXFP4
// index records, heads not a multiple of 8 (≤ 64), dh not a multiple of 32 (≤ 128), a pool, a block
// size not dividing 32, jobs of different dh, or fewer than min_scores scores (rows × entries) in
// all, twice that for a chain with a candidate source (fewer are cheaper exactly:
// CudaExec::kIndexRefineMinScores).
bool index_refine_fits(const dk::IndexSelectChain& c, int64_t min_scores);
bool launch_chain(const dk::IndexSelectChain& c, Stream s = {}, int64_t min_scores = 0);
// Filter and refine's first step alone, for the tests: every row's fast scores (NaN: unknown) and
// work floats (β, unknown count) by the scorer c.warpgroup names; false where index_refine_fits
// declines the chain.
bool launch_fast_scores(const dk::IndexSelectChain& c, Stream s = {});
// The tiled GEMM (fast_gemm.cu) for `rows` rows: false where its 16-byte units do not fit the
// weight or x (then the warp-per-output kernel runs). gemm_tiled_kind: the weight kind it would
// read (1 bf16, 2 float32, 3 FP8, 4 FP4), 0 where it declines. `staged` false: tiles of 2 … 8 rows
// keep x in registers (widened per warp) instead of the block's shared copy; the same bits, slower
// (for the tests and the old/new comparison only).
bool launch_gemm_tiled(int64_t rows, const dk::GemmK& k, Stream s = {}, bool staged = true);
int gemm_tiled_kind(const dk::GemmK& k);
// RoPE + fake quantiser (or the window stores) beside a RoPE or a scale: a warp per quantiser /
// scale block, one thread per RoPE pair or scaled value (the same bits as the simple bodies).
bool launch(int64_t n, const dk::Both<dk::RopeK, dk::RopeQuantK>& f, Stream s = {});
bool launch(int64_t n, const dk::Both<dk::RopeQuantK, dk::ScaleK>& f, Stream s = {});
bool launch(int64_t n, const dk::Both<dk::RopeK, dk::WindowStoreK>& f, Stream s = {});
// Every other body: no fast kernel (the simple one runs).
template <class F>
bool launch(int64_t, const F&, Stream = {}) {
  return false;
}

// A chain as one kernel (device_kernels_stream.h, _attention.h): true when launched.
bool launch_chain(const dk::MhcCoeffChain& c, Stream s = {});
bool launch_chain(const dk::AttnChain& c, Stream s = {});
bool launch_chain(const dk::AttnBatch& b, Stream s = {});  // every segment's (row, head) blocks in one kernel
// The sink attention of AttnBatch / AttnChain as two kernels over many blocks (fast_attention.cu:
// logits per (row, 16 heads, 16 slots), softmax + values per (row, 8 heads, 32 channels), each key
// row decoded once per block for all its heads; the simple bodies' sums in their order, so the
// same bits); false where its shared memory would not hold the shape (then the one-block-per-
// (row, head) kernel runs). The jobs' logits scratch must be set.
bool launch_attn_split(const dk::AttnBatch& b, Stream s = {});
// The same attention on FP64 tensor-core MMAs (fast_attention_mma.cu): logits a block per (row,
// 16 heads, 32 key slots), softmax + values a block per (row, 16 heads, 32 channels), each key row
// decoded once per block for its 16 heads (MQA); the products exact in double, only the order of
// the double sums differs from the simple bodies (float results equal but at rare rounding ties).
// Off in launch_chain as a pair (kMmaAttention in fast_kernels.cu: measured slower than the split
// pair); its logits kernel is launch_chain's first choice (below);
// false where its shared memory would not hold the shape (D ≲ 560, L ≲ 1,400). The jobs' logits
// scratch must be set.
bool launch_attn_mma(const dk::AttnBatch& b, Stream s = {});
// The two halves, for the mixed pair (kMmaLogits in fast_kernels.cu): the MMA logits kernel alone,
// and the split pair's softmax + values kernel alone (it reads the logits either kernel wrote).
// slots: key slots a logits block (8, 16 or 32; 0: 32, or by the block count — attn_logit_slots —
// where kLogitSlotsByRows is on); 8 and 16 split each block's channels over 4 or 2 warps whose
// double sums are added in order.
bool launch_attn_mma_logits(const dk::AttnBatch& b, Stream s = {}, int slots = 0);
int attn_logit_slots(const dk::AttnBatch& b);
bool launch_attn_split_values(const dk::AttnBatch& b, Stream s = {});
// The softmax + values half in two kernels (fast_attention.cu): the probabilities once per (row,
// head) in place of the logits (a warp each), then the values a block per (row, 8 heads, 32
// channels) over the present slots listed once per block; the simple bodies' sums in their order,
// so the same bits. False where L > 1,024 or its shared memory would not hold L rows.
bool launch_attn_probs_values(const dk::AttnBatch& b, Stream s = {});
// The softmax + values half in one kernel (fast_attention.cu): a block per (row, 8 heads, 32
// channels) of `parts` × 256 threads (1, 2 or 4; 0: chosen by the block count, attn_slot_parts)
// that computes its 8 heads' probabilities (the simple softmax's operations in its order) into
// shared memory and splits the slots up to the last present one over its parts, whose double sums
// are added in part order: with 1 part the simple bits; with more, equal but at rare rounding ties
// (the re-associated double sum). False where L > 1,024 or its shared memory would not hold L rows.
bool launch_attn_slot_values(const dk::AttnBatch& b, Stream s = {}, int parts = 0);
int attn_slot_parts(const dk::AttnBatch& b);
// The same attention on bf16 tensor cores (fast_attention_tc.cu), a block per (row, 32 heads) over
// tiles of 64 key slots, each record decoded once per block to bf16 (exact for cached values and
// fake-quantised window rows), queries and probabilities split into two bf16 parts, an online
// softmax seeded by the sink: fp32 sums, so equal to the simple bodies within a bound
// (FastAttentionCuda.TensorSinkAttentionMatchesSimple), not bit for bit. launch_chain takes it
// for an AttnBatch with `tensor` set. False where a job is not head_dim 512 with FP8 window /
// NVFP4 main records or float rows, or the jobs' head counts differ. Needs no logits scratch.
bool launch_attn_tensor(const dk::AttnBatch& b, Stream s = {});
// The top-k of every row (fast_topk.cu): a block per 4096 entries of a row (radix select), then a
// block per longer row merging its chunks' candidates; linear in the row length, the simple
// path's ids. False (the simple path runs) for widths above 2048.
bool launch_chain(const dk::TopkBatch& t, Stream s = {});
bool launch_chain(const dk::CollapseNormChain& c, Stream s = {});  // one block per row
bool launch_chain(const dk::RouterChain& c, Stream s = {});        // one block per token
// The DSpark drafter's block attention, one block per (block row, head) (logits, softmax, values;
// the simple sums in another fixed order), and a greedy draft slot: the Markov bias over many
// blocks, then the argmax one block per request (two launches; the same bits as the simple bodies).
bool launch_chain(const dk::DraftAttnChain& c, Stream s = {});
bool launch_chain(const dk::DraftSlotChain& c, Stream s = {});
// Every greedy slot of a draft in one launch: a cluster of blocks per request (bias, argmax, the
// pick shared in the cluster, next slot); the same bits and picks as the slots' two launches each.
bool launch_chain(const dk::DraftSlotsChain& c, Stream s = {});
// A block per (token, 4 columns): the experts' sums by warps in parallel, added in order, and the
// mHC expand of those columns (the same bits as the two launches).
bool launch_chain(const dk::DownExpandChain& c, Stream s = {});
// The mHC expand in the split mix's blocks (each forms its token's streams in shared memory and
// writes its slice of them); false outside the split mix's shapes (then the two launches).
bool launch_chain(const dk::ExpandCoeffChain& c, Stream s = {});
template <class C>
bool launch_chain(const C&, Stream = {}) {
  return false;
}

}  // namespace dsv41::fast
