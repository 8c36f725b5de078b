// UTF-8 validation, lossy conversion and the GPT-2 byte-level alphabet (see tokenizer_utf8.h).
#include "format/tokenizer_utf8.h"

#include <array>

namespace dsv41::utf8 {
namespace {

// Result of looking at one sequence: how many bytes it spans and whether it is complete and
// well-formed (kValid), ill-formed (kInvalid: `len` bytes form one maximal subpart), or cut
// off by the end of the input while still well-formed so far (kTruncated).
enum class Seq { kValid, kInvalid, kTruncated };

// Table 3-7 of the Unicode standard: the lead byte fixes the length and the allowed range of
// the first continuation byte (E0, ED, F0, F4 are narrower to exclude overlongs, surrogates
// and code points past U+10FFFF).
Seq scan(std::string_view s, size_t pos, size_t& len) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) { len = 1; return Seq::kValid; }
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 1;
  else if (b0 == 0xE0) { need = 2; lo = 0xA0; }
  else if (b0 >= 0xE1 && b0 <= 0xEC) need = 2;
  else if (b0 == 0xED) { need = 2; hi = 0x9F; }
  else if (b0 >= 0xEE && b0 <= 0xEF) need = 2;
  else if (b0 == 0xF0) { need = 3; lo = 0x90; }
  else if (b0 >= 0xF1 && b0 <= 0xF3) need = 3;
  else if (b0 == 0xF4) { need = 3; hi = 0x8F; }
  else { len = 1; return Seq::kInvalid; }
  len = 1;
  for (int k = 0; k < need; ++k) {
    if (pos + len >= s.size()) return Seq::kTruncated;
    const auto b = static_cast<uint8_t>(s[pos + len]);
    if (b < lo || b > hi) return Seq::kInvalid;
    lo = 0x80; hi = 0xBF;
    ++len;
  }
  return Seq::kValid;
}

constexpr std::array<uint32_t, 256> make_byte_table() {
  std::array<uint32_t, 256> t{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    t[b] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kByteToCp = make_byte_table();

}  // namespace

size_t first_invalid(std::string_view text) {
  size_t pos = 0, len = 0;
  while (pos < text.size()) {
    if (static_cast<uint8_t>(text[pos]) < 0x80) { ++pos; continue; }
    if (scan(text, pos, len) != Seq::kValid) return pos;
    pos += len;
  }
  return text.size();
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0, len = 0;
  while (pos < bytes.size()) {
    if (scan(bytes, pos, len) == Seq::kValid) {
      out.append(bytes.substr(pos, len));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD; kTruncated at the end is one subpart too
    }
    pos += len;
  }
  return out;
}

size_t complete_prefix(std::string_view bytes) {
  // Only the last 3 bytes can start a truncated sequence (4 bytes is the longest).
  const size_t start = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t pos = start; pos < bytes.size(); ++pos) {
    const auto b = static_cast<uint8_t>(bytes[pos]);
    if (b < 0xC2 || b > 0xF4) continue;  // not a lead byte
    size_t len = 0;
    if (scan(bytes, pos, len) == Seq::kTruncated) {
      // Only hold back if it is a real sequence start in the whole-text parse; a lead byte in
      // the middle of earlier garbage is still a lead byte under maximal-subpart rules, since
      // every ill-formed subpart ends before the next lead byte.
      return pos;
    }
  }
  return bytes.size();
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t decode_at(std::string_view text, size_t pos, size_t& len) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) { len = 1; return b0; }
  int extra = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
  uint32_t cp = b0 & (0x3F >> extra);
  len = 1 + static_cast<size_t>(extra);
  for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + k]) & 0x3F);
  return cp;
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

uint32_t byte_to_code_point(uint8_t b) { return kByteToCp[b]; }

int code_point_to_byte(uint32_t cp) {
  if (cp < 256) return kByteToCp[cp] == cp ? static_cast<int>(cp) : -1;
  if (cp >= 256 + 68) return -1;
  // The 68 remapped bytes in increasing order get 256, 257, ...
  for (int b = 0; b < 256; ++b) {
    if (kByteToCp[b] == cp) return b;
  }
  return -1;
}

}  // namespace dsv41::utf8
