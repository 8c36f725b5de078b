// Longest common prefix of two token (or byte) sequences (see prefix.h).
#include "src/chat/prefix.h"

#include <algorithm>

namespace dsv41::chat {

PrefixReport common_token_prefix(std::span<const int32_t> previous, std::span<const int32_t> next) {
  PrefixReport r;
  r.previous_size = previous.size();
  r.next_size = next.size();
  auto mism = std::mismatch(previous.begin(), previous.end(), next.begin(), next.end());
  r.common = static_cast<size_t>(mism.first - previous.begin());
  return r;
}

PrefixReport common_text_prefix(std::string_view previous, std::string_view next) {
  PrefixReport r;
  r.previous_size = previous.size();
  r.next_size = next.size();
  auto mism = std::mismatch(previous.begin(), previous.end(), next.begin(), next.end());
  r.common = static_cast<size_t>(mism.first - previous.begin());
  return r;
}

}  // namespace dsv41::chat
