// The byte strings of a vocabulary's ordinary tokens as a trie, built once per model, so that a
// token mask is one walk of the trie with a byte acceptor (runtime/json_acceptor.h): tokens
// sharing a prefix share its work, and a prefix the acceptor rejects prunes every token below it.
// A mask then costs far fewer acceptor steps than simulating each of the |V| tokens.
// Inside a JSON string most tokens are allowed and a walk would visit the whole trie, so the
// tokens that are "plain string text" (no quote, backslash or control byte; whole, well-formed
// UTF-8) are kept as a precomputed set and a second trie holds only the others: where the
// acceptor says every plain token keeps it where it is, mask() takes the set and walks the
// small trie.
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
  bool plain(int32_t id) const { return plain_[static_cast<size_t>(id)] != 0; }
  size_t nodes() const { return all_.nodes.size(); }

  // Marks allowed[id] = 1 for every trie token whose bytes `start` accepts (a copy of start is
  // advanced byte by byte). A must be copyable with bool advance(uint8_t) and
  // bool plain_string() (true: every plain token leaves it in the same state, and is accepted).
  // `states` is scratch (kept by the caller so its capacity is reused). Returns the acceptor
  // steps taken.
  template <class A>
  int64_t mask(const A& start, std::vector<uint8_t>* allowed, std::vector<A>* states) const {
    if (!start.plain_string()) return walk(all_, start, allowed, states);
    for (size_t i = 0; i < plain_.size(); ++i) (*allowed)[i] |= plain_[i];
    return walk(other_, start, allowed, states);
  }
  // The walk over every trie token (the fast path's reference).
  template <class A>
  int64_t walk_all(const A& start, std::vector<uint8_t>* allowed, std::vector<A>* states) const {
    return walk(all_, start, allowed, states);
  }

 private:
  struct Node {
    uint32_t first_edge = 0, edges = 0;
    uint32_t first_token = 0, tokens = 0;
  };
  struct Layout {
    std::vector<Node> nodes;            // 0 is the root
    std::vector<uint8_t> edge_byte;     // edges of a node are contiguous, by byte
    std::vector<uint32_t> edge_child;
    std::vector<int32_t> token_ids;     // tokens ending at a node, contiguous per node
  };
  static Layout layout(const std::vector<std::string>& bytes, const std::vector<uint8_t>& include);
  static std::shared_ptr<const TokenTrie> from(std::vector<std::string> bytes, std::vector<uint8_t> include);
  template <class A>
  static int64_t walk(const Layout& t, const A& start, std::vector<uint8_t>* allowed, std::vector<A>* states);

  int32_t vocab_size_ = 0;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> in_trie_, plain_;
  Layout all_;    // every trie token
  Layout other_;  // the trie tokens that are not plain
};

template <class A>
int64_t TokenTrie::walk(const Layout& t, const A& start, std::vector<uint8_t>* allowed, std::vector<A>* states) {
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
    const Node& nd = t.nodes[it.node];
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
    if (!s.advance(t.edge_byte[e])) continue;
    const Node& child = t.nodes[t.edge_child[e]];
    for (uint32_t k = 0; k < child.tokens; ++k) (*allowed)[static_cast<size_t>(t.token_ids[child.first_token + k])] = 1;
    if (child.edges) stack.push_back({t.edge_child[e], 0});
  }
  return steps;
}

}  // namespace dsv41
