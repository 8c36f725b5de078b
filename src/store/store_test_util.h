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
#include "store/store_env.h"

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

// A StoreEnv over the real file system that can run out of space (a byte budget for pwrite)
// or fail every sync, as a disk can; no root needed. Settings may change while a store runs.
class FaultEnv final : public StoreEnv {
 public:
  struct Faults {
    std::atomic<int64_t> write_budget{-1};  // bytes pwrite may still write; -1 = unlimited
    std::atomic<bool> fail_sync{false};
    std::atomic<uint64_t> failed_writes{0}, failed_syncs{0};
  };
  std::shared_ptr<Faults> faults = std::make_shared<Faults>();

  Result<std::unique_ptr<StoreFile>> open(const std::string& path, OpenMode mode) override {
    DSV41_ASSIGN_OR_RETURN(auto f, real_->open(path, mode));
    return std::unique_ptr<StoreFile>(new File(std::move(f), faults));
  }
  Status remove(const std::string& path) override { return real_->remove(path); }
  Status sync_dir(const std::string& dir) override { return real_->sync_dir(dir); }
  Result<std::vector<std::string>> list_dir(const std::string& dir) override { return real_->list_dir(dir); }
  bool is_dir(const std::string& path) override { return real_->is_dir(path); }
  Status create_dirs(const std::string& dir) override { return real_->create_dirs(dir); }
  Result<std::string> read_file(const std::string& path) override { return real_->read_file(path); }
  Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) override {
    return real_->write_file_atomic(path, bytes);
  }
  Result<std::unique_ptr<StoreLock>> try_lock(const std::string& path) override { return real_->try_lock(path); }

 private:
  class File final : public StoreFile {
   public:
    File(std::unique_ptr<StoreFile> inner, std::shared_ptr<Faults> faults)
        : inner_(std::move(inner)), faults_(std::move(faults)) {}
    Result<size_t> pread(uint8_t* buf, size_t n, uint64_t off) override { return inner_->pread(buf, n, off); }
    Status pwrite(const uint8_t* buf, size_t n, uint64_t off) override {
      int64_t budget = faults_->write_budget.load();
      if (budget >= 0 && static_cast<int64_t>(n) > budget) {
        // Like a real full disk: what fits is written, then the call fails.
        (void)inner_->pwrite(buf, static_cast<size_t>(budget), off);
        faults_->write_budget = 0;
        ++faults_->failed_writes;
        return io_error(path() + ": pwrite: No space left on device (injected)");
      }
      if (budget >= 0) faults_->write_budget -= static_cast<int64_t>(n);
      return inner_->pwrite(buf, n, off);
    }
    Status sync() override {
      if (faults_->fail_sync) {
        ++faults_->failed_syncs;
        return io_error(path() + ": fdatasync: Input/output error (injected)");
      }
      return inner_->sync();
    }
    Status truncate(uint64_t size) override { return inner_->truncate(size); }
    Result<uint64_t> size() override { return inner_->size(); }
    const std::string& path() const override { return inner_->path(); }

   private:
    std::unique_ptr<StoreFile> inner_;
    std::shared_ptr<Faults> faults_;
  };
  std::shared_ptr<StoreEnv> real_ = make_posix_store_env();
};

}  // namespace dsv41::store_test
