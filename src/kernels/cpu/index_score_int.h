// Indexer scoring on integer instructions, from the MXFP4 index records themselves: the same bits
// as unpacking the keys to float and index_score_tile (index_score.h), without either.
//
// Why the bits are the same. A key channel is e2m1(code) · 2^(s − 127) = m · 2^K with the integer
// m = 2 · e2m1 ∈ [−12, 12] and K = s − 128 (s the block's UE8M0 byte). The indexer's queries are
// MXFP4 fake-quantised, so a query block is a · 2^U with integers |a| < 16 (index_query_ints finds
// U from the block's largest value and checks every channel). index_score_tile's block dot is an
// FMA chain whose partial sums are then multiples of 2^(U + K) below 2^13 · 2^(U + K): while
// −126 ≤ U + K ≤ 114 every one is a float, the chain never rounds, and its result is exactly
// S · 2^(U + K) with S = Σ a·m — an int32 here (u8 × s8 multiply-adds), converted and scaled
// exactly. The block sums' float additions, the ReLU, the scale and the head-weight FMAs then run
// as index_score_tile's, in its order. Outside that range, for a NaN key scale (0xFF) or a query
// block off its grid, the callers take the float path (index_int_tile_fits / index_query_ints
// say when).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_exec.h"
#include "kernels/cpu/index_score.h"

namespace dsv41 {

// E2M1 code → 2 · value + 12, the byte a key tile holds for it (codes 8 … 15 are the negatives of
// 0 … 7); each ISA's tile builder looks codes up in it.
inline constexpr uint8_t kIndexCodeBytes[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

// Query rows as integers: per (row, head) dh bytes a (int8) in the keys' byte order below, and per
// (row, head, block) the exponent U and Σ a over the block.
struct IndexQueryInts {
  int64_t rows = 0;
  int nh = 0, dh = 0;
  int u_min = 0, u_max = 0;   // over every (row, head, block)
  std::vector<int8_t> a;      // [rows, nh, dh]: byte p < dh/2 is channel 2p, byte dh/2 + p channel 2p + 1
  std::vector<int32_t> u;     // [rows, nh, dh/32]
  std::vector<int32_t> asum;  // [rows, nh, dh/32]
};

// A tile of kIndexKeyTile keys from their records: per key m + 12 ∈ [0, 24] as bytes in the query
// bytes' order, transposed so that dword group t of the 16 keys is one 64-byte row (bytes [dh/4,
// 16 keys, 4]); per (block, key) K = s − 128 (keys past n: m = 0, K = 0).
struct IndexKeyTileInts {
  int n = 0, dh = 0;
  int k_min = 0, k_max = 0;  // over the tile's n keys and blocks
  bool nan_scale = false;    // a key block with scale byte 0xFF (its values are NaN)
  // Not zeroed on construction (an IndexerScratch is made per call): index_key_tile_ints writes
  // every byte and exponent the scoring reads.
  alignas(64) uint8_t bytes[128 * kIndexKeyTile];
  alignas(64) int32_t k[4 * kIndexKeyTile];
};

// Whether this CPU and isa run the integer path (AVX2, or AVX-512 BW), and dh fits it (a multiple of
// 32, ≤ 128).
bool index_int_supported(CpuIsa isa, int dh);

// rows query rows q [rows, nh, dh] → out; false where a block is not a · 2^U with integers |a| < 16
// (NaN, Inf, off the grid) — then the float path must score them.
bool index_query_ints(const float* q, int64_t rows, int nh, int dh, IndexQueryInts& out);

// Keys records[0 … n) (MXFP4 index records of dh channels: dh/2 code bytes, dh/32 scale bytes),
// n ≤ kIndexKeyTile → out, on isa's kernel (the same bytes on each). Needs index_int_supported(isa, dh).
void index_key_tile_ints(CpuIsa isa, const uint8_t* const* records, int n, int dh, IndexKeyTileInts& out);

// Whether every (row, head, block) × key of the tile keeps the chain exact (above).
bool index_int_tile_fits(const IndexQueryInts& q, const IndexKeyTileInts& k);

// index_score_tile's scores of query rows [r0, r0 + rows) of q (w [rows, nh] their head weights,
// already offset) against the tile: out[r · out_stride + j] for j < cols, on isa's kernel (the same
// bits on each). Needs index_int_supported(isa, dh) and index_int_tile_fits.
void index_score_tile_ints(CpuIsa isa, const IndexQueryInts& q, int64_t r0, int64_t rows, const float* w,
                           const IndexKeyTileInts& k, float scale, float* out, int64_t out_stride, int cols);

}  // namespace dsv41
