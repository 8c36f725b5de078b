// Pre-tokenization for byte-level BPE (spec model.md §5): the `pre_tokenizer` of a Hugging
// Face tokenizer.json turned into a flat list of steps that cut text into pieces, each of which
// BPE then encodes on its own. Owns the compiled PCRE2 patterns.
//
// Supported: ByteLevel (add_prefix_space; use_regex = the GPT-2 split), Split (Regex or String
// pattern, behaviours Removed / Isolated / MergedWithPrevious / MergedWithNext / Contiguous,
// invert), Digits, Whitespace, WhitespaceSplit, Punctuation and nested Sequence. Patterns are
// Oniguruma syntax in the file; they are compiled with PCRE2 (UTF + UCP, JIT when available),
// whose syntax agrees for what tokenizers use (\p{L}, \p{N}, lookahead, classes), except that
// PCRE2 10.42 disagrees on \s (U+0085, U+180E): \s and \S are rewritten to Unicode White_Space.
//
// Every step sees each current piece as a separate subject, as Hugging Face does (a
// lookahead never looks past the end of the piece).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace dsv41 {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // Parses a pre_tokenizer object (`null` gives an empty pipeline). `field` names it in errors
  // ("pre_tokenizer", "pre_tokenizer.pretokenizers[2]"). Errors are not prefixed with the file.
  static Result<PreTokenizer> from_json(const nlohmann::json& node, const std::string& field);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // True when the pipeline contains a ByteLevel step (required for byte-level BPE).
  bool has_byte_level() const;

  // The pieces of one split() call. A piece views `text` (which must outlive it) or, when a
  // ByteLevel step prepended a space, a string in `owned` (a deque: its strings never move).
  struct Pieces {
    std::vector<std::string_view> pieces;
    std::deque<std::string> owned;
  };

  // Cuts `text` (valid UTF-8) into non-empty pieces, replacing out.pieces. Fails only when
  // PCRE2 reports a matching error (resource limits).
  Status split(std::string_view text, Pieces& out) const;

 private:
  struct Step;
  PreTokenizer();
  std::vector<std::unique_ptr<Step>> steps_;
};

// Applies `behavior` to a list of (begin, end, is_match) ranges covering a text, as Hugging
// Face's NormalizedString::split does; exposed for tests. Empty ranges are dropped.
struct SplitRange {
  size_t begin, end;
  bool is_match;
};
std::vector<SplitRange> apply_split_behavior(const std::vector<SplitRange>& ranges,
                                             SplitBehavior behavior);

}  // namespace dsv41
