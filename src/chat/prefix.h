// Prefix stability (system.md §3: a prompt's first h tokens that match an earlier prompt are
// a cache hit). Agents resend the whole conversation every turn; the previous turn's tokens
// (its prompt plus the generated completion) are reusable exactly up to the longest common
// prefix with the new prompt. Which renderings keep that prefix whole is documented in
// docs/CHAT.md ("Prefix stability"). Owns nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace dsv41::chat {

struct PrefixReport {
  size_t common = 0;          // length of the longest common prefix
  size_t previous_size = 0;
  size_t next_size = 0;
  // The whole previous sequence is a prefix of the next: everything cached is reusable.
  bool extends() const { return common == previous_size; }
};

// Longest common prefix of the previous turn's token ids (prompt + completion) and the new
// prompt's ids.
PrefixReport common_token_prefix(std::span<const int32_t> previous, std::span<const int32_t> next);

// The same over prompt text (bytes), for checks before tokenisation.
PrefixReport common_text_prefix(std::string_view previous, std::string_view next);

}  // namespace dsv41::chat
