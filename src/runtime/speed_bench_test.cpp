// End-to-end speed harness (runtime/speed_bench.h) on the f32 golden fixture: one point per
// context with the right positions and a cache that grows with the context; the prompt is
// deterministic and avoids the special ids; bad options fail before anything runs.
#include "runtime/speed_bench.h"

#include <gtest/gtest.h>

#include "backends/cuda/host_device_backend.h"
#include "tests/golden_file.h"

namespace dsv41 {
namespace {

const std::string kDir = std::string(DSV41_GOLDEN_DIR) + "/v41-tiny-f32";

TEST(SpeedBench, OnePointPerContext) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto model = Model::load(kDir).value();
  SpeedBenchOptions o;
  o.contexts = {5, 40};
  o.decode_tokens = 3;
  o.chunk = 16;
  int calls = 0;
  std::vector<int64_t> before;
  std::vector<int64_t> before_prefill;
  o.before_prefill = [&](int64_t c) {
    before_prefill.push_back(c);
    EXPECT_EQ(before.size() + 1, before_prefill.size());  // each prefill's hook before its decode's
  };
  o.before_decode = [&](int64_t c) {
    before.push_back(c);
    EXPECT_EQ(calls, static_cast<int>(before.size()) - 1);  // after the previous point, before this one
  };
  auto r = run_speed_bench(*model, o, [&](const SpeedPoint&) { ++calls; });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(before, o.contexts);
  EXPECT_EQ(before_prefill, o.contexts);
  for (size_t i = 0; i < 2; ++i) {
    const SpeedPoint& p = (*r)[i];
    EXPECT_EQ(p.context, o.contexts[i]);
    EXPECT_EQ(p.decode_tokens, 3);
    EXPECT_EQ(p.positions, o.contexts[i] + 3);
    EXPECT_GT(p.prefill_tokens_per_s(), 0);
    EXPECT_GT(p.decode_tokens_per_s(), 0);
    EXPECT_GT(p.cache.total(), 0);
  }
  EXPECT_GT((*r)[1].cache.main + (*r)[1].cache.index, 0);
  EXPECT_GE((*r)[1].cache.total(), (*r)[0].cache.total());
}

// `dsv41 bench --backend`: each context's session on a fresh backend from the factory, its status
// checked after the decode; the device backend (emulated here) decodes the CPU engine's ids.
TEST(SpeedBench, RunsOnTheGivenBackend) {
  auto model = Model::load(std::string(DSV41_SOURCE_DIR) + "/models/dsv41-mini").value();
  SpeedBenchOptions o;
  o.contexts = {24, 9};
  o.decode_tokens = 4;
  auto cpu = run_speed_bench(*model, o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  int made = 0, checked = 0;
  o.make_backend = [&]() -> Result<std::unique_ptr<Backend>> {
    ++made;
    return make_host_device_backend(*model);
  };
  o.backend_status = [&](const Backend&) {
    ++checked;
    return ok_status();
  };
  auto device = run_speed_bench(*model, o);
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  EXPECT_EQ(made, 2);
  EXPECT_EQ(checked, 2);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*device)[i].decoded.size(), 4u);
    EXPECT_EQ((*device)[i].decoded, (*cpu)[i].decoded) << "context " << o.contexts[i];
    EXPECT_EQ((*device)[i].positions, (*cpu)[i].positions);
  }
  // A backend that cannot be made, or one that reports an error, fails the run naming it.
  o.make_backend = []() -> Result<std::unique_ptr<Backend>> { return unsupported("no device here"); };
  auto failed = run_speed_bench(*model, o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("no device here"), std::string::npos);
  o.make_backend = [&]() -> Result<std::unique_ptr<Backend>> { return make_host_device_backend(*model); };
  o.backend_status = [](const Backend&) { return internal_error("a kernel failed"); };
  failed = run_speed_bench(*model, o);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().to_string().find("a kernel failed"), std::string::npos) << failed.status().to_string();
  EXPECT_NE(failed.status().to_string().find("context 24"), std::string::npos) << failed.status().to_string();
}

// The same on the golden fixtures: the device backend (emulated) against a cold, full-depth,
// single-sequence CPU run, prefill in chunks.
TEST(SpeedBench, GivenBackendDecodesTheCpuIdsOnTheGoldenFixtures) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  for (const char* name : {"v41-tiny-f32", "v41-tiny-bf16"}) {
    auto model = Model::load(std::string(DSV41_GOLDEN_DIR) + "/" + name).value();
    SpeedBenchOptions o;
    o.contexts = {33};
    o.decode_tokens = 6;
    o.chunk = 16;
    auto cpu = run_speed_bench(*model, o);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    o.make_backend = [&]() -> Result<std::unique_ptr<Backend>> { return make_host_device_backend(*model); };
    auto device = run_speed_bench(*model, o);
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    EXPECT_EQ((*device)[0].decoded, (*cpu)[0].decoded) << name;
    EXPECT_EQ((*device)[0].decoded.size(), 6u) << name;
  }
}

TEST(SpeedBench, PromptIsDeterministicAndAvoidsSpecialIds) {
  const auto a = speed_bench_prompt(643, 500, 9), b = speed_bench_prompt(643, 500, 9);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, speed_bench_prompt(643, 500, 10));
  for (int32_t id : a) {
    EXPECT_GE(id, 3);
    EXPECT_LT(id, 643);
  }
}

TEST(SpeedBench, BadOptionsFail) {
  DSV41_SKIP_WITHOUT_GOLDEN();
  auto model = Model::load(kDir).value();
  SpeedBenchOptions o;
  EXPECT_FALSE(run_speed_bench(*model, o).ok());  // no contexts
  o.contexts = {0};
  EXPECT_FALSE(run_speed_bench(*model, o).ok());
  o.contexts = {4};
  o.decode_tokens = -1;
  EXPECT_FALSE(run_speed_bench(*model, o).ok());
  o.decode_tokens = 1;
  o.contexts = {model->config().max_position_embeddings};
  EXPECT_FALSE(run_speed_bench(*model, o).ok());
}

}  // namespace
}  // namespace dsv41
