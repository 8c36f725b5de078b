// Golden encoding cases (../shared/golden/encoding/cases.json): every render case byte for
// byte (prompt and image records), every parse case field by field, and every parse case
// again through the streaming parser split at every byte boundary. Each failure names its
// case id.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/chat/output_parser.h"
#include "src/chat/render.h"
#include "src/chat/request_json.h"
#include "tests/golden_file.h"

namespace dsv41::chat {
namespace {

Json load_cases() {
  std::ifstream in(DSV41_GOLDEN_DIR "/encoding/cases.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto parsed = parse_json_ordered(ss.str(), "cases.json");
  if (!parsed.ok()) return Json();
  return parsed.value();
}

const Json& cases() {
  static const Json all = load_cases();
  return all;
}

TEST(ChatGolden, FileLoads) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  ASSERT_TRUE(cases().is_array()) << "cannot read " DSV41_GOLDEN_DIR "/encoding/cases.json";
  EXPECT_GT(cases().size(), 100u);
}

TEST(ChatGolden, RenderCases) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  int checked = 0;
  for (const Json& c : cases()) {
    if (c["kind"] != "render") continue;
    ++checked;
    const std::string id = c["id"].get<std::string>();
    const Json& exp = c["expected"];
    auto req = render_request_from_json(c["input"]);
    Result<RenderResult> got = req.ok() ? render_prompt(req.value()) : Result<RenderResult>(req.status());
    if (exp.contains("error")) {
      EXPECT_FALSE(got.ok()) << id << ": expected a refusal, got prompt " << py_json_string(got->prompt);
      continue;
    }
    if (!got.ok()) {
      ADD_FAILURE() << id << ": refused: " << got.status().to_string();
      continue;
    }
    EXPECT_EQ(got->prompt, exp["prompt"].get<std::string>()) << id;
    Json images = render_result_to_json(got.value(), nullptr)["images"];
    EXPECT_EQ(py_json_dumps(images), py_json_dumps(exp["images"])) << id;
  }
  EXPECT_GT(checked, 100);
}

TEST(ChatGolden, ParseCases) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  int checked = 0;
  for (const Json& c : cases()) {
    if (c["kind"] != "parse") continue;
    ++checked;
    const std::string id = c["id"].get<std::string>();
    const Json& exp = c["expected"];
    auto req = parse_request_from_json(c["input"]);
    ASSERT_TRUE(req.ok()) << id << ": " << req.status().to_string();
    auto got = parse_completion(req->completion, req->thinking_mode);
    if (exp.contains("error")) {
      EXPECT_FALSE(got.ok()) << id << ": expected a rejection, got "
                             << py_json_dumps(parsed_message_to_json(got.value()));
      continue;
    }
    if (!got.ok()) {
      ADD_FAILURE() << id << ": rejected: " << got.status().to_string();
      continue;
    }
    EXPECT_EQ(py_json_dumps(parsed_message_to_json(got.value())), py_json_dumps(exp)) << id;
  }
  EXPECT_GT(checked, 40);
}

// Feeds `pieces` one by one; checks the deltas add up to the final message.
Result<ParsedMessage> parse_in_pieces(const std::vector<std::string_view>& pieces, ThinkingMode mode,
                                      const std::string& id) {
  OutputParser p(mode);
  ParsedMessage streamed;
  auto take = [&](const StreamDelta& d) {
    streamed.reasoning_content += d.reasoning;
    streamed.content += d.content;
    for (const auto& tc : d.tool_calls) streamed.tool_calls.push_back(tc);
  };
  for (std::string_view s : pieces) take(p.feed(s));
  StreamDelta tail;
  auto r = p.finish(&tail);
  take(tail);
  if (r.ok()) {
    EXPECT_EQ(streamed.reasoning_content, r->reasoning_content) << id;
    EXPECT_EQ(streamed.content, r->content) << id;
    EXPECT_EQ(py_json_dumps(parsed_message_to_json(streamed)), py_json_dumps(parsed_message_to_json(r.value()))) << id;
  }
  return r;
}

std::string verdict(const Result<ParsedMessage>& r) {
  return r.ok() ? py_json_dumps(parsed_message_to_json(r.value())) : std::string("error");
}

TEST(ChatGolden, StreamingEqualsOneShotAtEveryByteSplit) {
  for (const Json& c : cases()) {
    if (c["kind"] != "parse") continue;
    const std::string id = c["id"].get<std::string>();
    auto req = parse_request_from_json(c["input"]);
    ASSERT_TRUE(req.ok());
    const std::string& text = req->completion;
    const std::string whole = verdict(parse_completion(text, req->thinking_mode));
    // One split point anywhere.
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      std::string_view t(text);
      auto r = parse_in_pieces({t.substr(0, cut), t.substr(cut)}, req->thinking_mode, id);
      EXPECT_EQ(verdict(r), whole) << id << " split at byte " << cut;
    }
    // Every byte on its own.
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(std::string_view(text).substr(i, 1));
    EXPECT_EQ(verdict(parse_in_pieces(bytes, req->thinking_mode, id)), whole) << id << " byte by byte";
  }
}

}  // namespace
}  // namespace dsv41::chat
