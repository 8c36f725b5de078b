// Reasoning-effort tiers and the effort line (see reasoning_effort.h; model.md §5).
#include "src/chat/reasoning_effort.h"

namespace dsv41::chat {

const EffortTable& release_effort_table() {
  static const EffortTable table{{{"low", 50}, {"high", 75}, {"xhigh", 75}, {"max", 100}}, "high"};
  return table;
}

const EffortTable& prerelease_effort_table() {
  static const EffortTable table{{{"low", 25}, {"high", 50}, {"xhigh", 75}, {"max", 100}}, "high"};
  return table;
}

static std::string tier_list(const EffortTable& table) {
  std::string out;
  for (const auto& t : table.tiers) out += (out.empty() ? "" : ", ") + t.name;
  return out;
}

Result<int> resolve_reasoning_effort(const ReasoningEffort& effort, const EffortTable& table) {
  auto by_name = [&](const std::string& name) -> Result<int> {
    for (const auto& t : table.tiers)
      if (t.name == name) return t.budget;
    return invalid_argument("reasoning_effort: unknown tier '" + name + "' (an integer 1..100 or one of " +
                            tier_list(table) + ")");
  };
  switch (effort.kind) {
    case ReasoningEffort::Kind::kDefault: return by_name(table.default_tier);
    case ReasoningEffort::Kind::kTier: return by_name(effort.tier);
    case ReasoningEffort::Kind::kInteger:
      if (effort.value < 1 || effort.value > 100)
        return invalid_argument("reasoning_effort: " + std::to_string(effort.value) + " is outside 1..100");
      return static_cast<int>(effort.value);
  }
  return internal_error("reasoning_effort: bad kind");
}

std::string reasoning_effort_line(int budget) {
  return "Reasoning Effort: " + std::to_string(budget) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

}  // namespace dsv41::chat
