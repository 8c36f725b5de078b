// OpenAI request parsing (see openai_request.h). Field names, ranges and defaults follow the
// OpenAI API reference; the V4.1 extensions (thinking, reasoning_effort as an integer,
// chat_template_kwargs.thinking) are documented in docs/SERVER.md.
#include "server/openai_request.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "chat/request_json.h"

namespace dsv41::server {
namespace {

using chat::Json;

constexpr int64_t kMaxTokens = int64_t{1} << 40;  // bounds max_tokens and budget_tokens (the context bounds them later)

const Json* find(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> unknown_fields(const Json& body, const std::set<std::string>& known, const std::string& where) {
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!known.count(it.key()))
      return bad_field(where + it.key(), "Unrecognized request argument supplied: " + where + it.key(),
                       "unknown_parameter");
  return std::nullopt;
}

std::optional<ApiError> number_in(const Json& body, const char* key, double lo, double hi, bool lo_open, float* out) {
  const Json* v = find(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    return bad_field(key, std::string(key) + ": expected a number, got " + v->type_name(), "invalid_type");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
    return bad_field(key, std::string(key) + ": " + v->dump() + " is outside " + (lo_open ? "(" : "[") +
                              nlohmann::json(lo).dump() + ", " + nlohmann::json(hi).dump() + "]");
  *out = static_cast<float>(x);
  return std::nullopt;
}

std::optional<ApiError> integer_in(const Json& body, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  const Json* v = find(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer())
    return bad_field(key, std::string(key) + ": expected an integer, got " + v->dump(), "invalid_type");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    return bad_field(key, std::string(key) + ": " + v->dump() + " is outside " + std::to_string(lo) + ".." +
                              std::to_string(hi));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    return bad_field(key, std::string(key) + ": " + std::to_string(x) + " is outside " + std::to_string(lo) + ".." +
                              std::to_string(hi));
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> boolean(const Json& body, const char* key, bool* out) {
  const Json* v = find(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return bad_field(key, std::string(key) + ": expected true or false, got " + v->dump(), "invalid_type");
  *out = v->get<bool>();
  return std::nullopt;
}

#define DSV41_TRY(expr)                      \
  do {                                       \
    if (auto e_ = (expr)) return std::move(*e_); \
  } while (0)

// model, max_tokens, sampling, n, stop, logprobs, logit_bias, stream; `chat` picks the
// logprobs shape (chat: bool + top_logprobs; completions: an integer).
std::optional<ApiError> generation_fields(const Json& body, bool chat, const ParseOptions& o, GenerationFields* g) {
  const Json* model = find(body, "model");
  if (!model) return bad_field("model", "model: missing (GET /v1/models lists the served model)", "missing_required_parameter");
  if (!model->is_string()) return bad_field("model", "model: expected a string", "invalid_type");
  g->model = model->get<std::string>();
  if (chat && find(body, "max_completion_tokens")) {
    DSV41_TRY(integer_in(body, "max_completion_tokens", 1, kMaxTokens, &g->max_tokens));
  } else {
    DSV41_TRY(integer_in(body, "max_tokens", 1, kMaxTokens, &g->max_tokens));
  }
  g->sampling.temperature = 1.0f;
  DSV41_TRY(number_in(body, "temperature", 0, 2, false, &g->sampling.temperature));
  DSV41_TRY(number_in(body, "top_p", 0, 1, true, &g->sampling.top_p));
  DSV41_TRY(number_in(body, "min_p", 0, 1, false, &g->sampling.min_p));
  int64_t top_k = 0;
  DSV41_TRY(integer_in(body, "top_k", -1, int64_t{1} << 30, &top_k));
  g->sampling.top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // −1 = off, as in vLLM
  if (const Json* seed = find(body, "seed")) {
    if (!seed->is_number_integer()) return bad_field("seed", "seed: expected an integer", "invalid_type");
    g->sampling.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
    g->seeded = true;
  }
  int64_t n = 1;
  DSV41_TRY(integer_in(body, "n", 1, o.max_n, &n));
  g->n = static_cast<int>(n);
  if (const Json* stop = find(body, "stop")) {
    if (stop->is_string()) {
      g->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && stop->size() <= 4) {
      for (const Json& s : *stop) {
        if (!s.is_string()) return bad_field("stop", "stop: expected strings", "invalid_type");
        g->stop.push_back(s.get<std::string>());
      }
    } else {
      return bad_field("stop", "stop: expected a string or a list of at most 4 strings");
    }
    for (const auto& s : g->stop)
      if (s.empty()) return bad_field("stop", "stop: empty stop strings are not allowed");
  }
  if (chat) {
    bool logprobs = false;
    DSV41_TRY(boolean(body, "logprobs", &logprobs));
    int64_t top = 0;
    DSV41_TRY(integer_in(body, "top_logprobs", 0, 20, &top));
    if (find(body, "top_logprobs") && !logprobs)
      return bad_field("top_logprobs", "top_logprobs: needs \"logprobs\": true");
    g->top_logprobs = logprobs ? static_cast<int>(top) : -1;
  } else if (find(body, "logprobs")) {
    int64_t k = 0;
    DSV41_TRY(integer_in(body, "logprobs", 0, 5, &k));
    g->top_logprobs = static_cast<int>(k);
  }
  if (const Json* bias = find(body, "logit_bias")) {
    if (!bias->is_object()) return bad_field("logit_bias", "logit_bias: expected an object {\"token id\": bias}", "invalid_type");
    for (auto it = bias->begin(); it != bias->end(); ++it) {
      const std::string& key = it.key();
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
        return bad_field("logit_bias", "logit_bias: key '" + key + "' is not a token id");
      if (!it->is_number() || !std::isfinite(it->get<double>()) || std::fabs(it->get<double>()) > 100)
        return bad_field("logit_bias", "logit_bias[" + key + "]: expected a number in [-100, 100]");
      g->sampling.logit_bias.emplace_back(static_cast<int32_t>(id), it->get<float>());
    }
  }
  DSV41_TRY(boolean(body, "stream", &g->stream));
  if (const Json* so = find(body, "stream_options")) {
    if (!so->is_object()) return bad_field("stream_options", "stream_options: expected an object", "invalid_type");
    if (!g->stream) return bad_field("stream_options", "stream_options: only allowed with \"stream\": true");
    DSV41_TRY(unknown_fields(*so, {"include_usage", "continuous_usage_stats"}, "stream_options."));
    if (const Json* iu = find(*so, "include_usage")) {
      if (!iu->is_boolean()) return bad_field("stream_options.include_usage", "stream_options.include_usage: expected true or false");
      g->include_usage = iu->get<bool>();
    }
    if (const Json* cu = find(*so, "continuous_usage_stats")) {
      if (!cu->is_boolean())
        return bad_field("stream_options.continuous_usage_stats", "stream_options.continuous_usage_stats: expected true or false",
                         "invalid_type");
      g->continuous_usage = cu->get<bool>();
      if (g->continuous_usage && !g->include_usage)
        return bad_field("stream_options.continuous_usage_stats",
                         "stream_options.continuous_usage_stats: needs \"include_usage\": true (the usage goes on the chunks it makes carry one)");
    }
  }
  if (const Json* ext = find(body, "dsv41")) {
    if (!ext->is_object()) return bad_field("dsv41", "dsv41: expected an object", "invalid_type");
    DSV41_TRY(unknown_fields(*ext, {"telemetry"}, "dsv41."));
    if (const Json* t = find(*ext, "telemetry")) {
      if (!t->is_boolean()) return bad_field("dsv41.telemetry", "dsv41.telemetry: expected true or false", "invalid_type");
      g->telemetry = t->get<bool>();
    }
  }
  DSV41_TRY(number_in(body, "presence_penalty", -2, 2, false, &g->sampling.presence_penalty));
  DSV41_TRY(number_in(body, "frequency_penalty", -2, 2, false, &g->sampling.frequency_penalty));
  // vLLM's extension: the prompt's and the output's tokens, each once, logit / p if positive, · p
  // if not (runtime/sampling.h); 1 = off.
  DSV41_TRY(number_in(body, "repetition_penalty", 0, 10, true, &g->sampling.repetition_penalty));
  return std::nullopt;
}

// thinking.budget_tokens (with "type": "enabled"): at most that many reasoning tokens, then
// "</think>" is forced (runtime/thinking_budget.h).
std::optional<ApiError> thinking_budget(const Json& thinking, bool enabled, int64_t* budget) {
  const Json* b = find(thinking, "budget_tokens");
  if (!b) return std::nullopt;
  const char* param = "thinking.budget_tokens";
  if (!b->is_number_integer())
    return bad_field(param, std::string(param) + ": expected an integer, got " + b->dump(), "invalid_type");
  if (!enabled) return bad_field(param, std::string(param) + ": only with \"type\": \"enabled\"");
  if (b->is_number_unsigned() ? b->get<uint64_t>() > static_cast<uint64_t>(kMaxTokens) : b->get<int64_t>() < 0)
    return bad_field(param, std::string(param) + ": " + b->dump() + " is outside 0.." + std::to_string(kMaxTokens));
  *budget = b->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> thinking_fields(const Json& body, const ParseOptions& o, chat::RenderRequest* r,
                                        int64_t* budget) {
  bool thinking = o.default_thinking;
  bool said = false;
  if (const Json* t = find(body, "thinking")) {
    const Json* type = t->is_object() ? find(*t, "type") : nullptr;
    if (!type || !type->is_string() ||
        (type->get<std::string>() != "enabled" && type->get<std::string>() != "disabled"))
      return bad_field("thinking", "thinking: expected {\"type\": \"enabled\"} or {\"type\": \"disabled\"}");
    DSV41_TRY(unknown_fields(*t, {"type", "budget_tokens"}, "thinking."));
    thinking = type->get<std::string>() == "enabled";
    DSV41_TRY(thinking_budget(*t, thinking, budget));
    said = true;
  }
  if (const Json* k = find(body, "chat_template_kwargs")) {
    if (!k->is_object()) return bad_field("chat_template_kwargs", "chat_template_kwargs: expected an object", "invalid_type");
    DSV41_TRY(unknown_fields(*k, {"thinking", "enable_thinking"}, "chat_template_kwargs."));
    for (const char* key : {"thinking", "enable_thinking"}) {
      if (const Json* v = find(*k, key)) {
        if (!v->is_boolean())
          return bad_field(std::string("chat_template_kwargs.") + key, std::string("chat_template_kwargs.") + key +
                                                                          ": expected true or false");
        if (said && v->get<bool>() != thinking)
          return bad_field("chat_template_kwargs", "chat_template_kwargs: contradicts \"thinking\"");
        thinking = v->get<bool>();
        said = true;
      }
    }
  }
  if (const Json* e = find(body, "reasoning_effort")) {
    if (e->is_number_integer()) {
      const int64_t v = e->is_number_unsigned() && e->get<uint64_t>() > 1000 ? 1001 : e->get<int64_t>();
      if (v < 1 || v > 100) return bad_field("reasoning_effort", "reasoning_effort: " + e->dump() + " is outside 1..100");
      r->reasoning_effort = chat::ReasoningEffort::integer(v);
    } else if (e->is_string()) {
      std::string s = e->get<std::string>();
      // OpenAI's names onto the release's tiers (system.md §5): its default "medium" is the
      // model's default "high", its lowest "minimal" the lowest tier "low", and "none" is no
      // reasoning at all (docs/SERVER.md).
      if (s == "none") {
        if (said && thinking)
          return bad_field("reasoning_effort", "reasoning_effort: 'none' contradicts thinking enabled");
        r->thinking_mode = chat::ThinkingMode::kChat;
        return std::nullopt;
      }
      if (s == "medium") s = "high";
      if (s == "minimal") s = "low";
      if (s != "low" && s != "high" && s != "xhigh" && s != "max")
        return bad_field("reasoning_effort", "reasoning_effort: '" + s +
                                                 "' is not none, minimal, low, medium, high, xhigh, max or an integer 1..100");
      r->reasoning_effort = chat::ReasoningEffort::named(s);
    } else {
      return bad_field("reasoning_effort", "reasoning_effort: expected an integer 1..100 or a tier name", "invalid_type");
    }
    if (!said) thinking = true;  // asking for an effort asks for reasoning
  }
  r->thinking_mode = thinking ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
  return std::nullopt;
}

std::optional<ApiError> tool_fields(const Json& body, ChatRequest* c) {
  std::vector<chat::Tool> tools;
  if (const Json* t = find(body, "tools")) {
    if (!t->is_array()) return bad_field("tools", "tools: expected a list", "invalid_type");
    for (size_t i = 0; i < t->size(); ++i) {
      const Json& tool = (*t)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      const Json* type = tool.is_object() ? find(tool, "type") : nullptr;
      const Json* fn = tool.is_object() ? find(tool, "function") : nullptr;
      if (!type || *type != "function") return bad_field(where + ".type", where + ".type: expected \"function\"");
      if (!fn || !fn->is_object()) return bad_field(where + ".function", where + ".function: expected an object");
      const Json* name = find(*fn, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty())
        return bad_field(where + ".function.name", where + ".function.name: expected a non-empty string");
      tools.push_back(chat::Tool{name->get<std::string>(), chat::py_json_dumps(*fn)});
      const Json* params = find(*fn, "parameters");
      c->tool_parameters.push_back(params ? nlohmann::json::parse(params->dump()) : nlohmann::json());
    }
  }
  c->has_tools = !tools.empty();
  for (const auto& t : tools) c->tool_names.push_back(t.name);
  DSV41_TRY(boolean(body, "parallel_tool_calls", &c->parallel_tool_calls));
  if (const Json* tc = find(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "auto") c->tool_choice = ToolChoice::kAuto;
      else if (s == "none") c->tool_choice = ToolChoice::kNone;
      else if (s == "required") c->tool_choice = ToolChoice::kRequired;
      else return bad_field("tool_choice", "tool_choice: expected none, auto, required or {\"type\":\"function\",...}");
    } else if (tc->is_object()) {
      const Json* fn = find(*tc, "function");
      const Json* name = fn && fn->is_object() ? find(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        return bad_field("tool_choice", "tool_choice: expected {\"type\": \"function\", \"function\": {\"name\": ...}}");
      c->tool_choice = ToolChoice::kNamed;
      c->tool_name = name->get<std::string>();
      bool declared = false;
      for (const auto& t : tools) declared = declared || t.name == c->tool_name;
      if (!declared) return bad_field("tool_choice", "tool_choice: function '" + c->tool_name + "' is not in tools");
    } else {
      return bad_field("tool_choice", "tool_choice: expected a string or an object", "invalid_type");
    }
    if (c->tool_choice != ToolChoice::kAuto && c->tool_choice != ToolChoice::kNone && tools.empty())
      return bad_field("tool_choice", "tool_choice: needs a non-empty \"tools\" list");
  }
  if (tools.empty()) return std::nullopt;
  // V4.1 renders tools on the system message (chat/dsml.h): attach them to the first message
  // when it is a system message, else open the prompt with a system message carrying them.
  auto& msgs = c->render.messages;
  if (!msgs.empty() && msgs[0].role == chat::Role::kSystem && msgs[0].tools.empty()) {
    msgs[0].tools = std::move(tools);
  } else if (!msgs.empty() && msgs[0].role == chat::Role::kSystem) {
    return bad_field("tools", "tools: given both in the request and on messages[0]");
  } else {
    chat::Message sys = chat::Message::make(chat::Role::kSystem, "");
    sys.tools = std::move(tools);
    msgs.insert(msgs.begin(), std::move(sys));
  }
  return std::nullopt;
}


// response_format: text (nothing), json_object, or json_schema {name, schema, strict,
// description}; the schema is compiled here so that a keyword outside the subset is a 400.
std::optional<ApiError> response_format(const Json& body, ChatRequest* c) {
  const Json* rf = find(body, "response_format");
  if (!rf || rf->is_null()) return std::nullopt;
  const Json* type = rf->is_object() ? find(*rf, "type") : nullptr;
  if (!type || !type->is_string())
    return bad_field("response_format", "response_format: expected {\"type\": \"text\" | \"json_object\" | \"json_schema\"}", "invalid_type");
  const std::string t = type->get<std::string>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    DSV41_TRY(unknown_fields(*rf, {"type"}, "response_format."));
    c->response_schema = JsonSchema::any_object();
  } else if (t == "json_schema") {
    DSV41_TRY(unknown_fields(*rf, {"type", "json_schema"}, "response_format."));
    const Json* js = find(*rf, "json_schema");
    if (!js || !js->is_object())
      return bad_field("response_format.json_schema", "response_format.json_schema: expected an object with name and schema",
                       js ? "invalid_type" : "missing_required_parameter");
    DSV41_TRY(unknown_fields(*js, {"name", "schema", "strict", "description"}, "response_format.json_schema."));
    const Json* name = find(*js, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty() || name->get<std::string>().size() > 64)
      return bad_field("response_format.json_schema.name", "response_format.json_schema.name: expected a string of 1 to 64 characters",
                       name ? "invalid_value" : "missing_required_parameter");
    if (const Json* strict = find(*js, "strict"); strict && !strict->is_boolean() && !strict->is_null())
      return bad_field("response_format.json_schema.strict", "response_format.json_schema.strict: expected true or false", "invalid_type");
    const Json* schema = find(*js, "schema");
    if (!schema) {
      c->response_schema = JsonSchema::any_value();
    } else {
      auto compiled = JsonSchema::compile(nlohmann::json::parse(schema->dump()));
      if (!compiled.ok())
        return bad_field("response_format.json_schema.schema", compiled.status().message(),
                         compiled.status().kind() == ErrorKind::kUnsupported ? "unsupported_value" : "invalid_value");
      c->response_schema = *compiled;
    }
  } else {
    return bad_field("response_format.type", "response_format.type: '" + t + "' is not text, json_object or json_schema");
  }
  // V4.1 renders a response format on the system message (chat/dsml.h), as it does tools.
  auto& msgs = c->render.messages;
  if (msgs.empty() || msgs[0].role != chat::Role::kSystem) msgs.insert(msgs.begin(), chat::Message::make(chat::Role::kSystem, ""));
  if (msgs[0].response_format)
    return bad_field("response_format", "response_format: given both in the request and on messages[0]");
  msgs[0].response_format = chat::py_json_dumps(*rf);
  return std::nullopt;
}

}  // namespace

Parsed<ChatRequest> parse_chat_request(const Json& body, const ParseOptions& o) {
  if (!body.is_object()) return bad_field("", "the request body must be a JSON object", "invalid_type");
  DSV41_TRY(unknown_fields(body, {"model", "messages", "stream", "stream_options", "max_tokens", "max_completion_tokens",
                                  "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop", "logprobs",
                                  "top_logprobs", "logit_bias", "tools", "tool_choice", "parallel_tool_calls",
                                  "reasoning_effort", "thinking", "chat_template_kwargs", "response_format", "user",
                                  "metadata", "store", "service_tier", "presence_penalty", "frequency_penalty",
                                  "repetition_penalty", "modalities", "dsv41"},
                           ""));
  ChatRequest c;
  DSV41_TRY(generation_fields(body, true, o, &c.gen));
  const Json* messages = find(body, "messages");
  if (!messages || !messages->is_array() || messages->empty())
    return bad_field("messages", "messages: expected a non-empty list of messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& m = (*messages)[i];
    if (m.is_object()) {
      // Only OpenAI's message keys (plus reasoning_content): render-only keys such as "task" or
      // "wo_eos" would change the prompt in ways the API does not offer.
      DSV41_TRY(unknown_fields(m, {"role", "content", "name", "reasoning_content", "tool_calls", "tool_call_id",
                                   "refusal"},
                               where + "."));
      if (const Json* name = find(m, "name"); name && !name->is_string())
        return bad_field(where + ".name", where + ".name: expected a string", "invalid_type");
    }
    auto msg = chat::message_from_json(m, where);
    if (!msg.ok()) {
      const std::string& text = msg.status().message();
      return bad_field(text.substr(0, text.find(':')), text);
    }
    // The release's encoder skips parts it does not know; an API must not drop a user's input.
    for (size_t k = 0; k < msg->content.parts.size(); ++k)
      if (msg->content.parts[k].kind == chat::ContentPart::Kind::kOther ||
          msg->content.parts[k].kind == chat::ContentPart::Kind::kNotObject) {
        const std::string at = where + ".content[" + std::to_string(k) + "]";
        const std::string& type = msg->content.parts[k].type_name;
        const std::string what = type.empty() ? "a non-object content part"
                                 : type == "None"  ? "a content part without a \"type\""
                                                   : "content part type '" + type + "'";
        return bad_field(at + ".type", at + ": " + what + " is not supported (text and image_url are)",
                         "unsupported_value");
      }
    c.render.messages.push_back(std::move(*msg));
  }
  DSV41_TRY(thinking_fields(body, o, &c.render, &c.thinking_budget));
  DSV41_TRY(tool_fields(body, &c));
  DSV41_TRY(response_format(body, &c));
  if (const Json* mod = find(body, "modalities")) {
    if (!mod->is_array() || mod->size() != 1 || (*mod)[0] != "text")
      return bad_field("modalities", "modalities: only [\"text\"] is supported", "unsupported_value");
  }
  return c;
}

namespace {

// A token list (non-empty, ids in int32) at `param`.
std::optional<ApiError> token_list(const Json& list, const std::string& param, std::vector<int32_t>* out) {
  if (list.empty()) return bad_field(param, param + ": an empty token list");
  for (const Json& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      return bad_field(param, param + ": a token list must hold token ids");
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> completion_prompts(const Json& p, int max_prompts, std::vector<CompletionPrompt>* out) {
  const char* expected = "prompt: expected a string, a list of strings, a list of token ids or a list of token-id lists";
  if (p.is_string()) {
    out->push_back(p.get<std::string>());
    return std::nullopt;
  }
  if (!p.is_array() || p.empty()) return bad_field("prompt", expected);
  if (p[0].is_number_integer()) {
    std::vector<int32_t> ids;
    if (auto e = token_list(p, "prompt", &ids)) return e;
    out->push_back(std::move(ids));
    return std::nullopt;
  }
  if (p.size() > static_cast<size_t>(max_prompts))
    return bad_field("prompt", "prompt: " + std::to_string(p.size()) + " prompts in one request; at most " +
                                   std::to_string(max_prompts));
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string param = "prompt[" + std::to_string(i) + "]";
    if (p[i].is_string()) {
      out->push_back(p[i].get<std::string>());
    } else if (p[i].is_array()) {
      std::vector<int32_t> ids;
      if (auto e = token_list(p[i], param, &ids)) return e;
      out->push_back(std::move(ids));
    } else {
      return bad_field(param, std::string(expected) + " (" + param + " is neither)");
    }
  }
  return std::nullopt;
}

}  // namespace

Parsed<CompletionRequest> parse_completion_request(const Json& body, const ParseOptions& o) {
  if (!body.is_object()) return bad_field("", "the request body must be a JSON object", "invalid_type");
  DSV41_TRY(unknown_fields(body, {"model", "prompt", "stream", "stream_options", "max_tokens", "temperature", "top_p",
                                  "top_k", "min_p", "seed", "n", "stop", "logprobs", "logit_bias", "echo", "user",
                                  "presence_penalty", "frequency_penalty", "repetition_penalty", "best_of", "suffix", "dsv41"},
                           ""));
  CompletionRequest c;
  DSV41_TRY(generation_fields(body, false, o, &c.gen));
  if (c.gen.max_tokens < 0) c.gen.max_tokens = 16;  // OpenAI's default for completions
  const Json* p = find(body, "prompt");
  if (!p) return bad_field("prompt", "prompt: missing", "missing_required_parameter");
  DSV41_TRY(completion_prompts(*p, o.max_prompts, &c.prompts));
  DSV41_TRY(boolean(body, "echo", &c.echo));
  int64_t best_of = c.gen.n;
  DSV41_TRY(integer_in(body, "best_of", c.gen.n, o.max_n, &best_of));
  if (best_of > c.gen.n && c.gen.stream)
    return bad_field("best_of", "best_of: the choices are ranked once all are done, so they cannot be streamed");
  c.best_of = static_cast<int>(best_of);
  if (const Json* s = find(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    return bad_field("suffix", "suffix: not supported", "unsupported_value");
  return c;
}

}  // namespace dsv41::server
