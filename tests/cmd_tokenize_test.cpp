// `dsv41 tokenize` end to end: the golden prompt's ids, JSON output, decoding, bad paths.
#include <string>

#include <gtest/gtest.h>

#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace {

using dsv41::testing::run_cli;
using dsv41::testing::Stderr;

const std::string kGolden = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

TEST(CmdTokenize, EncodesDecodesAndReportsErrors) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  // golden.json sequence 1 (BOS, then 288 223 332 336 271 274 for "The river car") continues.
  const auto encoded = run_cli("tokenize -t " + kGolden + " 'The river carries'", Stderr::kInherit);
  EXPECT_EQ(encoded.out, "288 223 332 336 271 274 332 272\n");
  EXPECT_EQ(encoded.code, 0);
  EXPECT_EQ(run_cli("tokenize -t " + kGolden + "/tokenizer.json --json '<｜end▁of▁sentence｜>The'",
                    Stderr::kInherit)
                .out,
            "{\"ids\":[1,288],\"tokens\":[\"<｜end▁of▁sentence｜>\",\"The\"]}\n");
  EXPECT_EQ(run_cli("tokenize -t " + kGolden + " -d 288 223 332 336 271 274", Stderr::kInherit).out, "The river car\n");
  const auto missing = run_cli("tokenize -t /nonexistent 'x'", Stderr::kMerge);
  EXPECT_EQ(missing.out, "dsv41 tokenize: i/o error: /nonexistent/tokenizer.json: cannot open\n");
  EXPECT_EQ(missing.code, 1);
}

}  // namespace
