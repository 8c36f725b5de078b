// `dsv41 render` and `dsv41 parse` end to end: golden cases in, the same JSON out; refusals
// print {"error": ...} and exit non-zero.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "src/chat/py_json.h"
#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41::chat {
namespace {

using testing::CliResult;

CliResult run(const std::string& args) { return testing::run_cli(args, testing::Stderr::kDiscard); }

const Json& find_case(const std::string& id) {
  static const Json all = [] {
    std::ifstream in(DSV41_GOLDEN_DIR "/encoding/cases.json", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = parse_json_ordered(ss.str(), "cases.json");
    return j.ok() ? j.value() : Json::array();
  }();
  static const Json none;
  for (const Json& c : all)
    if (c["id"] == id) return c;
  return none;
}

std::string write_input(const std::string& id) {
  std::string path = ::testing::TempDir() + "chat_cli_" + id + ".json";
  std::ofstream(path, std::ios::binary) << py_json_dumps(find_case(id)["input"]);
  return path;
}

TEST(ChatCli, RenderJsonMatchesGolden) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string id = "render.toolresults.with_image.chat";
  CliResult r = run("render --json --request " + write_input(id));
  ASSERT_EQ(r.code, 0) << r.out;
  auto got = parse_json_ordered(r.out, "stdout");
  ASSERT_TRUE(got.ok()) << r.out;
  EXPECT_EQ(py_json_dumps(got.value()), py_json_dumps(find_case(id)["expected"]));
}

TEST(ChatCli, RenderWithTokenizerPrintsIds) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string id = "render.basic.system_user.chat";
  CliResult r = run("render --json --tokenizer " DSV41_GOLDEN_DIR "/v41-tiny-f32 --request " + write_input(id));
  ASSERT_EQ(r.code, 0) << r.out;
  auto got = parse_json_ordered(r.out, "stdout");
  ASSERT_TRUE(got.ok()) << r.out;
  const Json& ids = got.value()["ids"];
  ASSERT_TRUE(ids.is_array());
  ASSERT_GT(ids.size(), 3u);
  EXPECT_EQ(ids[0], 0);  // <｜begin▁of▁sentence｜> is added token 0
  EXPECT_EQ(got.value()["prompt"], find_case(id)["expected"]["prompt"]);
  EXPECT_NE(run("render --json --tokenizer /nonexistent --request " + write_input(id)).code, 0);
}

TEST(ChatCli, RenderRefusalIsJsonAndNonZero) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  CliResult r = run("render --json --request " + write_input("render.effort.invalid_101.error"));
  EXPECT_NE(r.code, 0);
  auto got = parse_json_ordered(r.out, "stdout");
  ASSERT_TRUE(got.ok()) << r.out;
  EXPECT_TRUE(got.value()["error"]["message"].is_string());
  EXPECT_NE(run("render --json --request /nonexistent.json").code, 0);
}

TEST(ChatCli, ParseJsonMatchesGolden) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  const std::string id = "parse.roundtrip.two_invokes.thinking";
  CliResult r = run("parse --json --request " + write_input(id));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(py_json_dumps(parse_json_ordered(r.out, "stdout").value()), py_json_dumps(find_case(id)["expected"]));
  CliResult bad = run("parse --json --request " + write_input("parse.malformed.two_calls_blocks"));
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("\"error\""), std::string::npos);
}

}  // namespace
}  // namespace dsv41::chat
