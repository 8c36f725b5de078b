// Every numeric option of every subcommand refuses an out-of-range value with an error that names
// the option and the accepted range (app/option_checks.h), before any model is loaded: `dsv41 run
// -n -4` used to print CLI11's double maximum (a 309-digit number) and no range.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

struct BadOption {
  std::string args;    // after `dsv41`
  std::string option;  // the name the error must carry
  std::string range;   // the accepted range the error must state
};

const BadOption kCases[] = {
    {"run -m /nonexistent -p hi -n -4", "-n", "0 to 1048576"},
    {"run -m /nonexistent -p hi -n 99999999", "-n", "0 to 1048576"},
    {"run -m /nonexistent -p hi --temp -1", "--temp", "0 to 100"},
    {"run -m /nonexistent -p hi --temp nan", "--temp", "0 to 100"},
    {"run -m /nonexistent -p hi --top-p 0", "--top-p", "(0, 1]"},
    {"run -m /nonexistent -p hi --top-p 1.5", "--top-p", "(0, 1]"},
    {"run -m /nonexistent -p hi --seed -1", "--seed", "0 to 18446744073709551615"},
    {"run -m /nonexistent -p hi --chunk -1", "--chunk", "0 to 1048576"},
    {"logits -m /nonexistent --ids 0 --out /dev/null --decode-from -2", "--decode-from", "0 to 1048576"},
    {"logits -m /nonexistent --ids 0 --out /dev/null --chunk -3", "--chunk", "0 to 1048576"},
    {"bench -m /nonexistent --contexts 128,0", "--contexts", "1 to 1048576"},
    {"bench -m /nonexistent --decode -1", "--decode", "0 to 1048576"},
    {"bench -m /nonexistent --chunk -1", "--chunk", "0 to 1048576"},
    {"bench -m /nonexistent --seed -5", "--seed", "0 to 18446744073709551615"},
    {"bench -m /nonexistent --membw-mib -1", "--membw-mib", "0 to 1048576"},
    {"bench -m /nonexistent --membw-passes 0", "--membw-passes", "1 to 1000"},
    {"bpb -m /nonexistent /dev/null --context -1", "--context", "0 to 1048576"},
    {"bpb -m /nonexistent /dev/null --stride -1", "--stride", "0 to 1048576"},
    {"cost --config /nonexistent --swa-checkpoint-interval 0", "--swa-checkpoint-interval", "1 to 1048576"},
    {"cost --config /nonexistent --context 0", "--context", "1 to 2^40"},
    {"cost --config /nonexistent --new-tokens -5", "--new-tokens", "1 to 2^40"},
    {"init-random --config /nonexistent --out /nonexistent --shard-mb 0", "--shard-mb", "1 to 1048576"},
    {"init-random --config /nonexistent --out /nonexistent --seed -1", "--seed", "0 to 18446744073709551615"},
    {"parse --completion /dev/null --chunk -1", "--chunk", "0 to 1073741824"},
    {"render --effort 101", "--effort", "1 to 100"},
    {"render --effort 0", "--effort", "1 to 100"},
    {"serve -m /nonexistent --port 70000", "--port", "0 to 65535"},
    {"serve -m /nonexistent --parallel 0", "--parallel", "1 to 1024"},
    {"serve -m /nonexistent --ctx 0", "--ctx", "1 to 1048576"},
    {"serve -m /nonexistent --max-queue -1", "--max-queue", "0 to 1048576"},
    {"serve -m /nonexistent --max-body-mb 0", "--max-body-mb", "1 to 1024"},
    {"serve -m /nonexistent --vision-threads -1", "--vision-threads", "0 to 1024"},
    {"serve -m /nonexistent --vision-threads 5000", "--vision-threads", "0 to 1024"},
};

// `dsv41 serve` refuses bad options and a missing model before it binds or loads anything.
TEST(CliOptions, ServeRefusesBadSetupsBeforeLoading) {
  const std::pair<const char*, const char*> cases[] = {
      {"serve -m /nonexistent", "/nonexistent: not a directory"},
      {"serve -m /tmp --depth deep", "--depth"},
      {"serve -m /tmp --thinking maybe", "--thinking"},
      {"serve -m /tmp --api-key ''", "--api-key: empty"},
      {"serve -m /tmp --image-dir /nonexistent-image-dir", "--image-dir /nonexistent-image-dir: No such file"},
      {"serve -m /tmp --image-dir /etc/passwd", "--image-dir /etc/passwd: not a directory"},
  };
  for (const auto& [args, want] : cases) {
    const testing::CliResult r = testing::run_cli(args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << args;
  }
}

TEST(CliOptions, OutOfRangeValuesNameTheOptionAndTheRange) {
  for (const BadOption& c : kCases) {
    const testing::CliResult r = testing::run_cli(c.args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_NE(r.out.find(c.option + ":"), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.range), std::string::npos) << c.args << "\n" << r.out;
    // No number longer than 2^64's 20 digits (CLI11's double maximum had 309).
    EXPECT_FALSE(std::regex_search(r.out, std::regex("[0-9]{21}"))) << c.args << "\n" << r.out;
  }
}

TEST(CliOptions, InRangeEdgesAreAccepted) {
  // Parsing succeeds, so the failure is the missing model directory, not the option.
  for (const std::string args : {"run -m /nonexistent -p hi -n 0 --temp 0 --top-p 1 --seed 18446744073709551615",
                                 "run -m /nonexistent -p hi -n 1048576 --temp 100 --top-p 0.001 --chunk 0"}) {
    const testing::CliResult r = testing::run_cli(args, testing::Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_EQ(r.out.find("accepted range"), std::string::npos) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("/nonexistent"), std::string::npos) << args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace dsv41
