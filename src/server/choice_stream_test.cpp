// Token ids -> deltas: whatever the tokenization, the deltas concatenate to the one-shot parse of
// the completion (reasoning, content, tool calls with stable ids), DSML never reaches content,
// stop strings cut the text, and a completion that breaks the format keeps what is certain.
#include "server/choice_stream.h"

#include <gtest/gtest.h>

#include "chat/markers.h"
#include "chat/output_parser.h"
#include "server/generation_driver.h"

namespace dsv41::server {
namespace {

const Tokenizer& tok() {
  static Tokenizer t = [] {
    auto r = Tokenizer::load(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(*r);
  }();
  return t;
}

struct Fed {
  ChoiceOutput all;             // deltas concatenated
  std::vector<ChoiceDelta> deltas;
};

// Feeds `text` as the mini tokenizer's ids (EOS as its id when the text ends with it).
Fed run(const std::string& text, ChoiceOptions o, FinishReason engine = FinishReason::kLength, int* ids_seen = nullptr) {
  int calls = 0;
  ChoiceStream s(tok(), o, [&] { return "call_" + std::to_string(calls++); });
  auto ids = tok().encode(text);
  EXPECT_TRUE(ids.ok());
  Fed r;
  auto add = [&](const ChoiceDelta& d) {
    r.all.reasoning += d.reasoning;
    r.all.content += d.content;
    for (const auto& c : d.tool_calls) r.all.tool_calls.push_back(c);
    r.deltas.push_back(d);
  };
  int n = 0;
  for (int32_t id : *ids) {
    add(s.push(TokenEvent{0, id, 0.0f, {}}));
    ++n;
    if (s.stopped()) break;
  }
  if (ids_seen) *ids_seen = n;
  add(s.finish(engine));
  r.all.finish_reason = s.finish_reason();
  r.all.format_error = s.format_error();
  r.all.completion_tokens = s.completion_tokens();
  return r;
}

ChoiceOptions opts(chat::ThinkingMode mode) {
  ChoiceOptions o;
  o.mode = mode;
  o.eos_token_id = 1;
  return o;
}

const std::string kCall = std::string(chat::kCallsStart) + ">\n" + std::string(chat::kInvokeOpen) +
                          " name=\"get_weather\">\n" + std::string(chat::kParamOpen) +
                          " name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n" + std::string(chat::kParamOpen) +
                          " name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n" +
                          std::string(chat::kInvokeOpen) + " name=\"now\">\n</｜DSML｜ invoke>\n" +
                          std::string(chat::kCallsClose);

TEST(ChoiceStream, DeltasReassembleToTheOneShotParse) {
  const std::vector<std::pair<chat::ThinkingMode, std::string>> cases = {
      {chat::ThinkingMode::kThinking, "I should look it up.</think>Let me check." + kCall + std::string(chat::kEos)},
      {chat::ThinkingMode::kChat, "Sure." + kCall},
      {chat::ThinkingMode::kChat, "Hello there, ünïcödé ✓ text." + std::string(chat::kEos)},
      {chat::ThinkingMode::kThinking, "hmm</think>The answer is 4." + std::string(chat::kEos)},
  };
  for (const auto& [mode, text] : cases) {
    auto want = chat::parse_completion(text, mode);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    Fed r = run(text, opts(mode));
    EXPECT_EQ(r.all.format_error, "");
    EXPECT_EQ(r.all.reasoning, want->reasoning_content);
    EXPECT_EQ(r.all.content, want->content);
    ASSERT_EQ(r.all.tool_calls.size(), want->tool_calls.size());
    for (size_t i = 0; i < want->tool_calls.size(); ++i) {
      EXPECT_EQ(r.all.tool_calls[i].name, want->tool_calls[i].name);
      EXPECT_EQ(r.all.tool_calls[i].arguments, want->tool_calls[i].arguments);
      EXPECT_EQ(r.all.tool_calls[i].index, static_cast<int>(i));
      EXPECT_EQ(r.all.tool_calls[i].id, "call_" + std::to_string(i)) << "one id per call, made once";
    }
    EXPECT_EQ(r.all.finish_reason, want->tool_calls.empty() ? "stop" : "tool_calls");
    EXPECT_EQ(r.all.content.find(chat::kDsml), std::string::npos);
    EXPECT_GT(r.deltas.size(), 3u) << "streamed in pieces";
  }
  Fed calls = run("Sure." + kCall, opts(chat::ThinkingMode::kChat));
  EXPECT_EQ(calls.all.tool_calls[0].arguments, R"({"city": "Paris", "days": 3})");
  ChoiceOptions single = opts(chat::ThinkingMode::kChat);
  single.parallel_tool_calls = false;
  EXPECT_EQ(run("Sure." + kCall, single).all.tool_calls.size(), 1u);
}

TEST(ChoiceStream, StopStringsAndLengthEndPlainContent) {
  ChoiceOptions o = opts(chat::ThinkingMode::kChat);
  o.stops = {"STOP"};
  int seen = 0;
  Fed r = run("one two STOP three four", o, FinishReason::kCancelled, &seen);
  EXPECT_EQ(r.all.content, "one two ");
  EXPECT_EQ(r.all.finish_reason, "stop");
  EXPECT_EQ(r.all.format_error, "");
  EXPECT_EQ(r.all.completion_tokens, seen) << "tokens after the stop do not count";
  Fed len = run("cut short", opts(chat::ThinkingMode::kChat), FinishReason::kLength);
  EXPECT_EQ(len.all.content, "cut short");
  EXPECT_EQ(len.all.finish_reason, "length");
  Fed think = run("still thinking", opts(chat::ThinkingMode::kThinking), FinishReason::kLength);
  EXPECT_EQ(think.all.reasoning, "still thinking");
  EXPECT_EQ(think.all.content, "");
}

TEST(ChoiceStream, ABrokenCallBlockNeverLeaksDsml) {
  // Cut inside the calls block (max_tokens): the partial call is dropped, the text before stays.
  const std::string text = "Checking." + kCall.substr(0, kCall.size() / 2);
  Fed r = run(text, opts(chat::ThinkingMode::kChat), FinishReason::kLength);
  EXPECT_EQ(r.all.content, "Checking.");
  EXPECT_NE(r.all.format_error, "");
  EXPECT_EQ(r.all.content.find(chat::kDsml), std::string::npos);
  EXPECT_EQ(r.all.finish_reason, "length");
  // A stray marker in content: the text around it is kept, the marker is not.
  Fed m = run("a<think>b" + std::string(chat::kEos), opts(chat::ThinkingMode::kChat), FinishReason::kStop);
  EXPECT_EQ(m.all.content, "ab");
}

TEST(ChoiceStream, ForcedCallPrefixIsParsedNotShown) {
  ChoiceOptions o = opts(chat::ThinkingMode::kChat);
  o.forced_prefix = std::string(chat::kCallsStart) + ">\n" + std::string(chat::kInvokeOpen) + " name=\"now\">\n";
  Fed r = run("</｜DSML｜ invoke>\n" + std::string(chat::kCallsClose), o, FinishReason::kStop);
  EXPECT_EQ(r.all.format_error, "");
  EXPECT_EQ(r.all.content, "");
  ASSERT_EQ(r.all.tool_calls.size(), 1u);
  EXPECT_EQ(r.all.tool_calls[0].name, "now");
  EXPECT_EQ(r.all.finish_reason, "tool_calls");
}

TEST(ChoiceStream, ABrokenForcedCallShowsNoTagText) {
  // What dsv41-mini wrote after a forced `invoke name="` (issue 12): the tag's attribute text and
  // a value, with no DSML marker in them. Before the fix this was shown as content.
  for (const std::string& prefix : {std::string(chat::kCallsStart) + ">\n" + std::string(chat::kInvokeOpen) + " name=\"",
                                   std::string(chat::kCallsStart) + ">\n" + std::string(chat::kInvokeOpen) + " name=\"read_file\">\n"}) {
    ChoiceOptions o = opts(chat::ThinkingMode::kChat);
    o.forced_prefix = prefix;
    for (const std::string& text : {std::string("summary\">/usr/local/pgsql/data/data"), std::string("<...\n</...\n</...\n"),
                                   std::string("x\"> name=\"y\">") + std::string(chat::kEos)}) {
      Fed r = run(text, o, FinishReason::kLength);
      EXPECT_EQ(r.all.content, "") << text;
      EXPECT_NE(r.all.format_error, "") << text;
      EXPECT_TRUE(r.all.tool_calls.empty()) << text;
    }
  }
}

TEST(ChoiceStream, ReasoningTokensEndWithTheThinkClose) {
  const std::string reasoning = "Let me see, step by step";
  auto r_ids = tok().encode(reasoning);
  auto all = tok().encode(reasoning + "</think>The answer." + std::string(chat::kEos));
  ASSERT_TRUE(r_ids.ok() && all.ok());
  ChoiceStream s(tok(), opts(chat::ThinkingMode::kThinking), [] { return std::string("x"); });
  for (int32_t id : *all) s.push(TokenEvent{0, id, 0.0f, {}});
  s.finish(FinishReason::kStop);
  EXPECT_EQ(s.completion_tokens(), static_cast<int64_t>(all->size()));
  // "</think>" is one added token of the mini tokenizer: the reasoning's tokens and it.
  EXPECT_EQ(s.reasoning_tokens(), static_cast<int64_t>(r_ids->size()) + 1);
  ChoiceStream c(tok(), opts(chat::ThinkingMode::kChat), [] { return std::string("x"); });
  for (int32_t id : *all) c.push(TokenEvent{0, id, 0.0f, {}});
  EXPECT_EQ(c.reasoning_tokens(), 0);
}

TEST(ChoiceStream, ReasoningTokensEndWithAThinkCloseInPieces) {
  // A tokenizer without a "</think>" token (or a forced close) spells it over several tokens.
  TokenizerEncodeOptions plain;
  plain.match_special_tokens = false;
  auto r_ids = tok().encode("Let me see, step by step");
  auto close = tok().encode("</think>", plain);
  auto answer = tok().encode("The answer." + std::string(chat::kEos));
  ASSERT_TRUE(r_ids.ok() && close.ok() && answer.ok());
  ASSERT_GT(close->size(), 1u);
  ChoiceStream s(tok(), opts(chat::ThinkingMode::kThinking), [] { return std::string("x"); });
  for (const auto* part : {&*r_ids, &*close, &*answer})
    for (int32_t id : *part) s.push(TokenEvent{0, id, 0.0f, {}});
  s.finish(FinishReason::kStop);
  EXPECT_EQ(s.reasoning_tokens(), static_cast<int64_t>(r_ids->size() + close->size()));
}

TEST(ChoiceStream, PlainCompletionsDropEos) {
  ChoiceOptions o;
  o.chat = false;
  o.eos_token_id = 1;
  Fed r = run("raw <think> text" + std::string(chat::kEos), o, FinishReason::kStop);
  EXPECT_EQ(r.all.content, "raw <think> text");
  EXPECT_EQ(r.all.finish_reason, "stop");
}

}  // namespace
}  // namespace dsv41::server
