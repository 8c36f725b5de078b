// One choice's generated tokens -> what the client sees, incrementally: token ids are decoded
// to UTF-8 (StreamDecoder), cut at the request's stop strings (StopMatcher), and, for chat,
// split by the V4.1 output parser into reasoning, content and DSML tool calls (chat/
// output_parser.h), so markup never reaches `content`. Streaming and non-streaming responses
// are both built from these deltas: concatenated, they are the non-stream message.
// Owns its decoder, matcher and parser; the tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chat/messages.h"
#include "chat/output_parser.h"
#include "format/tokenizer.h"
#include "runtime/scheduler.h"
#include "server/engine_loop.h"
#include "server/stop_matcher.h"

namespace dsv41::server {

struct OutToolCall {
  int index = 0;
  std::string id, name, arguments;
};

struct ChoiceDelta {
  std::string reasoning, content;
  std::vector<OutToolCall> tool_calls;
  std::vector<TokenEvent> tokens;  // for logprobs: the tokens this delta came from
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty() && tokens.empty(); }
};

struct ChoiceOptions {
  bool chat = true;  // false: /v1/completions, plain text
  chat::ThinkingMode mode = chat::ThinkingMode::kChat;
  std::vector<std::string> stops;
  // Text already forced after the prompt (tool_choice required / named): fed to the parser
  // first, never shown as content.
  std::string forced_prefix;
  bool parallel_tool_calls = true;  // false: only the first call is returned
  int32_t eos_token_id = -1;
};

class ChoiceStream {
 public:
  ChoiceStream(const Tokenizer& tokenizer, ChoiceOptions options, std::function<std::string()> new_call_id);

  // One sampled token (EOS included). Ignored after a stop string (see stopped()).
  ChoiceDelta push(const TokenEvent& token);
  // End of generation with the engine's reason; gives the last delta. Call once.
  ChoiceDelta finish(FinishReason engine_reason);

  // A stop string appeared: the caller should cancel the generation.
  bool stopped() const { return matcher_.stopped(); }
  int64_t completion_tokens() const { return tokens_; }
  // Thinking mode: the tokens up to the one that closed the reasoning ("</think>" included).
  int64_t reasoning_tokens() const { return reasoning_tokens_; }
  // "stop", "length" or "tool_calls" (after finish()).
  const std::string& finish_reason() const { return finish_reason_; }
  // Why the completion did not follow the V4.1 format (after finish(); empty when it did).
  const std::string& format_error() const { return format_error_; }

 private:
  void feed_text(const std::string& text, ChoiceDelta* out);
  void take(const chat::StreamDelta& d, ChoiceDelta* out);

  const Tokenizer& tokenizer_;
  ChoiceOptions options_;
  std::function<std::string()> new_call_id_;
  StreamDecoder decoder_;
  StopMatcher matcher_;
  std::optional<chat::OutputParser> parser_;
  int64_t tokens_ = 0, reasoning_tokens_ = 0;
  int calls_ = 0;
  bool eos_ = false;
  bool reasoning_closed_ = false;  // thinking mode: "</think>" seen
  std::string think_tail_;         // thinking mode: the reasoning's last bytes, for a marker in pieces
  std::string finish_reason_, format_error_;
};

}  // namespace dsv41::server
