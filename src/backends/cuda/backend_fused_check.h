// The fused launches (DeviceBackend::set_fused: RoPE + FakeQuant, inverse RoPE + window stores,
// routed + shared expert up projections, experts' down projection + mHC expand) against the same
// backend launching each body on its own: the same logits bits for every part of every step, and
// after every step of the fused run the device's packed records equal the cache's
// (backend_records_check.h). Scenarios of backend_scenario.h (forks, a removal, rollbacks,
// restored snapshots, and on request 20 sequences: segments batched in one launch). Shared by
// device_backend_test.cpp (HostExec) and cuda_backend_test.cu (GPU). Test support only.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/backend_records_check.h"
#include "backends/cuda/backend_scenario.h"
#include "backends/cuda/device_backend.h"

namespace dsv41::testing_scenario {

// make(fused): a fresh DeviceBackend<Exec> of the model with fused launches on or off. Fused runs
// must make fewer launches than unfused ones.
template <class Exec>
void check_fused(const Model& model, const std::function<std::unique_ptr<Backend>(bool fused)>& make,
                 const std::string& what, bool many = false) {
  const int64_t V = model.vocab_size();
  struct Case {
    std::string name;
    std::vector<Step> steps;
    int sequences;
  };
  std::vector<Case> cases = {{"mixed", mixed_batch(V, 6), 3},
                             {"forks", forks_and_removal(V), 1},
                             {"rollbacks", rollbacks(V), 2},
                             {"restores", restores(V), 2}};
  if (many) cases.push_back({"many", many_sequences(V, 20), 20});
  for (const Case& c : cases) {
    std::vector<std::vector<float>> logits[2];
    int64_t launches[2] = {0, 0};
    RecordCounts n;
    for (int fused = 0; fused < 2; ++fused) {
      std::unique_ptr<Backend> b = make(fused == 1);
      auto* dev = dynamic_cast<DeviceBackend<Exec>*>(b.get());
      ASSERT_NE(dev, nullptr) << what;
      // The counts are read after each step: `run` owns (and destroys) the backend.
      AfterStep after = [&](const Engine& e, const std::vector<SequenceId>& ids) {
        launches[fused] = dev->exec_counts().launches;
        if (fused == 1) compare_device_records(*dev, e, ids, n, what + " " + c.name);
      };
      auto r = run(std::move(b), model.engram_tables(), c.sequences, c.steps, 1024, after);
      ASSERT_TRUE(r.ok()) << what << " " << c.name << ": " << r.status().to_string();
      logits[fused] = std::move(*r);
    }
    EXPECT_LT(launches[1], launches[0]) << what << " " << c.name << ": fused launches saved nothing";
    ASSERT_EQ(logits[0].size(), logits[1].size()) << what << " " << c.name;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      ASSERT_EQ(logits[0][i].size(), logits[1][i].size()) << what << " " << c.name;
      EXPECT_EQ(std::memcmp(logits[0][i].data(), logits[1][i].data(), logits[0][i].size() * sizeof(float)), 0)
          << what << " " << c.name << ": logits of part " << i << " differ with fused launches";
    }
    std::printf("%s %s: %zu parts' logits equal fused and unfused; %lld launches fused, %lld unfused; "
                "%lld main, %lld window records equal to the cache's\n",
                what.c_str(), c.name.c_str(), logits[0].size(), static_cast<long long>(launches[1]),
                static_cast<long long>(launches[0]), static_cast<long long>(n.main),
                static_cast<long long>(n.window));
    EXPECT_GT(n.main, 0) << c.name;
  }
}

}  // namespace dsv41::testing_scenario
