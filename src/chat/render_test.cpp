// Renderer edge cases beyond the golden file: bad input gives clear errors (never a crash),
// the strict options, the configurable effort table, and size limits.
#include "src/chat/render.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/chat/markers.h"
#include "src/chat/request_json.h"

namespace dsv41::chat {
namespace {

Result<RenderResult> render_json(const std::string& text, const RenderOptions& opt = {}) {
  auto req = render_request_from_text(text);
  if (!req.ok()) return req.status();
  return render_prompt(req.value(), opt);
}

std::string error_of(const std::string& text, const RenderOptions& opt = {}) {
  auto r = render_json(text, opt);
  return r.ok() ? std::string("(accepted)") : r.status().message();
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ChatRender, UnknownOrMissingRoles) {
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"wizard","content":"x"}],"thinking_mode":"chat"})"),
                  "messages[0].role: unknown role 'wizard'"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"content":"x"}],"thinking_mode":"chat"})"), "messages[0].role: missing"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":5}],"thinking_mode":"chat"})"), "messages[0].role"));
  EXPECT_TRUE(has(error_of(R"({"messages":["hi"],"thinking_mode":"chat"})"), "messages[0]: expected an object"));
  EXPECT_TRUE(has(error_of(R"({"messages":{},"thinking_mode":"chat"})"), "messages"));
  EXPECT_TRUE(has(error_of(R"({"messages":[],"thinking_mode":"fast"})"), "thinking_mode"));
  EXPECT_TRUE(has(error_of(R"({"messages":[]})"), "thinking_mode: missing"));
  EXPECT_TRUE(has(error_of("[1,2"), "invalid JSON"));
}

TEST(ChatRender, BadToolCallArguments) {
  auto call = [](const std::string& args) {
    return R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":)" +
           args + R"(}}]}],"thinking_mode":"chat"})";
  };
  EXPECT_TRUE(has(error_of(call(R"("{not json")")), "tool_calls[0].function.arguments: invalid JSON"));
  EXPECT_TRUE(has(error_of(call(R"("[1, 2]")")), "must be a JSON object"));
  EXPECT_TRUE(has(error_of(call(R"("5")")), "must be a JSON object"));
  EXPECT_TRUE(has(error_of(call("[1]")), "must be a JSON object"));
  EXPECT_EQ(error_of(call(R"({"a": 1})")), "(accepted)");
  // A call without a name or arguments is refused when read.
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}],"thinking_mode":"chat"})"),
                  "function.name"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f"}}]}],"thinking_mode":"chat"})"),
                  "function.arguments: missing"));
}

TEST(ChatRender, UndeclaredToolsOnlyRefusedWhenAsked) {
  std::string req = R"({"messages":[{"role":"system","content":"s","tools":[{"type":"function","function":{"name":"known"}}]},
    {"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"other","arguments":"{}"}}]}],
    "thinking_mode":"chat"})";
  EXPECT_EQ(error_of(req), "(accepted)");
  RenderOptions strict;
  strict.require_declared_tools = true;
  EXPECT_TRUE(has(error_of(req, strict), "tool call names 'other'"));
}

TEST(ChatRender, LiteralMarkersPassThroughUnlessStrict) {
  std::string req = R"({"messages":[{"role":"user","content":"<｜User｜>hi<｜end▁of▁sentence｜>"}],"thinking_mode":"chat"})";
  auto r = render_json(req);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(has(r->prompt, "<｜User｜><｜User｜>hi<｜end▁of▁sentence｜><｜Assistant｜>"));
  RenderOptions strict;
  strict.reject_markers_in_text = true;
  EXPECT_TRUE(has(error_of(req, strict), "messages[0].content: text contains the special marker"));
  // The image placeholder is always refused in text.
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"user","content":"a <｜deepseek_image｜>"}],"thinking_mode":"chat"})"),
                  "image placeholder"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"tool","content":[{"type":"text","text":"<｜deepseek_image｜>"}]}],"thinking_mode":"chat"})"),
                  "image placeholder"));
}

TEST(ChatRender, ImagesAndParts) {
  auto r = render_json(R"({"messages":[{"role":"user","content":[{"type":"text","text":"look"},
      {"type":"image_url","image_url":"a.png"},{"type":"audio"},{"text":"untyped"}]}],"thinking_mode":"chat"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(has(r->prompt, "<｜User｜>look\n\n<｜deepseek_image｜>\n\n[Unsupported audio]\n\n[Unsupported None]<｜Assistant｜>"));
  ASSERT_EQ(r->images.size(), 1u);
  EXPECT_EQ(r->images[0].json, R"({"type": "image", "url": "a.png"})");
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":""}}]}],"thinking_mode":"chat"})"),
                  "no source"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"user","content":[{"type":"text","text":null}]}],"thinking_mode":"chat"})"),
                  "text: null"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"user","content":[1]}],"thinking_mode":"chat"})"), "content part"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"user","content":5}],"thinking_mode":"chat"})"), "content"));
}

TEST(ChatRender, TasksAndDevelopers) {
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"user","content":"q","task":"summon"}],"thinking_mode":"chat"})"),
                  "unknown task 'summon'"));
  EXPECT_TRUE(has(error_of(R"({"messages":[{"role":"developer","content":""}],"thinking_mode":"chat"})"),
                  "developer message needs non-empty content"));
  auto r = render_json(R"({"messages":[{"role":"user","content":"q","task":"action"}],"thinking_mode":"thinking"})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->prompt.ends_with("<｜User｜>q<｜Assistant｜><think><｜action｜>"));
}

TEST(ChatRender, ReasoningEffortValuesAndTable) {
  auto with_effort = [](const std::string& e) {
    return R"({"messages":[{"role":"user","content":"q"}],"thinking_mode":"thinking","reasoning_effort":)" + e + "}";
  };
  EXPECT_TRUE(has(render_json(with_effort("37"))->prompt, "Reasoning Effort: 37 "));
  EXPECT_TRUE(has(render_json(with_effort("\"low\""))->prompt, "Reasoning Effort: 50 "));
  EXPECT_TRUE(has(render_json(with_effort("null"))->prompt, "Reasoning Effort: 75 "));
  for (const char* bad : {"0", "101", "-1", "37.0", "true", "\"High\"", "\"medium\"", "[50]", "123456789012345678901234"})
    EXPECT_FALSE(render_json(with_effort(bad)).ok()) << bad;
  RenderOptions old;
  old.effort_table = &prerelease_effort_table();
  EXPECT_TRUE(has(render_json(with_effort("null"), old)->prompt, "Reasoning Effort: 50 "));
  EXPECT_TRUE(has(render_json(with_effort("\"low\""), old)->prompt, "Reasoning Effort: 25 "));
  // Chat mode renders no effort but still validates it.
  auto chat = R"({"messages":[{"role":"user","content":"q"}],"thinking_mode":"chat","reasoning_effort":"max"})";
  EXPECT_FALSE(has(render_json(chat)->prompt, "Reasoning Effort"));
}

TEST(ChatRender, SizeLimits) {
  std::string big(1 << 16, 'x');
  std::string req = R"({"messages":[{"role":"user","content":")" + big + R"("}],"thinking_mode":"chat"})";
  RenderOptions small;
  small.max_prompt_bytes = 1000;
  EXPECT_EQ(render_json(req, small).status().kind(), ErrorKind::kOutOfRange);
  EXPECT_TRUE(render_json(req).ok());
  small.max_messages = 0;
  EXPECT_EQ(render_json(req, small).status().kind(), ErrorKind::kOutOfRange);
}

TEST(ChatRender, TypedApiWithoutJson) {
  RenderRequest req;
  req.thinking_mode = ThinkingMode::kChat;
  req.messages = {Message::make(Role::kSystem, "S"), Message::make(Role::kUser, "U")};
  auto r = render_prompt(req);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt, std::string(kBos) + "<｜System｜>S<｜User｜>U<｜Assistant｜></think>");
}

}  // namespace
}  // namespace dsv41::chat
