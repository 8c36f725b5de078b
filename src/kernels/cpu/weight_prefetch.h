// Where the tiles of gemm_quant, gemm_fp8_rows and the float32 / bf16 products (gemm_avx2.cpp,
// gemm_avx512.cpp) fetch their weight rows ahead (issue 13).
// A decode tile streams its O weight rows side by side, several short streams at once, which the
// hardware prefetchers pick up late, so the tile prefetches each row's own stream a fixed distance
// ahead: inside the row while it lasts, then in the same row of the next tile (tiles follow each
// other in memory). Before, a tile fetched the next tile's rows at its own current offset: with
// rows of 4096 or 8192 bytes (mini-flash's wo_a and wo_b) those lines lie a multiple of 4 KiB from
// the ones being read, so all of them share one L1 set, and the products streamed ≈ 1/4 slower
// than the 1280-byte rows of wq_b (docs/BENCHMARKS.md, session 28).
// The float32 / bf16 tiles had no prefetch until session 40: dsv41-mini's bf16 products (rows of
// 256 weights, 512 bytes, 16 rows a tile) streamed 6.7–7.7 GB/s cold on one thread, and 17.5–18.9
// with it (BM_GemmSmallBatch, AVX-512; AVX2 6.9 → 13.5–13.8), the default model's decode 1.2–1.8×.
// The lines go to L2 (prefetcht1), not L1: on a Zen 4 (session 39) the L1 hint capped one thread's
// cold FP8 product at 11.4 GB/s where it computes 20.8 from cache — each prefetch holds one of
// L1's few miss buffers until its line arrives, so O rows × 16 lines ahead could not all be in
// flight — and with the L2 hint it streams 18.1 GB/s (two threads 21.4 → 32.5, a decode step's
// layer 24 → 32); the demand loads then find the lines in L2, whose latency the loop hides.
// Internal linkage: included by the ISA-flag files only (see thread_scratch.h for why).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dsv41 {
namespace {

// Bytes ahead of the tile's current offset in each row's stream: of 512, 768, 1024, 1536 and 2048
// (2 threads streaming FP8 products cold on Zen 5, L1 hint), 1024 was best, and of 512 … 4096 with
// the L2 hint on the Zen 4 again 1024; the distance in the tile's whole stream is O times that.
constexpr int64_t kPrefetchAheadBytes = 1024;

// For each of the O rows of a tile at `codes` (row_bytes apart), the line kPrefetchAheadBytes past
// `offset` in that row's stream. Past the matrix's last row it names memory the tile never reads:
// a prefetch is only a hint and never faults.
template <int O>
inline void prefetch_rows_ahead(const uint8_t* codes, int64_t row_bytes, int64_t offset) {
  const int64_t at = offset + kPrefetchAheadBytes;
  const uint8_t* first = at < row_bytes ? codes + at : codes + O * row_bytes + (at - row_bytes);
  for (int o = 0; o < O; ++o) _mm_prefetch(reinterpret_cast<const char*>(first + o * row_bytes), _MM_HINT_T1);
}

}  // namespace
}  // namespace dsv41
