// OpenAI response bodies and stream chunks for chat and text completions, built from the
// driver's outputs: chat.completion / chat.completion.chunk / text_completion objects, usage,
// logprobs ({token, logprob, bytes, top_logprobs} for chat; tokens / token_logprobs /
// top_logprobs / text_offset for completions). Pure functions; owns nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chat/py_json.h"
#include "format/tokenizer.h"
#include "server/generation_driver.h"

namespace dsv41::server {

// What every object of one response shares.
struct ResponseMeta {
  std::string id;     // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  bool thinking = false;  // chat: reasoning_content is part of the message
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t reasoning_tokens = -1;  // chat: completion_tokens_details.reasoning_tokens (−1: absent)
};

chat::Json usage_json(const Usage& u);

// Chat.
chat::Json chat_logprobs_json(const std::vector<TokenEvent>& tokens, const Tokenizer& tok);
chat::Json chat_tool_calls_json(const std::vector<OutToolCall>& calls);
chat::Json chat_completion_json(const ResponseMeta& m, const std::vector<ChoiceOutput>& out, bool logprobs,
                                const Tokenizer& tok, const Usage& usage);
// One chunk: choices = [{index, delta, logprobs, finish_reason}] (finish_reason "" -> null).
chat::Json chat_chunk_json(const ResponseMeta& m, int choice, chat::Json delta, const chat::Json& logprobs,
                           const std::string& finish_reason);
chat::Json chat_delta_json(const ChoiceDelta& d);

// Text completions.
chat::Json completion_logprobs_json(const std::vector<TokenEvent>& tokens, const Tokenizer& tok, size_t text_offset);
// echo: per choice, the prompt text put before its output (empty strings without echo).
chat::Json completion_json(const ResponseMeta& m, const std::vector<ChoiceOutput>& out, const std::vector<std::string>& echo,
                           bool logprobs, const Tokenizer& tok, const Usage& usage);
chat::Json completion_chunk_json(const ResponseMeta& m, int choice, const std::string& text, const chat::Json& logprobs,
                                 const std::string& finish_reason);

// The SERVE_TURN record (runtime/serve_turn.h) as JSON, for the "dsv41" extension object.
chat::Json turn_json(const ServeTurnRecord& r);
// {"serve_turn": [record or null per choice]}.
chat::Json telemetry_json(const std::vector<ChoiceOutput>& out);

// Compact JSON text (invalid UTF-8 replaced).
std::string dump(const chat::Json& j);
// A random id with `prefix`: prefix + 24 hex digits.
std::string random_id(const std::string& prefix);

}  // namespace dsv41::server
