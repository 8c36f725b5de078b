// Engram normalised-token map (model.md §3.8). See engram_token_map.h.
#include "model/engram_token_map.h"

#include <utf8proc.h>

#include <cstdlib>
#include <unordered_map>

namespace dsv41 {

namespace {

// Codepoints of valid UTF-8; false if ill-formed.
bool decode_utf8(std::string_view s, std::vector<int32_t>& out) {
  out.clear();
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0 || cp < 0) return false;
    out.push_back(cp);
    p += n;
    left -= n;
  }
  return true;
}

std::string encode_utf8(const std::vector<int32_t>& cps) {
  std::string out;
  utf8proc_uint8_t buf[4];
  for (int32_t cp : cps) {
    const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

// utf8proc_map over an explicit length (tokens may contain NUL bytes).
bool map_utf8(const std::string& s, utf8proc_option_t options, std::string& out) {
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &dst, options);
  if (n < 0) return false;
  out.assign(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return true;
}

// Unicode White_Space (what Rust's char::is_whitespace, used by the reference's Strip, tests).
bool is_white_space(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

constexpr int32_t kSentinel = 0xE000;  // private use: protects a lone space from Strip

}  // namespace

std::string engram_normalize(std::string_view utf8) {
  std::string nfkc, nfd;
  const std::string in(utf8);
  if (!map_utf8(in, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT), nfkc))
    return in;
  if (!map_utf8(nfkc, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE), nfd)) return in;
  std::vector<int32_t> cps;
  if (!decode_utf8(nfd, cps)) return in;
  std::vector<int32_t> out;
  out.reserve(cps.size());
  for (int32_t c : cps) {
    if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue;  // strip accents
    c = utf8proc_tolower(c);
    const bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (ws) {
      if (!out.empty() && out.back() == ' ') continue;  // collapse the run
      c = ' ';
    }
    out.push_back(c);
  }
  if (out.size() == 1 && out[0] == ' ') out[0] = kSentinel;
  size_t b = 0, e = out.size();
  while (b < e && is_white_space(out[b])) ++b;
  while (e > b && is_white_space(out[e - 1])) --e;
  std::vector<int32_t> stripped(out.begin() + b, out.begin() + e);
  for (int32_t& c : stripped)
    if (c == kSentinel) c = ' ';
  return encode_utf8(stripped);
}

EngramTokenMap build_engram_token_map(const std::vector<std::string>& decoded, const std::vector<std::string>& raw) {
  EngramTokenMap map;
  map.ids.resize(decoded.size());
  std::unordered_map<std::string, int64_t> seen;
  std::vector<int32_t> cps;
  for (size_t id = 0; id < decoded.size(); ++id) {
    const std::string& text = decoded[id];
    bool partial = !decode_utf8(text, cps);  // lossy decoding would insert U+FFFD
    if (!partial)
      for (int32_t c : cps)
        if (c == 0xFFFD) partial = true;
    std::string key;
    if (partial) {
      key = id < raw.size() ? raw[id] : text;
    } else {
      key = engram_normalize(text);
      if (key.empty()) key = text;
    }
    auto [it, inserted] = seen.emplace(key, static_cast<int64_t>(seen.size()));
    map.ids[id] = it->second;
  }
  map.distinct = static_cast<int64_t>(seen.size());
  return map;
}

}  // namespace dsv41
