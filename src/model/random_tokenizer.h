// A small byte-level BPE tokenizer.json for random-weight models (`dsv41 init-random`), and the
// Engram normalised-key count that the written config must carry. Spec: model.md §3.8 (Engram
// token normalisation), golden tokenizer.json (layout: ByteLevel pre-tokenizer and decoder).
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

// TEMPORARY (until src/model/engram_token_map.h from branch forward2 is on main; then use
// build_engram_token_map(decoded, raw).distinct): the number of distinct Engram keys, model.md
// §3.8: decoded text with invalid UTF-8 or U+FFFD → raw token string as key; otherwise
// NFKC → NFD → drop Mn → lowercase → collapse space/tab/CR/LF runs → strip White_Space
// (a lone " " is kept; an empty result keeps the text); count distinct keys.
int64_t temp_engram_distinct_keys(const std::vector<std::string>& decoded, const std::vector<std::string>& raw);
std::string temp_engram_normalize(std::string_view utf8);

}  // namespace dsv41
