// OpenAI response objects (see response_json.h).
#include "server/response_json.h"

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

namespace dsv41::server {

using chat::Json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string random_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* kHex = "0123456789abcdef";
  std::string out = prefix;
  for (int i = 0; i < 24; ++i) out += kHex[rng() & 15];
  return out;
}

namespace {

Json null_if_empty(const std::string& s) { return s.empty() ? Json() : Json(s); }

// The token's text for logprobs (lossy UTF-8, as OpenAI shows it) and its raw bytes.
Json token_entry(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string_view raw = tok.decode_token(id);
  const std::vector<int32_t> one{id};
  Json e;
  e["token"] = tok.decode_text(one);
  e["logprob"] = std::isfinite(logprob) ? logprob : -9999.0f;  // JSON has no -inf
  Json bytes = Json::array();
  for (unsigned char c : raw) bytes.push_back(static_cast<int>(c));
  e["bytes"] = std::move(bytes);
  return e;
}

}  // namespace

Json turn_json(const ServeTurnRecord& r) {
  auto j = chat::parse_json_ordered(serve_turn_json(r), "serve_turn");
  return j.ok() ? *j : Json();
}

Json telemetry_json(const std::vector<ChoiceOutput>& out) {
  Json turns = Json::array();
  for (const auto& o : out) turns.push_back(o.turn ? turn_json(*o.turn) : Json());
  return Json{{"serve_turn", std::move(turns)}};
}

Json usage_json(const Usage& u) {
  Json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = Json{{"cached_tokens", u.cached_tokens}};
  if (u.reasoning_tokens >= 0) j["completion_tokens_details"] = Json{{"reasoning_tokens", u.reasoning_tokens}};
  return j;
}

namespace {
// The envelope of a non-streamed response: the fields OpenAI sends, in its order.
Json response_json(const ResponseMeta& m, const char* object, Json choices, const Usage& usage) {
  Json j;
  j["id"] = m.id;
  j["object"] = object;
  j["created"] = m.created;
  j["model"] = m.model;
  j["choices"] = std::move(choices);
  j["usage"] = usage_json(usage);
  j["system_fingerprint"] = "dsv41";
  return j;
}
}  // namespace

Json chat_logprobs_json(const std::vector<TokenEvent>& tokens, const Tokenizer& tok) {
  Json content = Json::array();
  for (const TokenEvent& t : tokens) {
    Json e = token_entry(tok, t.token, t.logprob);
    Json top = Json::array();
    for (const auto& [id, lp] : t.top) top.push_back(token_entry(tok, id, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  Json j;
  j["content"] = std::move(content);
  j["refusal"] = nullptr;
  return j;
}

Json chat_tool_calls_json(const std::vector<OutToolCall>& calls) {
  Json arr = Json::array();
  for (const auto& c : calls) {
    Json call;
    call["index"] = c.index;
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = Json{{"name", c.name}, {"arguments", c.arguments}};
    arr.push_back(std::move(call));
  }
  return arr;
}

Json chat_completion_json(const ResponseMeta& m, const std::vector<ChoiceOutput>& out, bool logprobs,
                          const Tokenizer& tok, const Usage& usage) {
  Json choices = Json::array();
  for (size_t i = 0; i < out.size(); ++i) {
    const ChoiceOutput& o = out[i];
    Json msg;
    msg["role"] = "assistant";
    // OpenAI sends null content for a message that only calls tools.
    msg["content"] = o.tool_calls.empty() ? Json(o.content) : null_if_empty(o.content);
    if (m.thinking) msg["reasoning_content"] = o.reasoning;
    if (!o.tool_calls.empty()) {
      Json calls = chat_tool_calls_json(o.tool_calls);
      for (auto& c : calls) c.erase("index");
      msg["tool_calls"] = std::move(calls);
    }
    msg["refusal"] = nullptr;
    Json c;
    c["index"] = i;
    c["message"] = std::move(msg);
    c["logprobs"] = logprobs ? chat_logprobs_json(o.tokens, tok) : Json();
    c["finish_reason"] = o.finish_reason;
    choices.push_back(std::move(c));
  }
  return response_json(m, "chat.completion", std::move(choices), usage);
}

Json chat_delta_json(const ChoiceDelta& d) {
  Json delta = Json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.tool_calls.empty()) delta["tool_calls"] = chat_tool_calls_json(d.tool_calls);
  return delta;
}

Json chat_chunk_json(const ResponseMeta& m, int choice, Json delta, const Json& logprobs, const std::string& finish) {
  Json c;
  c["index"] = choice;
  c["delta"] = std::move(delta);
  c["logprobs"] = logprobs;
  c["finish_reason"] = null_if_empty(finish);
  Json j;
  j["id"] = m.id;
  j["object"] = "chat.completion.chunk";
  j["created"] = m.created;
  j["model"] = m.model;
  j["system_fingerprint"] = "dsv41";
  j["choices"] = Json::array({std::move(c)});
  return j;
}

Json completion_logprobs_json(const std::vector<TokenEvent>& tokens, const Tokenizer& tok, size_t text_offset) {
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const TokenEvent& t : tokens) {
    const std::vector<int32_t> one{t.token};
    const std::string text = tok.decode_text(one);
    toks.push_back(text);
    lps.push_back(std::isfinite(t.logprob) ? t.logprob : -9999.0f);
    Json top = Json::object();
    for (const auto& [id, lp] : t.top) {
      const std::vector<int32_t> alt{id};
      top[tok.decode_text(alt)] = std::isfinite(lp) ? lp : -9999.0f;
    }
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += text.size();
  }
  Json j;
  j["tokens"] = std::move(toks);
  j["token_logprobs"] = std::move(lps);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

Json completion_json(const ResponseMeta& m, const std::vector<ChoiceOutput>& out, const std::vector<std::string>& echo,
                     bool logprobs, const Tokenizer& tok, const Usage& usage) {
  Json choices = Json::array();
  for (size_t i = 0; i < out.size(); ++i) {
    Json c;
    c["text"] = echo[i] + out[i].content;
    c["index"] = i;
    c["logprobs"] = logprobs ? completion_logprobs_json(out[i].tokens, tok, echo[i].size()) : Json();
    c["finish_reason"] = out[i].finish_reason;
    choices.push_back(std::move(c));
  }
  return response_json(m, "text_completion", std::move(choices), usage);
}

Json completion_chunk_json(const ResponseMeta& m, int choice, const std::string& text, const Json& logprobs,
                           const std::string& finish) {
  Json c;
  c["text"] = text;
  c["index"] = choice;
  c["logprobs"] = logprobs;
  c["finish_reason"] = null_if_empty(finish);
  Json j;
  j["id"] = m.id;
  j["object"] = "text_completion";
  j["created"] = m.created;
  j["model"] = m.model;
  j["system_fingerprint"] = "dsv41";
  j["choices"] = Json::array({std::move(c)});
  return j;
}

}  // namespace dsv41::server
