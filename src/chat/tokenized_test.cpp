// Chat rendering and parsing at the token level, with the real tokenizer (src/format/
// tokenizer.h): the golden parse cases fed one token at a time, and agent-loop prefix
// stability measured in token ids. The test tokenizer is the golden tiny model's tokenizer
// with the chat markers added as added tokens, as the released V4.1 tokenizer has them.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/output_parser.h"
#include "src/chat/prefix.h"
#include "src/chat/render.h"
#include "src/chat/request_json.h"
#include "src/format/tokenizer.h"
#include "tests/golden_file.h"

namespace dsv41::chat {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The tiny tokenizer plus every chat marker (but the bare ｜DSML｜ fragment) as an added token.
const Tokenizer& chat_tokenizer() {
  static const Tokenizer tok = [] {
    nlohmann::json j = nlohmann::json::parse(slurp(DSV41_GOLDEN_DIR "/v41-tiny-f32/tokenizer.json"));
    int next = 0;
    for (const auto& [k, v] : j["model"]["vocab"].items()) next = std::max(next, v.get<int>() + 1);
    for (const auto& a : j["added_tokens"]) next = std::max(next, a["id"].get<int>() + 1);
    for (std::string_view m : kAllMarkers) {
      if (m == kDsml || m == kBos || m == kEos) continue;
      j["added_tokens"].push_back({{"id", next++}, {"content", std::string(m)}, {"single_word", false},
                                   {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    auto t = Tokenizer::parse(j.dump(), "chat test tokenizer");
    if (!t.ok()) throw std::runtime_error(t.status().to_string());
    return std::move(t).value();
  }();
  return tok;
}

std::vector<int32_t> encode(std::string_view text) {
  auto ids = chat_tokenizer().encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? ids.value() : std::vector<int32_t>{};
}

std::string verdict(const Result<ParsedMessage>& r) {
  return r.ok() ? py_json_dumps(parsed_message_to_json(r.value())) : std::string("error");
}

TEST(ChatTokenized, MarkersAreSingleTokens) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (std::string_view m : {kUser, kAssistant, kThinkOpen, kThinkClose, kEos, kBos}) {
    EXPECT_EQ(encode(m).size(), 1u) << m;
  }
}

// Every golden parse case, fed as the tokenizer splits it (token bytes one at a time).
TEST(ChatTokenized, ParseCasesFedTokenByToken) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto all = parse_json_ordered(slurp(DSV41_GOLDEN_DIR "/encoding/cases.json"), "cases.json");
  ASSERT_TRUE(all.ok());
  int checked = 0;
  for (const Json& c : all.value()) {
    if (c["kind"] != "parse") continue;
    auto req = parse_request_from_json(c["input"]);
    ASSERT_TRUE(req.ok());
    std::vector<int32_t> ids = encode(req->completion);
    OutputParser p(req->thinking_mode);
    std::string fed;
    for (int32_t id : ids) {
      std::string_view bytes = chat_tokenizer().decode_token(id);
      fed += bytes;
      p.feed(bytes);
    }
    ASSERT_EQ(fed, req->completion) << c["id"];
    EXPECT_EQ(verdict(p.finish()), verdict(parse_completion(req->completion, req->thinking_mode))) << c["id"];
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

// Thinking-mode agent loop with declared tools: the previous turn's ids (prompt + generated)
// are a prefix of the next prompt's ids at every turn.
TEST(ChatTokenized, AgentLoopPrefixInTokens) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  RenderRequest req;
  Message sys = Message::make(Role::kSystem, "Agent.");
  sys.tools.push_back({"get_weather", R"({"name": "get_weather", "parameters": {"type": "object"}})"});
  req.messages = {sys, Message::make(Role::kUser, "Weather in Oslo?")};
  const std::string calls =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"city\" "
      "string=\"true\">Oslo</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + std::string(kEos);
  const std::vector<std::string> completions = {"Look it up." + std::string(kThinkClose) + calls,
                                                "Got it." + std::string(kThinkClose) + "3 C in Oslo." + std::string(kEos)};
  for (size_t turn = 0; turn < completions.size(); ++turn) {
    auto prompt = render_prompt(req);
    ASSERT_TRUE(prompt.ok()) << prompt.status().to_string();
    std::vector<int32_t> previous = encode(prompt->prompt);
    std::vector<int32_t> generated = encode(completions[turn]);
    previous.insert(previous.end(), generated.begin(), generated.end());
    auto parsed = parse_completion(completions[turn], req.thinking_mode);
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    Message a;
    a.role = Role::kAssistant;
    a.content = Content::of(parsed->content);
    a.reasoning_content = parsed->reasoning_content;
    for (const auto& tc : parsed->tool_calls) a.tool_calls.push_back({"c" + std::to_string(turn), tc.name, tc.arguments});
    req.messages.push_back(a);
    if (turn == 0) {
      Message result = Message::make(Role::kTool, "3 C");
      result.tool_call_id = "c0";
      req.messages.push_back(result);
    } else {
      req.messages.push_back(Message::make(Role::kUser, "Thanks"));
    }
    auto next = render_prompt(req);
    ASSERT_TRUE(next.ok());
    PrefixReport r = common_token_prefix(previous, encode(next->prompt));
    EXPECT_TRUE(r.extends()) << "turn " << turn << ": common " << r.common << " of " << r.previous_size;
  }
}

}  // namespace
}  // namespace dsv41::chat
