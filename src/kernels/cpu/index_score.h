// Indexer scoring of query rows against a tile of keys: the inner loop of the sparse indexer
// (model.md §3.4, model/indexer.h), for prefill (many rows × the whole context) and decode.
//   score(row, key) = Σ_h w[row, h] · ReLU(q[row, h] · key) · scale
// The arithmetic is fixed, so every path gives the same bits:
//   q_h · key   per block of 32 channels, a fused multiply-add chain over the block's channels
//               in order (both vectors are MXFP4 values — E2M1 codes × power-of-two scales — so
//               every partial sum of a block is exact), then the blocks' sums added in order;
//   total       over heads in order: total = fma(max(dot, 0) · scale, w_h, total), from 0.
// A NaN dot propagates (max(NaN, 0) is NaN, as std::max(dot, 0.0f)).
// Layout: q [rows, nh, dh] and w [rows, nh] row-major (the indexer's queries and head weights);
// keys_t [dh, kIndexKeyTile]: the tile's keys transposed (channel-major), unused columns zero;
// out[r · out_stride + j] for j < cols (≤ kIndexKeyTile). No allocation.
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

inline constexpr int kIndexKeyTile = 16;     // keys per tile: one AVX-512 register of scores
inline constexpr int kIndexDotBlock = 32;    // channels per exactly-summed block (the MXFP4 block)
inline constexpr int64_t kIndexTileRows = 64;  // rows per index_score_tile call (its accumulators)

// The score of one row against one key (the definition; keys not transposed: key [dh]).
float index_score_reference(const float* q, const float* w, int nh, int dh, const float* key, float scale);

// rows ≤ kIndexTileRows rows against a tile of keys, on the given ISA (capped by the CPU's;
// kPortable: the scalar loop, the same bits).
void index_score_tile(CpuIsa isa, const float* q, const float* w, int64_t rows, int nh, int dh, const float* keys_t,
                      float scale, float* out, int64_t out_stride, int cols);

// Keys [n, dh] (n ≤ kIndexKeyTile) into keys_t [dh, kIndexKeyTile], zero past n. A copy, so the
// same values on every ISA: with isa ≥ kAvx512 (capped by the CPU's) 16 channels of the 16 keys
// at a time through registers (a decode step transposes every entry's key per index layer; the
// element-by-element loop was ≈ 1.5 % of a batch-8 step of dsv41-mini), else element by element.
void transpose_key_tile(CpuIsa isa, const float* keys, int n, int dh, float* keys_t);

}  // namespace dsv41
