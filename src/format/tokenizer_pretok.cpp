// Pre-tokenizer pipeline of a tokenizer.json, matched with PCRE2 (see tokenizer_pretok.h).
#include "format/tokenizer_pretok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include <nlohmann/json.hpp>

namespace dsv41 {
namespace {

using json = nlohmann::json;

// The split regex of GPT-2 that Hugging Face's ByteLevel pre-tokenizer applies with use_regex.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Oniguruma's \s is exactly the Unicode White_Space property. PCRE2 10.42's \s under UCP differs
// (it lacks U+0085 NEL and accepts U+180E MONGOLIAN VOWEL SEPARATOR), so \s and \S are
// rewritten to this explicit set. \S inside a class is left alone (no tokenizer writes it).
constexpr const char* kWhiteSpaceSet =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string rewrite_white_space(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  int depth = 0;  // character-class nesting (Oniguruma allows nested classes)
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') out += depth > 0 ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      else if (e == 'S' && depth == 0) out += "[^" + std::string(kWhiteSpaceSet) + "]";
      else { out += c; out += e; }
      continue;
    }
    out += c;
    if (c == '[') {
      ++depth;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
    } else if (c == ']' && depth > 0) {
      --depth;
    }
  }
  return out;
}

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using CodePtr = std::unique_ptr<pcre2_code, CodeDeleter>;

Result<CodePtr> compile(std::string_view pattern, const std::string& field) {
  const std::string rewritten = rewrite_white_space(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return corrupt(field + ": regex '" + std::string(pattern) + "' does not compile: " +
                   reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: when unavailable pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return CodePtr(code);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kRegex, kLiteral, kByteLevel };
  Kind kind = Kind::kRegex;
  CodePtr code;            // kRegex; kByteLevel with use_regex (GPT-2 pattern)
  std::string literal;     // kLiteral
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

namespace {

Result<bool> get_bool(const json& node, const char* key, bool dflt, const std::string& field) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) return corrupt(field + "." + key + ": expected a boolean");
  return it->get<bool>();
}

Result<SplitBehavior> parse_behavior(const json& node, const std::string& field) {
  auto it = node.find("behavior");
  if (it == node.end()) return SplitBehavior::kIsolated;
  if (!it->is_string()) return corrupt(field + ".behavior: expected a string");
  const std::string& b = it->get_ref<const std::string&>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return unsupported(field + ".behavior: unknown split behavior '" + b + "'");
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_json(const json& node, const std::string& field) {
  PreTokenizer out;
  if (node.is_null()) return out;
  // Depth-first flattening of nested Sequences, keeping the field path for errors.
  struct Item {
    const json* node;
    std::string field;
    int depth;
  };
  std::vector<Item> stack{{&node, field, 0}};
  bool seen_byte_level = false;
  while (!stack.empty()) {
    Item item = std::move(stack.back());
    stack.pop_back();
    const json& n = *item.node;
    const std::string& f = item.field;
    if (!n.is_object()) return corrupt(f + ": expected an object");
    auto type_it = n.find("type");
    if (type_it == n.end() || !type_it->is_string()) return corrupt(f + ".type: missing or not a string");
    const std::string& type = type_it->get_ref<const std::string&>();
    if (type == "Sequence") {
      auto list = n.find("pretokenizers");
      if (list == n.end() || !list->is_array()) return corrupt(f + ".pretokenizers: missing or not an array");
      if (stack.size() + list->size() > 4096) return corrupt(f + ": too many pre-tokenizers");
      if (item.depth >= 32) return corrupt(f + ": Sequence nested more than 32 deep");
      for (size_t i = list->size(); i-- > 0;) {
        stack.push_back({&(*list)[i], f + ".pretokenizers[" + std::to_string(i) + "]", item.depth + 1});
      }
      continue;
    }
    if (seen_byte_level) {
      // After ByteLevel Hugging Face works on the remapped alphabet (a space is then 'Ġ', a
      // letter); dsv41 splits raw bytes, so a later step would cut differently.
      return unsupported(f + ": pre-tokenizer '" + type + "' after ByteLevel is not supported");
    }
    auto step = std::make_unique<Step>();
    if (type == "ByteLevel") {
      step->kind = Step::Kind::kByteLevel;
      DSV41_ASSIGN_OR_RETURN(step->add_prefix_space, get_bool(n, "add_prefix_space", true, f));
      DSV41_ASSIGN_OR_RETURN(bool use_regex, get_bool(n, "use_regex", true, f));
      if (use_regex) {
        DSV41_ASSIGN_OR_RETURN(step->code, compile(kGpt2Pattern, f));
      }
      seen_byte_level = true;
    } else if (type == "Split") {
      auto pat = n.find("pattern");
      if (pat == n.end() || !pat->is_object()) return corrupt(f + ".pattern: missing or not an object");
      DSV41_ASSIGN_OR_RETURN(step->behavior, parse_behavior(n, f));
      DSV41_ASSIGN_OR_RETURN(step->invert, get_bool(n, "invert", false, f));
      if (auto re = pat->find("Regex"); re != pat->end() && re->is_string()) {
        step->kind = Step::Kind::kRegex;
        DSV41_ASSIGN_OR_RETURN(step->code, compile(re->get_ref<const std::string&>(), f + ".pattern.Regex"));
      } else if (auto s = pat->find("String"); s != pat->end() && s->is_string()) {
        step->kind = Step::Kind::kLiteral;
        step->literal = s->get<std::string>();
      } else {
        return corrupt(f + ".pattern: expected {\"Regex\": string} or {\"String\": string}");
      }
    } else if (type == "Digits") {
      DSV41_ASSIGN_OR_RETURN(bool individual, get_bool(n, "individual_digits", false, f));
      // Hugging Face: individual -> each numeric char isolated; else runs (Contiguous).
      DSV41_ASSIGN_OR_RETURN(step->code, compile(individual ? R"(\p{N})" : R"(\p{N}+)", f));
    } else if (type == "Whitespace") {
      // Hugging Face's \w+|[^\w\s]+ (keep matches); Oniguruma's \w is L, M, Nd, Pc.
      DSV41_ASSIGN_OR_RETURN(
          step->code, compile(R"([\p{L}\p{M}\p{Nd}\p{Pc}]+|[^\p{L}\p{M}\p{Nd}\p{Pc}\s]+)", f));
      step->behavior = SplitBehavior::kRemoved;
      step->invert = true;
    } else if (type == "WhitespaceSplit") {
      DSV41_ASSIGN_OR_RETURN(step->code, compile(R"(\s+)", f));
      step->behavior = SplitBehavior::kRemoved;
    } else if (type == "Punctuation") {
      // char::is_ascii_punctuation || Unicode P*: one char per match.
      DSV41_ASSIGN_OR_RETURN(step->code, compile(R"([\p{P}!-/:-@\[-`{-~])", f));
      DSV41_ASSIGN_OR_RETURN(step->behavior, parse_behavior(n, f));
    } else {
      return unsupported(f + ".type: unsupported pre-tokenizer type '" + type + "'");
    }
    out.steps_.push_back(std::move(step));
  }
  return out;
}

bool PreTokenizer::has_byte_level() const {
  for (const auto& s : steps_) {
    if (s->kind == Step::Kind::kByteLevel) return true;
  }
  return false;
}

std::vector<SplitRange> apply_split_behavior(const std::vector<SplitRange>& ranges,
                                             SplitBehavior behavior) {
  std::vector<SplitRange> acc;
  acc.reserve(ranges.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      acc = ranges;
      break;
    case SplitBehavior::kRemoved:
      for (const auto& r : ranges) {
        if (!r.is_match) acc.push_back(r);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      // A match is glued onto the piece before it (unless that piece was a match too).
      for (const auto& r : ranges) {
        if (r.is_match && !previous_match && !acc.empty()) acc.back().end = r.end;
        else acc.push_back({r.begin, r.end, false});
        previous_match = r.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      // Mirror image: walk backwards gluing a match onto the piece after it.
      for (size_t i = ranges.size(); i-- > 0;) {
        const auto& r = ranges[i];
        if (r.is_match && !previous_match && !acc.empty()) acc.back().begin = r.begin;
        else acc.push_back({r.begin, r.end, false});
        previous_match = r.is_match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case SplitBehavior::kContiguous:
      // Runs of matches (and runs of non-matches) become one piece each.
      for (const auto& r : ranges) {
        if (r.is_match == previous_match && !acc.empty()) acc.back().end = r.end;
        else acc.push_back({r.begin, r.end, false});
        previous_match = r.is_match;
      }
      break;
  }
  std::vector<SplitRange> out;
  out.reserve(acc.size());
  for (const auto& r : acc) {
    if (r.end > r.begin) out.push_back(r);
  }
  return out;
}

namespace {

// All (non-empty) matches of `code` in `s` plus the gaps between them, covering s. Empty
// matches are skipped and the search moves on by one character, as Oniguruma's iterator does.
Status find_ranges(const pcre2_code* code, pcre2_match_data* md, std::string_view s,
                   std::vector<SplitRange>& ranges) {
  ranges.clear();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t offset = 0, prev = 0;
  while (offset <= s.size()) {
    int rc = pcre2_match(code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default stack is small; the interpreter keeps its backtracking on the heap.
      rc = pcre2_match(code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return out_of_range(std::string("pre-tokenizer regex failed: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e <= b) {
      if (b >= s.size()) break;
      // Step over one UTF-8 character.
      offset = b + 1;
      while (offset < s.size() && (static_cast<uint8_t>(s[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    if (b > prev) ranges.push_back({prev, b, false});
    ranges.push_back({b, e, true});
    prev = offset = e;
  }
  if (prev < s.size()) ranges.push_back({prev, s.size(), false});
  return ok_status();
}

void find_literal(std::string_view lit, std::string_view s, std::vector<SplitRange>& ranges) {
  ranges.clear();
  size_t prev = 0;
  if (!lit.empty()) {
    for (size_t pos = s.find(lit); pos != std::string_view::npos; pos = s.find(lit, pos)) {
      if (pos > prev) ranges.push_back({prev, pos, false});
      ranges.push_back({pos, pos + lit.size(), true});
      prev = pos += lit.size();
    }
  }
  if (prev < s.size()) ranges.push_back({prev, s.size(), false});
}

}  // namespace

Status PreTokenizer::split(std::string_view text, Pieces& out) const {
  out.pieces.clear();
  out.owned.clear();
  std::vector<std::string_view>& cur = out.pieces;
  if (!text.empty()) cur.push_back(text);
  std::vector<std::string_view> next;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create(1, nullptr));
  if (!md) return internal_error("pre-tokenizer: out of memory for PCRE2 match data");
  std::vector<SplitRange> ranges;
  for (const auto& step : steps_) {
    next.clear();
    for (std::string_view piece : cur) {
      if (step->kind == Step::Kind::kByteLevel) {
        if (step->add_prefix_space && piece[0] != ' ') {
          std::string& spaced = out.owned.emplace_back();
          spaced.reserve(piece.size() + 1);
          spaced.push_back(' ');
          spaced.append(piece);
          piece = spaced;
        }
        if (!step->code) {
          next.push_back(piece);
          continue;
        }
      }
      if (step->kind == Step::Kind::kLiteral) {
        find_literal(step->literal, piece, ranges);
      } else {
        DSV41_RETURN_IF_ERROR(find_ranges(step->code.get(), md.get(), piece, ranges));
      }
      if (step->invert) {
        for (auto& r : ranges) r.is_match = !r.is_match;
      }
      const SplitBehavior behavior =
          step->kind == Step::Kind::kByteLevel ? SplitBehavior::kIsolated : step->behavior;
      if (behavior == SplitBehavior::kIsolated) {
        for (const auto& r : ranges) next.push_back(piece.substr(r.begin, r.end - r.begin));
      } else {
        for (const auto& r : apply_split_behavior(ranges, behavior)) {
          next.push_back(piece.substr(r.begin, r.end - r.begin));
        }
      }
    }
    std::swap(cur, next);
  }
  return ok_status();
}

}  // namespace dsv41
