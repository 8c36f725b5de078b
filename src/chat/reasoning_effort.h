// Reasoning effort: the "Reasoning Effort: b" line of thinking-mode prompts (model.md §5,
// system.md §5). b is an integer 1..100 or a named tier; the tier table lives here, in one
// place, and can be swapped per request through RenderOptions. Owns the built-in tables.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/chat/messages.h"

namespace dsv41::chat {

struct EffortTier {
  std::string name;
  int budget;  // 1..100
};

struct EffortTable {
  std::vector<EffortTier> tiers;
  std::string default_tier;  // used when the request gives no effort; must be in `tiers`
};

// The published release encoder and the hosted API: low 50, high 75, max 100, default high;
// `xhigh` accepted as 75 like DeepSeek's deploy recipe. The golden cases pin this table.
const EffortTable& release_effort_table();
// The pre-publication drop / SGLang port: low 25, high 50, xhigh 75, max 100, default high (50).
const EffortTable& prerelease_effort_table();

// Resolves a request's effort to the budget b. Integers outside 1..100 and unknown tier
// names (matching is exact: "High" is unknown) are invalid_argument errors.
Result<int> resolve_reasoning_effort(const ReasoningEffort& effort, const EffortTable& table);

// "Reasoning Effort: {b} (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
std::string reasoning_effort_line(int budget);

}  // namespace dsv41::chat
