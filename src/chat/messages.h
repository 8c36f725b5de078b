// OpenAI-style chat request types for the DeepSeek-V4.1 prompt encoder (model.md §5;
// golden encoding README, "render input"). These hold a request as the client sent it, with
// just enough of JSON's shape kept (null vs missing, string vs list) to render byte-exactly
// like the reference encoder; request_json.cpp builds them from JSON. Owns plain values only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsv41::chat {

enum class Role { kSystem, kUser, kAssistant, kTool, kDeveloper, kLatestReminder };
enum class ThinkingMode { kChat, kThinking };

const char* role_name(Role role);
const char* thinking_mode_name(ThinkingMode mode);

// One image part, as the record the encoder returns beside the prompt:
// {"type":"image","url":...} or the part's "source" / "url" / "data" keys copied.
struct ImageRecord {
  std::string json;      // the record, serialised like Python's json.dumps
  bool has_source = false;  // some of source/url/data is non-empty (else rendering refuses)
};

// One element of a list-valued "content".
struct ContentPart {
  enum class Kind {
    kText,        // {"type":"text","text":...}
    kImage,       // image / image_url: becomes <｜deepseek_image｜>
    kToolResult,  // {"type":"tool_result", "tool_use_id", "content"} (client-built, user turns)
    kOther,       // any other type: "[Unsupported <type>]" in user turns, dropped elsewhere
    kNotObject,   // a non-object element: dropped, except in user turns where it is an error
  };
  Kind kind = Kind::kText;
  std::string text;       // kText
  bool text_null = false; // "text": null (an error wherever the text is used)
  ImageRecord image;      // kImage
  std::string type_name;  // kOther: the type as Python prints it ("None" when absent)
  // kToolResult: its id and content (a string, or parts when `nested` is set).
  std::string tool_use_id;
  std::string result_text;
  std::vector<ContentPart> nested;
  bool result_is_list = false;
};

// "content": missing, null, a string or a list of parts. The reference treats missing and
// null differently in a few places (e.g. a null tool result renders "None"), so both exist.
struct Content {
  enum class Kind { kMissing, kNull, kString, kParts };
  Kind kind = Kind::kMissing;
  std::string text;
  std::vector<ContentPart> parts;

  static Content of(std::string s) {
    Content c;
    c.kind = Kind::kString;
    c.text = std::move(s);
    return c;
  }
};

// A function offered to the model. `function_json` is the request's "function" object
// serialised like Python's json.dumps (key order and every key kept): the schema line.
struct Tool {
  std::string name;
  std::string function_json;
};

// An assistant's call. `arguments` is JSON text: the request's string as given, or the
// serialised object when the client sent an object. Parsed (and checked to be an object)
// only when the message is rendered, as the reference does.
struct ToolCall {
  std::string id;  // "id" or "function.id"; "" when absent
  std::string name;
  std::string arguments;
};

struct Message {
  Role role = Role::kUser;
  Content content;
  std::optional<std::string> reasoning_content;  // assistant
  std::vector<ToolCall> tool_calls;              // assistant
  std::string tool_call_id;                      // tool
  std::vector<Tool> tools;                       // rendered on system / developer only
  std::optional<std::string> response_format;    // serialised; set only when truthy
  std::optional<std::string> task;               // "action", "query", ... (checked when used)
  bool wo_eos = false;                           // assistant: prefilled reply, no EOS

  static Message make(Role role, std::string text) {
    Message m;
    m.role = role;
    m.content = Content::of(std::move(text));
    return m;
  }
};

// Reasoning effort as requested: absent (default tier), an integer, or a tier name.
struct ReasoningEffort {
  enum class Kind { kDefault, kInteger, kTier };
  Kind kind = Kind::kDefault;
  int64_t value = 0;  // kInteger (validated 1..100 when rendered)
  std::string tier;   // kTier

  static ReasoningEffort integer(int64_t v) { return {Kind::kInteger, v, {}}; }
  static ReasoningEffort named(std::string t) { return {Kind::kTier, 0, std::move(t)}; }
};

struct RenderRequest {
  std::vector<Message> messages;
  std::vector<Message> context;  // already encoded earlier (a cached prefix); not rendered
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
  ReasoningEffort reasoning_effort;
  bool drop_thinking = true;
  bool add_default_bos_token = true;
};

struct RenderResult {
  std::string prompt;
  std::vector<ImageRecord> images;  // in message order, context images excluded
};

// A completion read back into an assistant message.
struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text built by the parser: {"key": value, ...}
};

struct ParsedMessage {
  std::string content;
  std::string reasoning_content;
  std::vector<ParsedToolCall> tool_calls;
};

}  // namespace dsv41::chat
