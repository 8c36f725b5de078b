// A JSON Schema subset compiled for constrained decoding (runtime/json_acceptor.h): the
// response_format of the server (issue 12) and the parameters of forced tool calls.
//
// Supported keywords (nested to any depth up to kMaxSchemaDepth):
//   type        "object" | "array" | "string" | "number" | "integer" | "boolean" | "null", or a
//               list of them (a union)
//   properties  name -> schema (at most 64 per object); required (names); additionalProperties
//               true | false | schema (default true: other keys take any JSON value)
//   items       schema of every element (default: any JSON value)
//   enum, const the value is one of the given JSON values, written as its compact JSON text
//               (at most 64 values; with "type", values of other types are dropped)
//   anyOf       one of the schemas (alone: no other constraining keyword beside it)
//   title, description, default, examples, $schema, $comment, $id, strict: annotations, ignored
// Anything else ($ref, pattern, minimum, format, oneOf...) is refused by compile(), naming the
// keyword and where it was found, unless `lenient` (tool parameter schemas: the constraint is
// then looser than the schema, never stricter).
// A schema node without "type", "enum" or "anyOf" accepts any JSON value. Owns its nodes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace dsv41 {

inline constexpr int kMaxSchemaDepth = 32;
inline constexpr int kMaxSchemaNodes = 4096;

// Bit per JSON type.
enum JsonType : uint8_t {
  kJsonObject = 1,
  kJsonArray = 2,
  kJsonString = 4,
  kJsonNumber = 8,   // any number (integers included)
  kJsonInteger = 16, // a number without fraction or exponent
  kJsonBoolean = 32,
  kJsonNull = 64,
  kJsonAny = 127,
};

struct SchemaNode {
  uint8_t types = kJsonAny;
  // Object.
  std::vector<std::string> property_names;  // as written (keys are matched without escapes)
  std::vector<int32_t> property_nodes;
  uint64_t required = 0;  // bit i: property_names[i] is required
  int32_t additional = 0; // node for other keys, or −1: no other keys
  // Array.
  int32_t items = 0;
  // enum / const: the compact JSON texts the value must be (empty: no such restriction).
  bool has_literals = false;
  std::vector<std::string> literals;
  // anyOf (non-empty: this node is one of these and nothing else).
  std::vector<int32_t> any_of;
};

class JsonSchema {
 public:
  // Node 0 accepts any JSON value; the root is root().
  static Result<std::shared_ptr<const JsonSchema>> compile(const nlohmann::json& schema, bool lenient = false);
  // {"type": "object"} with any members: response_format json_object.
  static std::shared_ptr<const JsonSchema> any_object();
  // Any JSON value.
  static std::shared_ptr<const JsonSchema> any_value();

  const SchemaNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }
  size_t size() const { return nodes_.size(); }

 private:
  friend class SchemaCompiler;
  std::vector<SchemaNode> nodes_;
  int32_t root_ = 0;
};

// Whether `value` is an instance of node `node` of `schema` (the slow, direct check the
// acceptor is tested against; enum/const compare JSON values, not texts).
bool schema_accepts(const JsonSchema& schema, int32_t node, const nlohmann::json& value);

}  // namespace dsv41
