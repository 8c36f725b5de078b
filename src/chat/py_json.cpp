// Python-compatible JSON reading and writing (see py_json.h; golden encoding README).
#include "src/chat/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dsv41::chat {
namespace {

// Binary subtype that marks "integer digits too large for 64 bits".
constexpr std::uint64_t kBigIntSubtype = 0x42;

// SAX handler that builds an ordered_json like nlohmann's own DOM parser, except that an
// integer literal that overflowed 64 bits (reported as a float with its raw text) is kept
// exact. Python's json.loads keeps such integers exact, and the golden cases re-serialise them.
class OrderedBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(number_integer_t v) { return put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return put(Json(v)); }
  bool number_float(number_float_t v, const string_t& raw) {
    if (raw.find_first_of(".eE") == std::string::npos) {
      std::vector<std::uint8_t> digits(raw.begin(), raw.end());
      return put(Json::binary(std::move(digits), kBigIntSubtype));
    }
    return put(Json(v));
  }
  bool string(string_t& v) { return put(Json(std::move(v))); }
  bool binary(binary_t& v) { return put(Json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool key(string_t& k) {
    // operator[] keeps an existing key's position; the later value then overwrites it.
    pending_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() { stack_.pop_back(); return true; }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_array() { stack_.pop_back(); return true; }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = ex.what();
    error_pos_ = pos;
    return false;
  }

  Json root;
  std::string error_;
  std::size_t error_pos_ = 0;

 private:
  Json* place(Json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    *pending_ = std::move(v);
    return pending_;
  }
  bool put(Json v) { place(std::move(v)); return true; }
  bool open(Json v) { stack_.push_back(place(std::move(v))); return true; }

  std::vector<Json*> stack_;
  Json* pending_ = nullptr;
};

void append_escaped(std::string& out, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) {
            out += "\\u00";
            out += kHex[c >> 4];
            out += kHex[c & 15];
          } else {
            out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    // Copy one well-formed multi-byte sequence, or write U+FFFD for an ill-formed byte.
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool ok = len != 0 && c <= 0xF4 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len >= 3) {
      unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if (c == 0xE0 && c1 < 0xA0) ok = false;          // overlong
      if (c == 0xED && c1 >= 0xA0) ok = false;         // surrogate
      if (c == 0xF0 && c1 < 0x90) ok = false;          // overlong
      if (c == 0xF4 && c1 >= 0x90) ok = false;         // above U+10FFFF
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
}

void dump(std::string& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: out += "null"; break;
    case Json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case Json::value_t::number_integer: out += std::to_string(v.get<std::int64_t>()); break;
    case Json::value_t::number_unsigned: out += std::to_string(v.get<std::uint64_t>()); break;
    case Json::value_t::number_float: out += py_float_repr(v.get<double>()); break;
    case Json::value_t::string:
      out += '"';
      append_escaped(out, v.get_ref<const std::string&>());
      out += '"';
      break;
    case Json::value_t::binary: {
      const auto& b = v.get_binary();
      out.append(b.begin(), b.end());  // exact big-integer digits (see OrderedBuilder)
      break;
    }
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dump(out, e);
      }
      out += ']';
      break;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        append_escaped(out, k);
        out += "\": ";
        dump(out, e);
      }
      out += '}';
      break;
    }
    case Json::value_t::discarded: out += "null"; break;
  }
}

}  // namespace

Result<Json> parse_json_ordered(std::string_view text, std::string_view what) {
  OrderedBuilder builder;
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const std::exception& e) {  // nlohmann never escapes the library
    return invalid_argument(std::string(what) + ": invalid JSON: " + e.what());
  }
  if (!ok) {
    return invalid_argument(std::string(what) + ": invalid JSON: " +
                            (builder.error_.empty() ? std::string("parse failed") : builder.error_));
  }
  return std::move(builder.root);
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits in scientific form, e.g. "-1.5e+300", then laid out as repr().
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t p = 0;
  if (sci[0] == '-') {
    out += '-';
    p = 1;
  }
  size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = p; i < e_pos; ++i)
    if (sci[i] != '.') digits += sci[i];
  int exp = std::stoi(sci.substr(e_pos + 1));
  int n = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    int point = exp + 1;  // digits before the decimal point
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (point >= n) {
      out += digits;
      out.append(static_cast<size_t>(point - n), '0');
      out += ".0";
    } else {
      out += digits.substr(0, point);
      out += '.';
      out += digits.substr(point);
    }
    return out;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += 'e';
  out += exp < 0 ? '-' : '+';
  int a = exp < 0 ? -exp : exp;
  if (a < 10) out += '0';
  out += std::to_string(a);
  return out;
}

std::string py_json_dumps(const Json& v) {
  std::string out;
  dump(out, v);
  return out;
}

std::string py_json_string(std::string_view s) {
  std::string out = "\"";
  append_escaped(out, s);
  out += '"';
  return out;
}

bool is_big_integer(const Json& v) {
  return v.is_binary() && v.get_binary().has_subtype() && v.get_binary().subtype() == kBigIntSubtype;
}

bool py_truthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return v.get<bool>();
    case Json::value_t::number_integer: return v.get<std::int64_t>() != 0;
    case Json::value_t::number_unsigned: return v.get<std::uint64_t>() != 0;
    case Json::value_t::number_float: return v.get<double>() != 0.0;
    case Json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object: return !v.empty();
    case Json::value_t::binary: return true;  // a big integer is never 0
    case Json::value_t::discarded: return false;
  }
  return false;
}

Result<std::string> py_str(const Json& v, std::string_view what) {
  switch (v.type()) {
    case Json::value_t::string: return v.get<std::string>();
    case Json::value_t::null: return std::string("None");
    case Json::value_t::boolean: return std::string(v.get<bool>() ? "True" : "False");
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::binary: return py_json_dumps(v);
    case Json::value_t::number_float: {
      double x = v.get<double>();
      if (std::isnan(x)) return std::string("nan");
      if (std::isinf(x)) return std::string(x > 0 ? "inf" : "-inf");
      return py_float_repr(x);
    }
    default:
      return invalid_argument(std::string(what) + ": expected a string, got " + v.type_name());
  }
}

}  // namespace dsv41::chat
