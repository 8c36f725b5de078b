// One prompt token's sparse sink attention (model.md §3.5) for all its query heads on AMX-BF16
// tiles: mini-flash's 64 heads share one key/value head (MQA), so per token the logits are a
// [H × D] · [D × L] product over its L = window + selected keys and the output a [H × L] · [L × D]
// product, which is what the tiles are for.
//
// Same function, another summation order (the `--isa amx` contract of gemm_amx.h): the key/value
// rows are cache rows, exact in bf16 (records.h: every value the reference keeps is), used as
// they are; the query heads and the probabilities are float32, each split into three bf16 parts
// hi + mid + lo (exact), so every product is exact and only the float32 additions are ordered
// differently from dot_rows / weighted_sum_rows (all L keys in one sum, window then selected). The
// sink softmax between the two products is sink_softmax's, bit for bit. Denormals flush (as in
// gemm_amx.h). A token whose key rows are not all exact in bf16 is refused (returns false, its
// output untouched) and runs the vector loops.
//
// Call sink_attention_token_amx only when cpu_has_amx(); the emulated version (amx_emulated.h)
// runs the same packing and loops on a scalar model of the tiles, for tests anywhere.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_exec.h"

namespace dsv41 {

// The parts of one token on the tiles, in order (SinkTokenTimes).
enum SinkTokenPart : int {
  kPackKeys,     // key and value tiles from the token's rows
  kPackQueries,  // the query heads split in three bf16 parts
  kLogits,       // keys · queries on the tiles, scattered into [heads, lstride]
  kSoftmax,      // the sink softmax of every head
  kPackProbs,    // the probabilities split in three bf16 parts
  kValues,       // probabilities · values on the tiles
  kSinkTokenParts
};

// Wall nanoseconds per part, summed over the tokens run with SinkTokenArgs::times set (a
// diagnostic for the bench: the release path with a clock read between parts).
struct SinkTokenTimes {
  double ns[kSinkTokenParts] = {};
  int64_t tokens = 0;
};

// Switches for the A/B of each change to the tile path (either setting gives the same bits). A
// query split by rows was tried and dropped: no gain on the Xeon (72 → 75–81 µs a token-layer).
struct SinkTileOptions {
  // The softmax's exps on vector lanes and 8 heads' sums side by side (sink_softmax_heads), not
  // sink_softmax head by head with a std::exp call per key. On: on the Xeon (2026-12-03) the
  // softmax part of a token-layer fell 215 → 157 µs with the first version and 285–291 → 189–191
  // µs with this one (23:27 UTC, 16 threads; docs/BENCHMARKS.md).
  bool softmax_heads = true;
  // The query heads' split and B-tile layout on AVX-512 lanes with a 16 × 16 transpose of the
  // channel pairs (pack_token_queries_avx512), not pack_token_queries' 4-byte column stores, and
  // the logits tiles transposed in registers (store_logits_tile_avx512), not scattered float by
  // float; taken where min(isa, cpu_best_isa()) ≥ kAvx512. On: on the Xeon (2026-12-03 23:27 UTC,
  // 16 threads) the query pack fell 95 → 24 µs a token-layer and the logits part 318 → 279.
  bool vector_pack = true;
  // Software prefetch of the key rows a few rows ahead while the keys and values are packed from
  // the bf16 rows (the selected rows are scattered over the entry table). Off: faster on the
  // development VM with an 8 MB table (171 → 114–124 µs a token), but not on the Xeon (key pack
  // 144 → 154 µs a token-layer at 16 threads, 2026-12-03 23:27 UTC; its 2 MiB table sits in L2/L3).
  bool prefetch_rows = false;
};

// One token's inputs; every pointer borrowed for the call.
struct SinkTokenArgs {
  const float* q = nullptr;         // [heads, D]: the token's query heads
  int64_t heads = 0, D = 0;
  const float* win_rows = nullptr;  // [nwin, D]: window keys (= values)
  int64_t nwin = 0;
  const float* sel_rows = nullptr;  // [nsel, D]: selected compressed entries
  int64_t nsel = 0;
  float scaling = 1.0f;             // the logits' scale (D^-0.5)
  const float* sinks = nullptr;     // [heads]: each head's sink logit
  CpuIsa isa = CpuIsa::kAvx512;     // sink_softmax's path
  float* logits = nullptr;          // [heads, lstride] scratch, lstride ≥ nwin + nsel: the probabilities after
  int64_t lstride = 0;
  float* o = nullptr;               // [heads, D]: the output, overwritten (before the value RoPE is undone)
  // Optional, in place of win_rows / sel_rows (set win_bf16 to take it): the same key rows
  // already as bf16 — the window rows win_bf16 [nwin, D] and rows sel_ids[0 … nsel) of
  // table_bf16 [entries, D] — made once per call by the caller (key_rows_to_bf16, which checks
  // they are exact). A prefill's window rows serve up to 128 tokens each and a compressed entry
  // every token that selects it: per token, unpacking 512 selected entries to float32 and packing
  // them from float32 again cost more than the tile products (the packed bits are the same).
  const uint16_t* win_bf16 = nullptr;
  const uint16_t* table_bf16 = nullptr;
  const int32_t* sel_ids = nullptr;
  SinkTileOptions tile;
  SinkTokenTimes* times = nullptr;  // optional: each part's wall time added here
};

// The calling thread's packed operands, reused token after token (grow only).
struct SinkTokenBuffers {
  std::vector<uint16_t> keys, values, queries, probs;
  std::vector<uint32_t> zeros;  // a padding key row
  std::vector<uint16_t> zero_bf16;  // a padding key row (bf16 rows)
  std::vector<int32_t> sel_ids;  // the caller's: a token's selected entry ids (SinkTokenArgs::sel_ids)
};

// rows [n, D] float32 → out [n, D] bf16 (the high halves); false when a value is not exact in bf16
// (out then holds the truncations: not for the tiles). For SinkTokenArgs::win_bf16 / table_bf16.
inline bool key_rows_to_bf16(const float* rows, int64_t n, int64_t D, uint16_t* out) {
  uint32_t inexact = 0;
  for (int64_t i = 0; i < n * D; ++i) {
    uint32_t b;
    std::memcpy(&b, rows + i, 4);
    inexact |= b & 0xFFFFu;
    out[i] = static_cast<uint16_t>(b >> 16);
  }
  return inexact == 0;
}

// Whether the tile loops take this geometry: heads a multiple of 32, D a multiple of 32.
inline bool sink_attention_tiles_fit(int64_t heads, int64_t D) {
  return heads > 0 && D > 0 && heads % 32 == 0 && D % 32 == 0;
}

// true: a.o and a.logits written. false: a geometry the tiles do not take, or (float rows) a key
// row not exact in bf16; a.o untouched. With win_bf16 the rows are taken as exact (checked when
// they were made).
bool sink_attention_token_amx(const SinkTokenArgs& a, SinkTokenBuffers& buffers);

}  // namespace dsv41
