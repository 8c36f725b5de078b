// `dsv41 bench --tiers C1,C2 --cache-dir D`: time to first token of a returning turn served from
// each cache tier (issue 11 item 6; docs/STORE.md §16). Per context C, in one process and one run:
//   cold full      a C-token prompt, no cache, every layer (the baseline; it also fills the store)
//   cold bounded   the same prompt, no cache, at bounded depth (the paper's cold prefill)
//   DRAM hit       the prompt + S new tokens: global KV from the store, windows restored from the
//                  DRAM pool's snapshot at C (taken at the cold turn's prompt end)
//   SSD + bounded  the same turn without the DRAM pool: windows replayed (bounded)
//   SSD + exact    ditto, exact replay (the same logits as a cold full prefill)
// Every store read comes from the device: the store's files are synced and dropped from the page
// cache before each hit. The three hits are served three times each, interleaved; the median
// counts. Also reported: bytes on disk per stored token against the payload (the
// packed records) and the framing overhead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace dsv41::app {

struct TierBenchOptions {
  std::vector<int64_t> contexts;
  int64_t suffix = 200;          // new tokens of the returning turn
  int64_t cache_chunk = 256;     // tokens per stored chunk
  int64_t prefill_chunk = 512;   // positions per forward
  uint64_t seed = 1;
  std::string cache_dir;         // a scratch store per context is made (and removed) under it
  std::string model_dir;         // for the store identity (fingerprint, tokenizer)
};

// Returns the exit code; prints a table, or JSON with `json`.
int run_tier_bench_mode(const Model& model, const TierBenchOptions& options, bool json);

}  // namespace dsv41::app
