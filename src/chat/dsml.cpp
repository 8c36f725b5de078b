// DSML rendering and tag matching (see dsml.h). The matchers reproduce the reference parser's
// regular expressions exactly, including Python's `$` (which also matches before one final
// newline) and `\s` (Unicode whitespace), because the golden cases accept those variants.
#include "src/chat/dsml.h"

#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/py_json.h"

namespace dsv41::chat {

std::string render_tools_block(const std::vector<Tool>& tools) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i) schemas += '\n';
    schemas += tools[i].function_json;
  }
  std::string out;
  out += "## Tools\n\nYou have access to a set of tools to help answer the user's question. ";
  out += "You can invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n";
  out += "<｜DSML｜ calls>\n";
  out += "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n";
  out += "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜ parameter>\n";
  out += "...\n</｜DSML｜ invoke>\n";
  out += "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ invoke>\n";
  out += "</｜DSML｜ calls>\n\n";
  out += "String parameters should be specified as is and set `string=\"true\"`. For all other types "
         "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n";
  out += "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
         "<think>...</think> BEFORE any tool calls or final response.\n\n";
  out += "Otherwise, output directly after </think> with tool calls or final response.\n\n";
  out += "### Available Tool Schemas\n\n";
  out += schemas;
  out += "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
  return out;
}

std::string render_response_format(const std::string& schema_json) {
  return "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" + schema_json;
}

Result<std::string> render_tool_calls(const std::vector<ToolCall>& calls, const std::string& where) {
  if (calls.empty()) return std::string();
  std::string invokes;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string w = where + ".tool_calls[" + std::to_string(i) + "].function.arguments";
    DSV41_ASSIGN_OR_RETURN(Json args, parse_json_ordered(calls[i].arguments, w));
    if (!args.is_object()) return invalid_argument(w + ": must be a JSON object, got " + std::string(args.type_name()));
    std::string params;
    bool first = true;
    for (const auto& [key, value] : args.items()) {
      if (!first) params += '\n';
      first = false;
      params += std::string(kParamOpen) + " name=\"" + key + "\" string=\"" + (value.is_string() ? "true" : "false") + "\">";
      params += value.is_string() ? value.get_ref<const std::string&>() : py_json_dumps(value);
      params += kParamClose;
    }
    if (i) invokes += '\n';
    invokes += std::string(kInvokeOpen) + " name=\"" + calls[i].name + "\">\n" + params + "\n" + std::string(kInvokeClose) + ">";
  }
  return "\n\n" + std::string(kCallsOpen) + "\n" + invokes + "\n" + std::string(kCallsClose);
}

namespace {

// Python's str.isspace() (what `\s` matches in a str pattern).
bool py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Decodes one UTF-8 sequence at text[pos]. Returns its length, 0 when the text ends inside
// a sequence that may still complete, or -1 for an ill-formed byte (never whitespace).
int decode(std::string_view text, size_t pos, uint32_t* cp) {
  unsigned char c = static_cast<unsigned char>(text[pos]);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : -1;
  if (len < 0) return -1;
  uint32_t v = c & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) {
    if (pos + k >= text.size()) return 0;
    unsigned char b = static_cast<unsigned char>(text[pos + k]);
    if ((b & 0xC0) != 0x80) return -1;
    v = (v << 6) | (b & 0x3F);
  }
  *cp = v;
  return len;
}

// Length of the leading `\s*` run; sets *incomplete when the text ends inside a sequence.
size_t leading_space(std::string_view text, bool* incomplete) {
  size_t pos = 0;
  *incomplete = false;
  while (pos < text.size()) {
    uint32_t cp = 0;
    int len = decode(text, pos, &cp);
    if (len == 0) {
      *incomplete = true;
      break;
    }
    if (len < 0 || !py_isspace(cp)) break;
    pos += static_cast<size_t>(len);
  }
  return pos;
}

bool compatible_prefix(std::string_view text, std::string_view literal) {
  size_t n = std::min(text.size(), literal.size());
  return text.substr(0, n) == literal.substr(0, n);
}

}  // namespace

bool match_invoke_name(std::string_view text, std::string* name) {
  // ^\s*name="(.*?)">\n$  (DOTALL; `$` is the end or just before a final "\n")
  bool incomplete = false;
  std::string_view rest = text.substr(leading_space(text, &incomplete));
  constexpr std::string_view kHead = "name=\"";
  if (rest.substr(0, kHead.size()) != kHead) return false;
  rest.remove_prefix(kHead.size());
  // Shortest name: the tail is `">\n\n` (the `$` before a final newline) or `">\n`.
  if (rest.size() >= 4 && rest.substr(rest.size() - 4) == "\">\n\n") {
    *name = std::string(rest.substr(0, rest.size() - 4));
    return true;
  }
  if (rest.size() >= 3 && rest.substr(rest.size() - 3) == "\">\n") {
    *name = std::string(rest.substr(0, rest.size() - 3));
    return true;
  }
  return false;
}

bool match_parameter(std::string_view text, DsmlParam* param) {
  // ^ name="(.*?)" string="(true|false)">(.*?)<$  (DOTALL)
  constexpr std::string_view kHead = " name=\"";
  if (text.substr(0, kHead.size()) != kHead) return false;
  std::string_view rest = text.substr(kHead.size());
  constexpr std::string_view kTrue = "\" string=\"true\">";
  constexpr std::string_view kFalse = "\" string=\"false\">";
  // The shortest name is the first position where a string attribute follows; a later one
  // leaves a suffix of the same tail, so if the first fails every later one fails too.
  size_t p_true = rest.find(kTrue), p_false = rest.find(kFalse);
  size_t p = std::min(p_true, p_false);
  if (p == std::string_view::npos) return false;
  bool is_string = p == p_true;
  std::string_view tail = rest.substr(p + (is_string ? kTrue.size() : kFalse.size()));
  std::string_view value;
  if (tail.size() >= 2 && tail.substr(tail.size() - 2) == "<\n") {
    value = tail.substr(0, tail.size() - 2);
  } else if (!tail.empty() && tail.back() == '<') {
    value = tail.substr(0, tail.size() - 1);
  } else {
    return false;
  }
  param->name = std::string(rest.substr(0, p));
  param->value = std::string(value);
  param->is_string = is_string;
  return true;
}

bool could_start_invoke_name(std::string_view text) {
  bool incomplete = false;
  size_t ws = leading_space(text, &incomplete);
  if (incomplete) return true;
  return compatible_prefix(text.substr(ws), "name=\"");
}

bool could_start_parameter(std::string_view text) { return compatible_prefix(text, " name=\""); }

std::string arguments_json(const std::vector<DsmlParam>& params) {
  std::string out = "{";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i) out += ", ";
    out += py_json_string(params[i].name);
    out += ": ";
    out += params[i].is_string ? py_json_string(params[i].value) : params[i].value;
  }
  out += "}";
  return out;
}

}  // namespace dsv41::chat
