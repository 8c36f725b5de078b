// The device backend on a model whose FP8 / FP4 matrices it uploads as stored (the default load):
// a random model written from models/tiny-random/config.json (FP8 E4M3 32×32-block projections,
// indexer wq_b, shared experts and Engram wkv; FP4 routed experts), shared by
// device_backend_test.cpp (HostExec) and cuda_backend_test.cu (GPU). Test support only.
// What must hold:
// - against the CPU engine on the same stored model (which reads the bytes in place, gemm_quant),
//   on the mixed prefill / decode batch of three sequences: backend_compare_check.h's bounds
//   (argmax equal, 90 % of the rows within 2e-2, every row within max(0.1, 2 × the CPU's own
//   spread)), except that the last may rise to twice the device backend's own distance from the
//   CPU on the float32 widening of the same checkpoint: on this random model one sequence drifts
//   to 0.58 on both (a discrete difference the stored weights do not cause; see docs/CUDA.md; the
//   fast kernels sum stored and widened rows in different orders, so a flip may land elsewhere);
// - the device holds fewer weight bytes than for the float32 widening of the same checkpoint
//   (under half: FP8 is 1 byte + 1/1024 of a scale byte per weight, FP4 ½ + 1/32);
// - when `bitwise` (the simple kernel bodies): the logits equal, bit for bit, those of the same
//   backend on the float32 widening (the decode is the host tables' code × scale).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "backends/cuda/backend_compare_check.h"
#include "testing/random_init.h"

namespace dsv41::testing_scenario {

// Writes the random stored model of `config_path` (seed 5) into a fresh temporary directory.
inline std::string write_stored_model(const std::string& config_path) {
  std::string dir = (std::filesystem::temp_directory_path() / "dsv41_stored_XXXXXX").string();
  if (!::mkdtemp(dir.data())) return {};
  RandomInitOptions opt;
  opt.seed = 5;
  opt.force = true;
  auto r = write_random_model(config_path, dir, opt);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? dir : std::string();
}

using BackendFactory = std::function<std::unique_ptr<Backend>(const Model&)>;

inline void check_stored_model(const std::string& config_path, const BackendFactory& make,
                               const std::function<int64_t(const Backend&)>& weight_bytes, bool bitwise,
                               const std::string& what) {
  const std::string dir = write_stored_model(config_path);
  ASSERT_FALSE(dir.empty()) << what;
  ModelLoadOptions widened;
  widened.weights = WeightHolding::kWidened;
  widened.f32_weights = true;
  auto stored = Model::load(dir);
  auto wide = Model::load(dir, widened);
  ASSERT_TRUE(stored.ok()) << stored.status().to_string();
  ASSERT_TRUE(wide.ok()) << wide.status().to_string();
  ASSERT_GT((*stored)->matrix_bytes().stored, 0) << what << ": the model holds no stored matrix";
  std::unique_ptr<Backend> s = make(**stored), w = make(**wide);
  ASSERT_TRUE(s && w) << what;
  const int64_t sb = weight_bytes(*s), wb = weight_bytes(*w);
  std::printf("%s: device weight bytes stored %lld, float32 widening %lld\n", what.c_str(), static_cast<long long>(sb),
              static_cast<long long>(wb));
  EXPECT_LT(2 * sb, wb) << what;
  const int64_t V = (*stored)->vocab_size();
  const std::vector<Step> steps = mixed_batch(V);
  auto cpu = run(std::make_unique<CpuBackend>(**stored), (*stored)->engram_tables(), 3, steps);
  CpuExec scalar;  // the CPU backend's scalar references: its own spread
  scalar.isa = CpuIsa::kPortable;
  auto ref = run(std::make_unique<CpuBackend>(**stored, &scalar), (*stored)->engram_tables(), 3, steps);
  auto dev = run(std::move(s), (*stored)->engram_tables(), 3, steps);
  auto dev_wide = run(std::move(w), (*wide)->engram_tables(), 3, steps);
  ASSERT_TRUE(cpu.ok() && ref.ok() && dev.ok() && dev_wide.ok()) << what;
  const Diff d = compare(*cpu, *dev, V), dw = compare(*cpu, *dev_wide, V), spread = compare(*cpu, *ref, V);
  std::printf("%s: %lld rows; device (stored) vs cpu: max |dlogit| %.3g (%s), %lld rows within 2e-2, argmax differ "
              "%lld; device on the widening vs cpu: max %.3g, %lld rows within 2e-2; cpu fast vs scalar %.3g\n",
              what.c_str(), static_cast<long long>(d.rows), d.max_abs, d.worst.c_str(),
              static_cast<long long>(d.rows_within_2e2), static_cast<long long>(d.argmax_differ), dw.max_abs,
              static_cast<long long>(dw.rows_within_2e2), spread.max_abs);
  EXPECT_GT(d.rows, 0);
  EXPECT_EQ(d.argmax_differ, 0) << what << ": of " << d.rows << " rows";
  EXPECT_GE(d.rows_within_2e2 * 10, d.rows * 9) << what;
  // backend_compare_check.h's max bound, or twice the same backend's own distance on the widened
  // weights where that is larger (this random model amplifies one discrete difference of the
  // device backend to 0.58 with or without stored weights: docs/CUDA.md).
  EXPECT_LE(d.max_abs, std::max({0.1, 2 * spread.max_abs, 2 * dw.max_abs})) << what << " at " << d.worst;
  if (bitwise) {
    ASSERT_EQ(dev->size(), dev_wide->size()) << what;
    for (size_t i = 0; i < dev->size(); ++i) {
      ASSERT_EQ((*dev)[i].size(), (*dev_wide)[i].size()) << what;
      EXPECT_EQ(std::memcmp((*dev)[i].data(), (*dev_wide)[i].data(), (*dev)[i].size() * sizeof(float)), 0)
          << what << ": stored vs widened logits differ in part " << i;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace dsv41::testing_scenario
