// A small byte-level BPE tokenizer.json for random-weight models (`dsv41 init-random`); `decoded`
// and `raw` feed build_engram_token_map for the config's engram_compressed_vocab_size.
// Spec: golden tokenizer.json (layout: ByteLevel pre-tokenizer and decoder), model.md §3.8.
// Owns: nothing; builds the JSON text and the per-id decoded/raw strings.
//
// Vocabulary (exactly config.vocab_size ids):
//   bos/eos/pad at the config's ids (`<｜begin▁of▁sentence｜>`, `<｜end▁of▁sentence｜>`, `<｜▁pad▁｜>`),
//   then in the remaining ids, in order: the 256 byte tokens (GPT-2 byte→char map), up to
//   kMaxRandomMerges merged tokens learned greedily from a built-in English text, the chat
//   special tokens (<think>, </think>, <｜User｜>, <｜Assistant｜>, <｜System｜>, ...), and
//   `<｜reserved_K｜>` fillers. Everything is deterministic (ties broken by the pair's strings).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "format/config.h"

namespace dsv41 {

inline constexpr int kMaxRandomMerges = 400;

struct RandomTokenizer {
  std::string json;                  // tokenizer.json text
  std::vector<std::string> raw;      // [vocab_size] token strings as written in the file
  std::vector<std::string> decoded;  // [vocab_size] bytes of each token decoded alone
  int merges = 0;                    // learned merges written
  int reserved = 0;                  // filler tokens
};

// Fails (invalid_argument naming vocab_size / the id key) if the config's special ids collide or
// the vocabulary cannot hold the byte tokens and the special tokens.
Result<RandomTokenizer> make_random_tokenizer(const ModelConfig& config);

}  // namespace dsv41
