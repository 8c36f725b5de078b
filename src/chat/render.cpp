// Prompt rendering (see render.h): the turns of turns.h, each rendered as its role's text,
// followed by a generation header or task token when the next message is an assistant or
// reminder. The effort line opens the prompt in thinking mode.
#include "src/chat/render.h"

#include <set>

#include "src/chat/dsml.h"
#include "src/chat/markers.h"
#include "src/chat/turns.h"

namespace dsv41::chat {
namespace {

struct RenderState {
  const std::vector<Turn>* full;
  ThinkingMode mode;
  bool drop;  // the effective drop_thinking
  long last_user;
  int budget;
  const std::set<std::string>* declared;  // non-null: calls must name one of these
};

Result<std::string> render_item(const RenderState& st, size_t index) {
  const std::vector<Turn>& full = *st.full;
  const Turn& it = full[index];
  const bool thinking = st.mode == ThinkingMode::kThinking;
  std::string where = "message " + std::to_string(index) + " (" + role_name(it.role) + ")";
  std::string out;
  std::string effort = index == 0 && thinking ? reasoning_effort_line(st.budget) : std::string();
  // At index 0 one <｜System｜> hosts both the effort line and a system message's text.
  if (index == 0 && (!effort.empty() || it.role == Role::kSystem)) out += kSystem;
  out += effort;

  switch (it.role) {
    case Role::kSystem:
    case Role::kDeveloper:
      if (it.role == Role::kSystem) {
        if (index > 0) out += kSystem;
      } else {
        if (it.content_falsy) return invalid_argument(where + ": a developer message needs non-empty content");
        out += kUser;
      }
      out += it.content;
      if (it.tools_truthy()) out += "\n\n" + render_tools_block(it.src->tools);
      if (it.src->response_format) out += render_response_format(*it.src->response_format);
      break;
    case Role::kUser: {
      if (it.null_text) return invalid_argument(where + ": content is null (a user message needs text or parts)");
      out += kUser;
      for (size_t i = 0; i < it.blocks.size(); ++i) {
        if (i) out += "\n\n";
        const TurnBlock& b = it.blocks[i];
        out += b.is_tool_result ? std::string(kToolResultOpen) + b.text + std::string(kToolResultClose) : b.text;
      }
      break;
    }
    case Role::kLatestReminder:
      out += kLatestReminder;
      out += it.content;
      break;
    case Role::kAssistant: {
      const Message& m = *it.src;
      if (st.declared) {
        for (const ToolCall& tc : m.tool_calls)
          if (!st.declared->count(tc.name))
            return invalid_argument(where + ": tool call names '" + tc.name + "', which no message declares in tools");
      }
      DSV41_ASSIGN_OR_RETURN(std::string calls, render_tool_calls(m.tool_calls, where));
      // The reply to a task message has no thinking part.
      bool prev_has_task = index > 0 && full[index - 1].task.has_value();
      if (thinking && !prev_has_task && (!st.drop || static_cast<long>(index) > st.last_user)) {
        if (it.keep_reasoning && m.reasoning_content) out += *m.reasoning_content;
        out += kThinkClose;
      }
      out += it.content;
      out += calls;
      if (!m.wo_eos) out += kEos;
      break;
    }
    case Role::kTool: return internal_error(where + ": tool message survived merging");
  }

  // A header (or task token) only where the model is to answer: at the end, or before an
  // assistant or reminder message.
  if (index + 1 < full.size()) {
    Role next = full[index + 1].role;
    if (next != Role::kAssistant && next != Role::kLatestReminder) return out;
  }
  if (it.task) {
    const TaskToken* tok = nullptr;
    for (const TaskToken& t : kTaskTokens)
      if (t.name == *it.task) tok = &t;
    if (!tok)
      return invalid_argument(where + ": unknown task '" + *it.task +
                              "' (action, query, authority, domain, title or read_url)");
    if (tok->name == "action") {
      out += kAssistant;
      out += thinking ? kThinkOpen : kThinkClose;
    }
    out += tok->token;
  } else if (it.user_like(index)) {
    out += kAssistant;
    bool open = thinking && (!st.drop || static_cast<long>(index) >= st.last_user);
    out += open ? kThinkOpen : kThinkClose;
  }
  return out;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
    case Role::kDeveloper: return "developer";
    case Role::kLatestReminder: return "latest_reminder";
  }
  return "?";
}

const char* thinking_mode_name(ThinkingMode mode) { return mode == ThinkingMode::kChat ? "chat" : "thinking"; }

Result<RenderResult> render_prompt(const RenderRequest& req, const RenderOptions& opt) {
  if (req.messages.size() + req.context.size() > opt.max_messages)
    return out_of_range("request: " + std::to_string(req.messages.size() + req.context.size()) +
                        " messages, more than the limit of " + std::to_string(opt.max_messages));
  const EffortTable& table = opt.effort_table ? *opt.effort_table : release_effort_table();
  // Validated in chat mode too, as the reference does.
  DSV41_ASSIGN_OR_RETURN(int budget, resolve_reasoning_effort(req.reasoning_effort, table));

  RenderResult result;
  std::vector<ImageRecord> context_images;  // validated, not returned
  DSV41_ASSIGN_OR_RETURN(std::vector<Turn> ctx,
                         prepare_and_merge(req.context, "context", opt.reject_markers_in_text, &context_images));
  DSV41_ASSIGN_OR_RETURN(std::vector<Turn> msgs,
                         prepare_and_merge(req.messages, "messages", opt.reject_markers_in_text, &result.images));
  sort_tool_results(req.context, msgs);

  std::vector<Turn> full = ctx;
  full.insert(full.end(), msgs.begin(), msgs.end());

  // Tools anywhere switch drop_thinking off: an agent loop must see its earlier reasoning.
  bool drop = req.drop_thinking;
  for (const Turn& it : full)
    if (it.tools_truthy()) drop = false;

  long to_render = static_cast<long>(msgs.size());
  long first = static_cast<long>(ctx.size());
  if (req.thinking_mode == ThinkingMode::kThinking && drop) {
    full = drop_thinking(full);
    to_render = static_cast<long>(full.size()) - static_cast<long>(drop_thinking(ctx).size());
    first = static_cast<long>(full.size()) - to_render;
  }

  std::set<std::string> declared;
  if (opt.require_declared_tools) {
    for (const auto* list : {&req.context, &req.messages})
      for (const Message& m : *list)
        for (const Tool& t : m.tools) declared.insert(t.name);
  }
  RenderState st{&full, req.thinking_mode, drop, last_user_index(full), budget,
                 opt.require_declared_tools ? &declared : nullptr};

  if (req.add_default_bos_token && req.context.empty()) result.prompt += kBos;
  for (long i = 0; i < to_render; ++i) {
    DSV41_ASSIGN_OR_RETURN(std::string piece, render_item(st, static_cast<size_t>(first + i)));
    result.prompt += piece;
    if (result.prompt.size() > opt.max_prompt_bytes)
      return out_of_range("prompt: longer than the limit of " + std::to_string(opt.max_prompt_bytes) +
                          " bytes at message " + std::to_string(first + i));
  }
  return result;
}

}  // namespace dsv41::chat
