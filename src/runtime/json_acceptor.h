// A byte-level acceptor of JSON text that is an instance of a schema (runtime/json_schema.h):
// fed one byte at a time, it rejects the first byte after which the text can no longer be the
// beginning of such a value, and says when the text so far is a complete one. Used to mask
// tokens during constrained decoding (runtime/json_constraint.h), where every state it accepts
// must have a completion: it never accepts a byte that leads into a dead end (a ',' with no key
// left to write, a key no property starts with, a lone surrogate escape...).
//
// The text it accepts (a subset of valid JSON, RFC 8259):
// - whitespace (space, tab, CR, LF) between tokens, at most kMaxWhitespace bytes in a row;
// - strings of valid UTF-8 without raw control characters, escapes as in RFC 8259, \u
//   surrogates paired; object keys without escapes;
// - numbers as in RFC 8259, at most kMaxNumberDigits bytes before the exponent and at most
//   kMaxExponentDigits exponent digits (so every number is a finite double); integers without
//   fraction or exponent, at most kMaxIntegerDigits bytes (so every one fits an int64);
// - enum / const values and true / false / null written exactly as their compact JSON text;
// - at most kMaxNesting open objects and arrays (the schema itself is limited to 32 levels);
// - no duplicate keys among an object's declared properties.
// anyOf is followed by keeping one parse per alternative still possible (at most kMaxPaths).
// A value type: copies are independent (cheap when the capacity is already there). The schema
// must outlive the acceptor.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/json_schema.h"

namespace dsv41 {

inline constexpr int kMaxWhitespace = 20;
inline constexpr int kMaxNumberDigits = 40;
inline constexpr int kMaxExponentDigits = 2;
inline constexpr int kMaxIntegerDigits = 18;
inline constexpr int kMaxNesting = 64;
inline constexpr int kMaxPaths = 64;

class JsonAcceptor {
 public:
  JsonAcceptor() = default;  // dead
  explicit JsonAcceptor(const JsonSchema& schema) : JsonAcceptor(schema, schema.root()) {}
  // An instance of node `node` of the schema.
  JsonAcceptor(const JsonSchema& schema, int32_t node);

  // False when the byte is rejected; the acceptor is then dead (every later byte is rejected).
  bool advance(uint8_t byte);
  bool advance(std::string_view bytes) {
    for (char c : bytes)
      if (!advance(static_cast<uint8_t>(c))) return false;
    return true;
  }
  bool dead() const { return paths_.empty(); }
  // The text so far is a complete instance (trailing whitespace allowed).
  bool accepting() const;
  // Inside a string's text on every path (no escape or character pending): any token of plain
  // text (runtime/token_trie.h) is accepted and leaves the state as it is.
  bool plain_string() const;
  // Open frames of the shallowest parse path (tests: to search for completions close-first).
  size_t nesting() const;
  // Hash and equality of the state (for caching masks by state).
  size_t hash() const;
  bool operator==(const JsonAcceptor& o) const;

  struct Frame {
    uint8_t kind = 0, state = 0;
    uint8_t utf8_need = 0, utf8_lo = 0x80, utf8_hi = 0xBF;
    uint8_t hex = 0;        // \u digits left; number: exponent digits after the first
    bool low = false;       // reading the low half of a surrogate pair
    bool flag = false;      // value: ']' may close the array below; number: integer only; key: other keys allowed
    uint16_t cu = 0;        // \u: the surrogate class so far (see string_byte)
    int32_t node = 0;
    int32_t pos = 0;        // literal / key byte position; number length
    int32_t prop = -1;      // object: the property whose value is being read (−1: another key)
    uint64_t seen = 0;      // object: declared properties given
    uint64_t cand = 0;      // literal / key: candidates still matching
    bool operator==(const Frame&) const = default;
  };
  struct Path {
    std::vector<Frame> frames;
    int32_t ws = 0;  // whitespace bytes in a row
    bool operator==(const Path&) const = default;
  };

 private:
  bool feed(Path& p, uint8_t b);
  void push_value(Path& p, int32_t node, bool close_array);
  void complete(Path& p);

  const JsonSchema* schema_ = nullptr;
  std::vector<Path> paths_;
  std::vector<Path> forks_;  // scratch: alternatives of an anyOf being entered
};

}  // namespace dsv41
