// Chat turns: a request's messages as the renderer reads them (model.md §5; golden encoding
// README "Tool results", "Images", "drop_thinking"). Steps, in the reference encoder's order
// because its quirks are what the golden cases pin: (1) per message, images become
// placeholders and list content becomes text; (2) tool messages merge into user turns;
// (3) tool results are reordered by the last assistant's call ids; (4) drop_thinking removes
// reasoning (and earlier developer messages) before the last user-like message.
// Internal to src/chat (render.cpp); an Turn borrows its Message, which must outlive it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "src/chat/messages.h"

namespace dsv41::chat {

struct TurnBlock {
  bool is_tool_result = false;
  std::string text;         // text, or the result's content
  std::string tool_use_id;  // tool results: the id they answer
};

// One message after steps (1)-(4).
struct Turn {
  Role role = Role::kUser;        // never kTool: tool results live in user turns
  const Message* src = nullptr;   // null for a user turn started by a tool result
  std::string content;            // system / developer / assistant / reminder text
  bool content_falsy = false;     // developer messages must have content
  std::vector<TurnBlock> blocks;      // user turns
  bool keep_reasoning = true;     // false once drop_thinking removed it
  std::optional<std::string> task;
  bool null_text = false;         // a user message with "content": null is in this turn

  bool tools_truthy() const { return src && !src->tools.empty(); }
  bool user_like(size_t index) const {
    return role == Role::kUser || role == Role::kDeveloper || (role == Role::kSystem && index > 0);
  }
};

// Steps (1) and (2) over one list ("messages" or "context", for error messages). Image
// records are appended to *images in message order. `strict` refuses marker text.
Result<std::vector<Turn>> prepare_and_merge(const std::vector<Message>& msgs, const char* list_name, bool strict,
                                           std::vector<ImageRecord>* images);
// Step (3). `context` supplies the call ids in force when `items` begins.
void sort_tool_results(const std::vector<Message>& context, std::vector<Turn>& items);
// Index of the last user-like item (user, developer, system after index 0), or -1.
long last_user_index(const std::vector<Turn>& items);
// Step (4).
std::vector<Turn> drop_thinking(const std::vector<Turn>& items);

}  // namespace dsv41::chat
