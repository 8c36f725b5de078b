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
#include <vector>

namespace dsv41 {

using TokenId = int32_t;

class BpeMerger {
 public:
  // Single-byte starting symbols: initial_[b] is the id of the one-byte token for byte b, or -1
  // when the vocabulary lacks it (that byte is then dropped, or becomes unk_id when set, as in
  // Hugging Face).
  void set_byte_token(uint8_t byte, TokenId id) { initial_[byte] = id; }
  // Builds the rank map. A later duplicate of the same pair replaces the earlier one (Hugging
  // Face builds its merge map the same way). Each entry: merges[rank] = {left, right, merged}.
  struct MergeRule {
    TokenId left, right, merged;
  };
  void set_merges(const std::vector<MergeRule>& merges);
  void set_unk(TokenId unk_id, bool fuse_unk) { unk_id_ = unk_id; fuse_unk_ = fuse_unk; }

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
  // Open addressing with linear probing over a power-of-two table: the merge loop does one
  // lookup per adjacent pair, so this is the hot path of BPE.
  const Merge* find(TokenId a, TokenId b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    for (size_t i = hash(k);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.merge;
      if (s.key == kEmpty) return nullptr;
    }
  }
  size_t hash(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }

  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are non-negative: never a real key
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  std::array<TokenId, 256> initial_ = make_unset();
  TokenId unk_id_ = -1;
  bool fuse_unk_ = false;

  static std::array<TokenId, 256> make_unset() {
    std::array<TokenId, 256> a;
    a.fill(-1);
    return a;
  }
};

}  // namespace dsv41
