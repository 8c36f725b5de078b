// The JSON Schema subset of constrained decoding (see json_schema.h).
#include "runtime/json_schema.h"

#include <set>

namespace dsv41 {

using nlohmann::json;

namespace {

bool is_annotation(const std::string& k) {
  static const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema",
                                                     "$comment", "$id", "strict"};
  return kAnnotations.count(k) != 0;
}

// Keys are matched byte for byte without escapes, so a name that JSON must escape cannot be
// produced.
bool plain_name(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == '"' || c == '\\') return false;
  return true;
}

bool type_matches(uint8_t types, const json& v) {
  switch (v.type()) {
    case json::value_t::object: return types & kJsonObject;
    case json::value_t::array: return types & kJsonArray;
    case json::value_t::string: return types & kJsonString;
    case json::value_t::boolean: return types & kJsonBoolean;
    case json::value_t::null: return types & kJsonNull;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return types & (kJsonNumber | kJsonInteger);
    case json::value_t::number_float: return types & kJsonNumber;
    default: return false;
  }
}

}  // namespace

class SchemaCompiler {
 public:
  SchemaCompiler(JsonSchema* out, bool lenient) : out_(out), lenient_(lenient) {}

  Result<int32_t> compile(const json& s, const std::string& where, int depth) {
    if (depth > kMaxSchemaDepth)
      return invalid_argument(where + ": schema nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (out_->nodes_.size() >= static_cast<size_t>(kMaxSchemaNodes))
      return invalid_argument(where + ": schema has more than " + std::to_string(kMaxSchemaNodes) + " nodes");
    if (s.is_boolean()) {
      if (s.get<bool>()) return 0;
      return refuse(where, "false", "the schema false (nothing matches) is not supported");
    }
    if (!s.is_object()) return invalid_argument(where + ": a schema must be an object");
    SchemaNode n;
    bool constrained = false;
    for (const auto& [k, v] : s.items()) {
      if (is_annotation(k) || k == "type" || k == "properties" || k == "required" || k == "additionalProperties" ||
          k == "items" || k == "enum" || k == "const" || k == "anyOf")
        continue;
      if (!lenient_) return refuse(where, k, "not in the supported subset (docs/SERVER.md)");
    }
    if (const auto t = s.find("type"); t != s.end()) {
      n.types = 0;
      std::vector<json> names = t->is_array() ? t->get<std::vector<json>>() : std::vector<json>{*t};
      for (const json& name : names) {
        const std::string nm = name.is_string() ? name.get<std::string>() : "";
        if (nm == "object") n.types |= kJsonObject;
        else if (nm == "array") n.types |= kJsonArray;
        else if (nm == "string") n.types |= kJsonString;
        else if (nm == "number") n.types |= kJsonNumber;
        else if (nm == "integer") n.types |= kJsonInteger;
        else if (nm == "boolean") n.types |= kJsonBoolean;
        else if (nm == "null") n.types |= kJsonNull;
        else return invalid_argument(where + ".type: unknown type " + name.dump());
      }
      if (n.types & kJsonNumber) n.types &= static_cast<uint8_t>(~kJsonInteger);
      if (n.types == 0) return invalid_argument(where + ".type: an empty list of types");
      constrained = true;
    }
    const bool object_words = s.contains("properties") || s.contains("required") || s.contains("additionalProperties");
    if (!s.contains("type") && object_words) n.types = kJsonObject;   // properties imply an object
    else if (!s.contains("type") && s.contains("items")) n.types = kJsonArray;
    const int32_t self = static_cast<int32_t>(out_->nodes_.size());
    out_->nodes_.emplace_back();  // reserved; children come after
    if (const auto a = s.find("anyOf"); a != s.end()) {
      if (!a->is_array() || a->empty()) return invalid_argument(where + ".anyOf: expected a non-empty list of schemas");
      if ((constrained || object_words || s.contains("items") || s.contains("enum") || s.contains("const")) && !lenient_)
        return refuse(where, "anyOf", "anyOf beside type, properties, items, enum or const is not supported");
      for (size_t i = 0; i < a->size(); ++i) {
        DSV41_ASSIGN_OR_RETURN(int32_t c, compile((*a)[i], where + ".anyOf[" + std::to_string(i) + "]", depth + 1));
        n.any_of.push_back(c);
      }
      n.types = kJsonAny;
      out_->nodes_[static_cast<size_t>(self)] = std::move(n);
      return self;
    }
    if (object_words) DSV41_RETURN_IF_ERROR(object(s, where, depth, &n));
    if (const auto it = s.find("items"); it != s.end()) {
      DSV41_ASSIGN_OR_RETURN(n.items, compile(*it, where + ".items", depth + 1));
    }
    if (s.contains("enum") || s.contains("const")) {
      std::vector<json> values;
      if (const auto e = s.find("enum"); e != s.end()) {
        if (!e->is_array() || e->empty()) return invalid_argument(where + ".enum: expected a non-empty list");
        values = e->get<std::vector<json>>();
      }
      if (const auto c = s.find("const"); c != s.end()) {
        if (s.contains("enum")) {
          std::erase_if(values, [&](const json& v) { return v != *c; });
        } else {
          values = {*c};
        }
      }
      n.has_literals = true;
      for (const json& v : values)
        if (type_matches(n.types, v) && !(v.is_number_float() && !(n.types & kJsonNumber))) n.literals.push_back(v.dump());
      if (n.literals.empty()) return invalid_argument(where + ": no value of enum/const matches the schema's type");
      if (n.literals.size() > 64) {
        if (!lenient_) return refuse(where, "enum", "more than 64 enum values are not supported");
        n.has_literals = false;
        n.literals.clear();
      }
    }
    out_->nodes_[static_cast<size_t>(self)] = std::move(n);
    return self;
  }

 private:
  Status object(const json& s, const std::string& where, int depth, SchemaNode* n) {
    if (const auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return invalid_argument(where + ".properties: expected an object");
      for (const auto& [name, sub] : p->items()) {
        if (!plain_name(name)) {
          if (lenient_) continue;
          return refuse(where + ".properties", name, "property names with quotes, backslashes or control characters are not supported");
        }
        DSV41_ASSIGN_OR_RETURN(int32_t c, compile(sub, where + ".properties." + name, depth + 1));
        n->property_names.push_back(name);
        n->property_nodes.push_back(c);
      }
    }
    n->additional = 0;
    if (const auto a = s.find("additionalProperties"); a != s.end()) {
      if (a->is_boolean() && !a->get<bool>()) {
        n->additional = -1;
      } else {
        DSV41_ASSIGN_OR_RETURN(n->additional, compile(*a, where + ".additionalProperties", depth + 1));
      }
    }
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return invalid_argument(where + ".required: expected a list of names");
      for (const json& name : *r) {
        if (!name.is_string()) return invalid_argument(where + ".required: expected a list of names");
        const std::string nm = name.get<std::string>();
        size_t i = 0;
        while (i < n->property_names.size() && n->property_names[i] != nm) ++i;
        if (i == n->property_names.size()) {
          if (n->additional < 0)
            return invalid_argument(where + ".required: '" + nm + "' is not in properties and additionalProperties is false");
          if (!plain_name(nm)) return refuse(where + ".required", nm, "property names with quotes, backslashes or control characters are not supported");
          n->property_names.push_back(nm);
          n->property_nodes.push_back(n->additional);
        }
        if (i < 64) n->required |= uint64_t{1} << i;
      }
    }
    if (n->property_names.size() > 64) {
      if (!lenient_) return refuse(where, "properties", "more than 64 properties in one object are not supported");
      n->property_names.clear();
      n->property_nodes.clear();
      n->required = 0;
      n->additional = 0;
    }
    return ok_status();
  }

  Status refuse(const std::string& where, const std::string& keyword, const std::string& why) {
    return unsupported("response_format: " + where + ": " + why + " (keyword '" + keyword + "')");
  }

  JsonSchema* out_;
  bool lenient_;
};

Result<std::shared_ptr<const JsonSchema>> JsonSchema::compile(const json& schema, bool lenient) {
  auto out = std::make_shared<JsonSchema>();
  out->nodes_.emplace_back();  // node 0: any value
  SchemaCompiler c(out.get(), lenient);
  DSV41_ASSIGN_OR_RETURN(out->root_, c.compile(schema, "schema", 0));
  return std::shared_ptr<const JsonSchema>(std::move(out));
}

std::shared_ptr<const JsonSchema> JsonSchema::any_object() {
  auto out = std::make_shared<JsonSchema>();
  out->nodes_.emplace_back();
  SchemaNode obj;
  obj.types = kJsonObject;
  out->nodes_.push_back(obj);
  out->root_ = 1;
  return out;
}

std::shared_ptr<const JsonSchema> JsonSchema::any_value() {
  auto out = std::make_shared<JsonSchema>();
  out->nodes_.emplace_back();
  return out;
}

bool schema_accepts(const JsonSchema& schema, int32_t node, const json& v) {
  const SchemaNode& n = schema.node(node);
  if (!n.any_of.empty()) {
    for (int32_t c : n.any_of)
      if (schema_accepts(schema, c, v)) return true;
    return false;
  }
  if (!type_matches(n.types, v)) return false;
  if (v.is_number_float() && !(n.types & kJsonNumber)) return false;
  if (n.has_literals) {
    bool found = false;
    for (const std::string& lit : n.literals) found = found || json::parse(lit) == v;
    if (!found) return false;
  }
  if (v.is_object()) {
    uint64_t seen = 0;
    for (const auto& [k, sub] : v.items()) {
      size_t i = 0;
      while (i < n.property_names.size() && n.property_names[i] != k) ++i;
      if (i < n.property_names.size()) {
        if (!schema_accepts(schema, n.property_nodes[i], sub)) return false;
        seen |= uint64_t{1} << i;
      } else if (n.additional < 0 || !schema_accepts(schema, n.additional, sub)) {
        return false;
      }
    }
    if ((seen & n.required) != n.required) return false;
  }
  if (v.is_array())
    for (const json& e : v)
      if (!schema_accepts(schema, n.items, e)) return false;
  return true;
}

}  // namespace dsv41
