// Test-only helper for the attention tests (header-only, not part of the library): a minimal
// safetensors reader for the golden fixture's F32/I64/U8 tensors. It stands in until
// format/safetensors.h lands on main; the tests then switch to it.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>


namespace dsv41::testing {

struct StTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<float> f32() const {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
  }
  std::vector<int64_t> i64() const {
    std::vector<int64_t> v(bytes.size() / 8);
    std::memcpy(v.data(), bytes.data(), v.size() * 8);
    return v;
  }
};

inline std::map<std::string, StTensor> read_safetensors(const std::string& path) {
  std::map<std::string, StTensor> out;
  std::ifstream f(path, std::ios::binary);
  if (!f) return out;
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const auto j = nlohmann::json::parse(header);
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    StTensor t;
    t.dtype = it.value()["dtype"].get<std::string>();
    t.shape = it.value()["shape"].get<std::vector<int64_t>>();
    const auto off = it.value()["data_offsets"].get<std::vector<uint64_t>>();
    t.bytes.assign(data.begin() + static_cast<std::ptrdiff_t>(off[0]), data.begin() + static_cast<std::ptrdiff_t>(off[1]));
    out[it.key()] = std::move(t);
  }
  return out;
}

}  // namespace dsv41::testing
