// A TokenConstraint (runtime/token_constraint.h) from any byte acceptor: a token may come next
// when the acceptor accepts all its bytes (one walk of the token trie, runtime/token_trie.h,
// cached per acceptor state), EOS when the acceptor says the output is complete; added tokens
// (chat markers) only when listed in `extra_tokens` and accepted.
//
// Thinking mode: the reasoning before "</think>" is left free, except that EOS may not end it
// (the constrained answer must still come) and no token may run on past "</think>" within the
// same token (its bytes after the marker would not have been checked); the acceptor applies
// from the first byte after "</think>".
//
// A: a copyable value with bool advance(uint8_t), bool advance(std::string_view),
// bool accepting(), bool plain_string() (runtime/token_trie.h), size_t hash() and ==. The trie must outlive the constraint.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/token_constraint.h"
#include "runtime/token_trie.h"

namespace dsv41 {

struct AcceptorConstraintOptions {
  int32_t eos_token_id = -1;
  bool thinking = false;  // constrain only what follows "</think>"
  size_t cache_entries = 64;  // masks kept per sequence, by acceptor state
  std::vector<int32_t> extra_tokens;  // added tokens that may come when the acceptor takes their bytes
};

namespace detail {
inline constexpr std::string_view kThinkClose = "</think>";
// Tokens that could finish "</think>" and run on past it: (id, k) where the token starts with
// the last 8 − k bytes of the marker and is longer (k = −1: it holds the whole marker and more).
std::vector<std::pair<int32_t, int>> think_run_on(const TokenTrie& trie);
}  // namespace detail

template <class A>
class AcceptorConstraint final : public TokenConstraint {
 public:
  AcceptorConstraint(A start, std::shared_ptr<const TokenTrie> trie, const AcceptorConstraintOptions* options,
                     const std::vector<std::pair<int32_t, int>>* run_on)
      : trie_(std::move(trie)), o_(*options), run_on_(*run_on), answering_(!options->thinking), acceptor_(std::move(start)) {}

  int64_t mask(std::span<float> logits) override {
    const size_t n = std::min(logits.size(), static_cast<size_t>(trie_->vocab_size()));
    for (size_t i = n; i < logits.size(); ++i) logits[i] = -INFINITY;
    if (broken_) {
      for (float& v : logits) v = -INFINITY;
      return 0;
    }
    const int32_t eos = o_.eos_token_id;
    if (!answering_) {
      size_t k = 0;  // bytes of "</think>" the reasoning ends with
      for (size_t len = std::min(tail_.size(), detail::kThinkClose.size() - 1); len > 0; --len)
        if (std::string_view(tail_).substr(tail_.size() - len) == detail::kThinkClose.substr(0, len)) {
          k = len;
          break;
        }
      if (eos >= 0 && static_cast<size_t>(eos) < n) logits[static_cast<size_t>(eos)] = -INFINITY;
      for (const auto& [id, need] : run_on_)
        if (need < 0 || static_cast<size_t>(need) == k) logits[static_cast<size_t>(id)] = -INFINITY;
      int64_t count = 0;
      for (size_t i = 0; i < n; ++i) count += logits[i] != -INFINITY;
      return count;
    }
    const std::vector<uint8_t>& ok = allowed();
    const bool end_ok = acceptor_.accepting();
    int64_t count = 0;
    for (size_t i = 0; i < n; ++i) {
      const bool keep = ok[i] || (static_cast<int32_t>(i) == eos && end_ok);
      if (!keep) logits[i] = -INFINITY;
      else ++count;
    }
    return count;
  }

  void advance(int32_t token) override {
    if (broken_ || token < 0 || token >= trie_->vocab_size()) {
      broken_ = true;
      return;
    }
    const std::string_view bytes = trie_->bytes(token);
    if (!answering_) {
      tail_ += bytes;
      const size_t at = tail_.find(detail::kThinkClose);
      if (at == std::string::npos) {
        if (tail_.size() > detail::kThinkClose.size()) tail_.erase(0, tail_.size() - detail::kThinkClose.size());
        return;
      }
      answering_ = true;
      const std::string rest = tail_.substr(at + detail::kThinkClose.size());
      tail_.clear();
      if (!acceptor_.advance(std::string_view(rest))) broken_ = true;
      return;
    }
    if (token == o_.eos_token_id) return;
    const bool listed = trie_->in_trie(token) ||
                        std::find(o_.extra_tokens.begin(), o_.extra_tokens.end(), token) != o_.extra_tokens.end();
    if (!listed || !acceptor_.advance(bytes)) broken_ = true;
  }

  const A& acceptor() const { return acceptor_; }
  bool in_answer() const { return answering_; }
  int64_t steps() const { return steps_; }  // acceptor steps of the trie walks so far

 private:
  const std::vector<uint8_t>& allowed() {
    const size_t h = acceptor_.hash();
    auto it = cache_.find(h);
    if (it != cache_.end() && it->second.first == acceptor_) return it->second.second;
    if (cache_.size() >= o_.cache_entries) cache_.clear();
    std::vector<uint8_t> allowed(static_cast<size_t>(trie_->vocab_size()), 0);
    steps_ += trie_->mask(acceptor_, &allowed, &scratch_);
    for (int32_t id : o_.extra_tokens) {
      A copy = acceptor_;
      if (id >= 0 && id < trie_->vocab_size() && copy.advance(trie_->bytes(id))) allowed[static_cast<size_t>(id)] = 1;
    }
    auto& slot = cache_[h];
    slot = {acceptor_, std::move(allowed)};
    return slot.second;
  }

  std::shared_ptr<const TokenTrie> trie_;
  const AcceptorConstraintOptions& o_;
  const std::vector<std::pair<int32_t, int>>& run_on_;
  bool answering_;
  bool broken_ = false;  // a token the mask did not allow was fed: nothing is allowed any more
  std::string tail_;     // thinking: the last bytes of the reasoning
  A acceptor_;
  std::vector<A> scratch_;
  std::unordered_map<size_t, std::pair<A, std::vector<uint8_t>>> cache_;
  int64_t steps_ = 0;
};

}  // namespace dsv41
