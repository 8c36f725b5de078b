// /metrics text: every sample line belongs to a family declared by # HELP / # TYPE, histogram
// buckets are cumulative and end with +Inf = _count; SSE framing is one data line per event.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>

#include "server/sse.h"

namespace dsv41::server {
namespace {

TEST(Metrics, PrometheusTextFormat) {
  Metrics m;
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/health", 503);
  m.add_tokens(10, 4);
  m.observe_ttft(0.003);
  m.observe_ttft(0.2);
  m.observe_ttft(100);
  m.observe_inter_token(0.02);
  GaugeValues g;
  g.running = 2;
  g.kv_main_bytes = 1234;
  g.engine_steps = 7;
  g.dspark_drafts_verified = 9;
  g.dspark_drafts_accepted = 5;
  const std::string text = m.render(g);
  std::istringstream in(text);
  std::string line;
  std::set<std::string> typed;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? (-?[0-9.e+-]+|\+Inf)$)");
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch s;
    ASSERT_TRUE(std::regex_match(line, s, sample)) << line;
    std::string family = s[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!typed.count(family) && family.size() > strlen(suffix) && family.ends_with(suffix))
        family = family.substr(0, family.size() - strlen(suffix));
    EXPECT_TRUE(typed.count(family)) << line;
  }
  EXPECT_NE(text.find("dsv41_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_generation_tokens_total 4\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_time_to_first_token_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_requests_running 2\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_kv_main_bytes 1234\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_engine_steps_total 7\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_dspark_drafts_verified_total 9\n"), std::string::npos);
  EXPECT_NE(text.find("dsv41_dspark_drafts_accepted_total 5\n"), std::string::npos);
}

TEST(Sse, Framing) {
  EXPECT_EQ(sse_data(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("ping"), ": ping\n\n");
}

}  // namespace
}  // namespace dsv41::server
