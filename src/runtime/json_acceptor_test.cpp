// The JSON / schema acceptor against nlohmann's parser and the direct schema check, on fresh
// random values and schemas: every valid text it is given is accepted (complete at the end),
// every text it accepts is valid JSON and an instance, every state it reaches can still be
// completed, and hand-picked invalid texts are refused.
#include "runtime/json_acceptor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <queue>
#include <random>
#include <unordered_map>

namespace dsv41 {
namespace {

using nlohmann::json;

// The whole text accepted and complete.
bool accepts(const JsonSchema& s, std::string_view text) {
  JsonAcceptor a(s);
  return a.advance(text) && a.accepting();
}

// A completion of the state exists: a best-first search (fewest open frames first, then fewest
// bytes) over `alphabet`, states merged when equal, at most `max_states` of them.
bool completable(const JsonAcceptor& start, const std::string& alphabet, size_t max_states = 20000) {
  struct Item {
    size_t cost, index;
    bool operator<(const Item& o) const { return cost > o.cost; }
  };
  std::vector<JsonAcceptor> seen{start};
  std::vector<size_t> bytes{0};
  std::unordered_multimap<size_t, size_t> index{{start.hash(), 0}};
  std::priority_queue<Item> queue;
  queue.push({0, 0});
  while (!queue.empty() && seen.size() < max_states) {
    const size_t i = queue.top().index;
    queue.pop();
    if (seen[i].accepting()) return true;
    for (char c : alphabet) {
      JsonAcceptor next = seen[i];
      if (!next.advance(static_cast<uint8_t>(c))) continue;
      const size_t h = next.hash();
      bool dup = false;
      for (auto [it, end] = index.equal_range(h); it != end && !dup; ++it) dup = seen[it->second] == next;
      if (dup) continue;
      index.emplace(h, seen.size());
      queue.push({next.nesting() * 64 + bytes[i] + 1, seen.size()});
      bytes.push_back(bytes[i] + 1);
      seen.push_back(std::move(next));
    }
  }
  return false;
}

// Bytes to search completions with: JSON's structure, a few letters, digits, an escape, a
// two-byte character, and every byte of the schema's text (property names, enum values).
// \x80 and \xa9 between them continue every UTF-8 lead byte (\xed and \xf4 need one below \xa0 or
// \x90, \xe0 and \xf0 one above).
std::string alphabet(const std::string& schema_text = "") {
  std::string a = "{}[]\",:0123456789-+.eEtrufalsn \\uDCdcx_\xc3\xa9\x80" + schema_text;
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

std::string random_plain(std::mt19937& rng, int max_len) {
  static const char* kChars = "abcxyz_01 ";
  std::string s;
  for (int i = static_cast<int>(rng() % static_cast<unsigned>(max_len + 1)); i > 0; --i) s += kChars[rng() % 10];
  return s;
}

// Strings with escapes to write: controls, quotes, backslashes, 2-, 3- and 4-byte UTF-8.
std::string random_text(std::mt19937& rng) {
  static const std::vector<std::string> kPieces = {"a", "Z", " ", "\"", "\\", "/", "\n", "\t", std::string(1, '\x01'),
                                                   "é", "€", "｜", "😀", "{", "]", ",", ":", "0"};
  std::string s;
  for (int i = static_cast<int>(rng() % 8); i > 0; --i) s += kPieces[rng() % kPieces.size()];
  return s;
}

json random_value(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 3 ? 6 : 8)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3: return std::ldexp(static_cast<double>(rng() % 100000) - 50000, static_cast<int>(rng() % 60) - 30);
    case 4:
    case 5: return random_text(rng);
    case 6: {
      json a = json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) o[random_plain(rng, 6)] = random_value(rng, depth + 1);
      return o;
    }
  }
}

// JSON text of v with random whitespace between tokens (dump's indent, or none).
std::string write(const json& v, std::mt19937& rng) {
  const int indent = static_cast<int>(rng() % 3) - 1;  // −1 compact, 0 newlines, 1 indented
  std::string s = v.dump(indent);
  if (rng() % 2) s = " " + s + "\n";
  return s;
}

TEST(JsonAcceptor, AcceptsRandomValidJson) {
  auto any = JsonSchema::any_value();
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = write(random_value(rng, 0), rng);
    ASSERT_TRUE(accepts(*any, text)) << text;
  }
}

TEST(JsonAcceptor, WhatItAcceptsIsValidJsonAndEveryPrefixCompletes) {
  auto any = JsonSchema::any_value();
  std::mt19937 rng(11);
  int accepted_mutants = 0;
  for (int i = 0; i < 1500; ++i) {
    std::string text = write(random_value(rng, 0), rng);
    // One random edit: replace, insert or delete a byte.
    const size_t at = rng() % (text.size() + 1);
    static constexpr char kEdits[] = "{}[]\",:\\ 0-.eEtnu\x01\xc3\xa9\xed";  // and its '\0'
    const char c = kEdits[rng() % sizeof kEdits];
    switch (rng() % 3) {
      case 0: if (at < text.size()) text[at] = c; break;
      case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
      default: if (at < text.size()) text.erase(at, 1);
    }
    JsonAcceptor a(*any);
    size_t fed = 0;
    while (fed < text.size() && a.advance(static_cast<uint8_t>(text[fed]))) ++fed;
    if (fed == text.size() && a.accepting()) {
      ++accepted_mutants;
      EXPECT_TRUE(json::accept(text)) << text;
    }
    // The longest accepted prefix can still be completed (no dead end).
    JsonAcceptor b(*any);
    b.advance(std::string_view(text).substr(0, fed));
    if (i % 10 == 0) {
      EXPECT_TRUE(completable(b, alphabet())) << text.substr(0, fed);
    }
  }
  EXPECT_GT(accepted_mutants, 100);
}

TEST(JsonAcceptor, RefusesInvalidJson) {
  auto any = JsonSchema::any_value();
  for (std::string bad : {"", "{,}", "[1,]", "{\"a\":1,}", "01", "-", "1.", "1e", "1e+", ".5", "+1", "\"\\x\"",
                          "\"a\x01\"", "tru", "nul", "True", "{\"a\" 1}", "{a:1}", "[1 2]", "{}}", "[]]", "\"abc",
                          "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\xc0\x80\"", "\"\xed\xa0\x80\"",
                          "\"\xf5\x80\x80\x80\"", "\"\xe2\x82\"", "\"\x80\"", "{\"a\\u0062\":1}", "[1]x", "nan",
                          "1 2"}) {
    EXPECT_FALSE(accepts(*any, bad)) << bad;
  }
  for (std::string good : {"\"\\ud83d\\ude00\"", "\"\\u0000\"", "-0.5e-7", "0", "[[],{}]", "\"é€😀\""})
    EXPECT_TRUE(accepts(*any, good)) << good;
  // Bounded runs: whitespace and digits.
  EXPECT_FALSE(accepts(*any, std::string(kMaxWhitespace + 1, ' ') + "1"));
  EXPECT_TRUE(accepts(*any, std::string(kMaxWhitespace, ' ') + "1"));
  EXPECT_FALSE(accepts(*any, std::string(kMaxNumberDigits + 1, '1')));
  std::string deep(kMaxNesting + 1, '[');
  EXPECT_FALSE(JsonAcceptor(*any).advance(deep));
}

TEST(JsonAcceptor, ObjectMode) {
  auto obj = JsonSchema::any_object();
  EXPECT_TRUE(accepts(*obj, "{\"a\": [1, {\"b\": null}]}"));
  EXPECT_TRUE(accepts(*obj, " {} "));
  EXPECT_FALSE(accepts(*obj, "[]"));
  EXPECT_FALSE(accepts(*obj, "\"x\""));
  EXPECT_FALSE(accepts(*obj, "1"));
}

std::shared_ptr<const JsonSchema> compile(const std::string& text) {
  auto s = JsonSchema::compile(json::parse(text));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : JsonSchema::any_value();
}

TEST(JsonSchema, RefusesUnsupportedKeywordsNamingThem) {
  for (auto [schema, keyword] : std::vector<std::pair<std::string, std::string>>{
           {R"({"type":"string","pattern":"a+"})", "pattern"},
           {R"({"type":"object","properties":{"a":{"$ref":"#/x"}}})", "$ref"},
           {R"({"oneOf":[{"type":"string"}]})", "oneOf"},
           {R"({"type":"integer","minimum":3})", "minimum"},
           {R"({"type":"string","format":"date"})", "format"},
           {R"({"type":"string","anyOf":[{"type":"string"}]})", "anyOf"}}) {
    auto s = JsonSchema::compile(json::parse(schema));
    ASSERT_FALSE(s.ok()) << schema;
    EXPECT_NE(s.status().message().find("'" + keyword + "'"), std::string::npos) << s.status().message();
  }
  EXPECT_FALSE(JsonSchema::compile(json::parse(R"({"type":"object","properties":{},"required":["a"],"additionalProperties":false})")).ok());
  EXPECT_FALSE(JsonSchema::compile(json::parse(R"({"type":"strin"})")).ok());
  // Lenient (tool parameters): unknown keywords ignored.
  EXPECT_TRUE(JsonSchema::compile(json::parse(R"({"type":"integer","minimum":3})"), true).ok());
}

TEST(JsonSchema, HandPickedInstances) {
  auto s = compile(R"({"type":"object","properties":{
      "name":{"type":"string"},
      "age":{"type":"integer"},
      "tags":{"type":"array","items":{"enum":["a","b",3]}},
      "kind":{"const":"x"},
      "v":{"anyOf":[{"type":"null"},{"type":"object","properties":{"q":{"type":"boolean"}},"required":["q"],"additionalProperties":false}]}},
    "required":["name","age"],"additionalProperties":false})");
  EXPECT_TRUE(accepts(*s, R"({"name":"n","age":3})"));
  EXPECT_TRUE(accepts(*s, R"({ "age" : -3 , "name" : "n" , "tags" : ["a",3,"b"], "kind":"x", "v":{"q":true}})"));
  EXPECT_TRUE(accepts(*s, R"({"name":"n","age":3,"v":null})"));
  EXPECT_FALSE(accepts(*s, R"({"name":"n"})"));                  // required
  EXPECT_FALSE(accepts(*s, R"({"name":"n","age":3.5})"));        // integer
  EXPECT_FALSE(accepts(*s, R"({"name":"n","age":3,"x":1})"));    // additional
  EXPECT_FALSE(accepts(*s, R"({"name":"n","age":3,"age":4})"));  // duplicate
  EXPECT_FALSE(accepts(*s, R"({"name":"n","age":3,"tags":["c"]})"));
  EXPECT_FALSE(accepts(*s, R"({"name":"n","age":3,"kind":"y"})"));
  EXPECT_FALSE(accepts(*s, R"({"name":"n","age":3,"v":{}})"));
  // No dead ends: after every declared key was given, ',' is refused.
  JsonAcceptor a(*s);
  ASSERT_TRUE(a.advance(R"({"name":"n","age":3,"tags":[],"kind":"x","v":null)"));
  EXPECT_FALSE(JsonAcceptor(a).advance(','));
  EXPECT_TRUE(JsonAcceptor(a).advance('}'));
  // Enum of numbers: a prefix of another value.
  auto e = compile(R"({"enum":[1,12,"x"]})");
  EXPECT_TRUE(accepts(*e, "1"));
  EXPECT_TRUE(accepts(*e, "12"));
  EXPECT_FALSE(accepts(*e, "13"));
  EXPECT_FALSE(accepts(*e, "123"));
}

// Arbitrary JSON as a schema (the request body is the client's): compile() answers ok or an
// error, never throws; what compiles gives an acceptor that runs.
TEST(JsonSchema, ArbitraryJsonNeverBreaksTheCompiler) {
  std::mt19937 rng(13);
  static const char* kWords[] = {"type", "properties", "required", "additionalProperties", "items", "enum", "const",
                                 "anyOf", "title", "pattern", "object", "array", "string", "integer", "null"};
  std::function<json(int)> schema_like = [&](int depth) -> json {
    if (depth > 4 || rng() % 4 == 0) return random_value(rng, 3);
    json o = json::object();
    for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
      const char* key = kWords[rng() % 10];
      switch (rng() % 4) {
        case 0: o[key] = kWords[10 + rng() % 5]; break;
        case 1: o[key] = json::array({schema_like(depth + 1), kWords[10 + rng() % 5]}); break;
        case 2: o[key] = json{{random_plain(rng, 3), schema_like(depth + 1)}}; break;
        default: o[key] = schema_like(depth + 1);
      }
    }
    return o;
  };
  int compiled = 0;
  for (int i = 0; i < 3000; ++i) {
    const json s = schema_like(0);
    Result<std::shared_ptr<const JsonSchema>> r = invalid_argument("not run");
    ASSERT_NO_THROW(r = JsonSchema::compile(s)) << s.dump();
    ASSERT_NO_THROW((void)JsonSchema::compile(s, true)) << s.dump();
    if (!r.ok()) continue;
    ++compiled;
    JsonAcceptor a(**r);
    a.advance(write(random_value(rng, 0), rng));
  }
  EXPECT_GT(compiled, 100);
}

// Random schemas of the subset, and values that often match them.
json random_schema(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 2 ? 6 : 9));
  switch (kind) {
    case 0: return json{{"type", "string"}};
    case 1: return json{{"type", rng() % 2 ? "integer" : "number"}};
    case 2: return json{{"type", "boolean"}};
    case 3: return json{{"type", json::array({"string", "null"})}};
    case 4: return json{{"enum", json::array({"a", 1, nullptr, json::array({1})})}};
    case 5: return json::object();  // anything
    case 6: return json{{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
    case 7: return json{{"anyOf", json::array({random_schema(rng, depth + 1), random_schema(rng, depth + 1)})}};
    default: {
      json props = json::object(), req = json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
        const std::string name = std::string(1, static_cast<char>('a' + rng() % 5)) + (rng() % 2 ? "x" : "");
        props[name] = random_schema(rng, depth + 1);
        if (rng() % 2) req.push_back(name);
      }
      json o{{"type", "object"}, {"properties", props}, {"required", req}};
      if (rng() % 2) o["additionalProperties"] = false;
      return o;
    }
  }
}

// A value built from the schema, with random faults (types swapped, keys dropped or added).
json value_for(const json& s, std::mt19937& rng) {
  if (rng() % 12 == 0) return random_value(rng, 3);  // a fault
  if (s.contains("anyOf")) return value_for(s["anyOf"][rng() % 2], rng);
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()];
  if (!s.contains("type")) return random_value(rng, 2);
  const json t = s["type"].is_array() ? s["type"][rng() % 2] : s["type"];
  if (t == "string") return random_text(rng);
  if (t == "integer") return static_cast<int64_t>(rng() % 100);
  if (t == "number") return rng() % 2 ? json(0.25 * (rng() % 9)) : json(static_cast<int64_t>(rng() % 5));
  if (t == "boolean") return true;
  if (t == "null") return nullptr;
  if (t == "array") {
    json a = json::array();
    for (int i = static_cast<int>(rng() % 3); i > 0; --i) a.push_back(value_for(s["items"], rng));
    return a;
  }
  json o = json::object();
  for (const auto& [k, sub] : s["properties"].items())
    if (rng() % 4 != 0) o[k] = value_for(sub, rng);
  if (rng() % 8 == 0) o["zz"] = 1;
  return o;
}

TEST(JsonSchema, RandomSchemasAgreeWithTheDirectCheck) {
  std::mt19937 rng(5);
  int valid = 0, invalid = 0;
  for (int i = 0; i < 400; ++i) {
    const json schema = random_schema(rng, 0);
    auto compiled = JsonSchema::compile(schema);
    ASSERT_TRUE(compiled.ok()) << schema.dump() << ": " << compiled.status().to_string();
    const JsonSchema& s = **compiled;
    for (int k = 0; k < 10; ++k) {
      const json v = value_for(schema, rng);
      const bool expected = schema_accepts(s, s.root(), v);
      // Enum values must be written compactly; otherwise any whitespace.
      const std::string text = v.dump(schema.dump().find("enum") == std::string::npos ? static_cast<int>(rng() % 3) - 1 : -1);
      EXPECT_EQ(accepts(s, text), expected) << "schema " << schema.dump() << "\nvalue " << text;
      (expected ? valid : invalid)++;
      if (k == 0) {
        // A random prefix of the text can always be completed into an instance.
        JsonAcceptor a(s);
        size_t fed = 0;
        const size_t cut = rng() % (text.size() + 1);
        while (fed < cut && a.advance(static_cast<uint8_t>(text[fed]))) ++fed;
        if (fed < cut) a = JsonAcceptor(s), a.advance(std::string_view(text).substr(0, fed));
        EXPECT_TRUE(completable(a, alphabet(schema.dump()))) << schema.dump() << " after " << text.substr(0, fed);
      }
    }
  }
  EXPECT_GT(valid, 1000);
  EXPECT_GT(invalid, 200);
}

}  // namespace
}  // namespace dsv41
