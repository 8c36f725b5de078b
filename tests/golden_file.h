// Test-only reader for the golden fixtures' safetensors files (F32 / I64 / U8 tensors), so the
// block tests can compare against golden tensors without the production weight loader.
// Whole file in memory; throws nothing: a missing tensor gives an empty Tensor.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace dsv41::testing {

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
