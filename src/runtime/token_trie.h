// The byte strings of a vocabulary's ordinary tokens as a trie, built once per model, so that a
// token mask is one walk of the trie with a byte acceptor (runtime/json_acceptor.h): tokens
// sharing a prefix share its work, and a prefix the acceptor rejects prunes every token below it.
// A mask then costs far fewer acceptor steps than simulating each of the |V| tokens.
// Added tokens (chat markers, BOS/EOS...) are not in the trie: a constraint decides about them
// itself. Immutable after build(); shared by every request of a model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer.h"

namespace dsv41 {

class TokenTrie {
 public:
  static std::shared_ptr<const TokenTrie> build(const Tokenizer& tokenizer);
  // From explicit byte strings (id = index; empty strings are left out), for tests.
  static std::shared_ptr<const TokenTrie> from_strings(const std::vector<std::string>& tokens);

  int32_t vocab_size() const { return vocab_size_; }
  // Raw bytes of every id (added tokens included; empty for holes).
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool in_trie(int32_t id) const { return in_trie_[static_cast<size_t>(id)] != 0; }
  size_t nodes() const { return nodes_.size(); }

  // Marks allowed[id] = 1 for every trie token whose bytes `start` accepts (a copy of start is
  // advanced byte by byte). A must be copyable with bool advance(uint8_t). `states` is scratch
  // (kept by the caller so its capacity is reused). Returns the acceptor steps taken.
  template <class A>
  int64_t walk(const A& start, std::vector<uint8_t>* allowed, std::vector<A>* states) const;

 private:
  struct Node {
    uint32_t first_edge = 0, edges = 0;
    uint32_t first_token = 0, tokens = 0;
  };
  static std::shared_ptr<const TokenTrie> from(std::vector<std::string> bytes, std::vector<uint8_t> include);

  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> in_trie_;
  std::vector<Node> nodes_;           // 0 is the root
  std::vector<uint8_t> edge_byte_;    // edges of a node are contiguous, by byte
  std::vector<uint32_t> edge_child_;
  std::vector<int32_t> token_ids_;    // tokens ending at a node, contiguous per node
};

template <class A>
int64_t TokenTrie::walk(const A& start, std::vector<uint8_t>* allowed, std::vector<A>* states) const {
  struct Item {
    uint32_t node, next;
  };
  std::vector<Item> stack;
  stack.push_back({0, 0});
  if (states->empty()) states->resize(1);
  (*states)[0] = start;
  int64_t steps = 0;
  while (!stack.empty()) {
    Item& it = stack.back();
    const Node& nd = nodes_[it.node];
    if (it.next == nd.edges) {
      stack.pop_back();
      continue;
    }
    const uint32_t e = nd.first_edge + it.next++;
    const size_t depth = stack.size();
    if (states->size() <= depth) states->resize(depth + 1);
    A& s = (*states)[depth];
    s = (*states)[depth - 1];
    ++steps;
    if (!s.advance(edge_byte_[e])) continue;
    const Node& child = nodes_[edge_child_[e]];
    for (uint32_t t = 0; t < child.tokens; ++t) (*allowed)[static_cast<size_t>(token_ids_[child.first_token + t])] = 1;
    if (child.edges) stack.push_back({edge_child_[e], 0});
  }
  return steps;
}

}  // namespace dsv41
