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

namespace {

// Whole, well-formed UTF-8 text without a quote, a backslash or a control byte: inside a JSON
// string such a token is text and nothing else.
bool plain_text(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (b < 0x20 || b == '"' || b == '\\') return false;
    if (b < 0x80) {
      ++i;
      continue;
    }
    int need = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;
    else if (b == 0xED) need = 2, hi = 0x9F;
    else if (b >= 0xE1 && b <= 0xEF) need = 2;
    else if (b == 0xF0) need = 3, lo = 0x90;
    else if (b == 0xF4) need = 3, hi = 0x8F;
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else return false;
    for (int k = 1; k <= need; ++k) {
      if (i + static_cast<size_t>(k) >= s.size()) return false;
      const uint8_t c = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += static_cast<size_t>(need) + 1;
  }
  return true;
}

}  // namespace

TokenTrie::Layout TokenTrie::layout(const std::vector<std::string>& bytes, const std::vector<uint8_t>& include) {
  Layout t;
  // Sorted byte strings make every node's subtree one contiguous run: the trie is laid out by
  // a breadth-first pass over runs sharing a prefix.
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (include[i]) order.push_back(static_cast<int32_t>(i));
  auto at = [&](int32_t id) -> const std::string& { return bytes[static_cast<size_t>(id)]; };
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return at(a) < at(b) || (at(a) == at(b) && a < b); });
  t.nodes.emplace_back();
  struct Job {
    uint32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Job> queue{{0, 0, order.size(), 0}};
  for (size_t q = 0; q < queue.size(); ++q) {
    const Job j = queue[q];
    size_t i = j.lo;
    t.nodes[j.node].first_token = static_cast<uint32_t>(t.token_ids.size());
    while (i < j.hi && at(order[i]).size() == j.depth) t.token_ids.push_back(order[i++]);
    t.nodes[j.node].tokens = static_cast<uint32_t>(t.token_ids.size()) - t.nodes[j.node].first_token;
    t.nodes[j.node].first_edge = static_cast<uint32_t>(t.edge_byte.size());
    while (i < j.hi) {
      const char c = at(order[i])[j.depth];
      size_t k = i;
      while (k < j.hi && at(order[k])[j.depth] == c) ++k;
      const uint32_t child = static_cast<uint32_t>(t.nodes.size());
      t.nodes.emplace_back();
      t.edge_byte.push_back(static_cast<uint8_t>(c));
      t.edge_child.push_back(child);
      queue.push_back({child, i, k, j.depth + 1});
      i = k;
    }
    t.nodes[j.node].edges = static_cast<uint32_t>(t.edge_byte.size()) - t.nodes[j.node].first_edge;
  }
  return t;
}

std::shared_ptr<const TokenTrie> TokenTrie::from(std::vector<std::string> bytes, std::vector<uint8_t> include) {
  auto t = std::make_shared<TokenTrie>();
  t->vocab_size_ = static_cast<int32_t>(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i].empty()) include[i] = 0;
  t->plain_.assign(bytes.size(), 0);
  std::vector<uint8_t> other = include;
  for (size_t i = 0; i < bytes.size(); ++i)
    if (include[i] && plain_text(bytes[i])) t->plain_[i] = 1, other[i] = 0;
  t->all_ = layout(bytes, include);
  t->other_ = layout(bytes, other);
  t->bytes_ = std::move(bytes);
  t->in_trie_ = std::move(include);
  return t;
}

}  // namespace dsv41
