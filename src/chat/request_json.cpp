// JSON <-> chat request types (see request_json.h). Mirrors how the reference encoder reads
// each field (Python dict access) so that rendering stays byte-exact; types it would only
// format by accident (a number as content, a list as a tool name) are refused with an error.
#include "src/chat/request_json.h"

#include <nlohmann/json.hpp>

namespace dsv41::chat {
namespace {

const Json* find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Result<std::string> optional_string(const Json& obj, const char* key, const std::string& where) {
  const Json* v = find(obj, key);
  if (!v || v->is_null()) return std::string();
  if (!v->is_string()) return invalid_argument(where + "." + key + ": expected a string, got " + v->type_name());
  return v->get<std::string>();
}

Result<bool> optional_bool(const Json& obj, const char* key, bool fallback, const std::string& where) {
  const Json* v = find(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return invalid_argument(where + "." + key + ": expected true or false, got " + v->type_name());
  return v->get<bool>();
}

Result<ContentPart> part_from_json(const Json& p, const std::string& where);

Result<std::vector<ContentPart>> parts_from_json(const Json& list, const std::string& where) {
  std::vector<ContentPart> parts;
  for (size_t i = 0; i < list.size(); ++i) {
    DSV41_ASSIGN_OR_RETURN(ContentPart part, part_from_json(list[i], where + "[" + std::to_string(i) + "]"));
    parts.push_back(std::move(part));
  }
  return parts;
}

Result<ContentPart> part_from_json(const Json& p, const std::string& where) {
  ContentPart part;
  if (!p.is_object()) {
    part.kind = ContentPart::Kind::kNotObject;
    return part;
  }
  const Json* type = find(p, "type");
  std::string type_str = type && type->is_string() ? type->get<std::string>() : std::string();
  if (type_str == "text") {
    part.kind = ContentPart::Kind::kText;
    const Json* t = find(p, "text");
    if (t && t->is_null()) {
      part.text_null = true;
    } else if (t) {
      if (!t->is_string()) return invalid_argument(where + ".text: expected a string, got " + t->type_name());
      part.text = t->get<std::string>();
    }
    return part;
  }
  if (type_str == "image_url" || type_str == "image") {
    part.kind = ContentPart::Kind::kImage;
    Json record = Json::object();
    record["type"] = "image";
    if (type_str == "image_url") {
      const Json* iu = find(p, "image_url");
      Json url = "";
      if (iu && iu->is_string()) {
        url = *iu;
      } else if (iu && iu->is_object()) {
        if (const Json* u = find(*iu, "url")) url = *u;
      } else if (iu && py_truthy(*iu)) {
        return invalid_argument(where + ".image_url: expected a string or an object with \"url\", got " +
                                std::string(iu->type_name()));
      }
      part.image.has_source = py_truthy(url);
      record["url"] = std::move(url);
    } else {
      for (const char* key : {"source", "url", "data"}) {
        if (const Json* v = find(p, key)) {
          part.image.has_source = part.image.has_source || py_truthy(*v);
          record[key] = *v;
        }
      }
    }
    part.image.json = py_json_dumps(record);
    return part;
  }
  if (type_str == "tool_result") {
    part.kind = ContentPart::Kind::kToolResult;
    DSV41_ASSIGN_OR_RETURN(part.tool_use_id, optional_string(p, "tool_use_id", where));
    const Json* c = find(p, "content");
    if (!c) {
      part.result_text = "";
    } else if (c->is_array()) {
      part.result_is_list = true;
      DSV41_ASSIGN_OR_RETURN(part.nested, parts_from_json(*c, where + ".content"));
    } else {
      DSV41_ASSIGN_OR_RETURN(part.result_text, py_str(*c, where + ".content"));
    }
    return part;
  }
  part.kind = ContentPart::Kind::kOther;
  if (!type) {
    part.type_name = "None";
  } else {
    DSV41_ASSIGN_OR_RETURN(part.type_name, py_str(*type, where + ".type"));
  }
  return part;
}

Result<Content> content_from_json(const Json& m, const std::string& where) {
  Content c;
  const Json* v = find(m, "content");
  if (!v) return c;  // kMissing
  if (v->is_null()) {
    c.kind = Content::Kind::kNull;
  } else if (v->is_string()) {
    c.kind = Content::Kind::kString;
    c.text = v->get<std::string>();
  } else if (v->is_array()) {
    c.kind = Content::Kind::kParts;
    DSV41_ASSIGN_OR_RETURN(c.parts, parts_from_json(*v, where + ".content"));
  } else {
    return invalid_argument(where + ".content: expected a string, a list of parts or null, got " +
                            std::string(v->type_name()));
  }
  return c;
}

Result<Role> role_from_json(const Json& m, const std::string& where) {
  const Json* r = find(m, "role");
  if (!r) return invalid_argument(where + ".role: missing");
  if (!r->is_string()) return invalid_argument(where + ".role: expected a string, got " + std::string(r->type_name()));
  const std::string& s = r->get_ref<const std::string&>();
  if (s == "system") return Role::kSystem;
  if (s == "user") return Role::kUser;
  if (s == "assistant") return Role::kAssistant;
  if (s == "tool") return Role::kTool;
  if (s == "developer") return Role::kDeveloper;
  if (s == "latest_reminder") return Role::kLatestReminder;
  return invalid_argument(where + ".role: unknown role '" + s +
                          "' (system, user, assistant, tool, developer or latest_reminder)");
}

Result<std::vector<Tool>> tools_from_json(const Json& m, const std::string& where) {
  std::vector<Tool> tools;
  const Json* v = find(m, "tools");
  if (!v || v->is_null()) return tools;
  if (!v->is_array()) return invalid_argument(where + ".tools: expected a list, got " + std::string(v->type_name()));
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& t = (*v)[i];
    std::string w = where + ".tools[" + std::to_string(i) + "]";
    const Json* fn = t.is_object() ? find(t, "function") : nullptr;
    if (!fn) return invalid_argument(w + ": expected an object with a \"function\" key");
    Tool tool;
    if (fn->is_object()) {
      if (const Json* n = find(*fn, "name"); n && n->is_string()) tool.name = n->get<std::string>();
    }
    tool.function_json = py_json_dumps(*fn);
    tools.push_back(std::move(tool));
  }
  return tools;
}

Result<std::vector<ToolCall>> tool_calls_from_json(const Json& m, const std::string& where) {
  std::vector<ToolCall> calls;
  const Json* v = find(m, "tool_calls");
  if (!v || v->is_null()) return calls;
  if (!v->is_array())
    return invalid_argument(where + ".tool_calls: expected a list, got " + std::string(v->type_name()));
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& tc = (*v)[i];
    std::string w = where + ".tool_calls[" + std::to_string(i) + "]";
    const Json* fn = tc.is_object() ? find(tc, "function") : nullptr;
    if (!fn || !fn->is_object()) return invalid_argument(w + ": expected an object with a \"function\" object");
    ToolCall call;
    const Json* name = find(*fn, "name");
    if (!name || !name->is_string()) return invalid_argument(w + ".function.name: expected a string");
    call.name = name->get<std::string>();
    const Json* args = find(*fn, "arguments");
    if (!args) return invalid_argument(w + ".function.arguments: missing");
    call.arguments = args->is_string() ? args->get<std::string>() : py_json_dumps(*args);
    // The reference takes `id`, else `function.id`, whichever is non-empty.
    for (const Json* id : {find(tc, "id"), find(*fn, "id")}) {
      if (id && id->is_string() && !id->get_ref<const std::string&>().empty()) {
        call.id = id->get<std::string>();
        break;
      }
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace

Result<Message> message_from_json(const Json& m, const std::string& where) {
  if (!m.is_object()) return invalid_argument(where + ": expected an object, got " + std::string(m.type_name()));
  Message msg;
  DSV41_ASSIGN_OR_RETURN(msg.role, role_from_json(m, where));
  DSV41_ASSIGN_OR_RETURN(msg.content, content_from_json(m, where));
  if (const Json* rc = find(m, "reasoning_content"); rc && !rc->is_null()) {
    if (!rc->is_string()) return invalid_argument(where + ".reasoning_content: expected a string or null");
    msg.reasoning_content = rc->get<std::string>();
  }
  if (msg.role == Role::kAssistant) {
    DSV41_ASSIGN_OR_RETURN(msg.tool_calls, tool_calls_from_json(m, where));
  }
  DSV41_ASSIGN_OR_RETURN(msg.tool_call_id, optional_string(m, "tool_call_id", where));
  DSV41_ASSIGN_OR_RETURN(msg.tools, tools_from_json(m, where));
  if (const Json* rf = find(m, "response_format"); rf && py_truthy(*rf)) msg.response_format = py_json_dumps(*rf);
  if (const Json* t = find(m, "task"); t && !t->is_null()) {
    if (!t->is_string()) return invalid_argument(where + ".task: expected a task name, got " + std::string(t->type_name()));
    msg.task = t->get<std::string>();
  }
  if (const Json* w = find(m, "wo_eos")) msg.wo_eos = py_truthy(*w);
  return msg;
}

Result<ThinkingMode> thinking_mode_from_json(const Json& v) {
  if (v.is_string()) {
    if (v.get_ref<const std::string&>() == "chat") return ThinkingMode::kChat;
    if (v.get_ref<const std::string&>() == "thinking") return ThinkingMode::kThinking;
  }
  return invalid_argument("thinking_mode: expected \"chat\" or \"thinking\", got " + py_json_dumps(v));
}

Result<RenderRequest> render_request_from_json(const Json& input) {
  if (!input.is_object()) return invalid_argument("request: expected a JSON object");
  RenderRequest req;
  const Json* messages = find(input, "messages");
  if (!messages || !messages->is_array()) return invalid_argument("messages: expected a list of messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    DSV41_ASSIGN_OR_RETURN(Message m, message_from_json((*messages)[i], "messages[" + std::to_string(i) + "]"));
    req.messages.push_back(std::move(m));
  }
  if (const Json* ctx = find(input, "context"); ctx && !ctx->is_null()) {
    if (!ctx->is_array()) return invalid_argument("context: expected a list of messages");
    for (size_t i = 0; i < ctx->size(); ++i) {
      DSV41_ASSIGN_OR_RETURN(Message m, message_from_json((*ctx)[i], "context[" + std::to_string(i) + "]"));
      req.context.push_back(std::move(m));
    }
  }
  const Json* mode = find(input, "thinking_mode");
  if (!mode) return invalid_argument("thinking_mode: missing (\"chat\" or \"thinking\")");
  DSV41_ASSIGN_OR_RETURN(req.thinking_mode, thinking_mode_from_json(*mode));
  if (const Json* e = find(input, "reasoning_effort"); e && !e->is_null()) {
    if (e->is_number_integer()) {
      // Out-of-range values are kept so resolve_reasoning_effort reports them.
      req.reasoning_effort = e->is_number_unsigned() && e->get<uint64_t>() > 1000
                                 ? ReasoningEffort::integer(1001)
                                 : ReasoningEffort::integer(e->get<int64_t>());
    } else if (is_big_integer(*e)) {
      req.reasoning_effort = ReasoningEffort::integer(1001);
    } else if (e->is_string()) {
      req.reasoning_effort = ReasoningEffort::named(e->get<std::string>());
    } else {
      return invalid_argument("reasoning_effort: expected null, an integer 1..100 or a tier name, got " +
                              py_json_dumps(*e));
    }
  }
  DSV41_ASSIGN_OR_RETURN(req.drop_thinking, optional_bool(input, "drop_thinking", true, "request"));
  DSV41_ASSIGN_OR_RETURN(req.add_default_bos_token, optional_bool(input, "add_default_bos_token", true, "request"));
  return req;
}

Result<RenderRequest> render_request_from_text(std::string_view json_text) {
  DSV41_ASSIGN_OR_RETURN(Json j, parse_json_ordered(json_text, "request"));
  return render_request_from_json(j);
}

Result<ParseRequest> parse_request_from_json(const Json& input) {
  if (!input.is_object()) return invalid_argument("request: expected a JSON object");
  ParseRequest req;
  const Json* c = find(input, "completion");
  if (!c || !c->is_string()) return invalid_argument("completion: expected a string");
  req.completion = c->get<std::string>();
  const Json* mode = find(input, "thinking_mode");
  if (!mode) return invalid_argument("thinking_mode: missing (\"chat\" or \"thinking\")");
  DSV41_ASSIGN_OR_RETURN(req.thinking_mode, thinking_mode_from_json(*mode));
  return req;
}

Result<ParseRequest> parse_request_from_text(std::string_view json_text) {
  DSV41_ASSIGN_OR_RETURN(Json j, parse_json_ordered(json_text, "request"));
  return parse_request_from_json(j);
}

Json parsed_message_to_json(const ParsedMessage& m) {
  Json out = Json::object();
  out["role"] = "assistant";
  out["content"] = m.content;
  out["reasoning_content"] = m.reasoning_content;
  out["tool_calls"] = Json::array();
  for (const auto& tc : m.tool_calls) {
    Json fn = Json::object();
    fn["name"] = tc.name;
    fn["arguments"] = tc.arguments;
    Json call = Json::object();
    call["type"] = "function";
    call["function"] = std::move(fn);
    out["tool_calls"].push_back(std::move(call));
  }
  return out;
}

Json render_result_to_json(const RenderResult& r, const std::vector<int32_t>* ids) {
  Json out = Json::object();
  out["prompt"] = r.prompt;
  out["images"] = Json::array();
  for (const auto& img : r.images) {
    auto rec = parse_json_ordered(img.json, "image record");
    out["images"].push_back(rec.ok() ? rec.value() : Json(img.json));
  }
  if (ids) out["ids"] = *ids;
  return out;
}

Json error_to_json(const Status& s) {
  Json err = Json::object();
  err["message"] = s.to_string();
  Json out = Json::object();
  out["error"] = std::move(err);
  return out;
}

}  // namespace dsv41::chat
