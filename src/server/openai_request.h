// OpenAI request bodies -> typed requests: /v1/chat/completions and /v1/completions. Every
// field is checked (type, range) and a bad one gives a 400 naming it; a field that would change
// results but is not implemented, or an unknown field, is refused rather than ignored
// (docs/SERVER.md lists both). Pure functions of the JSON; owns plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "chat/messages.h"
#include "chat/py_json.h"
#include "runtime/json_schema.h"
#include "runtime/sampling.h"
#include "server/api_error.h"

namespace dsv41::server {

// Fields shared by both endpoints.
struct GenerationFields {
  std::string model;
  int64_t max_tokens = -1;  // −1: up to the context
  SamplingParams sampling;  // temperature defaults to 1 as in OpenAI's API
  bool seeded = false;      // "seed" given (else each choice draws a random seed)
  int n = 1;
  std::vector<std::string> stop;
  int top_logprobs = -1;    // −1: no logprobs
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (needs include_usage)
  bool telemetry = false;   // "dsv41": {"telemetry": true}: the SERVE_TURN record of each choice
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ChatRequest {
  GenerationFields gen;
  chat::RenderRequest render;  // messages (tools attached to the system message), mode, effort
  bool has_tools = false;
  std::vector<std::string> tool_names;  // of `tools`, in order
  std::vector<nlohmann::json> tool_parameters;  // their `parameters` schemas (null when absent)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // kNamed
  bool parallel_tool_calls = true;
  // response_format json_object / json_schema: what the answer must be an instance of (null:
  // free text). The request's response_format is also rendered on the system message.
  std::shared_ptr<const JsonSchema> response_schema;
  // thinking.budget_tokens: the most reasoning tokens before "</think>" is forced (−1: no limit).
  int64_t thinking_budget = -1;
};

// One prompt of /v1/completions: text, or token ids.
using CompletionPrompt = std::variant<std::string, std::vector<int32_t>>;

struct CompletionRequest {
  GenerationFields gen;
  // OpenAI's `prompt`: a string, a list of strings, a token list or a list of token lists (as
  // evaluation harnesses send a batch). Choice p·n + k of the answer is choice k of prompt p.
  std::vector<CompletionPrompt> prompts;
  bool echo = false;
  // OpenAI's best_of (n ≤ best_of ≤ max_n; not with stream): best_of choices generated a prompt,
  // the n with the highest mean log probability per token returned.
  int best_of = 1;
};

struct ParseOptions {
  // Thinking mode when the request says nothing. Off, as in DeepSeek's hosted chat model and
  // OpenAI's chat models: a plain client then gets its answer in `content`.
  bool default_thinking = false;
  int max_n = 16;
  // Prompts in one /v1/completions request (each with its n choices, all queued at once: the
  // server's --parallel + --max-queue still bounds what one request may ask for).
  int max_prompts = 256;
};

// Either the request or the error to answer with.
template <class T>
using Parsed = std::variant<T, ApiError>;

Parsed<ChatRequest> parse_chat_request(const chat::Json& body, const ParseOptions& options);
Parsed<CompletionRequest> parse_completion_request(const chat::Json& body, const ParseOptions& options);

}  // namespace dsv41::server
