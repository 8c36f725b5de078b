// JSON boundary of the chat module: a render request (the golden cases' `input` object:
// messages, thinking_mode, reasoning_effort, drop_thinking, context, add_default_bos_token)
// and a parse request (completion, thinking_mode) in; prompts, image records and parsed
// messages out, in the golden cases' `expected` format. Golden encoding README "File format".
// Every nlohmann exception is caught here; errors name the field, e.g. "messages[2].role".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/status.h"
#include "src/chat/messages.h"
#include "src/chat/py_json.h"

namespace dsv41::chat {

// Converts one request object (already parsed) / JSON text to a RenderRequest.
Result<RenderRequest> render_request_from_json(const Json& input);
Result<RenderRequest> render_request_from_text(std::string_view json_text);

// One message object (e.g. from an HTTP body). `where` prefixes error messages.
Result<Message> message_from_json(const Json& m, const std::string& where);

struct ParseRequest {
  std::string completion;
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
};
Result<ParseRequest> parse_request_from_json(const Json& input);
Result<ParseRequest> parse_request_from_text(std::string_view json_text);

Result<ThinkingMode> thinking_mode_from_json(const Json& v);

// {"role":"assistant","content":...,"reasoning_content":...,"tool_calls":[{"type":"function",
//  "function":{"name":...,"arguments":...}}]} — the `expected` object of parse cases.
Json parsed_message_to_json(const ParsedMessage& m);
// {"prompt":..., "images":[...]} plus "ids" when `ids` is given.
Json render_result_to_json(const RenderResult& r, const std::vector<int32_t>* ids);
// {"error":{"message":...}}
Json error_to_json(const Status& s);

}  // namespace dsv41::chat
