// `dsv41 run --dspark`: the decode goes through the scheduler's speculative steps and prints
// what plain decoding prints (greedy), for a fixed draft length and for auto; a model without a
// drafter decodes plainly after one log line; a bad value is an error naming the valid ones.
// On models/dsv41-mini (it ships its drafter) and tests/fixtures/v41-micro (none), so it runs in
// a plain clone too.
#include <gtest/gtest.h>

#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

const std::string kMini = std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini";
const std::string kMicro = std::string(DSV41_SOURCE_DIR) + "/tests/fixtures/v41-micro";

// The generated text and the ids line; the speed lines between them differ run to run.
std::string text_and_ids(const std::string& out) {
  const size_t speed = out.find("\nprefill:");
  const size_t last = out.rfind('\n', out.size() - 2);
  return out.substr(0, speed) + "|" + out.substr(last + 1);
}

TEST(CliRunDspark, GreedyOutputIsPlainDecodings) {
  const std::string args = "run -m " + kMini + " -p 'Once upon a time' -n 96 --ignore-eos --no-echo --print-ids";
  const testing::CliResult plain = testing::run_cli(args, testing::Stderr::kDiscard);
  ASSERT_EQ(plain.code, 0) << plain.out;
  for (const char* mode : {"1", "3", "5", "auto"}) {
    const testing::CliResult spec = testing::run_cli(args + " --dspark " + mode + " 2>&1", testing::Stderr::kInherit);
    ASSERT_EQ(spec.code, 0) << spec.out;
    // stderr is folded into the output here: the text, then the dspark summary line.
    const size_t at = spec.out.find("dspark ");
    ASSERT_NE(at, std::string::npos) << mode << "\n" << spec.out;
    EXPECT_NE(spec.out.find("drafts verified", at), std::string::npos) << spec.out;
    // The speed line counts the tokens after the prefill's first (96 − 1), not the forward passes.
    EXPECT_NE(spec.out.find("decode: 95 tokens in"), std::string::npos) << mode << "\n" << spec.out;
    // auto profiles batch 1's step shapes first (--dspark-profile, on by default); a fixed K does not.
    EXPECT_EQ(spec.out.find("step shapes profiled") != std::string::npos, std::string(mode) == "auto") << spec.out;
    const testing::CliResult quiet = testing::run_cli(args + " --dspark " + mode, testing::Stderr::kDiscard);
    ASSERT_EQ(quiet.code, 0) << quiet.out;
    EXPECT_EQ(text_and_ids(quiet.out), text_and_ids(plain.out)) << "--dspark " << mode;
  }
}

// --dspark-profile false: auto learns the shapes while decoding, with the same greedy output.
TEST(CliRunDspark, AutoWithoutTheProfileLearnsWhileDecoding) {
  const std::string args = "run -m " + kMini + " -p 'Once upon a time' -n 48 --ignore-eos --no-echo --print-ids";
  const testing::CliResult plain = testing::run_cli(args, testing::Stderr::kDiscard);
  ASSERT_EQ(plain.code, 0) << plain.out;
  const testing::CliResult spec =
      testing::run_cli(args + " --dspark auto --dspark-profile false 2>&1", testing::Stderr::kInherit);
  ASSERT_EQ(spec.code, 0) << spec.out;
  EXPECT_EQ(spec.out.find("step shapes"), std::string::npos) << spec.out;
  const testing::CliResult quiet =
      testing::run_cli(args + " --dspark auto --dspark-profile false", testing::Stderr::kDiscard);
  EXPECT_EQ(text_and_ids(quiet.out), text_and_ids(plain.out));
}

TEST(CliRunDspark, WithoutADrafterDecodesPlainlyAndSaysSo) {
  const std::string args = "run -m " + kMicro + " -p 'The model reads' -n 8 --ignore-eos --no-echo --print-ids";
  const testing::CliResult plain = testing::run_cli(args, testing::Stderr::kDiscard);
  const testing::CliResult spec = testing::run_cli(args + " --dspark auto 2>&1 >/dev/null", testing::Stderr::kInherit);
  ASSERT_EQ(plain.code, 0);
  ASSERT_EQ(spec.code, 0) << spec.out;
  EXPECT_NE(spec.out.find("decoding without speculation"), std::string::npos) << spec.out;
  const testing::CliResult quiet = testing::run_cli(args + " --dspark auto", testing::Stderr::kDiscard);
  EXPECT_EQ(text_and_ids(quiet.out), text_and_ids(plain.out));
}

TEST(CliRunDspark, BadValueNamesTheValidOnes) {
  const testing::CliResult r =
      testing::run_cli("run -m " + kMini + " -p x -n 2 --dspark 9 2>&1", testing::Stderr::kInherit);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--dspark"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1..5"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dsv41
