// Completion text -> assistant message, incrementally (model.md §5; golden encoding README
// "Parsing"). Fed the generated text in any pieces (token strings, single bytes), it splits
// reasoning (up to </think> in thinking mode), content (up to EOS or the "\n\n<｜DSML｜ calls"
// that opens a tool-call block) and DSML tool calls, and emits each piece as soon as it is
// certain. A suffix that could still become a marker is held back, so a partial marker is
// never emitted as text. finish() gives the strict verdict of the reference parser; feeding a
// whole completion at once and finishing is the one-shot parse, and any split gives the
// same result. Owns its pending buffer and the calls parsed so far.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/chat/dsml.h"
#include "src/chat/messages.h"

namespace dsv41::chat {

// What one feed() made certain. Concatenating every delta's reasoning (content) gives the
// final reasoning (content) whenever finish() succeeds.
struct StreamDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;  // each call once, when its invoke closes

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class OutputParser {
 public:
  explicit OutputParser(ThinkingMode mode);

  // Appends generated text. Never fails: once the text breaks the format, nothing more is
  // emitted, the error is kept for finish(), and the unconsumed text stays in unparsed().
  StreamDelta feed(std::string_view text);
  // End of generation. Emits what the end makes certain into *tail (may be null) and returns
  // the whole message, or the reason the completion is malformed. Call once.
  Result<ParsedMessage> finish(StreamDelta* tail = nullptr);

  bool failed() const { return !error_.ok(); }
  const Status& error() const { return error_; }
  // Text received but not (yet) attributed to reasoning, content or a call: held-back
  // marker prefixes, an open DSML tag, or everything from the point of a format error.
  std::string_view unparsed() const { return buf_; }
  // A tool-call block has begun (what follows is DSML, whatever becomes of it).
  bool in_calls() const { return in_calls_; }
  // The message so far (content and reasoning emitted, calls completed).
  const ParsedMessage& partial() const { return msg_; }

 private:
  enum class State { kReasoning, kContent, kCallsSep, kInvokeName, kParam, kParamSep, kTrailer, kDone, kError };

  // Consumes as much of buf_ as is certain; `final` means no more text will come.
  void advance(bool final, StreamDelta* out);
  bool step_text(bool final, StreamDelta* out);
  bool step_separator(bool final, StreamDelta* out);
  bool step_invoke_name(bool final, StreamDelta* out);
  bool step_param(bool final);
  bool step_trailer(bool final);
  void fail(std::string message);
  size_t resume_point() const;
  void close_call(StreamDelta* out);

  State state_;
  std::string buf_;
  ParsedMessage msg_;
  Status error_;
  bool finished_ = false;
  bool in_calls_ = false;
  // Bytes of buf_ already searched for the current tag's stop without success (a long
  // parameter value fed token by token is then scanned once, not once per token).
  size_t searched_ = 0;
  // The invoke being read.
  std::string call_name_;
  std::vector<DsmlParam> call_params_;
};

// One-shot parse: feed everything, then finish.
Result<ParsedMessage> parse_completion(std::string_view text, ThinkingMode mode);

// Optional checks a server may apply to a parsed message (the reference applies none):
// every call names a declared tool, and its arguments are valid JSON (string="false"
// values are copied unchecked by the parser).
Status validate_tool_calls(const ParsedMessage& msg, const std::vector<Tool>& tools);

}  // namespace dsv41::chat
