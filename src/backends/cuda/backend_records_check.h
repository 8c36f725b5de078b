// The device backend's packed caches against the CPU engine's records, byte for byte: after every
// step of the scenarios (mixed prefill + decode, forks and a removal, rollbacks, restored window
// snapshots), every mirror the step used holds exactly the SequenceCache's main and index records
// (which the CPU codec packs; backend_compare_check.h's MiniPackedRecords test shows they equal the
// CPU backend's own) and every window-ring position the device copy holds is the ring's record.
// Shared by device_backend_test.cpp (HostExec) and cuda_backend_test.cu (GPU). Test support only.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/backend_scenario.h"
#include "backends/cuda/device_backend.h"
#include "plan/cache_plan.h"

namespace dsv41::testing_scenario {

struct RecordCounts {
  int64_t main = 0, index = 0, window = 0;
};

// Compares what `dev` holds of the live sequences' caches with the caches; adds to `n`.
template <class Exec>
void compare_device_records(DeviceBackend<Exec>& dev, const Engine& engine, const std::vector<SequenceId>& ids,
                            RecordCounts& n, const std::string& what) {
  for (SequenceId id : ids) {
    const SequenceCache* c = engine.cache(id);
    if (!c) continue;  // removed
    for (int l = 0; l < c->num_layers(); ++l) {
      const WindowRing& ring = c->window(l);
      for (int64_t p = ring.first_held(); p < ring.length(); ++p) {
        const std::vector<uint8_t> rec = dev.device_records(c, l, RowKind::kWindow, p);
        if (rec.empty()) continue;
        ASSERT_EQ(std::memcmp(rec.data(), ring.record(p), rec.size()), 0)
            << what << ": window record, sequence " << id << " layer " << l << " position " << p;
        ++n.window;
      }
      const KvSourceCache* kv = c->kv_source(l);
      // A mirror the step did not read may lag its cache (it is brought up to date when read).
      if (!kv || !dev.mirror_used(c, l)) continue;
      for (RowKind kind : {RowKind::kMain, RowKind::kIndex}) {
        const PagedRows& rows = kind == RowKind::kMain ? kv->main : kv->index;
        const std::vector<uint8_t> dev_rows = dev.device_records(c, l, kind);
        const int64_t rb = rows.record_bytes();
        ASSERT_EQ(int64_t(dev_rows.size()), kv->entries() * rb)
            << what << ": mirror rows, sequence " << id << " layer " << l << " kind " << row_kind_name(kind);
        for (int64_t g = 0; g < kv->entries(); ++g) {
          ASSERT_EQ(std::memcmp(dev_rows.data() + g * rb, rows.row(g), size_t(rb)), 0)
              << what << ": " << row_kind_name(kind) << " record, sequence " << id << " layer " << l << " entry " << g;
          ++(kind == RowKind::kMain ? n.main : n.index);
        }
      }
    }
  }
}

// Every scenario run on a DeviceBackend<Exec> with the comparison after each step.
// make: a fresh DeviceBackend<Exec> of the model per run.
template <class Exec>
void check_device_records(const Model& model, const std::function<std::unique_ptr<Backend>()>& make,
                          const std::string& what) {
  const int64_t V = model.vocab_size();
  struct Case {
    std::string name;
    std::vector<Step> steps;
    int sequences;
  };
  const Case cases[] = {{"mixed", mixed_batch(V), 3}, {"forks", forks_and_removal(V), 1},
                        {"rollbacks", rollbacks(V), 2}, {"restores", restores(V), 2}};
  RecordCounts total;
  for (const Case& c : cases) {
    std::unique_ptr<Backend> backend = make();
    auto* dev = dynamic_cast<DeviceBackend<Exec>*>(backend.get());
    ASSERT_NE(dev, nullptr);
    RecordCounts n;
    auto out = run(std::move(backend), model.engram_tables(), c.sequences, c.steps, 1024,
                   [&](const Engine& e, const std::vector<SequenceId>& ids) {
                     compare_device_records(*dev, e, ids, n, what + " " + c.name);
                   });
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    std::printf("%s %s: device records equal to the cache's: %lld main, %lld index, %lld window\n", what.c_str(),
                c.name.c_str(), static_cast<long long>(n.main), static_cast<long long>(n.index),
                static_cast<long long>(n.window));
    EXPECT_GT(n.main, 0) << c.name;
    EXPECT_GT(n.window, 0) << c.name;
    total.main += n.main;
  }
  EXPECT_GT(total.main, 1000);
}

// Forks share their parent's device pages (DeviceBackend::fork_cache). `backend`: a fresh
// DeviceBackend<Exec> with 4-row pages. A whole fork and a fork at a prefix take no new page;
// decoding all three (and a rollback back into a shared page) copies only the pages a fork writes
// into, each mirror holding its own cache's records byte for byte after every step, and the three
// hold less than 2/3 of what each on pages of its own would; the parent removed, the forks keep
// their shared pages; every page back at the end.
template <class Exec>
void check_forks_share_pages(const Model& model, std::unique_ptr<Backend> backend, const std::string& what) {
  const int64_t V = model.vocab_size();
  auto* dev = dynamic_cast<DeviceBackend<Exec>*>(backend.get());
  ASSERT_NE(dev, nullptr);
  EngineOptions options;
  options.rollback_tokens = 8;
  auto e = Engine::create(std::move(backend), model.engram_tables(), options);
  ASSERT_TRUE(e.ok());
  Engine& engine = **e;
  const auto feed = [&](std::vector<std::pair<SequenceId, int>> parts, int seed) {
    std::vector<std::vector<int32_t>> toks;
    std::vector<Segment> segs;
    for (const auto& [id, n] : parts) toks.push_back(tokens(seed++, n, V));
    for (size_t i = 0; i < parts.size(); ++i) {
      Segment s;
      s.sequence = parts[i].first;
      s.start = *engine.length(parts[i].first);
      s.tokens = toks[i];
      segs.push_back(s);
    }
    for (const SegmentResult& r : engine.forward(segs)) ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  };
  RecordCounts n;
  const auto records_equal = [&](const std::vector<SequenceId>& ids, const std::string& when) {
    compare_device_records(*dev, engine, ids, n, what + ", " + when);
  };
  const SequenceId a = *engine.add_sequence(512);
  feed({{a, 150}}, 300);
  const int64_t alone = dev->cache_bytes_allocated().total();
  const SequenceId b = *engine.fork(a), c = *engine.fork_prefix(a, 97);
  EXPECT_EQ(dev->cache_bytes_allocated().total(), alone) << what << ": a fork took pages of its own";
  for (int step = 0; step < 3; ++step) {
    feed({{a, 1}, {b, 1}, {c, 1}}, 400 + 10 * step);
    records_equal({a, b, c}, "decode step " + std::to_string(step));
  }
  feed({{b, 8}}, 500);  // across a page boundary of the ratio-4 caches, then back into the shared page
  ASSERT_TRUE(engine.rollback(b, 2).ok());
  feed({{b, 1}, {c, 2}}, 510);
  records_equal({b, c}, "after b's rollback");
  CacheOptions pages;  // each sequence on pages of its own would take `unshared`
  pages.rows_per_page = 4;
  int64_t unshared = 0;
  for (SequenceId id : {a, b, c})
    unshared += plan_cache_bytes(model.config(), model.plan(), *engine.length(id), pages)->main;
  EXPECT_LT(dev->cache_bytes_allocated().main, unshared * 2 / 3) << what << ": the forks' prefix pages are not shared";
  ASSERT_TRUE(engine.remove_sequence(a).ok());
  feed({{b, 1}, {c, 1}}, 520);
  records_equal({b, c}, "after the parent went");
  EXPECT_GT(n.main, 1000) << what;
  ASSERT_TRUE(engine.remove_sequence(b).ok());
  ASSERT_TRUE(engine.remove_sequence(c).ok());
  EXPECT_EQ(dev->cache_bytes_allocated().total(), 0) << what;
}

}  // namespace dsv41::testing_scenario
