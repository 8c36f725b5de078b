// Test support for DSpark (issue 15): a scheduler draft override that rewrites the drafter's
// block to the true continuation (a plain run's output) at `percent` % of the slots, chosen by
// `coin`, so that accepted and rejected blocks alternate whatever the drafter is. Exactness tests
// then check that speculative output still equals the plain output token for token.
#pragma once

#include <algorithm>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "runtime/scheduler.h"

namespace dsv41::testing {

// reqs and truth (truth[r]: request r's plain output) and coin must outlive the override.
inline std::function<void(std::span<const int32_t>, int32_t, DraftBlock&)> truth_drafts(
    const std::vector<GenerationRequest>& reqs, const std::vector<std::vector<int32_t>>& truth, std::mt19937& coin,
    unsigned percent) {
  return [&reqs, &truth, &coin, percent](std::span<const int32_t> history, int32_t anchor, DraftBlock& block) {
    for (size_t r = 0; r < reqs.size(); ++r) {
      std::vector<int32_t> full = reqs[r].prompt;
      full.insert(full.end(), truth[r].begin(), truth[r].end());
      if (full.size() < history.size() + 1 || !std::equal(history.begin(), history.end(), full.begin()) ||
          full[history.size()] != anchor)
        continue;
      for (size_t j = 0; j < block.ids.size(); ++j) {
        const size_t at = history.size() + 1 + j;
        if (at < full.size() && coin() % 100 < percent) block.ids[j] = full[at];
      }
      return;
    }
  };
}

}  // namespace dsv41::testing
