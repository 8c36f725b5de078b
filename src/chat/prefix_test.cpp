// Prefix stability over multi-turn agent loops (docs/CHAT.md "Prefix stability"): the previous
// turn's prompt + generated completion must be an exact prefix of the next turn's prompt
// wherever the rules allow it, and where they do not (drop_thinking, non-canonical JSON,
// a changed effort) the common prefix ends exactly where documented.
#include "src/chat/prefix.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/output_parser.h"
#include "src/chat/render.h"
#include "src/chat/request_json.h"

namespace dsv41::chat {
namespace {

// Stand-in tokenizer for prefix checks: marker strings are single ids (as added tokens are
// matched before BPE), every other byte is its own id. Enough to show that a text prefix ending
// on a marker is also a token prefix.
std::vector<int32_t> toy_tokens(std::string_view text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    bool matched = false;
    int32_t id = 1000;
    for (std::string_view m : kAllMarkers) {
      ++id;
      if (text.substr(i, m.size()) == m) {
        ids.push_back(id);
        i += m.size();
        matched = true;
        break;
      }
    }
    if (!matched) ids.push_back(static_cast<unsigned char>(text[i++]));
  }
  return ids;
}

Tool weather_tool() {
  Tool t;
  t.name = "get_weather";
  t.function_json = R"({"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})";
  return t;
}

// The assistant message a client echoes back from a parsed completion (OpenAI response shape).
Message echo(const ParsedMessage& p, ThinkingMode mode, int turn) {
  Message m;
  m.role = Role::kAssistant;
  m.content = Content::of(p.content);
  if (mode == ThinkingMode::kThinking) m.reasoning_content = p.reasoning_content;
  for (size_t i = 0; i < p.tool_calls.size(); ++i)
    m.tool_calls.push_back({"call_" + std::to_string(turn) + "_" + std::to_string(i), p.tool_calls[i].name,
                            p.tool_calls[i].arguments});
  return m;
}

struct Loop {
  RenderRequest req;
  std::string prev_tokens;  // previous prompt + completion, as text

  // Renders the current conversation; returns the prefix report against the last turn.
  PrefixReport next_prompt(std::string* prompt) {
    auto r = render_prompt(req);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    *prompt = r.ok() ? r->prompt : std::string();
    auto a = toy_tokens(prev_tokens), b = toy_tokens(*prompt);
    PrefixReport text = common_text_prefix(prev_tokens, *prompt);
    PrefixReport tok = common_token_prefix(a, b);
    EXPECT_EQ(text.extends(), tok.extends());
    return text;
  }
  // The model answers `completion`; the client appends the parsed message.
  void generate(const std::string& prompt, const std::string& completion, int turn) {
    prev_tokens = prompt + completion;
    auto parsed = parse_completion(completion, req.thinking_mode);
    ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
    req.messages.push_back(echo(parsed.value(), req.thinking_mode, turn));
  }
  void tool_result(const std::string& id, const std::string& text) {
    Message m = Message::make(Role::kTool, text);
    m.tool_call_id = id;
    req.messages.push_back(m);
  }
};

const std::string kEosS(kEos);

std::string call_block(const std::string& city) {
  return "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"city\" "
         "string=\"true\">" + city + "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
}

TEST(ChatPrefix, CommonPrefixBasics) {
  std::vector<int32_t> a{1, 2, 3}, b{1, 2, 3, 4}, c{1, 9};
  EXPECT_EQ(common_token_prefix(a, b).common, 3u);
  EXPECT_TRUE(common_token_prefix(a, b).extends());
  EXPECT_EQ(common_token_prefix(a, c).common, 1u);
  EXPECT_FALSE(common_token_prefix(a, c).extends());
  EXPECT_EQ(common_token_prefix({}, a).common, 0u);
  EXPECT_TRUE(common_token_prefix({}, a).extends());
  EXPECT_EQ(common_text_prefix("abc", "ab").common, 2u);
}

// Thinking mode with tools declared: drop_thinking is off, so every turn extends the last.
TEST(ChatPrefix, ThinkingAgentLoopWithToolsExtendsEveryTurn) {
  Loop loop;
  Message sys = Message::make(Role::kSystem, "You are an agent.");
  sys.tools.push_back(weather_tool());
  loop.req.messages = {sys, Message::make(Role::kUser, "Weather in Oslo and Lima?")};
  loop.req.thinking_mode = ThinkingMode::kThinking;
  std::string prompt;
  loop.next_prompt(&prompt);
  loop.generate(prompt, "Oslo first." + std::string(kThinkClose) + call_block("Oslo") + kEosS, 1);
  loop.tool_result("call_1_0", "Oslo 3 C");
  EXPECT_TRUE(loop.next_prompt(&prompt).extends());
  // Two calls in one block, results sent back in reverse order (reordered by call id).
  std::string two = "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"city\" "
                    "string=\"true\">Lima</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"get_weather\">\n"
                    "<｜DSML｜ parameter name=\"city\" string=\"true\">Quito</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
                    "</｜DSML｜ calls>";
  loop.generate(prompt, "Now Lima and Quito." + std::string(kThinkClose) + "Checking." + two + kEosS, 2);
  loop.tool_result("call_2_1", "Quito 15 C");
  loop.tool_result("call_2_0", "Lima 19 C");
  EXPECT_TRUE(loop.next_prompt(&prompt).extends());
  EXPECT_NE(prompt.find("<tool_result>Lima 19 C</tool_result>\n\n<tool_result>Quito 15 C</tool_result>"),
            std::string::npos);
  loop.generate(prompt, "Done." + std::string(kThinkClose) + "Oslo 3, Lima 19, Quito 15." + kEosS, 3);
  loop.req.messages.push_back(Message::make(Role::kUser, "Thanks! And Rome?"));
  EXPECT_TRUE(loop.next_prompt(&prompt).extends());
}

// A calls block may end without EOS (generation stopped on the close tag); the re-rendered
// turn appends EOS after it, so the previous tokens are still a prefix.
TEST(ChatPrefix, CallsWithoutEosStillExtend) {
  Loop loop;
  Message sys = Message::make(Role::kSystem, "Agent.");
  sys.tools.push_back(weather_tool());
  loop.req.messages = {sys, Message::make(Role::kUser, "Oslo?")};
  loop.req.thinking_mode = ThinkingMode::kChat;
  std::string prompt;
  loop.next_prompt(&prompt);
  loop.generate(prompt, call_block("Oslo"), 1);
  loop.tool_result("call_1_0", "3 C");
  EXPECT_TRUE(loop.next_prompt(&prompt).extends());
}

// Chat mode: no reasoning is ever rendered, so plain multi-turn chat always extends.
TEST(ChatPrefix, ChatModeMultiTurnExtends) {
  Loop loop;
  loop.req.messages = {Message::make(Role::kSystem, "Be brief."), Message::make(Role::kUser, "Hi")};
  loop.req.thinking_mode = ThinkingMode::kChat;
  std::string prompt;
  loop.next_prompt(&prompt);
  for (int turn = 1; turn <= 3; ++turn) {
    loop.generate(prompt, "Answer " + std::to_string(turn) + "." + kEosS, turn);
    loop.req.messages.push_back(Message::make(Role::kUser, "More " + std::to_string(turn)));
    EXPECT_TRUE(loop.next_prompt(&prompt).extends()) << "turn " << turn;
  }
}

// drop_thinking = false keeps every reasoning, so thinking-mode chat extends too.
TEST(ChatPrefix, ThinkingKeepExtends) {
  Loop loop;
  loop.req.messages = {Message::make(Role::kUser, "Q1")};
  loop.req.drop_thinking = false;
  loop.req.reasoning_effort = ReasoningEffort::integer(37);
  std::string prompt;
  loop.next_prompt(&prompt);
  for (int turn = 1; turn <= 3; ++turn) {
    loop.generate(prompt, "think " + std::to_string(turn) + std::string(kThinkClose) + "A" + kEosS, turn);
    loop.req.messages.push_back(Message::make(Role::kUser, "Q" + std::to_string(turn + 1)));
    EXPECT_TRUE(loop.next_prompt(&prompt).extends()) << "turn " << turn;
  }
}

// drop_thinking (the default, no tools): once a new user turn follows, the previous reply
// loses its reasoning and its header turns from <think> into </think>. The reusable prefix
// ends right after the previous turn's <｜Assistant｜>.
TEST(ChatPrefix, DropThinkingBreaksAtThePreviousHeader) {
  Loop loop;
  loop.req.messages = {Message::make(Role::kUser, "Q1")};
  std::string prompt1, prompt2;
  loop.next_prompt(&prompt1);
  ASSERT_TRUE(prompt1.ends_with(std::string(kAssistant) + std::string(kThinkOpen)));
  loop.generate(prompt1, "because" + std::string(kThinkClose) + "A1" + kEosS, 1);
  loop.req.messages.push_back(Message::make(Role::kUser, "Q2"));
  EXPECT_FALSE(loop.next_prompt(&prompt2).extends());
  // In tokens: everything up to the previous <｜Assistant｜>; then <think> became </think>.
  auto prev = toy_tokens(loop.prev_tokens), next = toy_tokens(prompt2);
  PrefixReport r = common_token_prefix(prev, next);
  EXPECT_EQ(r.common, toy_tokens(prompt1).size() - 1);
  EXPECT_EQ(next[r.common], toy_tokens(kThinkClose)[0]);
}

// Without declared tools drop_thinking still applies in an agent loop: the tool result is a
// user turn, so the reasoning before the call is dropped (golden agent_loop_tools_undeclared).
TEST(ChatPrefix, UndeclaredToolsDropReasoning) {
  Loop loop;
  loop.req.messages = {Message::make(Role::kUser, "Oslo?")};
  std::string prompt;
  loop.next_prompt(&prompt);
  loop.generate(prompt, "need weather" + std::string(kThinkClose) + call_block("Oslo") + kEosS, 1);
  loop.tool_result("call_1_0", "3 C");
  PrefixReport r = loop.next_prompt(&prompt);
  EXPECT_FALSE(r.extends());
  loop.req.drop_thinking = false;  // the client's way out
  EXPECT_TRUE(loop.next_prompt(&prompt).extends());
}

// Non-string arguments are re-serialised from parsed JSON: a model that writes {"a":1}
// (no space) or 2.50 reads back as {"a": 1} / 2.5, and the prefix ends inside the value.
TEST(ChatPrefix, NonCanonicalJsonArgumentBreaksInsideTheValue) {
  Loop loop;
  Message sys = Message::make(Role::kSystem, "Agent.");
  sys.tools.push_back(weather_tool());
  loop.req.messages = {sys, Message::make(Role::kUser, "go")};
  loop.req.thinking_mode = ThinkingMode::kChat;
  std::string prompt;
  loop.next_prompt(&prompt);
  std::string block = "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"opts\" "
                      "string=\"false\">{\"a\":2.50}</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  loop.generate(prompt, block + kEosS, 1);
  loop.tool_result("call_1_0", "ok");
  PrefixReport r = loop.next_prompt(&prompt);
  EXPECT_FALSE(r.extends());
  EXPECT_EQ(loop.prev_tokens.substr(r.common - 5, 9), "{\"a\":2.50");
  EXPECT_EQ(prompt.substr(r.common - 5, 10), "{\"a\": 2.5}");
}

// Changing the effort between turns changes the first line: nothing but BOS and <｜System｜> is shared.
TEST(ChatPrefix, ChangedEffortBreaksAtTheStart) {
  Loop loop;
  loop.req.messages = {Message::make(Role::kUser, "Q1")};
  loop.req.drop_thinking = false;
  std::string prompt;
  loop.next_prompt(&prompt);
  loop.generate(prompt, "r" + std::string(kThinkClose) + "A" + kEosS, 1);
  loop.req.messages.push_back(Message::make(Role::kUser, "Q2"));
  loop.req.reasoning_effort = ReasoningEffort::named("max");
  PrefixReport r = loop.next_prompt(&prompt);
  EXPECT_EQ(r.common, kBos.size() + kSystem.size() + std::string("Reasoning Effort: ").size());
}

// Echoing content as null or "" and reasoning as absent or "" renders the same bytes.
TEST(ChatPrefix, EchoVariantsRenderTheSame) {
  auto render_with = [](Content c, std::optional<std::string> rc) {
    RenderRequest req;
    req.drop_thinking = false;
    req.messages = {Message::make(Role::kUser, "Q")};
    Message a;
    a.role = Role::kAssistant;
    a.content = c;
    a.reasoning_content = rc;
    req.messages.push_back(a);
    req.messages.push_back(Message::make(Role::kUser, "Q2"));
    return render_prompt(req).value().prompt;
  };
  Content null_content;
  null_content.kind = Content::Kind::kNull;
  std::string base = render_with(Content::of(""), std::string());
  EXPECT_EQ(render_with(null_content, std::nullopt), base);
  EXPECT_EQ(render_with(Content(), std::string()), base);
}

}  // namespace
}  // namespace dsv41::chat
