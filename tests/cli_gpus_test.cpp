// `--gpus N` on run, generate, bench and serve (app/gpus_flag.h): checked before any model is
// loaded (the model paths here do not exist), each refusal naming the flag and the reason. On a
// machine without the NVIDIA driver (every build machine) the reason is that no GPU is usable;
// with a driver, the GPUs present are counted and N is refused beyond them (N ≥ 2 runs one rank per
// GPU on every command: app/rank_flags.h, docs/PARALLEL.md).
#include <gtest/gtest.h>

#include <string>

#include "tests/cli_runner.h"

namespace dsv41 {
namespace {

using testing::run_cli;
using testing::Stderr;

TEST(CliGpus, EveryCommandRefusesWhatItCannotRun) {
  const char* cases[] = {"run -m /nonexistent -p hi --gpus 2", "generate -m /nonexistent --requests /nonexistent --gpus 3",
                         "bench -m /nonexistent --gpus 2", "serve -m /nonexistent --gpus 2",
                         "run -m /nonexistent -p hi --gpus 1024"};
  for (const char* args : cases) {
    const auto r = run_cli(args, Stderr::kMerge);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.out.find("--gpus "), std::string::npos) << args << ": " << r.out;
    const bool no_driver = r.out.find("0 GPUs usable") != std::string::npos;
    const bool counted = r.out.find("present") != std::string::npos;
    EXPECT_TRUE(no_driver || counted) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("/nonexistent"), std::string::npos) << args << ": the model was looked at: " << r.out;
  }
}

TEST(CliGpus, ZeroIsOutOfRange) {
  const auto r = run_cli("run -m /nonexistent -p hi --gpus 0", Stderr::kMerge);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--gpus"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 to 1024"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dsv41
