// The byte-level JSON schema acceptor (see json_acceptor.h). Each parse path is a stack of
// frames, innermost last; a value frame is pushed only as the last act of consuming a byte (':'
// ',' '[' or the start), so the paths an anyOf forks into never need that byte again.
#include "runtime/json_acceptor.h"

#include <algorithm>
#include <bit>
#include <cstdint>

namespace dsv41 {
namespace {

enum Kind : uint8_t { kValue, kObject, kArray, kString, kKey, kNumber, kLiteral, kKeyword, kDone };
enum ObjState : uint8_t { kObjOpen, kObjColon, kObjValue, kObjAfter, kObjComma };
enum ArrState : uint8_t { kArrItem, kArrAfter };
enum StrState : uint8_t { kStrNormal, kStrEscape, kStrHex, kStrLowBackslash, kStrLowU };
enum NumState : uint8_t { kNumSign, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits };
constexpr std::string_view kKeywords[] = {"true", "false", "null"};

using Frame = JsonAcceptor::Frame;

bool is_space(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
int hex_value(uint8_t b) {
  if (is_digit(b)) return b - '0';
  if (b >= 'a' && b <= 'f') return b - 'a' + 10;
  if (b >= 'A' && b <= 'F') return b - 'A' + 10;
  return -1;
}
uint64_t low_bits(size_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }
bool number_complete(uint8_t s) { return s == kNumZero || s == kNumInt || s == kNumFrac || s == kNumExpDigits; }

// The first byte of a multi-byte UTF-8 sequence: how many continuation bytes follow and the
// range of the first one (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
bool utf8_lead(Frame& f, uint8_t b) {
  f.utf8_lo = 0x80;
  f.utf8_hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) f.utf8_need = 1;
  else if (b == 0xE0) f.utf8_need = 2, f.utf8_lo = 0xA0;
  else if (b == 0xED) f.utf8_need = 2, f.utf8_hi = 0x9F;
  else if (b >= 0xE1 && b <= 0xEF) f.utf8_need = 2;
  else if (b == 0xF0) f.utf8_need = 3, f.utf8_lo = 0x90;
  else if (b == 0xF4) f.utf8_need = 3, f.utf8_hi = 0x8F;
  else if (b >= 0xF1 && b <= 0xF3) f.utf8_need = 3;
  else return false;
  return true;
}

// One byte of a string's body. *closed: it was the closing quote.
bool string_byte(Frame& f, uint8_t b, bool escapes, bool* closed) {
  *closed = false;
  if (f.utf8_need > 0) {
    if (b < f.utf8_lo || b > f.utf8_hi) return false;
    --f.utf8_need;
    f.utf8_lo = 0x80;
    f.utf8_hi = 0xBF;
    return true;
  }
  switch (f.state) {
    case kStrNormal:
      if (b == '"') {
        *closed = true;
        return true;
      }
      if (b == '\\') {
        if (!escapes) return false;
        f.state = kStrEscape;
        return true;
      }
      if (b < 0x20) return false;
      return b < 0x80 || utf8_lead(f, b);
    case kStrEscape:
      if (b == 'u') {
        f.state = kStrHex, f.hex = 4, f.cu = 0, f.low = false;
        return true;
      }
      if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
        f.state = kStrNormal;
        return true;
      }
      return false;
    case kStrLowBackslash:
      if (b != '\\') return false;
      f.state = kStrLowU;
      return true;
    case kStrLowU:
      if (b != 'u') return false;
      f.state = kStrHex, f.hex = 4, f.cu = 0, f.low = true;
      return true;
    case kStrHex: {
      const int d = hex_value(b);
      if (d < 0) return false;
      const int i = 4 - f.hex;
      // A low surrogate must follow a high one (DC00..DFFF) and nothing else may be one. Only
      // that class is kept (cu: 1 after a first digit D, 2 for D800..DBFF), not the digits, so
      // that escapes do not multiply the acceptor's states.
      if (f.low && ((i == 0 && d != 0xD) || (i == 1 && d < 0xC))) return false;
      if (!f.low && i == 1 && f.cu == 1 && d >= 0xC) return false;
      if (i == 0) f.cu = d == 0xD ? 1 : 0;
      if (i == 1) f.cu = f.cu == 1 && d >= 0x8 ? 2 : 0;
      if (--f.hex == 0) {
        f.state = !f.low && f.cu == 2 ? kStrLowBackslash : kStrNormal;
        f.cu = 0;
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

JsonAcceptor::JsonAcceptor(const JsonSchema& schema, int32_t node) : schema_(&schema) {
  Path p;
  Frame done;
  done.kind = kDone;
  p.frames.push_back(done);
  forks_.clear();
  push_value(p, node, false);
  paths_.push_back(std::move(p));
  for (Path& f : forks_) paths_.push_back(std::move(f));
  forks_.clear();
}

void JsonAcceptor::push_value(Path& p, int32_t node, bool close_array) {
  const SchemaNode& n = schema_->node(node);
  if (n.any_of.empty()) {
    Frame f;
    f.kind = kValue;
    f.node = node;
    f.flag = close_array;
    p.frames.push_back(f);
    return;
  }
  const Path base = p;
  push_value(p, n.any_of[0], close_array);
  for (size_t i = 1; i < n.any_of.size() && forks_.size() < static_cast<size_t>(kMaxPaths); ++i) {
    Path q = base;
    push_value(q, n.any_of[i], close_array);
    forks_.push_back(std::move(q));
  }
}

// The top frame's value is complete: pop it and tell its container.
void JsonAcceptor::complete(Path& p) {
  p.frames.pop_back();
  Frame& parent = p.frames.back();
  if (parent.kind == kObject) {
    if (parent.prop >= 0) parent.seen |= uint64_t{1} << parent.prop;
    parent.state = kObjAfter;
  } else if (parent.kind == kArray) {
    parent.state = kArrAfter;
  }
}

bool JsonAcceptor::feed(Path& p, uint8_t b) {
  const bool space = is_space(b);
  auto take_space = [&] {
    if (++p.ws > kMaxWhitespace) return false;
    return true;
  };
  for (;;) {
    Frame& f = p.frames.back();
    const SchemaNode& n = schema_->node(f.node);
    switch (f.kind) {
      case kDone:
        return space && take_space();
      case kValue: {
        if (space) return take_space();
        p.ws = 0;
        if (f.flag && b == ']') {  // an empty array
          p.frames.pop_back();
          complete(p);
          return true;
        }
        if (n.has_literals) {
          f.kind = kLiteral;
          f.pos = 0;
          f.cand = low_bits(n.literals.size());
          continue;
        }
        if (b == '{' && (n.types & kJsonObject)) {
          if (p.frames.size() > static_cast<size_t>(kMaxNesting)) return false;
          f.kind = kObject, f.state = kObjOpen, f.seen = 0, f.prop = -1;
          return true;
        }
        if (b == '[' && (n.types & kJsonArray)) {
          if (p.frames.size() > static_cast<size_t>(kMaxNesting)) return false;
          f.kind = kArray, f.state = kArrItem;
          push_value(p, n.items, true);
          return true;
        }
        if (b == '"' && (n.types & kJsonString)) {
          f.kind = kString, f.state = kStrNormal;
          return true;
        }
        if ((b == '-' || is_digit(b)) && (n.types & (kJsonNumber | kJsonInteger))) {
          f.kind = kNumber;
          f.flag = !(n.types & kJsonNumber);
          f.pos = 1;
          f.state = b == '-' ? kNumSign : b == '0' ? kNumZero : kNumInt;
          return true;
        }
        const int kw = b == 't' ? 0 : b == 'f' ? 1 : b == 'n' ? 2 : -1;
        if (kw >= 0 && (n.types & (kw == 2 ? kJsonNull : kJsonBoolean))) {
          f.kind = kKeyword, f.state = static_cast<uint8_t>(kw), f.pos = 1;
          return true;
        }
        return false;
      }
      case kKeyword: {
        const std::string_view kw = kKeywords[f.state];
        if (b != static_cast<uint8_t>(kw[static_cast<size_t>(f.pos)])) return false;
        if (static_cast<size_t>(++f.pos) == kw.size()) complete(p);
        return true;
      }
      case kLiteral: {
        uint64_t next = 0;
        bool done = false;
        const size_t pos = static_cast<size_t>(f.pos);
        for (uint64_t c = f.cand; c; c &= c - 1) {
          const int i = std::countr_zero(c);
          const std::string& lit = n.literals[static_cast<size_t>(i)];
          if (pos < lit.size() && static_cast<uint8_t>(lit[pos]) == b) next |= uint64_t{1} << i;
          else if (pos == lit.size()) done = true;
        }
        if (next) {
          f.cand = next;
          ++f.pos;
          return true;
        }
        if (!done) return false;
        complete(p);  // the byte belongs to the container
        continue;
      }
      case kNumber: {
        const bool room = f.pos < kMaxNumberDigits;
        uint8_t to = 255;
        switch (f.state) {
          case kNumSign: if (is_digit(b)) to = b == '0' ? kNumZero : kNumInt; break;
          case kNumDot: if (is_digit(b)) to = kNumFrac; break;
          case kNumExp: if (is_digit(b)) to = kNumExpDigits; else if (b == '+' || b == '-') to = kNumExpSign; break;
          case kNumExpSign: if (is_digit(b)) to = kNumExpDigits; break;
          case kNumExpDigits:
            // Two exponent digits at most: every value stays a finite double for any parser.
            if (is_digit(b) && f.hex < kMaxExponentDigits - 1) {
              ++f.hex;
              to = f.state;
            }
            break;
          case kNumInt:
          case kNumFrac:
            // Integers: at most kMaxIntegerDigits digits (every value fits an int64).
            if (is_digit(b) && room && !(f.flag && f.pos >= kMaxIntegerDigits)) to = f.state;
            [[fallthrough]];
          case kNumZero:
            if (to == 255 && room && !f.flag && b == '.' && f.state != kNumFrac && f.state != kNumExpDigits) to = kNumDot;
            if (to == 255 && room && !f.flag && (b == 'e' || b == 'E') && f.state != kNumExpDigits) to = kNumExp;
            break;
        }
        if (to != 255) {
          f.state = to;
          ++f.pos;
          return true;
        }
        if (!number_complete(f.state)) return false;
        complete(p);
        continue;
      }
      case kString: {
        bool closed = false;
        if (!string_byte(f, b, true, &closed)) return false;
        p.ws = 0;
        if (closed) complete(p);
        return true;
      }
      case kKey: {
        Frame& obj = p.frames[p.frames.size() - 2];
        const SchemaNode& on = schema_->node(obj.node);
        p.ws = 0;
        if (b == '"' && f.utf8_need == 0) {
          int exact = -1;
          for (uint64_t c = f.cand; c; c &= c - 1) {
            const int i = std::countr_zero(c);
            if (on.property_names[static_cast<size_t>(i)].size() == static_cast<size_t>(f.pos)) exact = i;
          }
          if (exact >= 0 && ((obj.seen >> exact) & 1)) return false;  // a duplicate key
          if (exact < 0 && !f.flag) return false;
          obj.prop = exact;
          obj.state = kObjColon;
          p.frames.pop_back();
          return true;
        }
        bool closed = false;
        if (!string_byte(f, b, false, &closed)) return false;
        uint64_t next = 0;
        const size_t pos = static_cast<size_t>(f.pos);
        for (uint64_t c = f.cand; c; c &= c - 1) {
          const int i = std::countr_zero(c);
          const std::string& name = on.property_names[static_cast<size_t>(i)];
          if (pos < name.size() && static_cast<uint8_t>(name[pos]) == b) next |= uint64_t{1} << i;
        }
        if (!next && !f.flag) return false;
        // With no candidate left the position no longer matters: kept at 0 so that long keys
        // do not make new states.
        f.cand = next;
        f.pos = next ? f.pos + 1 : 0;
        return true;
      }
      case kObject: {
        const uint64_t unseen = low_bits(n.property_names.size()) & ~f.seen;
        const bool key_possible = n.additional >= 0 || unseen != 0;
        const bool may_close = (f.seen & n.required) == n.required;
        if (space && f.state != kObjValue) return take_space();
        p.ws = 0;
        switch (f.state) {
          case kObjOpen:
          case kObjComma:
            if (b == '"' && key_possible) {
              Frame k;
              k.kind = kKey;
              k.node = f.node;
              k.flag = n.additional >= 0;
              k.cand = k.flag ? low_bits(n.property_names.size()) : unseen;
              p.frames.push_back(k);
              return true;
            }
            if (b == '}' && f.state == kObjOpen && may_close) {
              complete(p);
              return true;
            }
            return false;
          case kObjColon:
            if (b != ':') return false;
            f.state = kObjValue;
            push_value(p, f.prop >= 0 ? n.property_nodes[static_cast<size_t>(f.prop)] : n.additional, false);
            return true;
          case kObjAfter:
            if (b == ',' && key_possible) {
              f.state = kObjComma;
              return true;
            }
            if (b == '}' && may_close) {
              complete(p);
              return true;
            }
            return false;
          default:
            return false;
        }
      }
      case kArray: {
        if (f.state != kArrAfter) return false;
        if (space) return take_space();
        p.ws = 0;
        if (b == ',') {
          f.state = kArrItem;
          push_value(p, n.items, false);
          return true;
        }
        if (b == ']') {
          complete(p);
          return true;
        }
        return false;
      }
      default:
        return false;
    }
  }
}

bool JsonAcceptor::advance(uint8_t b) {
  forks_.clear();
  size_t kept = 0;
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (!feed(paths_[i], b)) continue;
    if (kept != i) std::swap(paths_[kept], paths_[i]);
    ++kept;
  }
  paths_.resize(kept);
  for (Path& f : forks_) paths_.push_back(std::move(f));
  forks_.clear();
  if (paths_.size() > 1) {
    // The same state reached by two alternatives is one path.
    for (size_t i = 1; i < paths_.size();) {
      if (std::find(paths_.begin(), paths_.begin() + static_cast<std::ptrdiff_t>(i), paths_[i]) !=
          paths_.begin() + static_cast<std::ptrdiff_t>(i))
        paths_.erase(paths_.begin() + static_cast<std::ptrdiff_t>(i));
      else
        ++i;
    }
    if (paths_.size() > static_cast<size_t>(kMaxPaths)) paths_.resize(kMaxPaths);
  }
  return !paths_.empty();
}

bool JsonAcceptor::accepting() const {
  for (const Path& p : paths_) {
    const Frame& top = p.frames.back();
    if (top.kind == kDone) return true;
    if (p.frames.size() != 2) continue;  // a number or enum value directly under the end
    if (top.kind == kNumber && number_complete(top.state)) return true;
    if (top.kind == kLiteral) {
      const auto& lits = schema_->node(top.node).literals;
      for (uint64_t c = top.cand; c; c &= c - 1)
        if (lits[static_cast<size_t>(std::countr_zero(c))].size() == static_cast<size_t>(top.pos)) return true;
    }
  }
  return false;
}

bool JsonAcceptor::plain_string() const {
  for (const Path& p : paths_) {
    const Frame& top = p.frames.back();
    if (top.kind != kString || top.state != kStrNormal || top.utf8_need != 0) return false;
  }
  return !paths_.empty();
}

size_t JsonAcceptor::nesting() const {
  size_t n = SIZE_MAX;
  for (const Path& p : paths_) n = std::min(n, p.frames.size());
  return paths_.empty() ? 0 : n;
}

size_t JsonAcceptor::hash() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const Path& p : paths_) {
    mix(static_cast<uint64_t>(p.ws));
    for (const Frame& f : p.frames) {
      mix(uint64_t{f.kind} | uint64_t{f.state} << 8 | uint64_t{f.utf8_need} << 16 | uint64_t{f.utf8_lo} << 24 |
          uint64_t{f.utf8_hi} << 32 | uint64_t{f.hex} << 40 | uint64_t{f.low} << 48 | uint64_t{f.flag} << 49);
      mix(uint64_t{f.cu} | static_cast<uint64_t>(static_cast<uint32_t>(f.node)) << 16);
      mix(static_cast<uint64_t>(static_cast<uint32_t>(f.pos)) | static_cast<uint64_t>(static_cast<uint32_t>(f.prop)) << 32);
      mix(f.seen);
      mix(f.cand);
    }
  }
  return static_cast<size_t>(h);
}

bool JsonAcceptor::operator==(const JsonAcceptor& o) const { return schema_ == o.schema_ && paths_ == o.paths_; }

}  // namespace dsv41
