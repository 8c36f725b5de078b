// Chat turns: steps (1)-(4) of rendering (see turns.h).
#include "src/chat/turns.h"

#include <algorithm>
#include <map>

#include "src/chat/markers.h"

namespace dsv41::chat {
namespace {

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
Result<std::vector<TurnBlock>> user_blocks(const std::vector<ContentPart>& parts, const std::string& where) {
  std::vector<TurnBlock> blocks;
  for (size_t i = 0; i < parts.size(); ++i) {
    const ContentPart& p = parts[i];
    std::string w = where + "[" + std::to_string(i) + "]";
    TurnBlock b;
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

// Step (1) for one message: an Turn (tool messages become a user turn with one result block).
Result<Turn> prepare(const Message& m, const std::string& where, bool strict, std::vector<ImageRecord>* images) {
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

  Turn it;
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
      TurnBlock b;
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
        it.blocks.push_back(TurnBlock{});
      } else if (c.kind == Content::Kind::kParts) {
        DSV41_ASSIGN_OR_RETURN(it.blocks, user_blocks(c.parts, where + ".content"));
      } else {
        it.blocks.push_back(TurnBlock{false, text, {}});
      }
      break;
  }
  return it;
}

}  // namespace

// Steps (1) and (2) over one list. Tool results join the user turn before them; a user
// message joins the one before it unless that one carries a task.
Result<std::vector<Turn>> prepare_and_merge(const std::vector<Message>& msgs, const char* list_name, bool strict,
                                           std::vector<ImageRecord>* images) {
  std::vector<Turn> merged;
  for (size_t i = 0; i < msgs.size(); ++i) {
    std::string where = std::string(list_name) + "[" + std::to_string(i) + "]";
    DSV41_ASSIGN_OR_RETURN(Turn it, prepare(msgs[i], where, strict, images));
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
void sort_tool_results(const std::vector<Message>& context, std::vector<Turn>& items) {
  std::map<std::string, size_t> order;
  auto note_calls = [&](const Message* m) {
    if (!m || m->role != Role::kAssistant || m->tool_calls.empty()) return;
    order.clear();
    for (size_t i = 0; i < m->tool_calls.size(); ++i)
      if (!m->tool_calls[i].id.empty()) order[m->tool_calls[i].id] = i;
  };
  for (const Message& m : context) note_calls(&m);
  for (Turn& it : items) {
    note_calls(it.src);
    if (it.role != Role::kUser || order.empty()) continue;
    std::vector<TurnBlock> results;
    for (const TurnBlock& b : it.blocks)
      if (b.is_tool_result) results.push_back(b);
    if (results.size() < 2) continue;
    auto pos = [&](const TurnBlock& b) {
      auto f = order.find(b.tool_use_id);
      return f == order.end() ? size_t{0} : f->second;
    };
    std::stable_sort(results.begin(), results.end(), [&](const TurnBlock& a, const TurnBlock& b) { return pos(a) < pos(b); });
    size_t k = 0;
    for (TurnBlock& b : it.blocks)
      if (b.is_tool_result) b = results[k++];
  }
}

long last_user_index(const std::vector<Turn>& items) {
  for (size_t i = items.size(); i-- > 0;)
    if (items[i].user_like(i)) return static_cast<long>(i);
  return -1;
}

// Step (4): before the last user-like message, assistants lose their reasoning and
// developer messages disappear.
std::vector<Turn> drop_thinking(const std::vector<Turn>& items) {
  long last = last_user_index(items);
  std::vector<Turn> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const Turn& it = items[i];
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

}  // namespace dsv41::chat
