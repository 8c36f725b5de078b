// `dsv41 parse`: a completion (the golden parse cases' `input` object: completion,
// thinking_mode) -> the assistant message: reasoning, content and OpenAI-style tool calls
// (model.md §5). With --json it prints the message in the cases' `expected` format, or
// {"error": {"message"}} (exit 1) when the completion is malformed. --chunk N feeds the
// streaming parser N bytes at a time and prints each delta as a JSON line first.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/command.h"
#include "app/option_checks.h"
#include "src/chat/output_parser.h"
#include "src/chat/request_json.h"

namespace dsv41::app {
namespace {

constexpr size_t kMaxCompletionBytes = size_t{256} << 20;

Result<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > kMaxCompletionBytes) return out_of_range(path + ": larger than the request limit");
  return ss.str();
}

chat::Json delta_json(const chat::StreamDelta& d) {
  chat::Json out = chat::Json::object();
  if (!d.reasoning.empty()) out["reasoning"] = d.reasoning;
  if (!d.content.empty()) out["content"] = d.content;
  if (!d.tool_calls.empty()) {
    chat::ParsedMessage m;
    m.tool_calls = d.tool_calls;
    out["tool_calls"] = chat::parsed_message_to_json(m)["tool_calls"];
  }
  return out;
}

int run_parse(int argc, char** argv) {
  CLI::App app{"Parse a DeepSeek-V4.1 completion into reasoning, content and tool calls"};
  std::string request, completion, thinking;
  size_t chunk = 0;
  bool json = false;
  app.add_option("--request", request, "JSON object like a golden parse case's input");
  app.add_option("--completion", completion, "raw completion text file (instead of --request)");
  app.add_option("--thinking", thinking, "thinking_mode: chat or thinking")->check(CLI::IsMember({"chat", "thinking"}));
  // 0 = no streaming; a completion longer than 1 GiB is not read anyway.
  app.add_option("--chunk", chunk, "stream: feed N bytes at a time and print each delta")
      ->check(in_range<size_t>(0, size_t{1} << 30));
  app.add_flag("--json", json, "print one JSON object");
  name_parse_errors(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto fail = [&](const Status& s) {
    if (json) {
      std::cout << chat::py_json_dumps(chat::error_to_json(s)) << "\n";
    } else {
      std::fprintf(stderr, "dsv41 parse: %s\n", s.to_string().c_str());
    }
    return 1;
  };

  chat::ParseRequest req;
  if (!request.empty()) {
    auto text = slurp(request);
    if (!text.ok()) return fail(text.status());
    auto r = chat::parse_request_from_text(text.value());
    if (!r.ok()) return fail(r.status().with_context(request));
    req = r.value();
  } else if (!completion.empty()) {
    auto text = slurp(completion);
    if (!text.ok()) return fail(text.status());
    req.completion = text.value();
  } else {
    return fail(invalid_argument("give --request FILE or --completion FILE"));
  }
  if (!thinking.empty()) req.thinking_mode = thinking == "chat" ? chat::ThinkingMode::kChat : chat::ThinkingMode::kThinking;

  chat::OutputParser parser(req.thinking_mode);
  const size_t step = chunk ? chunk : req.completion.size() + 1;
  for (size_t pos = 0; pos < req.completion.size(); pos += step) {
    chat::StreamDelta d = parser.feed(std::string_view(req.completion).substr(pos, step));
    if (chunk && !d.empty()) std::cout << chat::py_json_dumps(chat::Json{{"delta", delta_json(d)}}) << "\n";
  }
  chat::StreamDelta tail;
  auto msg = parser.finish(&tail);
  if (chunk && !tail.empty()) std::cout << chat::py_json_dumps(chat::Json{{"delta", delta_json(tail)}}) << "\n";
  if (!msg.ok()) return fail(msg.status());
  if (json) {
    std::cout << chat::py_json_dumps(chat::parsed_message_to_json(msg.value())) << "\n";
    return 0;
  }
  std::cout << "reasoning: " << msg->reasoning_content << "\n";
  std::cout << "content: " << msg->content << "\n";
  for (const auto& tc : msg->tool_calls) std::cout << "tool call: " << tc.name << " " << tc.arguments << "\n";
  return 0;
}

const CommandRegistration kRegister({"parse", "parse a completion into reasoning, content and tool calls", run_parse});

}  // namespace
}  // namespace dsv41::app
