// ThinkingBudget: the reasoning runs for at most `budget` tokens, then only "</think>" may come;
// a marker spelled by several tokens closes the reasoning too; after it the wrapped constraint
// (here a recording one) decides alone.
#include "runtime/thinking_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsv41 {
namespace {

// ids: 0 "a", 1 "b", 2 "</think>", 3 "</", 4 "think>", 5 "x"
std::shared_ptr<const TokenTrie> trie() { return TokenTrie::from_strings({"a", "b", "</think>", "</", "think>", "x"}); }
constexpr int32_t kClose = 2;

// Allows only token 5 ("x") and records what it was fed.
class OnlyX final : public TokenConstraint {
 public:
  explicit OnlyX(std::vector<int32_t>* fed) : fed_(fed) {}
  int64_t mask(std::span<float> logits) override {
    for (size_t i = 0; i < logits.size(); ++i)
      if (i != 5) logits[i] = -INFINITY;
    return 1;
  }
  void advance(int32_t token) override { fed_->push_back(token); }

 private:
  std::vector<int32_t>* fed_;
};

std::vector<int> allowed(TokenConstraint& c, float close_logit = 1.0f) {
  std::vector<float> logits(6, 1.0f);
  logits[kClose] = close_logit;
  const int64_t n = c.mask(logits);
  std::vector<int> ok;
  for (int i = 0; i < 6; ++i)
    if (logits[static_cast<size_t>(i)] != -INFINITY) ok.push_back(i);
  EXPECT_EQ(n, static_cast<int64_t>(ok.size()));
  return ok;
}

TEST(ThinkingBudget, ForcesTheCloseAfterTheBudget) {
  ThinkingBudget c(nullptr, trie(), 3, {kClose});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(allowed(c).size(), 6u) << i;
    c.advance(i % 2);
  }
  EXPECT_EQ(allowed(c), std::vector<int>{kClose});
  c.advance(kClose);
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(c.reasoning_tokens(), 3);
  EXPECT_EQ(allowed(c).size(), 6u);  // the answer is free
  c.advance(0);
  EXPECT_EQ(allowed(c).size(), 6u);
}

TEST(ThinkingBudget, ZeroBudgetClosesAtOnceEvenWhenTheCloseWasMaskedOut) {
  ThinkingBudget c(nullptr, trie(), 0, {kClose});
  std::vector<float> logits(6, 1.0f);
  logits[kClose] = -INFINITY;  // e.g. a logit_bias of -100 on "</think>"
  EXPECT_EQ(c.mask(logits), 1);
  EXPECT_EQ(logits[kClose], 0.0f);
  for (int i = 0; i < 6; ++i)
    if (i != kClose) EXPECT_EQ(logits[static_cast<size_t>(i)], -INFINITY);
}

TEST(ThinkingBudget, AMarkerSpelledByTwoTokensCloses) {
  ThinkingBudget c(nullptr, trie(), 4, {kClose});
  c.advance(0);
  c.advance(3);  // "</"
  c.advance(4);  // "think>"
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(c.reasoning_tokens(), 2);
  c.advance(0);
  c.advance(0);
  c.advance(0);
  EXPECT_EQ(allowed(c).size(), 6u);  // past the budget, but the reasoning had closed
}

TEST(ThinkingBudget, ForcesACloseOfSeveralTokensOneAtATime) {
  // A tokenizer without a "</think>" token: the close is the text's tokens, "</" then "think>".
  ThinkingBudget c(nullptr, trie(), 1, {3, 4});
  c.advance(0);
  EXPECT_EQ(allowed(c), std::vector<int>{3});
  c.advance(3);
  EXPECT_FALSE(c.closed());
  EXPECT_EQ(allowed(c), std::vector<int>{4});
  c.advance(4);
  EXPECT_TRUE(c.closed());
  EXPECT_EQ(c.reasoning_tokens(), 1);
  EXPECT_EQ(allowed(c).size(), 6u);
}

TEST(ThinkingBudget, WrapsTheInnerConstraintBeforeAndAfterTheCut) {
  std::vector<int32_t> fed;
  ThinkingBudget c(std::make_unique<OnlyX>(&fed), trie(), 1, {kClose});
  EXPECT_EQ(allowed(c), std::vector<int>{5});
  c.advance(5);
  EXPECT_EQ(allowed(c), std::vector<int>{kClose});  // the budget overrides the inner mask
  c.advance(kClose);
  EXPECT_EQ(allowed(c), std::vector<int>{5});
  c.advance(5);
  EXPECT_EQ(fed, (std::vector<int32_t>{5, kClose, 5}));  // the inner constraint heard every token
}

TEST(ThinkingBudgetFactory, EachStartHasItsOwnCount) {
  ThinkingBudgetFactory f(nullptr, trie(), 1, {kClose});
  auto a = f.start();
  auto b = f.start();
  a->advance(0);
  EXPECT_EQ(allowed(*a), std::vector<int>{kClose});
  EXPECT_EQ(allowed(*b).size(), 6u);
}

}  // namespace
}  // namespace dsv41
