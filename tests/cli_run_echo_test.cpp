// `dsv41 run` echoes the prompt before the generated text, as llama.cpp does, and --no-echo
// leaves it out; a quick prefill writes no progress to stderr. On the repository's own fixture
// (tests/fixtures/v41-micro), so it runs in a plain clone too.
#include <gtest/gtest.h>

#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

const std::string kModel = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro";

TEST(CliRunEcho, PromptTextComesFirstUnlessNoEcho) {
  const std::string args = "run -m " + kModel + " -p 'The model reads' -n 4 --ignore-eos";
  const testing::CliResult echo = testing::run_cli(args, testing::Stderr::kDiscard);
  ASSERT_EQ(echo.code, 0) << echo.out;
  EXPECT_EQ(echo.out.rfind("The model reads", 0), 0u) << echo.out;
  const testing::CliResult quiet = testing::run_cli(args + " --no-echo", testing::Stderr::kDiscard);
  ASSERT_EQ(quiet.code, 0) << quiet.out;
  EXPECT_NE(quiet.out.rfind("The model reads", 0), 0u) << quiet.out;
  // The same generated text follows the echo (the speed lines after it differ run to run).
  auto text = [](const std::string& out) { return out.substr(0, out.find("\nprefill:")); };
  EXPECT_EQ(text(echo.out), "The model reads" + text(quiet.out));
}

TEST(CliRunEcho, IdsAreEchoedAsTextWithoutSpecialTokens) {
  // 0 is BOS (special, not shown); the fixture's tokenizer has the 256 bytes at ids 3..258.
  const testing::CliResult r =
      testing::run_cli("run -m " + kModel + " --ids 0,87,108 -n 1 --ignore-eos", testing::Stderr::kDiscard);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("Ti", 0), 0u) << r.out;
}

TEST(CliRunEcho, QuickPrefillPrintsNoProgress) {
  const testing::CliResult r =
      testing::run_cli("run -m " + kModel + " -p 'The model' -n 2 --no-echo 2>&1 >/dev/null", testing::Stderr::kInherit);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("tokens ("), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("prefill:"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dsv41
