// Test-only reader for the golden fixtures' safetensors files (F32 / I64 / U8 tensors), so the
// block tests can compare against golden tensors without the production weight loader.
// Whole file in memory; throws nothing: a missing tensor gives an empty Tensor.
//
// Also the one place that decides whether the golden fixtures are there at all: they live beside
// the repository (../shared/golden, DSV41_GOLDEN_DIR), and a user's plain clone has no ../shared.
// Tests that read them begin with DSV41_SKIP_WITHOUT_GOLDEN(), so such a clone reports them as
// skipped, with the reason, instead of failing; tests/fixture_forward_test.cpp checks the
// forward pass against the reference on the repository's own fixture there.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dsv41::testing {

// True when DSV41_GOLDEN_DIR holds the golden fixtures (checked once per process).
inline bool golden_fixtures_present() {
  static const bool present = std::filesystem::is_directory(DSV41_GOLDEN_DIR "/v41-tiny-f32") &&
                              std::filesystem::is_directory(DSV41_GOLDEN_DIR "/encoding");
  return present;
}

// Skips the current test (in a test body or a fixture's SetUp) when the golden fixtures are absent.
#define DSV41_SKIP_WITHOUT_GOLDEN()                                                                 \
  do {                                                                                              \
    if (!::dsv41::testing::golden_fixtures_present())                                               \
      GTEST_SKIP() << "needs the golden fixtures in " DSV41_GOLDEN_DIR                              \
                      " (../shared beside the repository), which this checkout does not have";      \
  } while (0)

struct GoldenTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> f32;    // F32 (also filled for I64/U8/BF16 converted)
  std::vector<int64_t> i64;  // I64 / U8 / I32 values
  bool present() const { return !dtype.empty(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class GoldenFile {
 public:
  explicit GoldenFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return;
    std::stringstream ss;
    ss << f.rdbuf();
    bytes_ = ss.str();
    if (bytes_.size() < 8) return;
    uint64_t n = 0;
    std::memcpy(&n, bytes_.data(), 8);
    if (8 + n > bytes_.size()) return;
    header_ = nlohmann::json::parse(bytes_.substr(8, n), nullptr, false);
    data_off_ = 8 + n;
    ok_ = !header_.is_discarded();
  }
  bool ok() const { return ok_; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto it = header_.begin(); it != header_.end(); ++it)
      if (it.key() != "__metadata__") out.push_back(it.key());
    return out;
  }
  GoldenTensor get(const std::string& name) const {
    GoldenTensor t;
    if (!ok_ || !header_.contains(name)) return t;
    const auto& h = header_[name];
    t.dtype = h["dtype"].get<std::string>();
    t.shape = h["shape"].get<std::vector<int64_t>>();
    const auto off = h["data_offsets"].get<std::vector<uint64_t>>();
    const char* p = bytes_.data() + data_off_ + off[0];
    const int64_t n = t.numel();
    if (t.dtype == "F32") {
      t.f32.resize(n);
      std::memcpy(t.f32.data(), p, n * 4);
    } else if (t.dtype == "BF16") {
      t.f32.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        uint32_t u = uint32_t(b) << 16;
        std::memcpy(&t.f32[i], &u, 4);
      }
    } else if (t.dtype == "I64") {
      t.i64.resize(n);
      std::memcpy(t.i64.data(), p, n * 8);
    } else if (t.dtype == "I32") {
      t.i64.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        t.i64[i] = v;
      }
    } else if (t.dtype == "U8" || t.dtype == "BOOL") {
      t.i64.resize(n);
      for (int64_t i = 0; i < n; ++i) t.i64[i] = static_cast<uint8_t>(p[i]);
    }
    return t;
  }

 private:
  std::string bytes_;
  nlohmann::json header_;
  uint64_t data_off_ = 0;
  bool ok_ = false;
};

}  // namespace dsv41::testing
