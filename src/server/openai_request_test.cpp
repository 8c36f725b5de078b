// Request parsing: every field checked and named in the 400; unknown or unsupported fields
// refused; the V4.1 extensions (thinking, reasoning_effort) mapped onto the render request.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dsv41::server {
namespace {

chat::Json body(const std::string& text) {
  auto j = chat::parse_json_ordered(text, "test");
  EXPECT_TRUE(j.ok());
  return *j;
}

ChatRequest chat_ok(const std::string& text, ParseOptions o = {}) {
  auto r = parse_chat_request(body(text), o);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<ChatRequest>(r);
}

ApiError chat_err(const std::string& text) {
  auto r = parse_chat_request(body(text), {});
  if (!std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << "accepted: " << text;
    return {};
  }
  return std::get<ApiError>(r);
}

const std::string kMsgs = R"("model":"m","messages":[{"role":"user","content":"hi"}])";

TEST(OpenAiRequest, DefaultsFollowTheApi) {
  ChatRequest c = chat_ok("{" + kMsgs + "}");
  EXPECT_EQ(c.gen.model, "m");
  EXPECT_EQ(c.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(c.gen.sampling.top_p, 1.0f);
  EXPECT_EQ(c.gen.n, 1);
  EXPECT_EQ(c.gen.max_tokens, -1);
  EXPECT_FALSE(c.gen.stream);
  EXPECT_EQ(c.gen.top_logprobs, -1);
  EXPECT_EQ(c.render.thinking_mode, chat::ThinkingMode::kChat);
  ParseOptions on;
  on.default_thinking = true;
  EXPECT_EQ(chat_ok("{" + kMsgs + "}", on).render.thinking_mode, chat::ThinkingMode::kThinking);
}

TEST(OpenAiRequest, ReadsSamplingAndStreamingFields) {
  ChatRequest c = chat_ok("{" + kMsgs +
                          R"(,"max_completion_tokens":7,"temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,"seed":-1,
      "n":3,"stop":["a","b"],"logprobs":true,"top_logprobs":2,"logit_bias":{"5":-100,"7":2.5},
      "stream":true,"stream_options":{"include_usage":true},"presence_penalty":0.5,"frequency_penalty":-1})");
  EXPECT_EQ(c.gen.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(c.gen.sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(c.gen.max_tokens, 7);
  EXPECT_EQ(c.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(c.gen.sampling.top_p, 0.5f);
  EXPECT_EQ(c.gen.sampling.top_k, 3);
  EXPECT_FLOAT_EQ(c.gen.sampling.min_p, 0.1f);
  EXPECT_TRUE(c.gen.seeded);
  EXPECT_EQ(c.gen.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(c.gen.n, 3);
  EXPECT_EQ(c.gen.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.gen.top_logprobs, 2);
  ASSERT_EQ(c.gen.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(c.gen.sampling.logit_bias[1].first, 7);
  EXPECT_TRUE(c.gen.stream && c.gen.include_usage);
  EXPECT_FALSE(c.gen.continuous_usage);
  EXPECT_TRUE(chat_ok("{" + kMsgs + R"(,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}})")
                  .gen.continuous_usage);
}

TEST(OpenAiRequest, BadFieldsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":"m"})", "messages"},
      {R"({"model":"m","messages":[]})", "messages"},
      {"{" + kMsgs + R"(,"temperature":3})", "temperature"},
      {"{" + kMsgs + R"(,"temperature":"hot"})", "temperature"},
      {"{" + kMsgs + R"(,"top_p":0})", "top_p"},
      {"{" + kMsgs + R"(,"max_tokens":0})", "max_tokens"},
      {"{" + kMsgs + R"(,"n":0})", "n"},
      {"{" + kMsgs + R"(,"n":1000})", "n"},
      {"{" + kMsgs + R"(,"stop":["a","b","c","d","e"]})", "stop"},
      {"{" + kMsgs + R"(,"stop":""})", "stop"},
      {"{" + kMsgs + R"(,"top_logprobs":2})", "top_logprobs"},
      {"{" + kMsgs + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
      {"{" + kMsgs + R"(,"logit_bias":{"x":1}})", "logit_bias"},
      {"{" + kMsgs + R"(,"logit_bias":{"3":101}})", "logit_bias"},
      {"{" + kMsgs + R"(,"stream_options":{"include_usage":true}})", "stream_options"},
      {"{" + kMsgs + R"(,"stream":true,"stream_options":{"continuous_usage_stats":true}})", "stream_options.continuous_usage_stats"},
      {"{" + kMsgs + R"(,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":1}})",
       "stream_options.continuous_usage_stats"},
      {"{" + kMsgs + R"(,"frobnicate":1})", "frobnicate"},
      {"{" + kMsgs + R"(,"presence_penalty":2.5})", "presence_penalty"},
      {"{" + kMsgs + R"(,"repetition_penalty":0})", "repetition_penalty"},
      {"{" + kMsgs + R"(,"repetition_penalty":10.5})", "repetition_penalty"},
      {"{" + kMsgs + R"(,"response_format":{"type":"xml"}})", "response_format.type"},
      {"{" + kMsgs + R"(,"response_format":"json"})", "response_format"},
      {"{" + kMsgs + R"(,"response_format":{"type":"json_schema"}})", "response_format.json_schema"},
      {"{" + kMsgs + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})", "response_format.json_schema.name"},
      {"{" + kMsgs + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a"}}}})",
       "response_format.json_schema.schema"},
      {"{" + kMsgs + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","scheme":{}}}})",
       "response_format.json_schema.scheme"},
      {"{" + kMsgs + R"(,"reasoning_effort":0})", "reasoning_effort"},
      {"{" + kMsgs + R"(,"reasoning_effort":"huge"})", "reasoning_effort"},
      {"{" + kMsgs + R"(,"reasoning_effort":"High"})", "reasoning_effort"},
      {"{" + kMsgs + R"(,"thinking":{"type":"enabled"},"reasoning_effort":"none"})", "reasoning_effort"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]})",
       "messages[0].content[0].type"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"text":"b"}]}]})",
       "messages[0].content[1].type"},
      {"{" + kMsgs + R"(,"thinking":{"type":"on"}})", "thinking"},
      {"{" + kMsgs + R"(,"thinking":{"type":"disabled","budget_tokens":10}})", "thinking.budget_tokens"},
      {"{" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":-1}})", "thinking.budget_tokens"},
      {"{" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":"10"}})", "thinking.budget_tokens"},
      {"{" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":1.5}})", "thinking.budget_tokens"},
      {"{" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":18446744073709551615}})", "thinking.budget_tokens"},
      {"{" + kMsgs + R"(,"thinking":{"type":"enabled","budget":10}})", "thinking.budget"},
      {"{" + kMsgs + R"(,"tool_choice":"required"})", "tool_choice"},
      {"{" + kMsgs + R"(,"tools":[{"type":"function","function":{}}]})", "tools[0].function.name"},
      {R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role"},
      {R"({"model":"m","messages":[{"role":"user","content":"x","task":"query"}]})", "messages[0].task"},
  };
  for (const auto& [text, param] : cases) {
    ApiError e = chat_err(text);
    EXPECT_EQ(e.status, 400) << text;
    EXPECT_EQ(e.param, param) << text << " -> " << e.message;
    EXPECT_NE(e.json().find("\"param\":\"" + param + "\""), std::string::npos) << e.json();
  }
}

TEST(OpenAiRequest, ThinkingBudgetTokens) {
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"thinking":{"type":"enabled"}})").thinking_budget, -1);
  ChatRequest zero = chat_ok("{" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":0}})");
  EXPECT_EQ(zero.thinking_budget, 0);
  EXPECT_EQ(zero.render.thinking_mode, chat::ThinkingMode::kThinking);
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":1024},"reasoning_effort":"low"})")
                .thinking_budget,
            1024);
}

TEST(OpenAiRequest, ResponseFormatCompilesTheSchemaAndRendersItOnTheSystemMessage) {
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"response_format":{"type":"text"}})").response_schema, nullptr);
  ChatRequest o = chat_ok("{" + kMsgs + R"(,"response_format":{"type":"json_object"}})");
  ASSERT_NE(o.response_schema, nullptr);
  EXPECT_EQ(o.response_schema->node(o.response_schema->root()).types, kJsonObject);
  ASSERT_EQ(o.render.messages[0].role, chat::Role::kSystem);
  EXPECT_EQ(o.render.messages[0].response_format, std::optional<std::string>(R"({"type": "json_object"})"));
  ChatRequest s = chat_ok("{" + kMsgs +
                          R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}})");
  ASSERT_NE(s.response_schema, nullptr);
  EXPECT_EQ(s.response_schema->node(s.response_schema->root()).property_names, std::vector<std::string>{"a"});
  // The keyword outside the subset is named.
  ApiError e = chat_err("{" + kMsgs + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"d":{"type":"string","format":"date"}}}}}})");
  EXPECT_NE(e.message.find("'format'"), std::string::npos) << e.message;
  EXPECT_EQ(e.code, "unsupported_value");
}

TEST(OpenAiRequest, ThinkingEffortAndToolsMapOntoTheRenderRequest) {
  ChatRequest a = chat_ok("{" + kMsgs + R"(,"thinking":{"type":"disabled"}})");
  EXPECT_EQ(a.render.thinking_mode, chat::ThinkingMode::kChat);
  ChatRequest b = chat_ok("{" + kMsgs + R"(,"chat_template_kwargs":{"thinking":false}})");
  EXPECT_EQ(b.render.thinking_mode, chat::ThinkingMode::kChat);
  ParseOptions off;
  off.default_thinking = false;
  ChatRequest e = chat_ok("{" + kMsgs + R"(,"reasoning_effort":"max"})", off);
  EXPECT_EQ(e.render.thinking_mode, chat::ThinkingMode::kThinking) << "an effort asks for reasoning";
  EXPECT_EQ(e.render.reasoning_effort.tier, "max");
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"reasoning_effort":37})").render.reasoning_effort.value, 37);
  // OpenAI's names: medium is the model's default tier (high), minimal its lowest (low), none no
  // reasoning at all.
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"reasoning_effort":"medium"})", off).render.reasoning_effort.tier, "high");
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"reasoning_effort":"minimal"})", off).render.reasoning_effort.tier, "low");
  EXPECT_EQ(chat_ok("{" + kMsgs + R"(,"reasoning_effort":"none"})").render.thinking_mode, chat::ThinkingMode::kChat);
  EXPECT_EQ(chat_err("{" + kMsgs + R"(,"thinking":{"type":"enabled"},"chat_template_kwargs":{"thinking":false}})").param,
            "chat_template_kwargs");

  const std::string tools = R"(,"tools":[{"type":"function","function":{"name":"get","parameters":{"type":"object"}}}])";
  ChatRequest t = chat_ok("{" + kMsgs + tools + R"(,"tool_choice":{"type":"function","function":{"name":"get"}}})");
  ASSERT_EQ(t.render.messages.size(), 2u) << "a system message carries the tools";
  EXPECT_EQ(t.render.messages[0].role, chat::Role::kSystem);
  ASSERT_EQ(t.render.messages[0].tools.size(), 1u);
  EXPECT_EQ(t.render.messages[0].tools[0].function_json, R"({"name": "get", "parameters": {"type": "object"}})");
  EXPECT_EQ(t.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(t.tool_name, "get");
  ChatRequest s = chat_ok(R"({"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"x"}])" +
                          tools + "}");
  ASSERT_EQ(s.render.messages.size(), 2u);
  EXPECT_EQ(s.render.messages[0].tools.size(), 1u);
  EXPECT_EQ(chat_err("{" + kMsgs + tools + R"(,"tool_choice":{"type":"function","function":{"name":"other"}}})").param,
            "tool_choice");
}

TEST(OpenAiRequest, AssistantTurnsKeepReasoningAndToolCalls) {
  ChatRequest c = chat_ok(R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":null,"reasoning_content":"think",
       "tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"42"}]})");
  ASSERT_EQ(c.render.messages.size(), 3u);
  EXPECT_EQ(c.render.messages[1].reasoning_content.value_or(""), "think");
  ASSERT_EQ(c.render.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(c.render.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(c.render.messages[2].tool_call_id, "call_1");
}

TEST(OpenAiRequest, CompletionPrompts) {
  ParseOptions o;
  auto a = parse_completion_request(body(R"({"model":"m","prompt":"hello","logprobs":2,"echo":true})"), o);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(a));
  const auto& c = std::get<CompletionRequest>(a);
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(std::get<std::string>(c.prompts[0]), "hello");
  EXPECT_EQ(c.gen.max_tokens, 16);
  EXPECT_EQ(c.gen.top_logprobs, 2);
  EXPECT_TRUE(c.echo);
  auto b = parse_completion_request(body(R"({"model":"m","prompt":[0,5,9]})"), o);
  EXPECT_EQ(std::get<std::vector<int32_t>>(std::get<CompletionRequest>(b).prompts.at(0)), (std::vector<int32_t>{0, 5, 9}));
  // Several prompts: strings and token lists, mixed, in order.
  auto several = parse_completion_request(body(R"({"model":"m","prompt":["a",[3,4],"b"]})"), o);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(several));
  const auto& ps = std::get<CompletionRequest>(several).prompts;
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_EQ(std::get<std::string>(ps[0]), "a");
  EXPECT_EQ(std::get<std::vector<int32_t>>(ps[1]), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(std::get<std::string>(ps[2]), "b");
  // Each bad one named by its index; empty lists, other types and too many prompts refused.
  const std::pair<const char*, const char*> bad_prompts[] = {
      {R"(["a",[1,-2]])", "prompt[1]"}, {R"(["a",7.5])", "prompt[1]"}, {R"([["x"]])", "prompt[0]"},
      {R"([[]])", "prompt[0]"},         {R"([])", "prompt"},           {R"({"a":1})", "prompt"},
      {R"(["a",{}])", "prompt[1]"},     {R"(null)", "prompt"}};
  for (const auto& [prompt, param] : bad_prompts) {
    auto bad = parse_completion_request(body(std::string(R"({"model":"m","prompt":)") + prompt + "}"), o);
    ASSERT_TRUE(std::holds_alternative<ApiError>(bad)) << prompt;
    EXPECT_EQ(std::get<ApiError>(bad).param, param) << prompt;
  }
  // best_of: n ≤ best_of ≤ max_n, not streamed.
  auto best = parse_completion_request(body(R"({"model":"m","prompt":"a","best_of":3})"), o);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(best));
  EXPECT_EQ(std::get<CompletionRequest>(best).best_of, 3);
  EXPECT_EQ(std::get<CompletionRequest>(best).gen.n, 1);
  for (const char* bad_best : {R"("n":2,"best_of":1)", R"("best_of":17)", R"("best_of":2,"stream":true)", R"("best_of":"2")"}) {
    auto bad = parse_completion_request(body(std::string(R"({"model":"m","prompt":"a",)") + bad_best + "}"), o);
    ASSERT_TRUE(std::holds_alternative<ApiError>(bad)) << bad_best;
    EXPECT_EQ(std::get<ApiError>(bad).param, "best_of") << bad_best;
  }
  ParseOptions two = o;
  two.max_prompts = 2;
  auto too_many = parse_completion_request(body(R"({"model":"m","prompt":["a","b","c"]})"), two);
  ASSERT_TRUE(std::holds_alternative<ApiError>(too_many));
  EXPECT_NE(std::get<ApiError>(too_many).message.find("at most 2"), std::string::npos);
  auto bad2 = parse_completion_request(body(R"({"model":"m","prompt":"x","logprobs":true})"), o);
  EXPECT_EQ(std::get<ApiError>(bad2).param, "logprobs");
}

}  // namespace
}  // namespace dsv41::server
