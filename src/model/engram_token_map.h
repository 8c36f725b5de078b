// The Engram normalised-token map: every tokenizer id → a dense id shared by tokens that
// normalise alike (" The", "the", "THE"). Spec: model.md §3.8 (normalisation chain), golden
// `engram.token_map`.
//
// For each id in order 0…n−1: text = the token decoded alone (lossy UTF-8: ill-formed bytes
// read as U+FFFD). If text contains U+FFFD (a partial UTF-8 byte token) the key is the raw
// token string from the tokenizer file; otherwise key = normalise(text), or text itself when
// that is empty. Dense ids are assigned in first-seen order.
// normalise = NFKC → NFD → drop nonspacing marks (Mn) → lowercase → runs of space/tab/CR/LF
// become one space → a string that is exactly " " is kept → strip Unicode White_Space at
// both ends. (utf8proc provides the Unicode tables.)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dsv41 {

// The chain above on valid UTF-8 (ill-formed input is returned unchanged).
std::string engram_normalize(std::string_view utf8);

struct EngramTokenMap {
  std::vector<int64_t> ids;  // [n] dense ids
  int64_t distinct = 0;      // number of distinct keys (= engram_compressed_vocab_size)
};

// decoded[i] = bytes of token i decoded alone; raw[i] = token i as written in tokenizer.json.
EngramTokenMap build_engram_token_map(const std::vector<std::string>& decoded, const std::vector<std::string>& raw);

}  // namespace dsv41
