// Comma-separated token id lists (see token_ids.h).
#include "runtime/token_ids.h"

#include <charconv>

namespace dsv41 {

Result<std::vector<int32_t>> parse_token_ids(std::string_view text, std::string_view what) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  int item = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    std::string_view part = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    int32_t v = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size() || v < 0)
      return invalid_argument(std::string(what) + " item " + std::to_string(item) + " '" + std::string(part) +
                              "' is not a token id");
    ids.push_back(v);
    ++item;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return ids;
}

std::string format_token_ids(std::span<const int32_t> ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

}  // namespace dsv41
