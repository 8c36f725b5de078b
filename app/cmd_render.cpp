// `dsv41 render`: a chat request (the golden render cases' `input` object) -> the prompt text
// the model sees (model.md §5), optionally with token ids. With --json it prints one object
// {"prompt", "images", "ids"?} or {"error": {"message"}} (exit 1 on refusal).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/command.h"
#include "app/option_checks.h"
#include "src/chat/render.h"
#include "src/chat/request_json.h"
#include "src/format/tokenizer.h"

namespace dsv41::app {
namespace {

constexpr size_t kMaxRequestBytes = size_t{256} << 20;

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > kMaxRequestBytes)
    return out_of_range(path + ": " + std::to_string(text.size()) + " bytes, more than the request limit");
  return text;
}

struct RenderFlags {
  std::string request, messages, tokenizer, thinking, effort;
  bool json = false, keep_thinking = false, strict = false;
};

// Builds the request object: the file given by --request (or {"messages": <--messages file>}),
// then the convenience flags on top.
Result<chat::RenderRequest> load_request(const RenderFlags& f) {
  chat::Json input = chat::Json::object();
  if (!f.request.empty()) {
    DSV41_ASSIGN_OR_RETURN(std::string text, read_file(f.request));
    DSV41_ASSIGN_OR_RETURN(input, chat::parse_json_ordered(text, f.request));
    if (!input.is_object()) return invalid_argument(f.request + ": expected one JSON object");
  }
  if (!f.messages.empty()) {
    DSV41_ASSIGN_OR_RETURN(std::string text, read_file(f.messages));
    DSV41_ASSIGN_OR_RETURN(chat::Json msgs, chat::parse_json_ordered(text, f.messages));
    input["messages"] = std::move(msgs);
  }
  if (!f.thinking.empty()) input["thinking_mode"] = f.thinking;
  if (!input.contains("thinking_mode")) input["thinking_mode"] = "thinking";
  if (!f.effort.empty()) {
    bool digits = f.effort.find_first_not_of("0123456789") == std::string::npos && f.effort.size() < 10;
    input["reasoning_effort"] = digits ? chat::Json(std::stoll(f.effort)) : chat::Json(f.effort);
  }
  if (f.keep_thinking) input["drop_thinking"] = false;
  auto req = chat::render_request_from_json(input);
  if (!req.ok()) return req.status().with_context(f.request.empty() ? f.messages : f.request);
  return req;
}

int run_render(int argc, char** argv) {
  CLI::App app{"Render a chat request into the DeepSeek-V4.1 prompt text"};
  RenderFlags f;
  app.add_option("--request", f.request, "JSON object like a golden render case's input");
  app.add_option("--messages", f.messages, "JSON list of messages (instead of, or replacing, the request's)");
  app.add_option("--thinking", f.thinking, "thinking_mode: chat or thinking")->check(CLI::IsMember({"chat", "thinking"}));
  // A number is checked here so the error names the option; tier names are checked by the library
  // against the tokenizer's table, which lists the accepted ones.
  app.add_option("--effort", f.effort, "reasoning effort: 1..100 or low/high/xhigh/max")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v.empty() || v.find_first_not_of("-+0123456789") != std::string::npos) return {};
            return in_range<int64_t>(1, 100)(v);
          },
          "1 to 100 or a tier name"));
  app.add_flag("--keep-thinking", f.keep_thinking, "drop_thinking = false");
  app.add_flag("--strict", f.strict, "refuse marker text in messages and calls to undeclared tools");
  app.add_option("--tokenizer", f.tokenizer, "model directory with tokenizer.json: also print token ids");
  app.add_flag("--json", f.json, "print one JSON object");
  name_parse_errors(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto fail = [&](const Status& s) {
    if (f.json) {
      std::cout << chat::py_json_dumps(chat::error_to_json(s)) << "\n";
    } else {
      std::fprintf(stderr, "dsv41 render: %s\n", s.to_string().c_str());
    }
    return 1;
  };
  if (f.request.empty() && f.messages.empty()) return fail(invalid_argument("give --request FILE or --messages FILE"));

  auto req = load_request(f);
  if (!req.ok()) return fail(req.status());
  chat::RenderOptions opt;
  opt.reject_markers_in_text = f.strict;
  opt.require_declared_tools = f.strict;
  auto res = chat::render_prompt(req.value(), opt);
  if (!res.ok()) return fail(res.status());
  std::vector<int32_t> ids;
  if (!f.tokenizer.empty()) {
    // A directory holding tokenizer.json, or the file itself. Markers in the prompt are
    // added tokens, so each becomes its own id.
    std::string path = f.tokenizer;
    if (!path.ends_with(".json")) path += "/tokenizer.json";
    auto tok = Tokenizer::load(path);
    if (!tok.ok()) return fail(tok.status());
    auto enc = tok->encode(res->prompt);
    if (!enc.ok()) return fail(enc.status().with_context("prompt"));
    ids = std::move(enc).value();
  }
  const bool with_ids = !f.tokenizer.empty();
  if (f.json) {
    std::cout << chat::py_json_dumps(chat::render_result_to_json(res.value(), with_ids ? &ids : nullptr)) << "\n";
  } else {
    std::cout << res->prompt << "\n";
    if (with_ids) {
      std::cout << "ids:";
      for (int32_t id : ids) std::cout << " " << id;
      std::cout << "\n";
    }
    for (const auto& img : res->images) std::cerr << "image: " << img.json << "\n";
  }
  return 0;
}

const CommandRegistration kRegister({"render", "render a chat request into prompt text (and token ids)", run_render});

}  // namespace
}  // namespace dsv41::app
