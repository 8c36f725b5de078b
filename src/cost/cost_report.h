// Presentation of a CostModel: the human table of `dsv41 cost` and its `--json` object.
// Spec: system.md §1 (the four costs); JSON keys are part of the CLI contract (issue #2 item 6):
//   global_kv_bytes_per_token, global_entries_per_token, persistent_bytes_per_token,
//   persistent_definition, window_bytes_per_sequence, layers (per-layer global bytes/token),
//   layer_details, records, prefill_token_layers, decode_flops (one object per context).
// Added by issue 10 item 7: prefill_token_layers.{paper_ced, bounded, exact} (the replay rule's
// counts) and decode_flops[].operations (each operation's operand pair and rate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "cost/cost_model.h"

namespace dsv41 {

struct CostQuery {
  std::vector<int64_t> contexts;  // decode contexts; empty → default_contexts()
  int64_t new_tokens = 65536;     // uncached prompt tokens for the prefill cost
};
// 4K, 16K, 64K, 128K, 256K, 512K, 1M (powers of two).
std::vector<int64_t> default_contexts();
// "4096", "4K" (×1024), "1M" (×1048576), "65,536": a positive token count up to 2^40.
Result<int64_t> parse_token_count(const std::string& text);

// Both fail only when the query does (new_tokens < 1: no prefill to plan).
Result<std::string> format_cost_table(const CostModel& model, const CostQuery& query);
// One JSON object (pretty-printed, trailing newline).
Result<std::string> format_cost_json(const CostModel& model, const CostQuery& query);

}  // namespace dsv41
