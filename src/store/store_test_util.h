// Test-only helpers for the store tests: scratch directories, deterministic chunk payloads (so a
// chunk read back can be recomputed from its index alone), a log sink and a settable clock.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/prefix_key.h"
#include "store/segment.h"
#include "store/ssd_store.h"

namespace dsv41::store_test {

// A fresh directory under /tmp, removed with everything in it at scope exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char buf[] = "/tmp/dsv41-store-XXXXXX";
    path = ::mkdtemp(buf) ? buf : "/tmp/dsv41-store-failed";
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

inline StoreIdentity test_identity(uint32_t chunk = 16, uint8_t model = 1, uint32_t format = 1) {
  StoreIdentity id;
  id.model_fingerprint.fill(model);
  id.tokenizer.fill(7);
  id.record_format = format;
  id.chunk_tokens = chunk;
  return id;
}

// Key i: the chain over chunks whose token ids are derived from i (so keys are real chain keys).
inline PrefixKey test_key(const StoreIdentity& id, uint64_t i) {
  std::vector<int32_t> toks(id.chunk_tokens);
  for (size_t t = 0; t < toks.size(); ++t) toks[t] = static_cast<int32_t>((i * 7919 + t * 31) % 129280);
  return chain_key(root_key(id), toks);
}

// The payload of chunk i: one kv source with tokens/2 main rows (288 B) and as many index keys
// (68 B), bytes from a splitmix sequence seeded by i; `scale` multiplies the row count.
inline Payload test_payload(uint64_t i, uint32_t tokens = 16, uint32_t scale = 1) {
  Payload p;
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<uint8_t>(z ^ (z >> 31));
  };
  const uint32_t rows = tokens / 2 * scale;
  for (auto [kind, size] : {std::pair{RowKind::kMain, 288u}, std::pair{RowKind::kIndex, 68u}}) {
    PayloadPart part;
    part.layer = 2;
    part.kind = kind;
    part.record_bytes = size;
    part.count = rows;
    part.bytes.resize(size_t{size} * rows);
    for (auto& b : part.bytes) b = next();
    p.parts.push_back(std::move(part));
  }
  return p;
}

// Collects log lines (thread-safe) so tests can check that a problem was reported.
struct LogSink {
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<std::string>> lines = std::make_shared<std::vector<std::string>>();
  std::function<void(const std::string&)> fn() const {
    auto m = mu;
    auto l = lines;
    return [m, l](const std::string& s) {
      std::lock_guard lk(*m);
      l->push_back(s);
    };
  }
  bool contains(const std::string& needle) const {
    std::lock_guard lk(*mu);
    for (const auto& s : *lines) {
      if (s.find(needle) != std::string::npos) return true;
    }
    return false;
  }
  std::string all() const {
    std::lock_guard lk(*mu);
    std::string out;
    for (const auto& s : *lines) out += s + "\n";
    return out;
  }
};

// A wall clock the test moves by hand.
struct FakeClock {
  std::shared_ptr<std::atomic<int64_t>> now = std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);
  std::function<int64_t()> fn() const {
    auto n = now;
    return [n] { return n->load(); };
  }
  void advance_ms(int64_t ms) { *now += ms; }
};

}  // namespace dsv41::store_test
