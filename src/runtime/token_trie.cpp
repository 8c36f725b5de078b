// Building the token trie (see token_trie.h).
#include "runtime/token_trie.h"

#include <algorithm>
#include <numeric>

namespace dsv41 {

std::shared_ptr<const TokenTrie> TokenTrie::build(const Tokenizer& tokenizer) {
  const int32_t v = tokenizer.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(v));
  std::vector<uint8_t> include(static_cast<size_t>(v), 1);
  for (int32_t id = 0; id < v; ++id) bytes[static_cast<size_t>(id)] = std::string(tokenizer.decode_token(id));
  for (const AddedToken& t : tokenizer.added_tokens())
    if (t.id >= 0 && t.id < v) include[static_cast<size_t>(t.id)] = 0;
  return from(std::move(bytes), std::move(include));
}

std::shared_ptr<const TokenTrie> TokenTrie::from_strings(const std::vector<std::string>& tokens) {
  return from(tokens, std::vector<uint8_t>(tokens.size(), 1));
}

std::shared_ptr<const TokenTrie> TokenTrie::from(std::vector<std::string> bytes, std::vector<uint8_t> include) {
  auto t = std::make_shared<TokenTrie>();
  t->vocab_size_ = static_cast<int32_t>(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i].empty()) include[i] = 0;
  // Sorted byte strings make every node's subtree one contiguous run: the trie is laid out by
  // a recursive pass over runs sharing a prefix.
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (include[i]) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)] || (bytes[static_cast<size_t>(a)] == bytes[static_cast<size_t>(b)] && a < b);
  });
  t->nodes_.emplace_back();
  // Breadth-first over (node, run of order, depth).
  struct Job {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Job> queue{{0, 0, order.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Job j = queue[q];
    size_t i = j.lo;
    t->nodes_[j.node].first_token = static_cast<uint32_t>(t->token_ids_.size());
    while (i < j.hi && bytes[static_cast<size_t>(order[i])].size() == j.depth) t->token_ids_.push_back(order[i++]);
    t->nodes_[j.node].tokens = static_cast<uint32_t>(t->token_ids_.size()) - t->nodes_[j.node].first_token;
    t->nodes_[j.node].first_edge = static_cast<uint32_t>(t->edge_byte_.size());
    while (i < j.hi) {
      const char c = bytes[static_cast<size_t>(order[i])][j.depth];
      size_t k = i;
      while (k < j.hi && bytes[static_cast<size_t>(order[k])][j.depth] == c) ++k;
      const uint32_t child = static_cast<uint32_t>(t->nodes_.size());
      t->nodes_.emplace_back();
      t->edge_byte_.push_back(static_cast<uint8_t>(c));
      t->edge_child_.push_back(child);
      queue.push_back({child, i, k, j.depth + 1});
      i = k;
    }
    t->nodes_[j.node].edges = static_cast<uint32_t>(t->edge_byte_.size()) - t->nodes_[j.node].first_edge;
  }
  t->bytes_ = std::move(bytes);
  t->in_trie_ = std::move(include);
  return t;
}

}  // namespace dsv41
