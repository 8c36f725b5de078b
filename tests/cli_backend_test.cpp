// `dsv41 logits --backend ...` (app/backend_choice.h) end to end on the f32 golden fixture:
// device-emulation (the CUDA backend's kernels run on the CPU) gives the CPU backend's logits on
// every row (argmax equal, max |Δ| ≤ 2e-2, the bound docs/CUDA.md justifies), and the
// unavailable choices are clear errors, not crashes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "tests/cli_runner.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";
const std::string kIds = "5,17,200,33,41,99,7,150,23,64,11,3,90,91,92,400,401,2,8,9";

std::string out_path(const std::string& name) {
  return ::testing::TempDir() + "cli_backend_" + name + ".safetensors";
}

TEST(CliBackend, DeviceEmulationMatchesCpu) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* b : {"cpu", "device-emulation"}) {
    const auto r = testing::run_cli("logits -m " + kDir + " --ids " + kIds + " --depth full --decode-from 12 --backend " +
                                        b + " --out " + out_path(b),
                                    testing::Stderr::kMerge);
    ASSERT_EQ(r.code, 0) << b << ": " << r.out;
  }
  testing::GoldenFile cpu(out_path("cpu")), dev(out_path("device-emulation"));
  const auto a = cpu.get("logits").f32, d = dev.get("logits").f32;
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), d.size());
  const int64_t V = cpu.get("logits").shape.back();
  double max_abs = 0;
  for (size_t row = 0; (row + 1) * V <= a.size(); ++row) {
    size_t ia = 0, id = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (a[row * V + v] > a[row * V + ia]) ia = v;
      if (d[row * V + v] > d[row * V + id]) id = v;
      max_abs = std::max(max_abs, std::fabs(double(a[row * V + v]) - d[row * V + v]));
    }
    EXPECT_EQ(ia, id) << "row " << row;
  }
  EXPECT_LE(max_abs, 2e-2);
}

TEST(CliBackend, UnknownOrUnavailableBackendIsAClearError) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto r = testing::run_cli("logits -m " + kDir + " --ids 5,6 --backend tpu --out " + out_path("x"), testing::Stderr::kMerge);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("unknown backend 'tpu' (expected cpu, cuda or device-emulation)"), std::string::npos) << r.out;
  r = testing::run_cli("logits -m " + kDir + " --ids 5,6 --backend device-emulation --dump router --out " + out_path("x"),
                       testing::Stderr::kMerge);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--dump records the CPU backend's intermediates"), std::string::npos) << r.out;
  // cuda: works where a GPU is, else says why (built without CUDA, or no usable device).
  r = testing::run_cli("logits -m " + kDir + " --ids 5,6 --backend cuda --out " + out_path("cuda"), testing::Stderr::kMerge);
  if (r.code != 0) {
    EXPECT_EQ(r.code, 1) << r.out;
    const bool says_why = r.out.find("built without CUDA") != std::string::npos ||
                          r.out.find("no usable CUDA device") != std::string::npos ||
                          r.out.find("no CUDA device found") != std::string::npos;
    EXPECT_TRUE(says_why) << r.out;
  }
}

}  // namespace
}  // namespace dsv41
