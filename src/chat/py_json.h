// JSON exactly as the reference encoder writes and reads it (golden encoding README, "Tools
// block"): Python's json.loads keeps key order (a repeated key keeps its first position and
// its last value) and integers of any size; json.dumps(obj, ensure_ascii=False) writes
// separators ", " and ": ", non-ASCII raw, escapes only '"', '\\' and characters below
// U+0020, and floats in repr() form (shortest round-trip: 100.0, 1e-07, 1.5e+300).
// Every byte of a rendered tool schema or non-string tool argument goes through here.
// Owns nothing; nlohmann exceptions are caught inside and returned as Status.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "src/base/status.h"

namespace dsv41::chat {

using Json = nlohmann::ordered_json;

// Parses `text` keeping key order. Integers beyond 64 bits are kept as their exact digits
// (stored as a tagged binary value that py_json_dumps writes back verbatim). `what` names
// the field for the error message.
Result<Json> parse_json_ordered(std::string_view text, std::string_view what);

// json.dumps(v, ensure_ascii=False). Invalid UTF-8 inside strings is written as U+FFFD.
std::string py_json_dumps(const Json& v);
// json.dumps(s, ensure_ascii=False) for one string (quotes included).
std::string py_json_string(std::string_view s);
// repr(float) as json.dumps writes it (Infinity / -Infinity / NaN for the non-finite).
std::string py_float_repr(double x);
// Python truthiness: null, false, 0, 0.0, "", [], {} are false.
bool py_truthy(const Json& v);
// str(v) for the scalar values the reference formats into text (string raw, null "None",
// true/false "True"/"False", numbers as Python prints them); other types are an error.
Result<std::string> py_str(const Json& v, std::string_view what);
// True when v is an integer too large for 64 bits (kept as digits).
bool is_big_integer(const Json& v);

}  // namespace dsv41::chat
