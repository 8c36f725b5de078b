// DSML, the V4.1 tool-call markup (model.md §5; golden encoding README "Tools block" and
// "Tool calls (DSML)"): the "## Tools" text appended to system/developer messages, the
// calls block an assistant turn ends with, and the two tag grammars the output parser
// matches (invoke name, parameter) with the reference's exact tolerances. Owns nothing.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/status.h"
#include "src/chat/messages.h"

namespace dsv41::chat {

// "## Tools\n\n...### Available Tool Schemas\n\n" + one schema line per tool + "...calls.\n".
std::string render_tools_block(const std::vector<Tool>& tools);

// "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" + json
std::string render_response_format(const std::string& schema_json);

// "\n\n<｜DSML｜ calls>\n" + invokes joined by "\n" + "\n</｜DSML｜ calls>". Each call's
// arguments must be a JSON object (a string is parsed first); string values are written raw
// with string="true", other values as Python-style JSON with string="false". `where` names
// the message for errors. Empty `calls` renders nothing.
Result<std::string> render_tool_calls(const std::vector<ToolCall>& calls, const std::string& where);

// One parsed parameter: name, raw value, and whether it was marked string="true".
struct DsmlParam {
  std::string name;
  std::string value;
  bool is_string = false;
};

// The invoke tag's attribute text (what follows "<｜DSML｜ invoke" up to the next tag):
// optional whitespace, name="NAME">\n, optionally one more \n. Sets *name on success.
bool match_invoke_name(std::string_view text, std::string* name);
// A parameter's text (what follows "<｜DSML｜ parameter" up to "/｜DSML｜ parameter"):
//  name="KEY" string="true|false">VALUE< (or ...<\n). Sets *param on success.
bool match_parameter(std::string_view text, DsmlParam* param);
// Whether `text` can still grow into a match of the tags above (early error detection).
bool could_start_invoke_name(std::string_view text);
bool could_start_parameter(std::string_view text);

// {"key": value, ...}: string values JSON-encoded, string="false" values copied verbatim.
std::string arguments_json(const std::vector<DsmlParam>& params);

}  // namespace dsv41::chat
