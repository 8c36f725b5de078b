// Streaming output parser beyond the golden cases: no partial marker is ever emitted, deltas
// add up, tool calls arrive when their invoke closes, errors keep the text, token-boundary and
// random splits equal the one-shot parse, and optional tool-call validation.
#include "src/chat/output_parser.h"

#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/request_json.h"

namespace dsv41::chat {
namespace {

const std::string kE(kEos);

std::string verdict(const Result<ParsedMessage>& r) {
  return r.ok() ? py_json_dumps(parsed_message_to_json(r.value())) : "error";
}

TEST(ChatOutputParser, HoldsBackPartialMarkers) {
  OutputParser p(ThinkingMode::kThinking);
  EXPECT_EQ(p.feed("I reason </thi").reasoning, "I reason ");
  EXPECT_EQ(p.unparsed(), "</thi");
  StreamDelta d = p.feed("nk>Hello <｜end▁of");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Hello ");
  EXPECT_EQ(p.feed("▁sentence｜>").content, "");
  auto r = p.finish();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reasoning_content, "I reason ");
  EXPECT_EQ(r->content, "Hello ");
}

TEST(ChatOutputParser, HeldTextThatIsNotAMarkerIsReleased) {
  OutputParser p(ThinkingMode::kChat);
  EXPECT_EQ(p.feed("a <").content, "a ");
  EXPECT_EQ(p.feed("b>").content, "<b>");
  EXPECT_EQ(p.feed("\n\n").content, "");  // could open a calls block
  EXPECT_EQ(p.feed("x").content, "\n\nx");
  ASSERT_TRUE(p.finish().ok() == false);  // no EOS
}

TEST(ChatOutputParser, ToolCallsStreamWhenInvokeCloses) {
  OutputParser p(ThinkingMode::kChat);
  std::string head = "Sure.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"false\">1</｜DSML｜ parameter>\n";
  StreamDelta d = p.feed(head);
  EXPECT_EQ(d.content, "Sure.");
  EXPECT_TRUE(d.tool_calls.empty());
  d = p.feed("</｜DSML｜ invoke>\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"a\": 1}");
  p.feed("</｜DSML｜ calls>" + kE);
  auto r = p.finish();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tool_calls.size(), 1u);
}

TEST(ChatOutputParser, ErrorsKeepTextAndNeverCrash) {
  OutputParser p(ThinkingMode::kChat);
  p.feed("ok <think> later");
  EXPECT_TRUE(p.failed());
  EXPECT_NE(p.error().message().find("'<think>'"), std::string::npos);
  EXPECT_EQ(p.unparsed(), "ok <think> later");
  p.feed(" more");  // ignored but kept
  EXPECT_EQ(p.unparsed(), "ok <think> later more");
  EXPECT_FALSE(p.finish().ok());
  // Text after finish is an error, not a crash.
  OutputParser q(ThinkingMode::kChat);
  q.feed("a" + kE);
  EXPECT_TRUE(q.finish().ok());
  q.feed("b");
  EXPECT_TRUE(q.failed());
}

TEST(ChatOutputParser, MalformedDsmlFailsEarly) {
  OutputParser p(ThinkingMode::kChat);
  p.feed("\n\n<｜DSML｜ calls>\nnoise");
  EXPECT_TRUE(p.failed());  // known bad before the text ends: the buffer does not grow
  OutputParser q(ThinkingMode::kChat);
  q.feed("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke nam='x'");
  EXPECT_TRUE(q.failed());
}

TEST(ChatOutputParser, DuplicateParameterIsAnError) {
  auto r = parse_completion(
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"true\">1</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"a\" string=\"true\">2</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + kE,
      ThinkingMode::kChat);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("given twice"), std::string::npos);
}

TEST(ChatOutputParser, ReferenceTolerances) {
  // Whitespace (Unicode too) before name=, a blank invoke body, "<\n" ending a value.
  auto r = parse_completion(
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke \u3000name=\"f\">\n\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"g\">\n"
      "<｜DSML｜ parameter name=\"v\" string=\"true\">x<\n/｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
      ThinkingMode::kChat);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->tool_calls.size(), 2u);
  EXPECT_EQ(r->tool_calls[0].name, "f");
  EXPECT_EQ(r->tool_calls[1].arguments, "{\"v\": \"x\"}");
  // The text may end right after a closed invoke or a parameter's ">\n".
  EXPECT_TRUE(parse_completion("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke", ThinkingMode::kChat).ok());
  EXPECT_TRUE(parse_completion("\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
                               "string=\"true\">1</｜DSML｜ parameter>\n", ThinkingMode::kChat).ok());
}

// Random completions built from format pieces, parsed one-shot and in random splits
// (including splits inside UTF-8 sequences): always the same verdict, never a crash.
TEST(ChatOutputParser, RandomSplitsEqualOneShot) {
  const std::vector<std::string> pieces = {
      "r", "ok", "\n", "\n\n", ">", "<", "\"", "name=\"x\"", " string=\"true\"", " string=\"false\"", ">\n", "<\n",
      std::string(kThinkClose), std::string(kThinkOpen), kE, std::string(kBos), std::string(kDsml),
      std::string(kCallsStart), std::string(kInvokeOpen), std::string(kInvokeClose), std::string(kParamOpen),
      std::string(kParamCloseNoLt), std::string(kCallsClose), " ", "\xe3\x80\x80", "é", "\xff"};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    int n = static_cast<int>(rng() % 14);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    ThinkingMode mode = rng() % 2 ? ThinkingMode::kChat : ThinkingMode::kThinking;
    std::string whole = verdict(parse_completion(text, mode));
    OutputParser p(mode);
    std::string content, reasoning;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t len = 1 + rng() % 6;
      StreamDelta d = p.feed(std::string_view(text).substr(pos, len));
      content += d.content;
      reasoning += d.reasoning;
      pos += len;
    }
    StreamDelta tail;
    auto r = p.finish(&tail);
    ASSERT_EQ(verdict(r), whole) << py_json_string(text);
    if (r.ok()) {
      EXPECT_EQ(content + tail.content, r->content);
      EXPECT_EQ(reasoning + tail.reasoning, r->reasoning_content);
    }
  }
}

// Token-boundary splits: a completion fed as the pieces a tokenizer would produce (each
// marker whole, other text in short runs) parses like the one-shot text.
TEST(ChatOutputParser, MarkerTokenSplitsEqualOneShot) {
  std::string text = "Plan.</think>Calling.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"q\" "
                     "string=\"true\">北京</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + kE;
  std::vector<std::string> tokens;
  const std::string_view markers[] = {kThinkClose, kEos, kDsml};
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 0;
    for (std::string_view m : markers)
      if (std::string_view(text).substr(i, m.size()) == m) len = m.size();
    if (!len) len = std::min<size_t>(3, text.size() - i);
    tokens.push_back(text.substr(i, len));
    i += len;
  }
  OutputParser p(ThinkingMode::kThinking);
  for (const auto& t : tokens) p.feed(t);
  EXPECT_EQ(verdict(p.finish()), verdict(parse_completion(text, ThinkingMode::kThinking)));
  EXPECT_NE(verdict(parse_completion(text, ThinkingMode::kThinking)), "error");
}

// A long parameter value fed byte by byte is scanned once (linear, not quadratic).
TEST(ChatOutputParser, LongValueByteByByteIsLinear) {
  std::string value(1 << 20, 'v');
  std::string text = "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"true\">" + value +
                     "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>" + kE;
  OutputParser p(ThinkingMode::kChat);
  for (char c : text) p.feed(std::string_view(&c, 1));
  auto r = p.finish();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->tool_calls[0].arguments.size(), value.size() + 9);
}

TEST(ChatOutputParser, ValidateToolCalls) {
  std::vector<Tool> tools = {{"f", "{\"name\": \"f\"}"}};
  ParsedMessage m;
  m.tool_calls = {{"f", "{\"a\": 1}"}};
  EXPECT_TRUE(validate_tool_calls(m, tools).ok());
  m.tool_calls = {{"g", "{}"}};
  EXPECT_NE(validate_tool_calls(m, tools).message().find("unknown tool 'g'"), std::string::npos);
  m.tool_calls = {{"f", "{\"a\": [1,}"}};  // a string="false" value copied verbatim
  EXPECT_NE(validate_tool_calls(m, tools).message().find("invalid JSON"), std::string::npos);
}

}  // namespace
}  // namespace dsv41::chat
