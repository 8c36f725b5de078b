// The model's tokenizer: a Hugging Face `tokenizer.json` byte-level BPE (spec model.md §5).
// Owns the vocabulary, the merge ranks, the added/special tokens, the pre-tokenizer pipeline
// and a cache of encoded words.
//
// encode(text) -> ids follows Hugging Face tokenizers: added tokens are found first (leftmost
// longest; tokens with normalized=false on the raw text, then those with normalized=true on the
// normalized remainder; lstrip/rstrip swallow neighbouring whitespace; single_word needs
// non-word neighbours), the rest goes through normalizer -> pre-tokenizer -> byte-level BPE.
// The file's post_processor is ignored: BOS is added by dsv41 (prompt encoding), never here.
// Added tokens outside model.vocab must carry the ids Hugging Face would give them (consecutive
// after the vocabulary, in file order); a file that says otherwise is refused as corrupt.
//
// decode(ids) -> bytes concatenates each token's bytes: a token whose characters all belong to
// the GPT-2 byte alphabet becomes those bytes, any other token (e.g. `<｜User｜>`) its own UTF-8
// text, which is what the ByteLevel decoder does. Bytes may be ill-formed UTF-8 (a partial
// multi-byte character); decode_text() and StreamDecoder replace ill-formed parts by U+FFFD.
//
// Thread safety: all const methods may be called concurrently (the word cache has a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

using TokenId = int32_t;

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;      // control token: decode may skip it, encode may refuse to match it
  bool lstrip = false;       // a match also swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // only matches when not next to a word character
  bool normalized = false;   // matched in normalized text rather than raw text
};

struct TokenizerEncodeOptions {
  // false: special added tokens in the text are encoded as ordinary text (for untrusted user
  // text that must not inject control tokens). Non-special added tokens still match.
  bool match_special_tokens = true;
};

class Tokenizer {
 public:
  // Reads and parses a tokenizer.json file. Errors name the file and the field.
  static Result<Tokenizer> load(const std::string& path);
  // Parses tokenizer.json text held in memory; `source` names it in error messages.
  static Result<Tokenizer> parse(std::string_view json_text, const std::string& source = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text (must be valid UTF-8, else invalid_argument naming the byte offset) -> ids, no BOS.
  Result<std::vector<TokenId>> encode(std::string_view text, const TokenizerEncodeOptions& options = {}) const;

  // Raw bytes of one token (what the ByteLevel decoder gives for it alone); empty for an id
  // with no token (a hole in the id range or id outside [0, vocab_size())).
  std::string_view decode_token(TokenId id) const;
  // Concatenated bytes of `ids` (ids without a token contribute nothing, as in Hugging Face).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;
  // decode() as valid UTF-8: ill-formed parts become U+FFFD (Hugging Face's lossy decode).
  std::string decode_text(std::span<const TokenId> ids, bool skip_special = false) const;

  // The id of a token written as in the file (added token content, or a vocab entry in the
  // byte-level alphabet such as "Ġthe"): token_to_id("<think>").
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The token string exactly as written in the file, for ids that have one.
  std::optional<std::string_view> id_to_token(TokenId id) const;
  bool is_special(TokenId id) const;
  const std::vector<AddedToken>& added_tokens() const;

  // Max id + 1 over the vocabulary and the added tokens.
  int32_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Decodes ids one at a time and returns only complete UTF-8: a partial multi-byte character
// at the end is held back until the next token completes it. The concatenation of all push()
// results and flush() equals tokenizer.decode_text(all ids). The tokenizer must outlive this.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  std::string push(TokenId id);
  // Emits what is held back (a truncated character becomes U+FFFD) and resets.
  std::string flush();
  // Bytes currently held back (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace dsv41
