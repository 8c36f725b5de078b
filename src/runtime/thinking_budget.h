// Thinking budget (a chat request's `thinking.budget_tokens`): the reasoning may run for at most
// `budget` tokens; then only the "</think>" token may come, so the answer follows. Before that
// point, and once the reasoning has closed, it is the wrapped constraint (a JSON answer, forced
// tool calls) or no constraint at all. The reasoning counts as closed when its bytes contain
// "</think>", however the tokens spelled it (as the server's output parser reads it); the close
// is forced as the tokenizer's single "</think>" token where it has one, else as the tokens that
// encode the text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/token_constraint.h"
#include "runtime/token_trie.h"

namespace dsv41 {

class ThinkingBudget final : public TokenConstraint {
 public:
  // inner may be null; close_tokens (non-empty) must spell "</think>".
  ThinkingBudget(std::unique_ptr<TokenConstraint> inner, std::shared_ptr<const TokenTrie> trie, int64_t budget,
                 std::vector<int32_t> close_tokens);
  int64_t mask(std::span<float> logits) override;
  void advance(int32_t token) override;
  bool closed() const { return closed_; }
  int64_t reasoning_tokens() const { return used_; }

 private:
  std::unique_ptr<TokenConstraint> inner_;
  std::shared_ptr<const TokenTrie> trie_;
  int64_t budget_;
  std::vector<int32_t> close_;
  size_t forced_ = 0;    // close tokens forced so far
  int64_t used_ = 0;     // tokens of reasoning so far (the forced close not counted)
  bool closed_ = false;  // "</think>" seen
  std::string tail_;     // the reasoning's last bytes (a marker split over tokens)
};

class ThinkingBudgetFactory final : public ConstraintFactory {
 public:
  ThinkingBudgetFactory(std::shared_ptr<const ConstraintFactory> inner, std::shared_ptr<const TokenTrie> trie,
                        int64_t budget, std::vector<int32_t> close_tokens)
      : inner_(std::move(inner)), trie_(std::move(trie)), budget_(budget), close_(std::move(close_tokens)) {}
  std::unique_ptr<TokenConstraint> start() const override {
    return std::make_unique<ThinkingBudget>(inner_ ? inner_->start() : nullptr, trie_, budget_, close_);
  }

 private:
  std::shared_ptr<const ConstraintFactory> inner_;
  std::shared_ptr<const TokenTrie> trie_;
  int64_t budget_;
  std::vector<int32_t> close_;
};

}  // namespace dsv41
