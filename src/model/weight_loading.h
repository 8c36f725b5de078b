// Loading helpers shared by the backbone (model.cpp) and the DSpark drafter (dspark_weights.cpp):
// exact-size float32 tensors, weight matrices in their holding (stored FP8/FP4 view, bf16 or
// float32: weight_matrix.h), and the bf16 narrowing of attention projections. Spec: model.md §2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/attention.h"
#include "model/model.h"
#include "model/weight_matrix.h"
#include "model/weights.h"

namespace dsv41 {

// `name` as float32 with exactly numel elements (else a corrupt error naming the tensor).
Status load_exact(const WeightRegistry& reg, const std::string& name, int64_t numel, std::vector<float>& out);

// "layers.<layer>.<role>".
std::string lname(int layer, const std::string& role);

// A weight matrix: the checkpoint's FP8 / FP4 bytes in place when `stored` and it is stored so;
// else bf16 when allowed, stored narrower than F32 and every value bf16-exact; else float32.
Status load_matrix(const WeightRegistry& reg, const std::string& name, int64_t numel, bool allow_bf16, bool stored,
                   WeightMatrix& out);

// Moves each of the five big attention projections held as float32 into its bf16 holding when
// load_matrix's rule allows it (w.prefix names the tensors).
Status narrow_attention(const WeightRegistry& reg, AttentionWeights& w);

// Everything of a block but its attention and Engram, tensors named prefix + "attn_norm.weight"
// etc. ("layers.<i>." or "mtp.<s>."): norms, mHC, router (moe.n_experts experts), routed and
// shared experts. Only routed experts e with e mod expert_ranks = expert_rank are loaded (the
// others stay empty: expert parallelism, ModelLoadOptions).
Status load_block_weights(const WeightRegistry& reg, const ModelConfig& config, const std::string& prefix,
                          const MoeShape& moe, bool bf16, bool stored, LayerWeights& L, int expert_rank = 0,
                          int expert_ranks = 1);

}  // namespace dsv41
