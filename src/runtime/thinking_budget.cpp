#include "runtime/thinking_budget.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace dsv41 {
namespace {
constexpr std::string_view kClose = "</think>";
}

ThinkingBudget::ThinkingBudget(std::unique_ptr<TokenConstraint> inner, std::shared_ptr<const TokenTrie> trie,
                               int64_t budget, std::vector<int32_t> close_tokens)
    : inner_(std::move(inner)), trie_(std::move(trie)), budget_(budget), close_(std::move(close_tokens)) {}

int64_t ThinkingBudget::mask(std::span<float> logits) {
  if (!closed_ && used_ >= budget_ && !close_.empty()) {
    // Spent: the next token of "</think>" whatever the model prefers (its own logit, or 0 where
    // a bias or the wrapped constraint had ruled it out), nothing else.
    const size_t c = static_cast<size_t>(close_[std::min(forced_, close_.size() - 1)]);
    const float keep = c < logits.size() && std::isfinite(logits[c]) ? logits[c] : 0.0f;
    for (float& v : logits) v = -INFINITY;
    if (c >= logits.size()) return 0;
    logits[c] = keep;
    return 1;
  }
  if (inner_) return inner_->mask(logits);
  return static_cast<int64_t>(logits.size());
}

void ThinkingBudget::advance(int32_t token) {
  if (!closed_) {
    if (token >= 0 && token < trie_->vocab_size()) tail_ += trie_->bytes(token);
    if (tail_.find(kClose) != std::string::npos) {
      closed_ = true;
      tail_.clear();
    } else if (used_ >= budget_) {
      ++forced_;
    } else {
      ++used_;
      if (tail_.size() > kClose.size()) tail_.erase(0, tail_.size() - kClose.size());
    }
  }
  if (inner_) inner_->advance(token);
}

}  // namespace dsv41
