// The forced-call acceptor: what the V4.1 renderer writes for calls of the declared tools is
// accepted, and whatever it accepts and completes parses (chat/output_parser.h) into calls of
// declared tools whose arguments are instances of their schemas; tool names, parameter names,
// duplicate or missing required parameters and stray text are refused. Masked random
// generation over the mini tokenizer always ends in such calls.
#include "server/tool_call_acceptor.h"

#include <gtest/gtest.h>

#include <random>

#include "chat/dsml.h"
#include "chat/markers.h"
#include "chat/output_parser.h"
#include "format/tokenizer.h"

namespace dsv41::server {
namespace {

using nlohmann::json;

const std::vector<std::pair<std::string, json>>& tools() {
  static const std::vector<std::pair<std::string, json>> t = {
      {"read_file", json::parse(R"({"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer","minimum":1},
         "mode":{"enum":["text","bytes"]},"opts":{"type":"object","properties":{"a":{"type":"boolean"}}}},"required":["path"]})")},
      {"now", json()},
      {"list", json::parse(R"({"type":"object","properties":{"dirs":{"type":"array","items":{"type":"string"}}}})")},
  };
  return t;
}

std::string rendered(const std::vector<chat::ToolCall>& calls) {
  auto r = chat::render_tool_calls(calls, "test");
  EXPECT_TRUE(r.ok());
  return *r;
}

// The acceptor from the start of the block (tool −1) over `text`, whole and complete.
bool accepts(const ToolTable& t, const std::string& text, int tool = -1, bool many = true) {
  ToolCallAcceptor a(t, tool, many, true);
  return a.advance(text) && a.accepting();
}

TEST(ToolCallAcceptor, AcceptsTheRenderersCalls) {
  auto t = ToolTable::build(tools());
  EXPECT_TRUE(accepts(*t, rendered({{"", "read_file", R"({"path": "/etc/hosts"})"}})));
  EXPECT_TRUE(accepts(*t, rendered({{"", "read_file", R"({"limit": 3, "path": "a</b", "mode": "bytes", "opts": {"a": true}})"}})));
  EXPECT_TRUE(accepts(*t, rendered({{"", "now", "{}"}, {"", "list", R"({"dirs": ["x", "y"]})"}})));
  EXPECT_TRUE(accepts(*t, rendered({{"", "now", "{}"}}), 1, false));
  // Refused: an undeclared tool or parameter, a missing required one, a duplicate, a value
  // outside its schema, two calls when one is allowed, text after the block.
  EXPECT_FALSE(accepts(*t, rendered({{"", "rm", "{}"}})));
  EXPECT_FALSE(accepts(*t, rendered({{"", "read_file", R"({"path": "a", "force": true})"}})));
  EXPECT_FALSE(accepts(*t, rendered({{"", "read_file", R"({"limit": 3})"}})));
  EXPECT_FALSE(accepts(*t, rendered({{"", "read_file", R"({"path": "a", "mode": "lines"})"}})));
  EXPECT_FALSE(accepts(*t, rendered({{"", "read_file", R"({"path": "a", "limit": 1.5})"}})));
  EXPECT_FALSE(accepts(*t, rendered({{"", "now", "{}"}, {"", "now", "{}"}}), -1, false));
  EXPECT_FALSE(accepts(*t, rendered({{"", "now", "{}"}}) + "x"));
  EXPECT_TRUE(accepts(*t, rendered({{"", "read_file", R"({"path": "é€😀｜"})"}})));
  EXPECT_FALSE(ToolCallAcceptor(*t, 0, false).advance(std::string(chat::kParamOpen) + " name=\"path\" string=\"true\">\xef\xbd" + "a"));
  const std::string dup = std::string(chat::kCallsStart) + ">\n" + std::string(chat::kInvokeOpen) + " name=\"read_file\">\n" +
                          std::string(chat::kParamOpen) + " name=\"path\" string=\"true\">a" + std::string(chat::kParamClose) + "\n" +
                          std::string(chat::kParamOpen) + " name=\"path\" string=\"true\">";
  EXPECT_FALSE(ToolCallAcceptor(*t, -1, true, true).advance(dup));
}

const Tokenizer& mini() {
  static Tokenizer t = [] {
    auto r = Tokenizer::load(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(*r);
  }();
  return t;
}

TEST(ToolCallAcceptor, MaskedRandomGenerationParsesIntoDeclaredCalls) {
  auto table = ToolTable::build(tools());
  auto trie = TokenTrie::build(mini());
  std::vector<int32_t> extra;
  for (const AddedToken& a : mini().added_tokens())
    if (!a.special) extra.push_back(a.id);
  ASSERT_FALSE(extra.empty()) << "the mini tokenizer has the DSML marker as a token";
  std::mt19937 rng(2);
  std::normal_distribution<float> noise(0, 1);
  int complete = 0;
  for (int run = 0; run < 30; ++run) {
    ToolCallConstraintOptions o;
    o.base.eos_token_id = 1;
    o.base.extra_tokens = extra;
    o.tool = run % 3 == 0 ? 0 : -1;
    o.many = run % 2 == 0;
    o.with_lead = true;
    ToolCallConstraintFactory f(table, trie, o);
    auto c = f.start();
    std::string out;
    bool ended = false;
    for (int step = 0; step < 400 && !ended; ++step) {
      std::vector<float> logits(8192);
      for (float& v : logits) v = noise(rng);
      for (int32_t id : extra) logits[static_cast<size_t>(id)] += 3;  // the marker as one token, mostly
      logits[1] += 0.05f * static_cast<float>(step);
      ASSERT_GT(c->mask(logits), 0) << out;
      int32_t best = 0;
      for (int32_t i = 1; i < 8192; ++i)
        if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
      c->advance(best);
      if (best == 1) ended = true;
      else out += mini().decode_token(best);
    }
    if (!ended) continue;
    ++complete;
    auto msg = chat::parse_completion(out + std::string(chat::kEos), chat::ThinkingMode::kChat);
    ASSERT_TRUE(msg.ok()) << msg.status().to_string() << "\n" << out;
    EXPECT_EQ(msg->content, "");
    ASSERT_FALSE(msg->tool_calls.empty());
    if (!o.many) {
      EXPECT_EQ(msg->tool_calls.size(), 1u);
    }
    for (const auto& call : msg->tool_calls) {
      size_t i = 0;
      while (i < tools().size() && tools()[i].first != call.name) ++i;
      ASSERT_LT(i, tools().size()) << call.name;
      if (o.tool == 0) {
        EXPECT_EQ(call.name, "read_file");
      }
      ASSERT_TRUE(json::accept(call.arguments)) << call.arguments;
      const json args = json::parse(call.arguments);
      EXPECT_TRUE(args.is_object());
      const auto& schema = table->tools()[i].schema;
      EXPECT_TRUE(schema_accepts(*schema, schema->root(), args)) << call.name << " " << call.arguments;
    }
  }
  EXPECT_GE(complete, 8);
}

}  // namespace
}  // namespace dsv41::server
