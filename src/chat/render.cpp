// Prompt rendering (see render.h). The pipeline follows the reference encoder's order, since
// its quirks are what the golden cases pin: (1) per message, images become placeholders and
// list content becomes text; (2) tool messages merge into user turns; (3) tool results are
// reordered by the last assistant's call ids; (4) drop_thinking removes reasoning (and earlier
// developer messages) before the last user-like message; (5) each message renders, followed
// by a generation header or task token when the next message is an assistant or reminder.
#include "src/chat/render.h"

#include <algorithm>
#include <map>
#include <set>

#include "src/chat/dsml.h"
#include "src/chat/markers.h"

namespace dsv41::chat {
namespace {

struct Block {
  bool is_tool_result = false;
  std::string text;         // text, or the result's content
  std::string tool_use_id;  // tool results: the id they answer
};

// One message after steps (1)-(4).
struct Item {
  Role role = Role::kUser;        // never kTool: tool results live in user turns
  const Message* src = nullptr;   // null for a user turn started by a tool result
  std::string content;            // system / developer / assistant / reminder text
  bool content_falsy = false;     // developer messages must have content
  std::vector<Block> blocks;      // user turns
  bool keep_reasoning = true;     // false once drop_thinking removed it
  std::optional<std::string> task;
  bool null_text = false;         // a user message with "content": null is in this turn

  bool tools_truthy() const { return src && !src->tools.empty(); }
  bool user_like(size_t index) const {
    return role == Role::kUser || role == Role::kDeveloper || (role == Role::kSystem && index > 0);
  }
};

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

Status check_markers(std::string_view text, const std::string& where) {
  for (std::string_view m : kAllMarkers)
    if (text.find(m) != std::string_view::npos)
      return invalid_argument(where + ": text contains the special marker '" + std::string(m) + "'");
  return ok_status();
}

// Step (1) for one list of parts: checks placeholders and sources, collects image records
// (nested tool-result parts included) in order.
Status scan_parts(const std::vector<ContentPart>& parts, const std::string& where, bool strict,
                  std::vector<ImageRecord>* images) {
  for (size_t i = 0; i < parts.size(); ++i) {
    const ContentPart& p = parts[i];
    std::string w = where + "[" + std::to_string(i) + "]";
    switch (p.kind) {
      case ContentPart::Kind::kImage:
        if (!p.image.has_source) return invalid_argument(w + ": image part has no source (url, source or data)");
        images->push_back(p.image);
        break;
      case ContentPart::Kind::kText:
        if (p.text.find(kImage) != std::string::npos)
          return invalid_argument(w + ".text: contains the image placeholder " + std::string(kImage) +
                                  "; send images as image parts");
        if (strict) DSV41_RETURN_IF_ERROR(check_markers(p.text, w + ".text"));
        break;
      case ContentPart::Kind::kToolResult:
        if (p.result_is_list) {
          DSV41_RETURN_IF_ERROR(scan_parts(p.nested, w + ".content", strict, images));
        } else if (strict) {
          DSV41_RETURN_IF_ERROR(check_markers(p.result_text, w + ".content"));
        }
        break;
      default: break;
    }
  }
  return ok_status();
}

// Text parts (images as placeholders) joined by a blank line: how list content reads as text.
Result<std::string> joined_text(const std::vector<ContentPart>& parts, const std::string& where) {
  std::vector<std::string> texts;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ContentPart& p = parts[i];
    if (p.kind == ContentPart::Kind::kImage) {
      texts.emplace_back(kImage);
    } else if (p.kind == ContentPart::Kind::kText) {
      if (p.text_null) return invalid_argument(where + "[" + std::to_string(i) + "].text: null");
      texts.push_back(p.text);
    }
  }
  return join(texts, "\n\n");
}

// A user turn's blocks from list content: text, placeholders, client-built tool results,
// and "[Unsupported <type>]" for anything else.
Result<std::vector<Block>> user_blocks(const std::vector<ContentPart>& parts, const std::string& where) {
  std::vector<Block> blocks;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ContentPart& p = parts[i];
    std::string w = where + "[" + std::to_string(i) + "]";
    Block b;
    switch (p.kind) {
      case ContentPart::Kind::kText:
        if (p.text_null) return invalid_argument(w + ".text: null");
        b.text = p.text;
        break;
      case ContentPart::Kind::kImage: b.text = std::string(kImage); break;
      case ContentPart::Kind::kOther: b.text = "[Unsupported " + p.type_name + "]"; break;
      case ContentPart::Kind::kNotObject: return invalid_argument(w + ": expected a content part object");
      case ContentPart::Kind::kToolResult: {
        b.is_tool_result = true;
        b.tool_use_id = p.tool_use_id;
        if (!p.result_is_list) {
          b.text = p.result_text;
          break;
        }
        std::vector<std::string> texts;
        for (size_t k = 0; k < p.nested.size(); ++k) {
          const ContentPart& n = p.nested[k];
          switch (n.kind) {
            case ContentPart::Kind::kText:
              if (n.text_null) return invalid_argument(w + ".content[" + std::to_string(k) + "].text: null");
              texts.push_back(n.text);
              break;
            case ContentPart::Kind::kImage: texts.emplace_back(kImage); break;
            case ContentPart::Kind::kOther: texts.push_back("[Unsupported " + n.type_name + "]"); break;
            case ContentPart::Kind::kToolResult: texts.emplace_back("[Unsupported tool_result]"); break;
            case ContentPart::Kind::kNotObject:
              return invalid_argument(w + ".content[" + std::to_string(k) + "]: expected a content part object");
          }
        }
        b.text = join(texts, "\n\n");
        break;
      }
    }
    blocks.push_back(std::move(b));
  }
  return blocks;
}

// Step (1) for one message: an Item (tool messages become a user turn with one result block).
Result<Item> prepare(const Message& m, const std::string& where, bool strict, std::vector<ImageRecord>* images) {
  const Content& c = m.content;
  if (c.kind == Content::Kind::kString && c.text.find(kImage) != std::string::npos)
    return invalid_argument(where + ".content: contains the image placeholder " + std::string(kImage) +
                            "; send images as image parts");
  if (m.reasoning_content && m.reasoning_content->find(kImage) != std::string::npos)
    return invalid_argument(where + ".reasoning_content: contains the image placeholder " + std::string(kImage));
  if (c.kind == Content::Kind::kParts) DSV41_RETURN_IF_ERROR(scan_parts(c.parts, where + ".content", strict, images));
  if (strict) {
    if (c.kind == Content::Kind::kString) DSV41_RETURN_IF_ERROR(check_markers(c.text, where + ".content"));
    if (m.reasoning_content) DSV41_RETURN_IF_ERROR(check_markers(*m.reasoning_content, where + ".reasoning_content"));
  }

  Item it;
  it.role = m.role;
  it.src = &m;
  it.task = m.task;
  // The content as text, for roles that render it as one string. An empty part list counts
  // as absent, like the reference (which drops the key).
  bool absent = c.kind == Content::Kind::kMissing || (c.kind == Content::Kind::kParts && c.parts.empty());
  bool null = c.kind == Content::Kind::kNull;
  std::string text;
  if (c.kind == Content::Kind::kString) text = c.text;
  if (c.kind == Content::Kind::kParts && !c.parts.empty()) {
    DSV41_ASSIGN_OR_RETURN(text, joined_text(c.parts, where + ".content"));
  }

  switch (m.role) {
    case Role::kSystem:
    case Role::kAssistant: it.content = text; break;
    case Role::kDeveloper:
      it.content = text;
      it.content_falsy = text.empty();
      break;
    case Role::kLatestReminder: it.content = (absent || null) ? "None" : text; break;  // str(None)
    case Role::kTool: {
      Block b;
      b.is_tool_result = true;
      b.tool_use_id = m.tool_call_id;
      b.text = null ? "None" : text;
      if (strict) DSV41_RETURN_IF_ERROR(check_markers(b.text, where + ".content"));
      it.role = Role::kUser;
      it.src = nullptr;
      it.task.reset();
      it.blocks.push_back(std::move(b));
      break;
    }
    case Role::kUser:
      if (null) {
        // Refused only if rendered: a null user text in `context` is never read.
        it.null_text = true;
        it.blocks.push_back(Block{});
      } else if (c.kind == Content::Kind::kParts) {
        DSV41_ASSIGN_OR_RETURN(it.blocks, user_blocks(c.parts, where + ".content"));
      } else {
        it.blocks.push_back(Block{false, text, {}});
      }
      break;
  }
  return it;
}

// Steps (1) and (2) over one list. Tool results join the user turn before them; a user
// message joins the one before it unless that one carries a task.
Result<std::vector<Item>> prepare_and_merge(const std::vector<Message>& msgs, const char* list_name, bool strict,
                                           std::vector<ImageRecord>* images) {
  std::vector<Item> merged;
  for (size_t i = 0; i < msgs.size(); ++i) {
    std::string where = std::string(list_name) + "[" + std::to_string(i) + "]";
    DSV41_ASSIGN_OR_RETURN(Item it, prepare(msgs[i], where, strict, images));
    bool prev_user = !merged.empty() && merged.back().role == Role::kUser;
    if (msgs[i].role == Role::kTool && prev_user) {
      merged.back().blocks.push_back(std::move(it.blocks[0]));
    } else if (msgs[i].role == Role::kUser && prev_user && !merged.back().task) {
      for (auto& b : it.blocks) merged.back().blocks.push_back(std::move(b));
      merged.back().null_text = merged.back().null_text || it.null_text;
    } else {
      merged.push_back(std::move(it));
    }
  }
  return merged;
}

// Step (3): a user turn with several results follows the order of the most recent
// assistant's call ids (stable; an unknown id counts as position 0; text blocks stay put).
void sort_tool_results(const std::vector<Message>& context, std::vector<Item>& items) {
  std::map<std::string, size_t> order;
  auto note_calls = [&](const Message* m) {
    if (!m || m->role != Role::kAssistant || m->tool_calls.empty()) return;
    order.clear();
    for (size_t i = 0; i < m->tool_calls.size(); ++i)
      if (!m->tool_calls[i].id.empty()) order[m->tool_calls[i].id] = i;
  };
  for (const Message& m : context) note_calls(&m);
  for (Item& it : items) {
    note_calls(it.src);
    if (it.role != Role::kUser || order.empty()) continue;
    std::vector<Block> results;
    for (const Block& b : it.blocks)
      if (b.is_tool_result) results.push_back(b);
    if (results.size() < 2) continue;
    auto pos = [&](const Block& b) {
      auto f = order.find(b.tool_use_id);
      return f == order.end() ? size_t{0} : f->second;
    };
    std::stable_sort(results.begin(), results.end(), [&](const Block& a, const Block& b) { return pos(a) < pos(b); });
    size_t k = 0;
    for (Block& b : it.blocks)
      if (b.is_tool_result) b = results[k++];
  }
}

long last_user_index(const std::vector<Item>& items) {
  for (size_t i = items.size(); i-- > 0;)
    if (items[i].user_like(i)) return static_cast<long>(i);
  return -1;
}

// Step (4): before the last user-like message, assistants lose their reasoning and
// developer messages disappear.
std::vector<Item> drop_thinking(const std::vector<Item>& items) {
  long last = last_user_index(items);
  std::vector<Item> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    bool keep = it.role == Role::kUser || it.role == Role::kSystem || it.role == Role::kLatestReminder ||
                static_cast<long>(i) >= last;
    if (keep) {
      out.push_back(it);
    } else if (it.role == Role::kAssistant) {
      out.push_back(it);
      out.back().keep_reasoning = false;
    }
  }
  return out;
}

struct RenderState {
  const std::vector<Item>* full;
  ThinkingMode mode;
  bool drop;  // the effective drop_thinking
  long last_user;
  int budget;
  const std::set<std::string>* declared;  // non-null: calls must name one of these
};

Result<std::string> render_item(const RenderState& st, size_t index) {
  const std::vector<Item>& full = *st.full;
  const Item& it = full[index];
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
        const Block& b = it.blocks[i];
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
  DSV41_ASSIGN_OR_RETURN(std::vector<Item> ctx,
                         prepare_and_merge(req.context, "context", opt.reject_markers_in_text, &context_images));
  DSV41_ASSIGN_OR_RETURN(std::vector<Item> msgs,
                         prepare_and_merge(req.messages, "messages", opt.reject_markers_in_text, &result.images));
  sort_tool_results(req.context, msgs);

  std::vector<Item> full = ctx;
  full.insert(full.end(), msgs.begin(), msgs.end());

  // Tools anywhere switch drop_thinking off: an agent loop must see its earlier reasoning.
  bool drop = req.drop_thinking;
  for (const Item& it : full)
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
