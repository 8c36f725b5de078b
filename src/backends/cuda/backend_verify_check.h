// DSpark's verify steps on the device backend: short multi-row steps (k + 1 rows a sequence), each
// followed by a rollback of the rejected rows, as the scheduler runs them. The new path (the
// mirrors and open groups following rollbacks, the short steps as graphs) against the old one
// (every rolled-back mirror rebuilt, the short steps launched kernel by kernel): the same logits
// bits and the same compressed caches (records, open groups) after every step, the device's
// records equal to the cache's, and after the prefill no
// blocking upload at all (the old path uploads after rollbacks that take back entries). Shared by
// device_backend_test.cpp (HostExec) and cuda_backend_test.cu (GPU). Test support only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/backend_records_check.h"
#include "backends/cuda/backend_scenario.h"
#include "backends/cuda/backend_stored_check.h"
#include "backends/cuda/device_backend.h"

namespace dsv41::testing_scenario {

// Two sequences prefilled (40 and 23 tokens: compressor groups of every ratio), then `rounds`
// verify steps of 6 and 3 rows (all logits; 6 = DSpark's block of 5 drafts + 1), each after
// rolling back the previous step's rejected rows (0 … 5 of sequence 0, 0 … 2 of sequence 1, in a
// cycle that takes back entries of every ratio and reopens groups, with groups of 4 also one
// shorter than the device's open group), with a plain decode step of both every fourth round.
inline std::vector<Step> verify_steps(int64_t vocab, int rounds = 16) {
  std::vector<Step> steps;
  steps.push_back({{0, tokens(151, 40, vocab), LogitRows::kAll}, {1, tokens(152, 23, vocab), LogitRows::kAll}});
  int64_t last0 = 0, last1 = 0;  // rows the previous step fed
  for (int i = 0; i < rounds; ++i) {
    std::vector<Rollback> back;
    if (last0 > 1) back.push_back({0, std::min<int64_t>(i % 6, last0 - 1)});
    if (last1 > 1) back.push_back({1, std::min<int64_t>((i + 1) % 3, last1 - 1)});
    std::erase_if(back, [](const Rollback& b) { return b.k == 0; });
    const bool plain = i % 4 == 3;
    const int n0 = plain ? 1 : 6, n1 = plain ? 1 : 3;
    const LogitRows rows = plain ? LogitRows::kLast : LogitRows::kAll;
    steps.push_back(Step({{0, tokens(160 + i, n0, vocab), rows}, {1, tokens(180 + i, n1, vocab), rows}}, {}, {},
                         std::move(back)));
    last0 = n0;
    last1 = n1;
  }
  return steps;
}

// make(new_path): a fresh DeviceBackend<Exec> of the model with graphs on (the executor's own
// switch: off by default on HostExec) and the new path on or off.
template <class Exec>
void check_verify_steps(const Model& model, const std::function<std::unique_ptr<Backend>(bool new_path)>& make,
                        const std::string& what) {
  const int64_t V = model.vocab_size();
  const std::vector<Step> steps = verify_steps(V);
  std::vector<std::vector<float>> logits[2];
  // After every step, each live sequence's compressed caches as the host holds them (what the
  // device computed: records and open groups), to compare the two paths byte for byte (a wrong
  // open group kept on the device shows up here even where no later row's attention reads it).
  std::vector<std::vector<uint8_t>> caches[2];
  int64_t uploads[2] = {0, 0}, short_graphs[2] = {0, 0};
  RecordCounts n;
  for (int path = 0; path < 2; ++path) {
    std::unique_ptr<Backend> b = make(path == 1);
    auto* dev = dynamic_cast<DeviceBackend<Exec>*>(b.get());
    ASSERT_NE(dev, nullptr) << what;
    size_t step = 0;
    ExecCounts before;
    // Counted from the first verify step on (the prefill uploads nothing blocking either, but
    // makes the mirrors).
    AfterStep after = [&](const Engine& e, const std::vector<SequenceId>& ids) {
      const ExecCounts now = dev->exec_counts(), d = now - before;
      before = now;
      compare_device_records(*dev, e, ids, n, what + (path ? " new path" : " old path"));
      std::vector<uint8_t>& bytes = caches[path].emplace_back();
      for (SequenceId id : ids)
        if (const SequenceCache* c = e.cache(id))
          for (int l = 0; l < c->num_layers(); ++l)
            if (const KvSourceCache* kv = c->kv_source(l)) {
              for (const PagedRows* rows : {&kv->main, &kv->index})
                for (int64_t g = 0; g < rows->size(); ++g)
                  bytes.insert(bytes.end(), rows->row(g), rows->row(g) + rows->record_bytes());
              const auto* open = reinterpret_cast<const uint8_t*>(kv->pending_kv.data());
              bytes.insert(bytes.end(), open, open + kv->pending_kv.size() * sizeof(float));
            }
      if (step++ == 0) return;
      uploads[path] += d.uploads;
      const bool plain = steps[step - 1].parts[0].tokens.size() == 1;
      if (!plain) short_graphs[path] += d.graph_launches;
    };
    auto r = run(std::move(b), model.engram_tables(), 2, steps, 1024, after);
    ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
    logits[path] = std::move(*r);
  }
  std::printf("%s: %zu parts' logits equal on both paths; blocking uploads after the prefill: old path %lld, new "
              "path %lld; graphs in verify steps: old %lld, new %lld; %lld main, %lld window records equal to the "
              "cache's\n",
              what.c_str(), logits[0].size(), static_cast<long long>(uploads[0]), static_cast<long long>(uploads[1]),
              static_cast<long long>(short_graphs[0]), static_cast<long long>(short_graphs[1]),
              static_cast<long long>(n.main), static_cast<long long>(n.window));
  ASSERT_EQ(logits[0].size(), logits[1].size()) << what;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    ASSERT_EQ(logits[0][i].size(), logits[1][i].size()) << what;
    EXPECT_EQ(std::memcmp(logits[0][i].data(), logits[1][i].data(), logits[0][i].size() * sizeof(float)), 0)
        << what << ": logits of part " << i << " differ on the new path";
  }
  ASSERT_EQ(caches[0].size(), caches[1].size()) << what;
  for (size_t i = 0; i < caches[0].size(); ++i)
    EXPECT_TRUE(caches[0][i] == caches[1][i]) << what << ": the compressed caches differ on the new path after step " << i;
  EXPECT_GT(uploads[0], 0) << what << ": the old path rebuilt nothing (the scenario takes back no entry?)";
  EXPECT_EQ(uploads[1], 0) << what << ": blocking uploads in verify steps on the new path";
  EXPECT_EQ(short_graphs[0], 0) << what;
  EXPECT_GT(short_graphs[1], 0) << what << ": the verify steps ran no graphs on the new path";
  EXPECT_GT(n.main, 0) << what;
}

// A random model for the verify steps with groups of 4 (dsv41-mini's compressors pool 1 or 2
// rows, where a rolled-back open group is the device's first rows only when empty): models/
// tiny-random's config with compress_ratios 0, 0, 4, 4, 4, 4, 1, … (kv sources at layers 2, 4
// and 6 as there), written with its random weights into a fresh temporary directory ("" on failure).
inline std::string write_ratio4_model(const std::string& tiny_random_config) {
  std::ifstream in(tiny_random_config);
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  const size_t at = config.find("\"compress_ratios\"");
  const size_t open = config.find('[', at), close = config.find(']', open);
  EXPECT_TRUE(at != std::string::npos && open != std::string::npos && close != std::string::npos)
      << tiny_random_config << ": no compress_ratios";
  if (at == std::string::npos || open == std::string::npos || close == std::string::npos) return {};
  config.replace(open, close + 1 - open, "[0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 1, 1]");
  const std::string dir = (std::filesystem::temp_directory_path() / "dsv41_ratio4_XXXXXX").string();
  std::string cfg_dir = dir;
  if (!::mkdtemp(cfg_dir.data())) return {};
  const std::string path = cfg_dir + "/config.json";
  std::ofstream(path) << config;
  const std::string model = write_stored_model(path);
  std::filesystem::remove_all(cfg_dir);  // (the model's directory has its own copy of the config)
  return model;
}

// A directory removed with the test's scope, whichever way the test leaves it.
struct RemovedAtExit {
  std::string dir;
  ~RemovedAtExit() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

}  // namespace dsv41::testing_scenario
