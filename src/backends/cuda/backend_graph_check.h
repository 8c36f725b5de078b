// Decode steps replayed as graphs (Exec::set_graphs: CUDA graphs on the GPU, deferred launches on
// HostExec) against the same backend launching kernel by kernel: the same logits bits for every
// part of every step, and after every step of the graph run the device's packed records equal the
// cache's (backend_records_check.h). The scenarios put forks, a removal, rollbacks and restored
// window snapshots between decode steps, and a longer decode so that graphs are replayed many
// times with positions advancing. Shared by device_backend_test.cpp (HostExec) and
// cuda_backend_test.cu (GPU). Test support only.
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

// make(graphs): a fresh DeviceBackend<Exec> of the model with graphs on or off (and whatever chunk
// the caller tests); many: also 20 sequences; only_mixed: the first scenario alone. Every case must replay at least one graph per decode step with graphs on.
template <class Exec>
void check_graphs(const Model& model, const std::function<std::unique_ptr<Backend>(bool graphs)>& make,
                  const std::string& what, bool many = false, bool only_mixed = false) {
  const int64_t V = model.vocab_size();
  struct Case {
    std::string name;
    std::vector<Step> steps;
    int sequences;
  };
  std::vector<Case> cases = {{"mixed", mixed_batch(V, 12), 3},
                             {"forks", forks_and_removal(V), 1},
                             {"rollbacks", rollbacks(V), 2},
                             {"restores", restores(V), 2}};
  if (many) cases.push_back({"many", many_sequences(V, 20), 20});
  if (only_mixed) cases.resize(1);
  for (const Case& c : cases) {
    std::vector<std::vector<float>> logits[2];
    int64_t graph_launches[2] = {0, 0};
    RecordCounts n;
    for (int graphs = 0; graphs < 2; ++graphs) {
      std::unique_ptr<Backend> b = make(graphs == 1);
      auto* dev = dynamic_cast<DeviceBackend<Exec>*>(b.get());
      ASSERT_NE(dev, nullptr) << what;
      // The counts are read after each step: `run` owns (and destroys) the backend.
      AfterStep after = [&](const Engine& e, const std::vector<SequenceId>& ids) {
        graph_launches[graphs] = dev->exec_counts().graph_launches;
        if (graphs == 1) compare_device_records(*dev, e, ids, n, what + " " + c.name);
      };
      auto r = run(std::move(b), model.engram_tables(), c.sequences, c.steps, 1024, after);
      ASSERT_TRUE(r.ok()) << what << " " << c.name << ": " << r.status().to_string();
      logits[graphs] = std::move(*r);
    }
    int64_t decode_steps = 0;
    for (const Step& s : c.steps) {
      bool decode = true;
      for (const Part& p : s.parts) decode = decode && p.tokens.size() == 1;
      decode_steps += decode;
    }
    EXPECT_EQ(graph_launches[0], 0) << what << " " << c.name;
    EXPECT_GE(graph_launches[1], decode_steps) << what << " " << c.name << ": the decode steps ran no graphs";
    ASSERT_EQ(logits[0].size(), logits[1].size()) << what << " " << c.name;
    for (size_t i = 0; i < logits[0].size(); ++i) {
      ASSERT_EQ(logits[0][i].size(), logits[1][i].size()) << what << " " << c.name;
      EXPECT_EQ(std::memcmp(logits[0][i].data(), logits[1][i].data(), logits[0][i].size() * sizeof(float)), 0)
          << what << " " << c.name << ": logits of part " << i << " differ with graphs";
    }
    std::printf("%s %s: %zu parts' logits equal with and without graphs; %lld graphs over %lld decode steps; "
                "%lld main, %lld window records equal to the cache's\n",
                what.c_str(), c.name.c_str(), logits[0].size(), static_cast<long long>(graph_launches[1]),
                static_cast<long long>(decode_steps), static_cast<long long>(n.main), static_cast<long long>(n.window));
    EXPECT_GT(n.main, 0) << c.name;
  }
}

}  // namespace dsv41::testing_scenario
