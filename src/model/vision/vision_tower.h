// The vision tower and aligner forward (model.md §3.10), scalar reference: plain loops in
// float32 with double accumulators, one image per call. Checked against the PyTorch reference
// (reference/dsv41_ref/vision.py) by tests/vision_fixture_test.cpp.
//
//   patches [n, 3·p²] → Linear(+bias) → 32 × { x += Attn(RMSNorm1 x); x += SwiGLU(RMSNorm2 x) }
//   → RMSNorm → features [n_h·n_w, dim]
//   Attn: wqkv (+bias) → q | k | v, 2-D RoPE on q and k (row angles ‖ column angles over the
//   halves (i, i + hd/2) of each head), softmax(q·k/√hd) over all patches (no mask), wo (+bias).
//   SwiGLU: gate | up = w1 x; w2 (silu(gate)·up).
//   aligner: zero-pad the grid right/bottom to multiples of 3, 3×3 unfold (feature c·9 + kh·3 + kw,
//   tokens row-major), Linear(+bias), exact GELU, Linear(+bias) → [⌈n_h/3⌉·⌈n_w/3⌉, H].
//
// The release runs the tower in BF16; this computes in float32 from the same weights (the
// reference does the same), so it is the release's function up to BF16 activation rounding.
#pragma once

#include <vector>

#include "kernels/cpu/cpu_exec.h"
#include "model/vision/vision_weights.h"

namespace dsv41 {

// patches: [n_h·n_w, 3, p, p] (preprocess.h). `after_block0`, when given, receives the residual
// stream after block 0 (a fixture checkpoint). Returns [n_h·n_w, dim].
std::vector<float> vit_forward_reference(const VisionWeights& w, const std::vector<float>& patches, int n_h, int n_w,
                                         std::vector<float>* after_block0 = nullptr);

// features [n_h·n_w, dim] → [⌈n_h/3⌉·⌈n_w/3⌉, out_dim].
std::vector<float> aligner_forward_reference(const VisionWeights& w, const std::vector<float>& features, int n_h,
                                             int n_w);

// The fast path (vision_tower_fast.cpp): the same function with every product through the
// threaded GEMM (kernels/cpu/gemm.h), attention per head as two GEMMs (q·kᵀ, then p·v with v
// transposed) around a float32 softmax. Agrees with the reference to float rounding (tested on
// fresh random weights and patches: vision_tower_test.cpp), not bit for bit.
std::vector<float> vit_forward(const CpuExec& ex, const VisionWeights& w, const std::vector<float>& patches, int n_h,
                               int n_w);
std::vector<float> aligner_forward(const CpuExec& ex, const VisionWeights& w, const std::vector<float>& features,
                                   int n_h, int n_w);

}  // namespace dsv41
