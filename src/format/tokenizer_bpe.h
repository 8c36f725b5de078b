// Byte-level BPE merging (spec model.md §5): turns one pre-tokenized piece (raw bytes) into
// token ids by starting from one symbol per byte and applying the file's merges, lowest rank
// first and leftmost first among equal ranks, exactly as Hugging Face's BPE model does (a
// priority queue over adjacent pairs). Owns the rank map of merge pairs; the word cache lives
// in the Tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsv41 {

using TokenId = int32_t;

class BpeMerger {
 public:
  // Single-byte starting symbols: initial_[b] is the id of the one-byte token for byte b, or -1
  // when the vocabulary lacks it (that byte is then dropped, or becomes unk_id when set, as in
  // Hugging Face).
  void set_byte_token(uint8_t byte, TokenId id) { initial_[byte] = id; }
  // A later duplicate of the same pair replaces the earlier one (Hugging Face builds its merge
  // map the same way).
  void add_merge(TokenId left, TokenId right, int32_t rank, TokenId merged) {
    merges_[key(left, right)] = {rank, merged};
  }
  void set_unk(TokenId unk_id, bool fuse_unk) { unk_id_ = unk_id; fuse_unk_ = fuse_unk; }
  size_t merge_count() const { return merges_.size(); }

  // Appends the ids of `piece` (raw bytes, non-empty) to `out`.
  void encode(std::string_view piece, std::vector<TokenId>& out) const;

 private:
  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  static uint64_t key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const Merge* find(TokenId a, TokenId b) const {
    auto it = merges_.find(key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::array<TokenId, 256> initial_ = make_unset();
  std::unordered_map<uint64_t, Merge> merges_;
  TokenId unk_id_ = -1;
  bool fuse_unk_ = false;

  static std::array<TokenId, 256> make_unset() {
    std::array<TokenId, 256> a;
    a.fill(-1);
    return a;
  }
};

}  // namespace dsv41
